"""The tensor-descriptor (TMA) GEMM backend under the interpreter, and its space on each arch."""

from __future__ import annotations

import os

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.kernels import GEMM
from autotune.kernels.gemm_space import gemm_backends

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests")

INTERP = Target.interpreter_target()


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    assert torch.isfinite(o).all(), "output has NaN/inf (unwritten?)"
    return float((o - ref.double()).norm() / ref.double().norm())


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("persistent", [0, 1])
@pytest.mark.parametrize("split_k", [1, 2])
def test_tma_kernel_matches_reference(layout: str, dtype: str, persistent: int, split_k: int) -> None:
    # 40 x 48 with 16 x 16 tiles: 9 tiles over 4 "CUs" so the persistent loop takes several turns
    problem = Problem.gemm(40, 48, 72, dtype, layout)
    config = Config(
        backend="triton_tma",
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=32,
        GROUP_M=4,
        SPLIT_K=split_k,
        PERSISTENT=persistent,
        num_warps=4,
        num_stages=1,
    )
    if split_k == 1:  # (split-K on 9 tiles is pruned from the 4-CU interpreter space; it must still be right)
        space = GEMM.space(problem, INTERP)
        assert space.check(config) is None, space.check(config)
    inputs = GEMM.make_inputs(problem, "cpu", seed=11)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, GEMM.reference(problem, inputs)) < GEMM.tolerance(problem)


def test_tma_ragged_edges_are_clipped() -> None:
    problem = Problem.gemm(17, 24, 40, "bf16")  # no dimension a multiple of the 16/32 tiles
    inputs = GEMM.make_inputs(problem, "cpu", seed=2)
    config = Config(
        backend="triton_tma",
        BLOCK_M=32,
        BLOCK_N=16,
        BLOCK_K=32,
        GROUP_M=1,
        SPLIT_K=2,
        PERSISTENT=0,
        num_warps=4,
        num_stages=1,
    )
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, GEMM.reference(problem, inputs)) < GEMM.tolerance(problem)


def test_tma_unaligned_rows_are_pruned_with_a_reason() -> None:
    problem = Problem.gemm(16, 64, 70, "bf16")  # 70 x 2 bytes is not a multiple of 16
    space = GEMM.space(problem, INTERP)
    assert not [c for c in space.configs() if c.backend == "triton_tma"]
    reasons = [r for c, r in space.pruned() if c.backend == "triton_tma"]
    assert reasons and all(r.startswith("tma_alignment") for r in reasons)


def test_tma_backend_only_where_it_exists() -> None:
    assert "triton_tma" in gemm_backends(Target.for_arch("sm_90"))
    assert "triton_tma" not in gemm_backends(Target.for_arch("gfx942"))
    assert "triton_tma" not in gemm_backends(Target.for_arch("gfx950"))
    with pytest.raises(ValueError, match="unknown gemm backend 'triton_tma' on gfx942"):
        GEMM.space(Problem.gemm(64, 64, 64), Target.for_arch("gfx942"), ("triton_tma",))


def test_dispatched_tma_config_runs_through_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm

    problem = Problem.gemm(32, 48, 64, "fp16", "kn")
    config = Config(
        backend="triton_tma",
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=16,
        GROUP_M=1,
        SPLIT_K=2,
        PERSISTENT=1,
        num_warps=4,
        num_stages=1,
    )
    table = Table.from_winners(INTERP, [(problem, config, 1.0)])
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=INTERP.device_key())
    )
    a, b = GEMM.make_inputs(problem, "cpu", seed=5)
    b_view = b.t().contiguous().t()  # same values, column-major storage: must be handled, not misread
    out = gemm(a, b_view, b_layout="kn")
    assert _err(out, GEMM.reference(problem, (a, b))) < GEMM.tolerance(problem)
