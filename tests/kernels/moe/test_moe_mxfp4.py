"""The fused MoE with MXFP4 weights (`weights` "mxfp4"): the weights' quantization round trip, the kernel
against its reference under the CPU interpreter (both paths, both structures, split-K, a down N tile of
its own, uniform and skewed routing), the run-time entry point, bad input, the op's problems, space and
spec fields, and the vLLM export's refusal."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.engine.bench import rel_error
from autotune.kernels import MOE, fused_moe
from autotune.kernels.common.formats import e2m1_decode, unpack_fp4
from autotune.kernels.moe.mx import _e2m1_bf16
from autotune.kernels.moe.op import mx_emulated
from autotune.kernels.moe.params import experts_touched
from autotune.kernels.moe.ref import (
    dequantize_mxfp4_weight,
    moe_reference,
    quantize_mxfp4_weight,
    route,
    routing_logits,
    validate_mxfp4_moe_inputs,
)

INTERP = Target.interpreter_target()
needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)


#: x, w1, w2, topk_weights, topk_ids
Args = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def make_case(
    M: int, E: int, N: int, K: int, topk: int, zipf: float = 0.0, seed: int = 0
) -> tuple[Args, dict[str, Any]]:
    """Random (never zero) bf16 activations, MXFP4 experts and a routing."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).bfloat16()
    w1q, w1s = quantize_mxfp4_weight(torch.randn(E, 2 * N, K, generator=g) / K**0.5)
    w2q, w2s = quantize_mxfp4_weight(torch.randn(E, K, N, generator=g) / N**0.5)
    weights, ids = route(routing_logits(M, E, zipf=zipf, generator=g), topk)
    return (x, w1q, w2q, weights, ids), dict(w1_scale=w1s, w2_scale=w2s)


def cfg(fused: int, split: int = 1, bk: int = 32, down: int = 32) -> dict[str, int]:
    return dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=bk, GROUP_SIZE_M=1, num_warps=4, num_stages=1,
                SPLIT_K=split, GATE_UP_FUSED=fused, BLOCK_SIZE_N_DOWN=down)  # fmt: skip


# -- the weights' format -------------------------------------------------------------------------------------


def test_quantize_dequantize_round_trip() -> None:
    g = torch.Generator().manual_seed(1)
    # codes without -0 and a largest magnitude of 6 in every 32-group: their quantization is themselves
    codes = torch.randint(0, 15, (3, 8, 64), generator=g, dtype=torch.uint8)
    codes = torch.where(codes == 8, torch.ones_like(codes), codes)
    codes[..., ::32] = 7
    scales = torch.randint(110, 140, (3, 8, 2), generator=g, dtype=torch.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous()
    w = dequantize_mxfp4_weight(packed, scales)
    assert torch.equal(unpack_fp4(packed), codes)
    want = e2m1_decode(codes) * torch.exp2(scales.float() - 127).repeat_interleave(32, dim=-1)
    assert torch.equal(w, want)
    q, s = quantize_mxfp4_weight(w)
    assert torch.equal(q, packed) and torch.equal(s, scales)
    # any weights: within half an e2m1 step of the group's scale (the largest step is 2 x scale)
    x = torch.randn(2, 4, 96, generator=g)
    q, s = quantize_mxfp4_weight(x)
    assert q.shape == (2, 4, 48) and s.shape == (2, 4, 3) and q.dtype == s.dtype == torch.uint8
    back = dequantize_mxfp4_weight(q, s)
    step = torch.exp2(s.float() - 127).repeat_interleave(32, dim=-1)
    big = x.abs() <= 6 * step
    assert torch.all((back - x).abs()[big] <= step[big] + 1e-6)
    assert torch.equal(back.bfloat16().float(), back)  # exact in bf16: what the kernel multiplies
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4_weight(torch.randn(1, 2, 40))
    with pytest.raises(ValueError, match="scale shape"):
        dequantize_mxfp4_weight(q, s[..., :2])


@triton.jit
def _decode(code_ptr, scale_ptr, out_ptr, SIZE: tl.constexpr):
    i = tl.arange(0, SIZE)
    code = tl.load(code_ptr + i).to(tl.int32)
    scale = tl.load(scale_ptr + i).to(tl.int32)
    tl.store(out_ptr + i, _e2m1_bf16(code, (scale - 1) << 7))


@needs_interpreter
def test_the_emulated_path_makes_every_weight_bf16_exactly() -> None:
    """Every e2m1 code (both zeros, the subnormal 0.5, up to ±6) at every scale the quantizer gives for
    finite weights above 2^-124 (e8m0 2 to 252): the bits the kernel builds are the value, exactly."""
    codes = torch.arange(16, dtype=torch.uint8).repeat(251)
    scales = torch.arange(2, 253, dtype=torch.uint8).repeat_interleave(16)
    size = 4096
    code_in = torch.zeros(size, dtype=torch.uint8)
    scale_in = torch.full((size,), 127, dtype=torch.uint8)
    code_in[: codes.numel()], scale_in[: codes.numel()] = codes, scales
    out = torch.full((size,), float("nan"), dtype=torch.bfloat16)
    _decode[(1,)](code_in, scale_in, out, SIZE=size)
    want = e2m1_decode(code_in) * torch.exp2(scale_in.float() - 127)
    assert torch.equal(out.float(), want)


# -- the kernel under the interpreter ------------------------------------------------------------------------


@needs_interpreter
@pytest.mark.parametrize(
    ("native", "fused", "split", "zipf", "K"),
    [
        (False, 1, 1, 0.0, 64),
        (False, 0, 2, 2.0, 96),  # skewed, K slices, a partial last K step (BLOCK_SIZE_K 64)
        (True, 1, 2, 0.0, 64),  # tl.dot_scaled, as on gfx950
        (True, 0, 1, 2.0, 96),
    ],
)
def test_kernel_matches_the_reference(native: bool, fused: int, split: int, zipf: float, K: int) -> None:
    from autotune.kernels.moe.mx import fused_moe_mx

    args, kw = make_case(7, 4, 32, K, 2, zipf=zipf, seed=K + split)
    out = torch.full_like(args[0], float("nan"))
    config = cfg(fused, split, bk=64 if K == 96 else 32, down=64)
    got = fused_moe_mx(*args, config, **kw, native=native, interpret=True, out=out)
    ref = moe_reference(*args, **kw, fused_gate_up=bool(fused))
    assert got is out
    assert rel_error(out, ref) <= 1e-2, (native, fused, split, zipf, K)


@needs_interpreter
def test_the_down_tile_and_top1_write_the_output_directly() -> None:
    from autotune.kernels.moe.mx import fused_moe_mx

    args, kw = make_case(5, 4, 64, 64, 1, seed=3)
    ref = moe_reference(*args, **kw, fused_gate_up=True)
    for down in (32, 64):
        out = fused_moe_mx(*args, cfg(1, down=down), **kw, interpret=True)
        assert rel_error(out, ref) <= 1e-2, down


@needs_interpreter
def test_the_served_entry_point_takes_mxfp4_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import Dispatcher, Table

    args, kw = make_case(6, 4, 32, 64, 2, seed=5)
    problem = Problem.of("moe", 6, 32, 64, variant="mxfp4", E=4, topk=2)
    config = Config(backend="triton", **cfg(0, split=2))
    table = Table.from_winners(INTERP, [(problem, config, 1.0)])
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=INTERP.device_key())
    )
    out = fused_moe(*args, **kw, target=INTERP)
    assert out.dtype == torch.bfloat16 and rel_error(out, moe_reference(*args, **kw)) <= 1e-2


