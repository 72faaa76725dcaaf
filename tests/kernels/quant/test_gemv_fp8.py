"""The FP8 GEMV backend (`triton_gemv` of gemm_fp8_rowwise and gemm_fp8_blockwise, A of at most 4 rows)
under the interpreter: against the reference, its space, its launcher's refusals and the dispatcher's
guard for larger M."""

from __future__ import annotations

import os

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.kernels.quant.op import QUANT_GEMMS

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests")

INTERP = Target.interpreter_target()
H100 = Target.for_arch("sm_90")
FP8_OPS = ("gemm_fp8_rowwise", "gemm_fp8_blockwise")


def _config(bn: int = 4, bk: int = 64, **knobs: int) -> Config:
    return Config(backend="triton_gemv", BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=1, **knobs)


def _run(problem: Problem, config: Config, inputs: list[torch.Tensor]) -> torch.Tensor:
    op = QUANT_GEMMS[problem.op]
    out = op.make_output(problem, "cpu").fill_(float("nan"))
    op.prepare(problem, config, INTERP, inputs, out)()
    return out


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(out.float()).all(), "output has NaN/inf (unwritten?)"
    return float((out.float() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("op", FP8_OPS)
@pytest.mark.parametrize(
    ("M", "N", "K", "bn", "bk"),
    [
        (1, 37, 256, 4, 64),  # steps inside one scale group; the last program's columns wrap
        (2, 130, 640, 8, 128),  # one group a step, five groups
        (3, 20, 384, 8, 256),  # two groups a step, the last step half masked
        (4, 9, 128, 4, 32),  # N under one program's columns
    ],
)
def test_fp8_gemv_matches_reference(op: str, M: int, N: int, K: int, bn: int, bk: int) -> None:
    problem = Problem.quant(op, M, N, K)
    inputs = QUANT_GEMMS[op].make_inputs(problem, "cpu", seed=M)
    out = _run(problem, _config(bn, bk), inputs)
    assert _rel(out, QUANT_GEMMS[op].reference(problem, inputs)) < QUANT_GEMMS[op].tolerance(problem)


@pytest.mark.parametrize(
    ("M", "N", "K", "bn", "bk"),
    [(1, 37, 256, 4, 64), (3, 20, 384, 8, 256), (4, 9, 200, 4, 128)],  # the last: K steps half masked
)
def test_fp8_gemv_step_sums_match_reference(M: int, N: int, K: int, bn: int, bk: int) -> None:
    """Row-wise with STEP_SUM: each K step summed into one value per (row, column) as it comes."""
    problem = Problem.quant("gemm_fp8_rowwise", M, N, K)
    op = QUANT_GEMMS["gemm_fp8_rowwise"]
    inputs = op.make_inputs(problem, "cpu", seed=10 + M)
    out = _run(problem, _config(bn, bk, STEP_SUM=1), inputs)
    assert _rel(out, op.reference(problem, inputs)) < op.tolerance(problem)


def test_fp8_gemv_step_sum_is_a_row_wise_knob() -> None:
    """Row-wise GEMV configs come with and without STEP_SUM, the default without; blockwise has no such
    knob (its K steps are summed per scale group already)."""
    rowwise, blockwise = (QUANT_GEMMS[op] for op in FP8_OPS)
    problem = Problem.quant("gemm_fp8_rowwise", 1, 7168, 4096)
    configs = list(rowwise.space(problem, H100, ("triton_gemv",)).configs())
    assert {int(c["STEP_SUM"]) for c in configs} == {0, 1}
    assert len([c for c in configs if c["STEP_SUM"] == 1]) == len(configs) // 2
    narrow = Problem.quant("gemm_fp8_rowwise", 1, 1536, 4096)  # wide layers default to the TMA kernel
    assert rowwise.default_config(narrow, H100)["STEP_SUM"] == 0
    block = Problem.quant("gemm_fp8_blockwise", 1, 7168, 4096)
    assert all("STEP_SUM" not in c for c in blockwise.space(block, H100, ("triton_gemv",)).configs())


def test_fp8_gemv_per_tensor_scales() -> None:
    """Row-wise with one scale for each tensor (the launch passes scale strides of 0)."""
    problem = Problem.quant("gemm_fp8_rowwise", 2, 24, 192)
    op = QUANT_GEMMS["gemm_fp8_rowwise"]
    a, b, _, _ = op.make_inputs(problem, "cpu", seed=3)
    sa, sb = torch.full((1, 1), 0.37), torch.full((1, 1), 1.9)
    out = _run(problem, _config(8, 64), [a, b, sa, sb])
    assert _rel(out, op.reference(problem, [a, b, sa, sb])) < op.tolerance(problem)


def test_fp8_gemv_space_rows_and_scale_groups() -> None:
    op = QUANT_GEMMS["gemm_fp8_blockwise"]
    assert "triton_gemv" in op.backends(H100) and "triton_gemv" in op.backends(Target.for_arch("gfx942"))
    assert "triton_gemv" not in QUANT_GEMMS["gemm_mxfp8"].backends(H100)
    decode = op.space(Problem.quant("gemm_fp8_blockwise", 1, 7168, 4096), H100, ("triton_gemv",))
    configs = list(decode.configs())
    assert configs and all(c.backend == "triton_gemv" for c in configs)
    assert {int(c["BLOCK_K"]) for c in configs} == {256, 512, 1024}
    wide = op.space(Problem.quant("gemm_fp8_blockwise", 16, 7168, 4096), H100, ("triton_gemv",))
    assert not list(wide.configs()) and all(r.startswith("gemv_rows") for _, r in wide.pruned())
    with pytest.raises(ValueError, match="unknown gemm_mxfp8 backend 'triton_gemv'"):
        QUANT_GEMMS["gemm_mxfp8"].space(Problem.quant("gemm_mxfp8", 1, 64, 256), H100, ("triton_gemv",))


def test_fp8_gemv_launcher_refusals() -> None:
    from autotune.kernels.quant.gemv import gemv_fp8_launcher

    with pytest.raises(ValueError, match="BLOCK_K must divide 128 or be a multiple"):
        gemv_fp8_launcher(_config(bk=192), blockwise=True)
    run = gemv_fp8_launcher(_config(), blockwise=False)
    problem = Problem.quant("gemm_fp8_rowwise", 5, 8, 64)
    a, b, sa, sb = QUANT_GEMMS["gemm_fp8_rowwise"].make_inputs(problem, "cpu", seed=0)
    with pytest.raises(ValueError, match="at most 4 rows"):
        run(a, b, torch.empty(5, 8, dtype=torch.bfloat16), sa, sb, (1, 0, 1, 0), 5, 8, 64)


def test_a_gemv_bucket_never_serves_more_rows_than_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounding down from M = 8 lands on the M = 1 bucket's GEMV config: `gemm_quant` takes the default."""
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm_quant

    op = QUANT_GEMMS["gemm_fp8_blockwise"]
    one, eight = (Problem.quant("gemm_fp8_blockwise", m, 40, 256) for m in (1, 8))
    table = Table.from_winners(INTERP, [(one, _config(), 1.0)], m_policy="round_down")
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=INTERP.device_key())
    )
    for problem in (one, eight):
        a, b, sa, sb = op.make_inputs(problem, "cpu", seed=problem.M)
        out = gemm_quant("gemm_fp8_blockwise", a, b, sa, sb, target=INTERP)
        assert _rel(out, op.reference(problem, [a, b, sa, sb])) < op.tolerance(problem)


