"""gfx950's FP4 conversion in `gemm_mxfp4_bf16a` (HW_FP4_CVT): the CPU model of
v_cvt_scalef32_pk_fp4_bf16 against `quantize_mx`, the kernel with the model in the interpreter, the knob's
space, and (compile-only, gfx950) the instruction in the binary with far fewer vector instructions."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable

import pytest
import torch

from autotune import Config, Problem
from autotune.core.target import Target, TargetError, interpreting
from autotune.kernels import get_op
from autotune.kernels.common.formats import dequantize_mx, quantize_mx, unpack_fp4
from autotune.kernels.quant.fp4_cvt import cvt_pk_fp4, floor_scale, quantize_words, rounded_scale
from autotune.kernels.quant.space import hw_fp4_cvt_target, triton_default

OP = "gemm_mxfp4_bf16a"
INTERP = Target.interpreter_target()
#: e2m1 ties (each rounds to the even neighbour), values near and past the largest (6) and e2m1 subnormals
#: (0.5 and what rounds to 0 or 0.5), in units of the group's scale
SPECIAL = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 5.75, 6.0, 6.5, 7.0, 0.125, 0.3, 0.5, 0.625, 1.0)


def _random_bf16(rows: int, K: int, seed: int) -> torch.Tensor:
    """Random bf16 (rows, K), no zeros, each 32-group over its own power of two 2^k (k in [-100, 100)): the
    SPECIAL values and 7.5 (the amax, which saturates) times 2^k with random signs, then uniform values in
    (-7, 7) · 2^k."""
    g = torch.Generator().manual_seed(seed)
    n = len(SPECIAL) + 1
    k = torch.randint(-100, 100, (rows, K // 32, 1), generator=g).float()
    sign = torch.where(torch.rand(rows, K // 32, n, generator=g) < 0.5, -1.0, 1.0)
    planted = torch.tensor((7.5, *SPECIAL)) * sign
    rest = torch.rand(rows, K // 32, 32 - n, generator=g) * 14 - 7
    rest = torch.where(rest == 0, 1.0, rest)
    return (torch.cat((planted, rest), dim=-1) * torch.exp2(k)).view(rows, K).bfloat16()


def test_model_matches_quantize_mx_bit_for_bit() -> None:
    a = _random_bf16(64, 256, seed=1)
    packed, scales = quantize_words(a)
    want_packed, want_scales = quantize_mx(a.float(), "e2m1")
    assert torch.equal(scales, want_scales)
    assert torch.equal(packed, want_packed)
    codes = unpack_fp4(packed)
    assert {int(c) & 7 for c in codes.unique()} == set(range(8))  # every magnitude, ties and 6 included
    # the planted values in units of their scale: ties to even, saturation at 6, e2m1 subnormals
    y = dequantize_mx(packed, scales, "e2m1").view(64, 8, 32)[..., 1 : len(SPECIAL) + 1]
    unit = dequantize_mx(packed, scales, "e2m1").view(64, 8, 32)[..., :1].abs() / 6.0  # 7.5 saturates
    want = torch.tensor((0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, 6.0, 6.0, 0.0, 0.5, 0.5, 0.5, 1.0))
    assert torch.equal((y.abs() / unit), want.expand_as(y))


def test_cvt_rounds_to_nearest_even_and_saturates_on_both_sources() -> None:
    values = torch.tensor(SPECIAL) * 4.0  # scale 2^2: exponent field 129
    scale = torch.tensor(4.0)
    for dtype in (torch.bfloat16, torch.float32):
        byte = cvt_pk_fp4(values.to(dtype), -values.to(dtype), scale)
        lo, hi = byte & 0xF, byte >> 4
        want = torch.tensor((0, 2, 2, 4, 4, 6, 6, 7, 7, 7, 7, 7, 0, 1, 1, 1, 2), dtype=torch.uint8)
        assert torch.equal(lo, want)
        assert torch.equal(hi, lo | 8)
    # only the scale's exponent field counts (1.5 · 4 is 4); an exponent field of 255 is no e8m0 scale
    assert torch.equal(cvt_pk_fp4(values, values, torch.tensor(6.0)), cvt_pk_fp4(values, values, scale))
    with pytest.raises(ValueError, match="exponent field 255"):
        cvt_pk_fp4(values, values, torch.tensor(float("inf")))


def test_special_values_and_where_the_model_differs_from_quantize_mx() -> None:
    base = torch.linspace(0.1, 3.0, 32)
    rows = torch.stack([base, base, base, base])
    rows[0, 3], rows[1, 5], rows[2, 7] = float("inf"), float("-inf"), float("nan")
    rows[3, 9] = -0.0
    a = rows.bfloat16()
    packed, scales = quantize_words(a)
    want_packed, want_scales = quantize_mx(a.float(), "e2m1")
    assert torch.equal(scales, want_scales) and scales[:3].flatten().tolist() == [253, 253, 253]
    codes, want = unpack_fp4(packed), unpack_fp4(want_packed)
    assert (codes[0, 3], codes[1, 5], codes[2, 7]) == (7, 15, 0)  # ±inf saturate to ±6, NaN is +0
    assert codes[3, 9] == 8 and want[3, 9] == 0  # -0.0 keeps its sign here, both decode to 0
    same = torch.ones_like(codes, dtype=torch.bool)
    same[3, 9] = False
    assert torch.equal(codes[same], want[same])


def test_scale_rules_differ_where_the_amax_mantissa_is_at_least_1_75() -> None:
    g = torch.Generator().manual_seed(2)
    groups = torch.randn(4096, 32, generator=g) * torch.exp2(torch.randint(-40, 40, (4096, 1), generator=g))
    groups = torch.where(groups == 0, 1.0, groups)
    floor, rounded = floor_scale(groups), rounded_scale(groups)
    amax = groups.abs().amax(dim=-1)
    high = amax / torch.exp2(torch.floor(torch.log2(amax))) >= 1.75
    assert 0 < int(high.sum()) < len(high)
    assert torch.equal(rounded.int() - floor.int(), high.int())
    # the floor rule is quantize_mx's; with it, amax / scale in [7, 8) saturates to 6
    assert torch.equal(floor, quantize_mx(groups, "e2m1")[1].flatten())


def _config(**kw: int) -> Config:
    base = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=1)
    return Config(backend="triton", **{**base, **kw})


@pytest.mark.skipif(not interpreting(), reason="runs kernels in the CPU interpreter")
def test_kernel_with_the_model_equals_the_software_quantizer() -> None:
    """Words of A, their exponent fields and the packed bytes through the kernel (the instruction replaced
    by its model), on both MX paths, an edge tile in M and N and a partial K tile: the same C, bit for bit,
    as the software quantizer (HW_FP4_CVT 0), and within the tolerance of the reference."""
    from autotune.kernels.quant.op import QuantGemmOp

    op = get_op(OP)
    problem = Problem.quant(OP, 20, 48, 192)
    inputs = op.make_inputs(problem, "cpu", seed=5)
    ref = op.reference(problem, inputs)
    for path in (QuantGemmOp(OP), QuantGemmOp(OP, native_mx=True)):
        for config in (_config(), _config(BLOCK_K=128, SPLIT_K=2)):
            outs = []
            for hw in (0, 1):
                out = op.make_output(problem, "cpu").fill_(float("nan"))
                path.prepare(problem, config.replace(HW_FP4_CVT=hw), INTERP, inputs, out)()
                outs.append(out)
            assert torch.isfinite(outs[1]).all()
            assert torch.equal(outs[0], outs[1]), (path.native_mx, config.short())
            err = ((outs[1].float() - ref).norm() / ref.norm()).item()
            assert err <= op.tolerance(problem), err
    # A is read as 32-bit words: a view starting at an odd element is refused, not misread
    a = inputs[0]
    shifted = torch.cat((a, a[:, :1]), dim=1)[:, 1:]
    out = op.make_output(problem, "cpu")
    with pytest.raises(ValueError, match="32-bit words"):
        op.prepare(problem, _config(HW_FP4_CVT=1), INTERP, (shifted, *inputs[1:]), out)()


def test_hw_fp4_cvt_is_a_knob_on_gfx950_only() -> None:
    op = get_op(OP)
    problem = Problem.quant(OP, 16, 7168, 2048)
    gfx950 = Target.for_arch("gfx950")
    assert hw_fp4_cvt_target(gfx950)
    sub = op.space(problem, gfx950, ("triton",)).subspaces[0]
    assert tuple(sub.params["HW_FP4_CVT"]) == (0, 1)
    assert triton_default(problem, gfx950)["HW_FP4_CVT"] == 0
    for target in (Target.for_arch("gfx942"), Target.for_arch("sm_90"), INTERP):
        assert not hw_fp4_cvt_target(target)
        other = op.space(problem, target, ("triton",)).subspaces[0]
        assert "HW_FP4_CVT" not in other.params
        config = triton_default(problem, target).replace(HW_FP4_CVT=1)
        broken = other.violated(config)
        assert broken is not None and "only gfx950" in broken.explain(config)
    with pytest.raises(ValueError, match="needs gfx950"):
        op.kernel_calls(problem, triton_default(problem, gfx950).replace(HW_FP4_CVT=1, kpack=1),
                        Target.for_arch("gfx942"))  # fmt: skip


_COMPILE = """
import json, sys
from autotune import Problem
from autotune.core.target import Target
from autotune.engine.compile import compile_call
from autotune.engine.isa import amd_mix
from autotune.kernels import get_op
from autotune.kernels.quant.space import triton_default