def _bad(
    args: tuple[torch.Tensor, ...], kw: dict[str, Any], how: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    x, w1, w2, weights, ids = args
    kw = dict(kw)
    if how == "fp16 x":
        x = x.half()
    elif how == "w1 shape":
        w1 = w1[:, :, :16]
    elif how == "w2 shape":
        w2 = w2[:, :, :8]
    elif how == "scale dtype":
        kw["w1_scale"] = kw["w1_scale"].float()
    elif how == "scale shape":
        kw["w2_scale"] = kw["w2_scale"][..., :0]
    elif how == "no scale":
        kw.pop("w2_scale")
    elif how == "block_shape":
        kw["block_shape"] = [128, 128]
    elif how == "ids":
        ids = ids + 4
    return (x, w1, w2, weights, ids), kw


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("fp16 x", "x must be one of"),
        ("w1 shape", "MXFP4 w1 must be"),
        ("w2 shape", "MXFP4 w2 must be"),
        ("scale dtype", "w1_scale must be e8m0 uint8"),
        ("scale shape", "w2_scale must be e8m0 uint8"),
        ("no scale", "MXFP4 weights need w2_scale"),
        ("block_shape", "block_shape applies to FP8 weights only"),
        ("ids", "topk_ids out of range"),
    ],
)
def test_bad_input_is_one_clear_error_before_any_launch(
    monkeypatch: pytest.MonkeyPatch, how: str, message: str
) -> None:
    import autotune.kernels.moe.mx as mx

    def no_launch(*a: Any, **k: Any) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(mx, "fused_moe_mx", no_launch)
    args, kw = make_case(4, 4, 32, 64, 2, seed=7)
    bad, bad_kw = _bad(args, kw, how)
    with pytest.raises(ValueError, match=message):
        fused_moe(*bad, **bad_kw, target=INTERP)
    with pytest.raises(ValueError, match=message):
        moe_reference(*bad, **bad_kw)
    if how != "block_shape":
        with pytest.raises(ValueError, match=message):
            validate_mxfp4_moe_inputs(*bad, w1_scale=bad_kw.get("w1_scale"), w2_scale=bad_kw.get("w2_scale"))