@pytest.mark.parametrize(
    ("arch", "op", "M", "backend"),
    [
        ("sm_90", "gemm_fp8_rowwise", 1, "triton_gemv"),
        ("sm_90", "gemm_fp8_blockwise", 1, "triton_gemv"),
        ("sm_90", "gemm_fp8_rowwise", 2, "triton"),
        ("sm_90", "gemm_fp8_blockwise", 2, "triton"),  # the tiled kernel, swapped, from M = 2
        ("gfx942", "gemm_fp8_blockwise", 1, "triton"),
        ("sm_90", "gemm_mxfp8", 1, "triton"),
    ],
)
def test_fp8_gemv_is_the_nvidia_default_at_one_row(arch: str, op: str, M: int, backend: str) -> None:
    if backend == "gluon":
        pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    target = Target.for_arch(arch)
    problem = Problem.quant(op, M, 1536, 7168)
    default = QUANT_GEMMS[op].default_config(problem, target)
    assert default.backend == backend
    if backend == "triton_gemv":
        knobs = {"STEP_SUM": 0} if op == "gemm_fp8_rowwise" else {}
        assert default == _config(4, 1024, **knobs).replace(num_stages=3)
    space = QUANT_GEMMS[op].space(problem, target)
    assert default in space and next(iter(space.configs())).backend in ("torch", backend)
    interp = Problem.quant(op, 1, 64, 256)
    assert QUANT_GEMMS[op].default_config(interp, INTERP).backend == "triton"  # tests keep the tiles