target = Target.for_arch("gfx950")
problem = Problem.quant("gemm_mxfp4_bf16a", 16, 7168, 2048)
config = triton_default(problem, target).replace(HW_FP4_CVT=int(sys.argv[1]))
asm = compile_call(get_op(problem.op).kernel_calls(problem, config, target)[0], target).asm["amdgcn"]
print(json.dumps(dict(amd_mix(asm), cvt="v_cvt_scalef32_pk_fp4_bf16" in asm)))
"""


def test_gfx950_binary_converts_in_hardware_with_a_quarter_of_the_vector_instructions(
    compile_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Compile-only (cross-compiled for gfx950, outside the interpreter): the default at M = 16 with
    HW_FP4_CVT 1 holds the conversion instruction, the software ladder's binary does not, and the vector
    instructions per scaled MFMA fall at least 4x (1116 to 248 for 4 MFMAs with Triton 3.9)."""
    pytest.importorskip("triton")
    from autotune.engine.compile import check_compilable

    try:
        check_compilable(Target.for_arch("gfx950"))
    except TargetError as exc:
        pytest.skip(f"this Triton cannot compile for gfx950: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    mixes = []
    for hw in (0, 1):
        run = compile_script(_COMPILE, str(hw), env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        mixes.append(json.loads(run.stdout.splitlines()[-1]))
    software, hardware = mixes
    assert (software["cvt"], hardware["cvt"]) == (False, True)
    assert software["mma"] == hardware["mma"] > 0
    assert not hardware.get("spill", 0), hardware
    assert software["valu"] >= 4 * hardware["valu"], (software, hardware)
