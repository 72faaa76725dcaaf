"""The GEMV backend (`triton_gemv`, A of at most 4 rows) under the interpreter, its space and default."""

from __future__ import annotations

import os

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.kernels import GEMM, launch_config

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests")

INTERP = Target.interpreter_target()
H100 = Target.for_arch("sm_90")


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    assert torch.isfinite(o).all(), "output has NaN/inf (unwritten?)"
    return float((o - ref.double()).norm() / ref.double().norm())


def _config(bn: int = 4, bk: int = 32) -> Config:
    return Config(backend="triton_gemv", BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=1)


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("layout", "dtype", "K"), [("nk", "bf16", 96), ("kn", "fp16", 100), ("nk", "fp16", 7)]
)
def test_gemv_matches_reference(M: int, layout: str, dtype: str, K: int) -> None:
    problem = Problem.of(
        "gemm", M, 37, K, dtype, layout=layout
    )  # N = 37: the last program's columns wrap and are masked
    inputs = GEMM.make_inputs(problem, "cpu", seed=M)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, _config(), INTERP, inputs, out)()
    assert _err(out, GEMM.reference(problem, inputs)) < GEMM.tolerance(problem)


def test_gemv_writes_only_its_rows_and_columns_of_a_strided_out() -> None:
    problem = Problem.of("gemm", 2, 24, 64, "bf16")
    a, b = GEMM.make_inputs(problem, "cpu", seed=3)
    big = torch.full((4, 40), 7.0, dtype=torch.bfloat16)
    out = big[1:3, 8:32]  # rows of 40: not dense
    launch_config(_config(bk=64), a, b, target=INTERP, out=out)
    assert _err(out, GEMM.reference(problem, (a, b))) < GEMM.tolerance(problem)
    assert (
        (big[0] == 7).all()
        and (big[3] == 7).all()
        and (big[1:3, :8] == 7).all()
        and (big[1:3, 32:] == 7).all()
    )


def test_gemv_launcher_refuses_more_rows_than_it_keeps() -> None:
    from autotune.kernels.dense.gemv import gemv_launcher

    run = gemv_launcher(_config())
    a, b = torch.randn(5, 32).to(torch.bfloat16), torch.randn(8, 32).to(torch.bfloat16)
    with pytest.raises(ValueError, match="at most 4 rows"):
        run(a, b, torch.empty(5, 8, dtype=torch.bfloat16), 1, 32, 5, 8, 32)


def test_gemv_space_rows_registers_and_k_tiles() -> None:
    decode = GEMM.space(Problem.of("gemm", 1, 4096, 4096), H100, ("triton_gemv",))
    configs = list(decode.configs())
    assert configs and {int(c["BLOCK_N"]) for c in configs} == {4, 8, 16}
    four = GEMM.space(Problem.of("gemm", 4, 4096, 4096), H100, ("triton_gemv",))
    assert all(int(c["BLOCK_N"]) * int(c["BLOCK_K"]) * 4 <= 16384 for c in four.configs())
    assert any(r.startswith("gemv_registers") for _, r in four.pruned())
    wide = GEMM.space(Problem.of("gemm", 8, 4096, 4096), H100, ("triton_gemv",))
    assert not list(wide.configs()) and all(r.startswith("gemv_rows") for _, r in wide.pruned())
    short = GEMM.space(Problem.of("gemm", 1, 4096, 300), H100, ("triton_gemv",))
    assert {int(c["BLOCK_K"]) for c in short.configs()} == {256, 512}  # 1024 > K = 300 rounded up
    assert "triton_gemv" in GEMM.backends(H100) and "triton_gemv" in GEMM.backends(Target.for_arch("gfx942"))


@pytest.mark.parametrize(
    ("arch", "M", "backend"),
    [
        ("sm_90", 1, "triton_gemv"),
        ("sm_90", 2, "triton_gemv"),
        ("sm_90", 3, "triton"),
        ("gfx942", 1, "triton"),
    ],
)
def test_gemv_is_the_nvidia_default_up_to_two_rows(arch: str, M: int, backend: str) -> None:
    target = Target.for_arch(arch)
    problem = Problem.of("gemm", M, 4096, 14336)
    default = GEMM.default_config(problem, target)
    assert default.backend == backend
    if backend == "triton_gemv":
        assert int(default["num_warps"]) == (8 if M == 1 else 4)
    assert GEMM.space(problem, target).check(default) is None  # a member of its space
    assert (
        GEMM.default_config(Problem.of("gemm", 1, 64, 64), INTERP).backend == "triton"
    )  # tests keep the tiles


def test_a_gemv_bucket_never_serves_more_rows_than_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounding down from M = 8 lands on the M = 1 bucket's GEMV config: `gemm` takes the default."""
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm

    one, eight = Problem.of("gemm", 1, 40, 64), Problem.of("gemm", 8, 40, 64)
    table = Table.from_winners(INTERP, [(one, _config(bk=64), 1.0)], m_policy="round_down")
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=INTERP.device_key())
    )
    for problem in (one, eight):
        a, b = GEMM.make_inputs(problem, "cpu", seed=problem.M)
        assert _err(gemm(a, b), GEMM.reference(problem, (a, b))) < GEMM.tolerance(problem)
