"""The fused MoE Triton kernel (CPU interpreter, tiny shapes) against moe_reference, and the torch helpers of
moe_ref: routing, token alignment, FP8 block quantization and input validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from autotune.core.op import KernelCall
from autotune.core.target import interpreting
from autotune.engine.bench import rel_error
from autotune.kernels.moe.ref import (
    align_block_size,
    dequantize_blockwise,
    moe_reference,
    quantize_fp8_act_groupwise,
    quantize_fp8_weight_blockwise,
    route,
    routing_logits,
)

needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)

FP8 = torch.float8_e4m3fn
BLOCK = [128, 128]


def cfg(bm: int = 16, bn: int = 32, bk: int = 32, group_m: int = 1, **extra: int) -> dict[str, int]:
    return (
        dict(
            BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=group_m, num_warps=4, num_stages=1
        )
        | extra
    )


def make_case(
    M: int,
    E: int,
    N: int,
    K: int,
    topk: int,
    *,
    zipf: float = 0.0,
    fp8: bool = False,
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """Random (never zero) inputs (x, w1, w2, topk_weights, topk_ids) and the FP8 keyword arguments."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype)
    w1 = torch.randn(E, 2 * N, K, generator=g) / K**0.5
    w2 = torch.randn(E, K, N, generator=g) / N**0.5
    weights, ids = route(routing_logits(M, E, zipf=zipf, generator=g), topk)
    if not fp8:
        return (x, w1.to(dtype), w2.to(dtype), weights, ids), {}
    w1q, w1s = quantize_fp8_weight_blockwise(w1, BLOCK, FP8)
    w2q, w2s = quantize_fp8_weight_blockwise(w2, BLOCK, FP8)
    return (x, w1q, w2q, weights, ids), dict(w1_scale=w1s, w2_scale=w2s, block_shape=BLOCK)


def run_kernel(args: tuple[torch.Tensor, ...], kw: dict[str, Any], config: dict[str, int]) -> torch.Tensor:
    """fused_moe into a NaN-poisoned output; checks that the output given is the one returned."""
    from autotune.kernels.moe.kernel import fused_moe

    x = args[0]
    out = torch.full_like(x, float("nan"))
    got = fused_moe(*args, config, interpret=True, out=out, **kw)
    assert got is out
    return out


def check_close(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-2) -> None:
    assert out.shape == ref.shape
    err = rel_error(out, ref)  # NaN or inf anywhere: +inf
    assert err <= tol, f"relative error {err} > {tol}"


# -- the kernel against the reference -----------------------------------------------------------------

BF16_CASES = [
    # M, E, N, K, topk, zipf, config
    (1, 4, 32, 64, 1, 0.0, cfg()),
    (1, 4, 32, 64, 2, 0.0, cfg(bm=32, bn=64, bk=64)),
    (5, 4, 32, 64, 2, 0.0, cfg(group_m=4)),
    (5, 8, 64, 128, 1, 1.2, cfg(bm=32, bk=64, group_m=4)),
    (33, 8, 64, 128, 2, 0.0, cfg(bn=64, bk=64, group_m=4)),
    (33, 8, 64, 128, 2, 1.5, cfg(bm=32, bn=32, bk=32, group_m=1)),
    (33, 6, 48, 80, 2, 1.0, cfg(bn=32, bk=32)),  # N % BLOCK_SIZE_N and K % BLOCK_SIZE_K != 0
]


@needs_interpreter
@pytest.mark.parametrize("M, E, N, K, topk, zipf, config", BF16_CASES)
def test_fused_moe_bf16_matches_reference(
    M: int, E: int, N: int, K: int, topk: int, zipf: float, config: dict[str, int]
) -> None:
    args, kw = make_case(M, E, N, K, topk, zipf=zipf)
    out = run_kernel(args, kw, config)
    assert out.dtype == torch.bfloat16
    check_close(out, moe_reference(*args))


@needs_interpreter
def test_fused_moe_fp16_without_out_argument() -> None:
    from autotune.kernels.moe.kernel import fused_moe

    args, _ = make_case(5, 4, 32, 64, 2, dtype=torch.float16, seed=3)
    out = fused_moe(*args, cfg(), interpret=True)
    assert out.dtype == torch.float16
    check_close(out, moe_reference(*args), tol=5e-3)