def test_configs_that_cannot_run_mxfp4_weights_are_refused() -> None:
    from autotune.kernels.moe.mx import fused_moe_mx

    args, kw = make_case(2, 4, 32, 64, 2)
    with pytest.raises(ValueError, match="multiple of the 32-wide scale groups"):
        fused_moe_mx(*args, {**cfg(1), "BLOCK_SIZE_K": 16}, **kw, interpret=True)
    with pytest.raises(ValueError, match="BLOCK_SIZE_N_DOWN must be a power of two"):
        fused_moe_mx(*args, cfg(1, down=48), **kw, interpret=True)
    with pytest.raises(ValueError, match="B_TMA 1: the MXFP4 weights decode through pointer loads"):
        fused_moe_mx(*args, {**cfg(1), "B_TMA": 1}, **kw, interpret=True)
    with pytest.raises(ValueError, match="PERSISTENT > 0: the MXFP4 kernels run a program a tile"):
        fused_moe_mx(*args, {**cfg(1), "PERSISTENT": 2}, **kw, interpret=True)


@needs_interpreter
def test_the_benchmarker_checks_both_backends_on_mxfp4_problems() -> None:
    """The op's own inputs, reference and tolerance; the output is poisoned with NaN before each run."""
    from autotune.engine.bench import Benchmarker

    problem = Problem.of("moe", 5, 32, 64, variant="mxfp4", E=4, topk=2)
    bench = Benchmarker(MOE, INTERP)
    default = MOE.default_config(problem, INTERP)
    for config in [Config(backend="torch"), default]:
        result = bench.run(problem, config)
        assert result.ok, (config.short(), result.status, result.error[:500])
        assert result.rel_error is not None and result.rel_error < MOE.tolerance(problem)


# -- the op --------------------------------------------------------------------------------------------------


def test_problems_spec_fields_and_emulated_targets() -> None:
    p = Problem.of("moe", 16, 1024, 2048, variant="mxfp4", E=8, topk=2)
    assert p.dtype_b == "fp4e2m1" and p.key() == "moe:M=16,N=1024,K=2048:bf16,fp4e2m1,bf16:nk:E=8,topk=2"
    # half a byte a weight and one scale byte per 32
    weights = p.min_bytes() - 16 * 2048 * 4
    assert weights == pytest.approx(experts_touched(p) * 3 * 1024 * 2048 * (0.5 + 1 / 32))
    with pytest.raises(ValueError, match="multiples of 32"):
        Problem.of("moe", 16, 1000, 2048, variant="mxfp4", E=8, topk=2)
    with pytest.raises(ValueError, match="bf16 activations"):
        Problem.of("moe", 16, 1024, 2048, "fp16", "mxfp4", E=8, topk=2)
    options = MOE.spec_options({"e": 8, "topk": 2, "weights": "mxfp4"}, "bf16")
    assert options["weights"] == "fp4e2m1"
    with pytest.raises(ValueError, match="take bf16 activations"):
        MOE.spec_options({"e": 8, "topk": 2, "weights": "mxfp4"}, "fp16")
    assert [mx_emulated(p, Target.for_arch(a)) for a in ("gfx950", "gfx942", "sm_90", "interpreter")] == [
        False, True, True, True,
    ]  # fmt: skip
    assert not mx_emulated(Problem.of("moe", 16, 1024, 2048, E=8, topk=2), Target.for_arch("gfx942"))


@pytest.mark.parametrize("arch", ["gfx950", "gfx942", "sm_90"])
def test_the_down_tile_is_a_knob_of_the_mxfp4_space_only(arch: str) -> None:
    target = Target.for_arch(arch)
    mx = MOE.space(Problem.of("moe", 64, 1024, 2048, variant="mxfp4", E=8, topk=2), target).subspace("triton")
    plain = MOE.space(Problem.of("moe", 64, 1024, 2048, E=8, topk=2), target).subspace("triton")
    assert "BLOCK_SIZE_N_DOWN" in mx.params and "BLOCK_SIZE_N_DOWN" not in plain.params
    assert all(int(k) % 32 == 0 for k in mx.params["BLOCK_SIZE_K"]) and mx.params["SPLIT_K"] == (1, 2, 4, 8)
    # B is staged in LDS upcast to bf16 (two bytes a weight, not half a byte): a 64x256 bf16 A tile and
    # two 64x256 B tiles need 97 KiB a buffer, which gfx942's 64 KiB cannot hold (the packed bytes would fit)
    big = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=256, BLOCK_SIZE_N_DOWN=64, GATE_UP_FUSED=1,
               num_warps=4, num_stages=2, GROUP_SIZE_M=1, SPLIT_K=1)  # fmt: skip
    lds = next(c for c in mx.constraints if c.name == "lds_overflow")
    assert lds.allows(big) is (arch != "gfx942")


def test_the_cost_model_takes_the_down_tile() -> None:
    target = Target.for_arch("gfx950")
    problem = Problem.of("moe", 64, 1792, 4096, variant="mxfp4", E=8, topk=2)
    configs = MOE.space(problem, target).configs()[:100]
    times = [MOE.predict_us(problem, c, target) for c in configs]
    assert all(t is not None and 0 < t < float("inf") for t in times)
    base = next(c for c in configs if c.backend == "triton" and c["BLOCK_SIZE_N_DOWN"] == 32)
    assert MOE.predict_us(problem, base, target) != MOE.predict_us(
        problem, base.replace(BLOCK_SIZE_N_DOWN=256), target
    )