FP8_CASES = [
    # M, E, N, K, topk, zipf, config
    (1, 4, 128, 128, 1, 0.0, cfg(bk=128)),
    (5, 4, 128, 128, 2, 1.2, cfg(bm=16, bn=64, bk=64, group_m=4)),
    (33, 8, 128, 128, 2, 0.0, cfg(bm=32, bn=32, bk=32)),
    (5, 4, 64, 192, 2, 1.0, cfg(bn=64, bk=64)),  # partial scale blocks: 2N = 128 rows, K = 1.5 blocks
    # two scale blocks each for gate, up and down rows: one B scale per tile (64), several (256)
    (3, 4, 256, 256, 2, 0.0, cfg(bn=64, bk=64)),
    (3, 4, 256, 256, 2, 0.0, cfg(bn=256, bk=64)),
]


@needs_interpreter
@pytest.mark.parametrize("M, E, N, K, topk, zipf, config", FP8_CASES)
def test_fused_moe_fp8_blockwise_matches_reference(
    M: int, E: int, N: int, K: int, topk: int, zipf: float, config: dict[str, int]
) -> None:
    args, kw = make_case(M, E, N, K, topk, zipf=zipf, fp8=True)
    out = run_kernel(args, kw, config)
    ref = moe_reference(*args, **kw)
    check_close(out, ref)
    # The reference computes on the same fp8 values: far closer than to the unquantized MLP.
    x, w1, w2, weights, ids = args
    w1f = dequantize_blockwise(w1, kw["w1_scale"], BLOCK)
    w2f = dequantize_blockwise(w2, kw["w2_scale"], BLOCK)
    loose = moe_reference(x, w1f.bfloat16(), w2f.bfloat16(), weights, ids)
    assert rel_error(out, ref) < rel_error(out, loose)


SPLIT_CASES = [
    # M, E, N, K, topk, fp8, config: K slices summed in the launch, uneven and empty slices included
    (1, 4, 32, 128, 2, False, cfg(bk=32, SPLIT_K=4)),
    (5, 4, 32, 96, 2, False, cfg(bk=32, SPLIT_K=2)),  # 3 K steps in 2 slices of 2 and 1
    (7, 4, 48, 80, 2, False, cfg(bn=32, bk=32, SPLIT_K=4)),  # K % BLOCK_SIZE_K: 3 steps, 1 empty slice
    (3, 4, 128, 256, 1, True, cfg(bn=64, bk=64, SPLIT_K=4)),
    (5, 4, 128, 256, 2, True, cfg(bn=32, bk=128, SPLIT_K=2)),  # one 128-wide K step per slice
]


@needs_interpreter
@pytest.mark.parametrize("M, E, N, K, topk, fp8, config", SPLIT_CASES)
def test_split_k_sums_in_the_launch_and_matches(
    M: int, E: int, N: int, K: int, topk: int, fp8: bool, config: dict[str, int]
) -> None:
    from autotune.kernels.scratch import split_scratch

    args, kw = make_case(M, E, N, K, topk, fp8=fp8, seed=11)
    out = run_kernel(args, kw, config)
    check_close(out, moe_reference(*args, **kw))
    unsplit = run_kernel(args, kw, {**config, "SPLIT_K": 1})
    check_close(out, unsplit, tol=1e-2)
    again = run_kernel(args, kw, config)
    assert torch.equal(out, again)  # slices summed in slice order: the same bits every time
    _, counters = split_scratch(torch.device("cpu"), 0, 0)
    assert not counters.any()  # every tile's counter is back at 0 for the next launch


TMA_CASES = [
    # M, E, N, K, topk, fp8, config: B through tensor descriptors, both structures, split, ragged N and K
    (33, 6, 48, 80, 2, False, cfg(bn=32, bk=32, B_TMA=1)),
    (33, 6, 48, 80, 2, False, cfg(bn=32, bk=32, B_TMA=1, GATE_UP_FUSED=1)),
    (7, 4, 48, 80, 2, False, cfg(bn=32, bk=32, B_TMA=1, GATE_UP_FUSED=1, SPLIT_K=4)),
    (5, 4, 64, 192, 2, True, cfg(bn=64, bk=64, B_TMA=1, GATE_UP_FUSED=1)),
    (3, 4, 256, 256, 2, True, cfg(bn=256, bk=64, B_TMA=1)),
]


@needs_interpreter
@pytest.mark.parametrize("M, E, N, K, topk, fp8, config", TMA_CASES)
def test_weight_tiles_through_descriptors_give_the_pointer_loads_bits(
    M: int, E: int, N: int, K: int, topk: int, fp8: bool, config: dict[str, int]
) -> None:
    """Rows past an expert's read the next expert's weights (columns the store drops), columns past K
    read zeros: the same bits as the pointer loads, and the reference's answer."""
    args, kw = make_case(M, E, N, K, topk, fp8=fp8)
    out = run_kernel(args, kw, config)
    check_close(out, moe_reference(*args, **kw))
    assert torch.equal(out, run_kernel(args, kw, {**config, "B_TMA": 0}))


PERSISTENT_CASES = [
    # M, E, N, K, topk, fp8, config, programs: a program an SM over both structures, TMA, FP8, ragged N, K
    (33, 6, 48, 80, 2, False, cfg(bn=32, bk=32, PERSISTENT=1), 3),
    (33, 8, 64, 128, 2, False, cfg(bn=32, bk=32, group_m=4, PERSISTENT=1, GATE_UP_FUSED=1), 5),
    (5, 4, 64, 192, 2, True, cfg(bn=64, bk=64, PERSISTENT=1, B_TMA=1), 2),
    (9, 4, 64, 64, 1, False, cfg(bm=32, PERSISTENT=2), 32),  # more programs than tiles
]


@needs_interpreter
@pytest.mark.parametrize("M, E, N, K, topk, fp8, config, programs", PERSISTENT_CASES)
def test_a_program_an_sm_gives_the_bits_of_a_program_a_tile(
    M: int, E: int, N: int, K: int, topk: int, fp8: bool, config: dict[str, int], programs: int
) -> None:
    """PERSISTENT 1 walks the same tiles with the same arithmetic, the padding blocks of a worst-case
    alignment (expert id -1) left out: the same bits as one program a tile, and the reference's answer."""
    from autotune.kernels.moe.kernel import fused_moe
    from autotune.kernels.moe.routing import align_fixed

    args, kw = make_case(M, E, N, K, topk, fp8=fp8, zipf=1.0)
    want = run_kernel(args, kw, {**config, "PERSISTENT": 0})
    check_close(want, moe_reference(*args, **kw), tol=5e-2 if fp8 else 1e-2)
    worst = align_fixed(args[4], config["BLOCK_SIZE_M"], E)
    assert int((worst[1] < 0).sum()) > 0  # the grid holds padding blocks
    out = torch.full_like(args[0], float("nan"))
    fused_moe(*args, config, interpret=True, out=out, alignment=worst, num_sms=programs, **kw)
    assert torch.equal(out, want)


def test_programs_an_sm_launch_on_the_sms() -> None:
    """PERSISTENT p: each GEMM on min(tiles, p x num_sms) programs of `moe_gemm_kernel` with its
    PERSISTENT path and their number (without it: a program a tile, the path off); SPLIT_K > 1 and values
    other than 0, 1 and 2 are refused before any launch."""
    from autotune.kernels.moe.kernel import fused_moe

    args, _ = make_case(5, 4, 128, 256, 2)
    calls: list[KernelCall] = []
    fused_moe(*args, cfg(bm=16, bn=64, bk=64), kernels=recorders(calls))
    tiles = calls[0].args[8] // 16 * (2 * 128 // 64)  # worst-case row blocks x column tiles of 2N
    assert calls[0].grid == (tiles,) and "PERSISTENT" not in calls[0].kwargs
    for persistent, programs in ((1, 7), (2, 14)):
        calls.clear()
        fused_moe(*args, cfg(bm=16, bn=64, bk=64, PERSISTENT=persistent), kernels=recorders(calls), num_sms=7)
        gate_up, act, down = calls
        assert gate_up.kwargs["PERSISTENT"] and down.kwargs["PERSISTENT"] and "PERSISTENT" not in act.kwargs
        assert gate_up.grid == (min(tiles, programs),) == (gate_up.kwargs["NUM_PROGRAMS"],)
        assert down.grid == (min(down.args[8] // 16 * 4, programs),)  # K = 256 over 64-wide tiles
    with pytest.raises(ValueError, match="PERSISTENT runs whole tiles"):
        fused_moe(*args, cfg(PERSISTENT=1, SPLIT_K=2), kernels=recorders([]))
    with pytest.raises(ValueError, match="PERSISTENT must be 0"):
        fused_moe(*args, cfg(PERSISTENT=3), kernels=recorders([]))


@needs_interpreter
@pytest.mark.parametrize("fp8_dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_activation_quantization_kernel_matches_the_torch_quantizer_bitwise(fp8_dtype: torch.dtype) -> None:
    from autotune.kernels.moe.kernel import _quantize_act, act_quant_kernel

    g = torch.Generator().manual_seed(4)
    # magnitudes over 6 decades within rows, so groups hold values that land on FP8 subnormals
    x = torch.randn(37, 300, generator=g) * 10 ** (torch.rand(37, 300, generator=g) * 6 - 5)
    x[2, :128] = 0.0  # an all-zero group: scale 1
    x = x.bfloat16()
    q, scale = _quantize_act(act_quant_kernel, x, fp8_dtype, interpret=True)
    want_q, want_scale = quantize_fp8_act_groupwise(x, 128, fp8_dtype)
    assert q.dtype == fp8_dtype and scale.shape == (37, 3)
    assert torch.equal(scale, want_scale) and scale[2, 0] == 1.0
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    tiny = q.float().abs()
    assert ((tiny > 0) & (tiny < torch.finfo(fp8_dtype).smallest_normal)).any()  # subnormals were covered


@needs_interpreter
def test_group_size_m_only_reorders_tiles() -> None:
    """GROUP_SIZE_M changes the order tiles run in, never a tile's arithmetic: bitwise equal outputs."""
    args, kw = make_case(33, 8, 64, 64, 2, zipf=1.0, seed=5)
    a = run_kernel(args, kw, cfg(group_m=1))
    b = run_kernel(args, kw, cfg(group_m=4))
    assert torch.equal(a, b)


@needs_interpreter
def test_precomputed_alignment_gives_the_same_output() -> None:
    from autotune.kernels.moe.kernel import fused_moe

    args, kw = make_case(33, 8, 64, 64, 2, zipf=1.0, seed=6)
    config = cfg(bm=32)
    want = run_kernel(args, kw, config)
    ids = args[4].clone()
    ids[0, 0] = 99  # never read back with a precomputed alignment
    alignment = align_block_size(args[4], 32, 8)
    got = fused_moe(*args[:4], ids, config, interpret=True, alignment=alignment, **kw)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="alignment must be align_block_size"):
        fused_moe(*args, config, alignment=align_block_size(args[4], 16, 8), kernels=recorders([]))


def test_reference_matches_a_token_by_token_loop() -> None:
    args, _ = make_case(4, 4, 16, 32, 2, zipf=1.0, dtype=torch.float32, seed=7)
    x, w1, w2, weights, ids = args
    ref = moe_reference(*args)
    for t in range(x.shape[0]):
        want = torch.zeros(x.shape[1])
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w1[e] @ x[t]
            gate, up = h[:16], h[16:]
            want += float(weights[t, j]) * (w2[e] @ (gate * torch.sigmoid(gate) * up))
        torch.testing.assert_close(ref[t], want, rtol=1e-5, atol=1e-5)


# -- launches through `kernels=` ----------------------------------------------------------------------


class Recorder:
    def __init__(self, calls: list[KernelCall]) -> None:
        self.calls = calls

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(KernelCall(None, tuple(grid), args, kwargs))

        return record


def recorders(calls: list[KernelCall]) -> tuple[Recorder, ...]:
    """One Recorder per JIT kernel of fused_moe, all appending to `calls`."""
    from autotune.kernels.moe.kernel import JIT_KERNELS

    return tuple(Recorder(calls) for _ in JIT_KERNELS)


AMD_OPTS = dict(matrix_instr_nonkdim=16, waves_per_eu=2, kpack=2)


@pytest.mark.parametrize("fused", [1, 0])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_every_launch_goes_through_the_recorders_with_amd_options(device: str, fused: int) -> None:
    from autotune.kernels.moe.kernel import fused_moe

    args, kw = make_case(5, 4, 128, 128, 2, fp8=True)
    args = tuple(t.to(device) for t in args)
    kw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    calls: list[KernelCall] = []
    config = cfg(bm=16, bn=64, bk=64, GATE_UP_FUSED=fused, **AMD_OPTS)
    fused_moe(*args, config, is_amd=True, kernels=recorders(calls), **kw)
    if not fused:  # vLLM's structure: x @ w1 over all 2N rows, then SiLU·up in a launch of its own
        assert [("SWIGLU" in c.kwargs, "BLOCK_N" in c.kwargs) for c in calls] == [
            (False, False), (True, False), (False, True), (False, False), (True, False)
        ]  # fmt: skip
        quant_x, gate_up, act, quant_inter, down = calls
        assert not gate_up.kwargs["SWIGLU"] and gate_up.args[10] == 2 * 128  # n: gate and up rows
        assert act.args[0] is gate_up.args[2] and quant_inter.args[0] is act.args[1]
        assert act.args[2:4] == (10, 128) and quant_x.args[2] is gate_up.args[3]
        assert down.kwargs["MUL_ROUTED_WEIGHT"] and down.args[3] is quant_inter.args[2]
        return
    # x quantized, x @ w1 with the SiLU·up epilogue, the intermediate quantized, then @ w2 with the weights
    assert [("SWIGLU" in c.kwargs, "FP8_MAX" in c.kwargs) for c in calls] == [
        (False, True), (True, False), (False, True), (True, False)
    ]  # fmt: skip
    quant_x, up, quant_inter, down = calls
    assert up.kwargs["SWIGLU"] and not up.kwargs["MUL_ROUTED_WEIGHT"] and up.kwargs["A_ROW_DIV"] == 2
    assert down.kwargs["MUL_ROUTED_WEIGHT"] and not down.kwargs["SWIGLU"] and down.kwargs["A_ROW_DIV"] == 1
    assert up.args[3] is quant_x.args[2] and down.args[3] is quant_inter.args[2]  # the scales each wrote
    assert quant_inter.args[0] is up.args[2]  # the intermediate the gate/up GEMM wrote
    for call in (up, down):
        assert {k: call.kwargs[k] for k in AMD_OPTS} == AMD_OPTS
        assert call.kwargs["FP8"] and "DOT_F32" not in call.kwargs and "SPLIT_K" not in call.kwargs
    assert quant_x.grid == (1, 1) and quant_x.kwargs["FP8_MAX"] == 448.0
    # grids: token blocks × N tiles (N=128 and K=128 over BLOCK_SIZE_N=64 → 2 tiles each)
    num_padded = up.args[8]
    assert num_padded % 16 == 0 and up.grid == (num_padded // 16 * 2,) == down.grid
    if device == "meta":  # sized for the worst routing: 10 pairs, each of up to 4 experts padded to 16
        assert num_padded == 64


def test_split_k_launches_the_split_kernel_with_scratch_per_gemm() -> None:
    """SPLIT_K slices each GEMM's K (at most one slice per K step) in a second grid axis, with a workspace
    of slices x (gate, up) tiles and a counter per tile."""
    from autotune.kernels.moe.kernel import fused_moe

    args, kw = make_case(5, 4, 128, 256, 2, fp8=True)
    calls: list[KernelCall] = []
    fused_moe(*args, cfg(bm=16, bn=64, bk=64, SPLIT_K=8, GATE_UP_FUSED=1), kernels=recorders(calls), **kw)
    _, up, _, down = calls
    tiles = up.args[10] // 16 * 2
    assert up.grid == (tiles, 4) and up.kwargs["SPLIT_K"] == 4  # K = 256: 4 steps of 64
    assert down.grid == (down.args[10] // 16 * 4, 2) and down.kwargs["SPLIT_K"] == 2  # K = N = 128: 2 steps
    ws, counters = up.args[8], up.args[9]
    assert ws.dtype == torch.float32 and ws.numel() >= tiles * 4 * 2 * 16 * 64
    assert counters.dtype == torch.int32 and counters.numel() >= tiles and not counters.any()
    with pytest.raises(ValueError, match="SPLIT_K must be >= 1"):
        fused_moe(*args, cfg(SPLIT_K=0), kernels=recorders([]), **kw)


def test_amd_launch_options_are_refused_on_nvidia() -> None:
    from autotune.kernels.moe.kernel import fused_moe

    args, kw = make_case(5, 4, 32, 64, 2)
    with pytest.raises(ValueError, match="waves_per_eu exist only on AMD"):
        fused_moe(*args, cfg(waves_per_eu=2), kernels=recorders([]), **kw)


# -- bad input ----------------------------------------------------------------------------------------


def _bad_cases() -> list[tuple[str, Callable[[list[Any], dict[str, Any]], None], str]]:
    def setarg(
        i: int, fn: Callable[[torch.Tensor], torch.Tensor]
    ) -> Callable[[list[Any], dict[str, Any]], None]:
        def mutate(args: list[Any], kw: dict[str, Any]) -> None:
            args[i] = fn(args[i])

        return mutate

    def setkw(key: str, value: Any) -> Callable[[list[Any], dict[str, Any]], None]:
        def mutate(args: list[Any], kw: dict[str, Any]) -> None:
            kw[key] = value(kw) if callable(value) else value

        return mutate

    return [
        ("x 1-D", setarg(0, lambda x: x[0]), r"x must be \(M, K\)"),
        ("x fp64", setarg(0, lambda x: x.double()), "x must be one of"),
        ("w1 K", setarg(1, lambda w: w[:, :, :64]), r"w1 must be \(E, 2N, K=128\)"),
        ("w1 odd rows", setarg(1, lambda w: w[:, :255]), r"w1 must be \(E, 2N"),
        ("w2 shape", setarg(2, lambda w: w[:3]), r"w2 must be \(E=4, K=128, N=128\)"),
        ("ids rows", setarg(4, lambda t: t[:3]), r"topk_ids must be \(M=5, topk\)"),
        ("ids float", setarg(4, lambda t: t.float()), "topk_ids must be int32 or int64"),
        ("weights shape", setarg(3, lambda t: t[:, :1]), "topk_weights shape"),
        ("ids too big", setarg(4, lambda t: t + 4), r"topk_ids out of range \[0, 4\)"),
        ("ids negative", setarg(4, lambda t: t - 4), r"topk_ids out of range \[0, 4\)"),
        ("w2 not fp8", setarg(2, lambda w: w.float().bfloat16()), "share one FP8 dtype"),
        ("no block shape", setkw("block_shape", None), r"FP8 weights need block_shape=\[128, 128\]"),
        ("block 64", setkw("block_shape", [64, 64]), r"FP8 weights need block_shape=\[128, 128\]"),
        ("no w1 scale", setkw("w1_scale", None), "FP8 weights need w1_scale"),
        (
            "w2 scale shape",
            setkw("w2_scale", lambda kw: kw["w2_scale"][:, :, :0]),
            "w2_scale must have shape",
        ),
        ("w1 scale dtype", setkw("w1_scale", lambda kw: kw["w1_scale"].double()), "w1_scale must be float32"),
    ]


@pytest.mark.parametrize("mutate, match", [c[1:] for c in _bad_cases()], ids=[c[0] for c in _bad_cases()])
def test_bad_input_raises_a_clear_value_error(
    mutate: Callable[[list[Any], dict[str, Any]], None], match: str
) -> None:
    from autotune.kernels.moe.kernel import fused_moe

    base, kw = make_case(5, 4, 128, 128, 2, fp8=True)
    args = list(base)
    mutate(args, kw)
    with pytest.raises(ValueError, match=match):
        fused_moe(*args, cfg(), kernels=recorders([]), **kw)
    with pytest.raises(ValueError, match=match):
        moe_reference(*args, **kw)


def test_bad_bf16_input_and_config_raise() -> None:
    from autotune.kernels.moe.kernel import fused_moe

    (x, w1, w2, weights, ids), _ = make_case(5, 4, 32, 64, 2)
    rec = recorders([])
    with pytest.raises(ValueError, match="must have x's dtype"):
        fused_moe(x, w1.half(), w2, weights, ids, cfg(), kernels=rec)
    with pytest.raises(ValueError, match="apply to FP8 weights only"):
        fused_moe(x, w1, w2, weights, ids, cfg(), block_shape=BLOCK, kernels=rec)
    with pytest.raises(ValueError, match="lacks BLOCK_SIZE_K"):
        fused_moe(x, w1, w2, weights, ids, {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32}, kernels=rec)
    with pytest.raises(ValueError, match="BLOCK_SIZE_N must be a power of two"):
        fused_moe(x, w1, w2, weights, ids, cfg(bn=48), kernels=rec)
    with pytest.raises(ValueError, match=r"out must be a contiguous \(5, 64\)"):
        fused_moe(x, w1, w2, weights, ids, cfg(), out=torch.empty(5, 64), kernels=rec)
    args, kw = make_case(5, 4, 128, 128, 2, fp8=True)
    with pytest.raises(ValueError, match="BLOCK_SIZE_K must divide the scale block 128"):
        fused_moe(*args, cfg(bk=256), kernels=rec, **kw)


def test_bad_weight_descriptor_configs_raise_before_any_launch() -> None:
    from autotune.kernels.moe.kernel import fused_moe

    (x, w1, w2, weights, ids), _ = make_case(5, 4, 32, 64, 2)
    calls: list[KernelCall] = []
    with pytest.raises(ValueError, match="B_TMA must be 0"):
        fused_moe(x, w1, w2, weights, ids, cfg(B_TMA=2), kernels=recorders(calls))
    with pytest.raises(ValueError, match="NVIDIA sm_90 and newer only"):
        fused_moe(x, w1, w2, weights, ids, cfg(B_TMA=1), is_amd=True, kernels=recorders(calls))
    strided = torch.empty(4, 64, 128, dtype=w1.dtype)[:, :, :64]
    strided.copy_(w1)
    with pytest.raises(ValueError, match="B_TMA 1 needs contiguous weights"):
        fused_moe(x, strided, w2, weights, ids, cfg(B_TMA=1), kernels=recorders(calls))
    (x, w1, w2, weights, ids), _ = make_case(5, 4, 36, 60, 2)  # bf16 rows of 120 and 72 bytes
    with pytest.raises(ValueError, match="16-byte aligned rows; w1"):
        fused_moe(x, w1, w2, weights, ids, cfg(B_TMA=1), kernels=recorders(calls))
    assert not calls


# -- routing and alignment ----------------------------------------------------------------------------


def test_route_picks_the_top_softmax_experts() -> None:
    g = torch.Generator().manual_seed(0)
    logits = routing_logits(64, 8, generator=g)
    weights, ids = route(logits, 2)
    assert ids.dtype == torch.int32 and weights.dtype == torch.float32
    torch.testing.assert_close(weights.sum(-1), torch.ones(64))
    probs = torch.softmax(logits, -1)
    assert torch.equal(ids.long(), probs.topk(2).indices)
    raw, _ = route(logits, 2, renormalize=False)
    torch.testing.assert_close(raw, probs.topk(2).values)
    with pytest.raises(ValueError, match="topk must be in"):
        route(logits, 9)


def test_routing_logits_zipf_skews_the_load() -> None:
    M, E = 4000, 8

    def loads(zipf: float, seed: int) -> torch.Tensor:
        logits = routing_logits(M, E, zipf=zipf, generator=torch.Generator().manual_seed(seed))
        assert logits.shape == (M, E) and logits.dtype == torch.float32
        return torch.bincount(route(logits, 1)[1].flatten().long(), minlength=E)

    uniform = loads(0.0, 0)
    assert int(uniform.max()) < 1.3 * M / E and int(uniform.min()) > 0.7 * M / E
    skewed = loads(1.2, 0)
    assert int(skewed.max()) > 2.5 * int(uniform.max())  # rank 1 expects 1/H(8, 1.2) ≈ 43 % of tokens
    hot = {int(loads(1.2, seed).argmax()) for seed in range(6)}
    assert len(hot) > 1, "the hot expert must move with the seed (random permutation of experts)"
    with pytest.raises(ValueError, match="zipf"):
        routing_logits(4, 4, zipf=-1.0)


@pytest.mark.parametrize("M, topk, E, block_m", [(1, 1, 4, 16), (33, 2, 8, 16), (100, 4, 16, 32)])
def test_align_block_size_properties(M: int, topk: int, E: int, block_m: int) -> None:
    g = torch.Generator().manual_seed(M)
    _, ids = route(routing_logits(M, E, zipf=1.0, generator=g), topk)
    sorted_ids, expert_ids, num_padded = align_block_size(ids, block_m, E)
    n = M * topk
    assert sorted_ids.dtype == expert_ids.dtype == torch.int32
    assert sorted_ids.numel() == num_padded and num_padded % block_m == 0
    assert expert_ids.numel() == num_padded // block_m
    valid = sorted_ids[sorted_ids != n].long()
    assert torch.equal(valid.sort().values, torch.arange(n))  # every (token, slot) exactly once
    assert int((sorted_ids > n).sum()) == 0  # only the sentinel pads
    counts = torch.bincount(ids.flatten().long(), minlength=E)
    blocks = torch.bincount(expert_ids.long(), minlength=E)
    assert torch.equal(blocks, (counts + block_m - 1) // block_m)  # minimal padding per expert
    assert bool((expert_ids[1:] >= expert_ids[:-1]).all())  # groups in expert order
    flat = ids.flatten().long()
    for b, e in enumerate(expert_ids.tolist()):
        block = sorted_ids[b * block_m : (b + 1) * block_m].long()
        real = block[block != n]
        assert bool((flat[real] == e).all())
        assert bool((real[1:] > real[:-1]).all())  # stable: pairs in order within the group
    again = align_block_size(ids, block_m, E)
    assert torch.equal(again[0], sorted_ids) and torch.equal(again[1], expert_ids)
    with pytest.raises(ValueError, match="out of range"):
        align_block_size(ids, block_m, int(ids.max()))


# -- FP8 quantization ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fp8_dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_weight_blockwise_round_trip(fp8_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(2, 200, 300, generator=g) * torch.logspace(-3, 2, 300)  # blocks of different ranges
    w[1, 128:, 128:256] = 0.0  # an all-zero block
    q, scale = quantize_fp8_weight_blockwise(w, (128, 128), fp8_dtype)
    assert q.dtype == fp8_dtype and q.shape == w.shape
    assert scale.dtype == torch.float32 and scale.shape == (2, 2, 3)
    assert bool(torch.isfinite(scale).all()) and float(scale[1, 1, 1]) == 1.0
    back = dequantize_blockwise(q, scale, (128, 128))
    assert back.dtype == torch.float32 and bool(torch.isfinite(back).all())
    s = scale.repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :200, :300]
    # e4m3: 3 mantissa bits, rounding error at most 2^-4 relative (normals) or 2^-10·scale (subnormals)
    assert bool(((back - w).abs() <= 2**-4 * w.abs() + 2**-9 * s).all())
    assert rel_error(back, w) < 0.05
    # every non-zero block uses the full fp8 range
    fp8_max = torch.finfo(fp8_dtype).max
    amax_q = q.float().abs().reshape(2, 1, 200, 300)[..., :128, :128].amax()
    assert float(amax_q) == fp8_max


def test_act_groupwise_round_trip() -> None:
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(5, 200, generator=g) * 10).bfloat16()
    q, scale = quantize_fp8_act_groupwise(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (5, 2)
    back = dequantize_blockwise(q, scale, (1, 128))
    assert rel_error(back, x.float()) < 0.05
    amax = torch.stack([x[:, :128].float().abs().amax(1), x[:, 128:].float().abs().amax(1)], dim=1)
    torch.testing.assert_close(scale, amax / torch.finfo(torch.float8_e4m3fn).max)
    with pytest.raises(ValueError, match="does not fit"):
        dequantize_blockwise(q, scale[:, :1], (1, 128))
