"""An op that declares backend records of its own is costed, compile-checked and served through them:
no code of the engine, the sweeps or the run-time lookup knows its backends' names."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest
import torch

from autotune.core import registry
from autotune.core.backend import LIBRARY, Backend, Backends, Cost
from autotune.core.config import Config
from autotune.core.op import KernelCall
from autotune.core.problem import Problem
from autotune.core.space import SearchSpace, SubSpace
from autotune.core.target import Target
from autotune.kernels.dense.backends import GEMM_BACKENDS, KernelLaunch
from autotune.kernels.dense.op import GemmOp

INTERP, SM90 = Target.interpreter_target(), Target.for_arch("sm_90")


_TILED = GEMM_BACKENDS["triton"].launch
assert isinstance(_TILED, KernelLaunch)


def _launcher(config: Config, target: Target, calls: list[KernelCall] | None) -> Any:
    """The tiled kernel's launcher, with the toy's K step."""
    return _TILED.launcher(config.replace(BLOCK_K=16), target, calls)


def _tiles(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """A small space of the dense GEMM's tiled kernel under another name."""
    params = dict(BLOCK_M=(16,), BLOCK_N=(16, 32), GROUP_M=(1,), SPLIT_K=(1,), num_warps=(4,))
    params["num_stages"] = (1,)
    return SubSpace("toy_tiles", params, first=() if default is None else (default,))


#: The dense GEMM's tiled kernel as "toy_tiles": its own K step (no BLOCK_K knob: a config takes the
#: cost's), at most 8 rows of A served; and torch.mm, the vendor baseline, under the usual name.
TOY_BACKENDS = Backends(
    "toy_records",
    (
        GEMM_BACKENDS["torch"],
        Backend(
            "toy_tiles",
            KernelLaunch(_launcher),
            _tiles,
            modules=("autotune.kernels.dense.kernel",),
            cost=Cost("tiled", block_k=16),
            max_m=8,
        ),
    ),
)
DEFAULT = Config(backend="toy_tiles", BLOCK_M=16, BLOCK_N=32, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=1)


class ToyRecords(GemmOp):
    """A GEMM-shaped op whose backends are `TOY_BACKENDS`."""

    name = "toy_records"

    def backends(self, target: Target) -> tuple[str, ...]:
        return TOY_BACKENDS.names(target)

    def backend(self, name: str) -> Backend:
        return TOY_BACKENDS[name]

    def source_hash(self, backend: str) -> str:
        return TOY_BACKENDS[backend].source_hash()

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        return SearchSpace([b.space(problem, target, DEFAULT) for b in TOY_BACKENDS.chosen(target, backends)])

    def default_config(self, problem: Problem, target: Target) -> Config:
        return DEFAULT

    def check_problem(self, problem: Problem) -> None:
        if problem.op != self.name:
            raise ValueError(f"toy_records got a {problem.op} problem")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyRecords:
    monkeypatch.setattr(registry, "_ops", dict(registry.ops()))
    op = ToyRecords()
    registry.register(op)
    return op


def test_its_records_answer_for_it(toy: ToyRecords) -> None:
    assert toy.backends(SM90) == ("torch", "toy_tiles")
    assert toy.source_hash("toy_tiles") == GEMM_BACKENDS["triton"].source_hash()  # the same kernel module
    assert registry.backend_of("toy_records", "toy_tiles").max_m == 8
    assert registry.is_vendor("toy_records", "torch") and not registry.is_vendor("toy_records", "toy_tiles")
    with pytest.raises(ValueError, match="unknown toy_records backend 'triton'; known: torch, toy_tiles"):
        toy.backend("triton")


def test_the_cost_model_reads_its_cost_kind(toy: ToyRecords) -> None:
    from autotune.engine.model import library_us, predict_us

    problem, gemm = Problem("toy_records", 64, 4096, 4096), Problem.of("gemm", 64, 4096, 4096)
    same_as_triton = Config(DEFAULT, backend="triton", BLOCK_K=16)  # the record's K step, as a knob
    assert predict_us(problem, DEFAULT, SM90) == predict_us(gemm, same_as_triton, SM90)
    assert predict_us(problem, Config(backend="torch"), SM90) == library_us(problem, SM90)
    assert GEMM_BACKENDS["torch"].cost == LIBRARY


def test_its_kernels_are_compile_checked_and_its_vendor_baseline_is_not(toy: ToyRecords) -> None:
    from autotune.engine.checker import StaticChecker

    class RecordingPool:
        workers = 1

        def __init__(self) -> None:
            self.submitted: list[Config] = []

        def submit(self, op: object, problem: Problem, config: Config) -> Future[object]:
            self.submitted.append(config)
            return Future()

    problem = Problem("toy_records", 4, 32, 32)
    checker = StaticChecker(SM90, workers=1)
    pool = checker._pool = RecordingPool()  # type: ignore[assignment]
    checker.prefetch(toy, problem, toy.space(problem, SM90).configs())
    assert [c.backend for c in pool.submitted] == ["toy_tiles", "toy_tiles"]
    assert checker.ready(problem, Config(backend="torch"))  # nothing to compile
    (main,) = toy.kernel_calls(problem, DEFAULT, SM90)
    assert main.fn.fn.__name__ == "gemm_kernel" and main.kwargs["BLOCK_K"] == 16
    assert toy.kernel_calls(problem, Config(backend="torch"), SM90) == []


@pytest.mark.parametrize(
    "arch, problem, library",
    [
        (
            "sm_90",
            Problem.of("gemm", 64, 4096, 4096),
            "tunableop",
        ),  # TunableOp's pin: torch.mm, nothing of ours
        ("gfx942", Problem.quant("gemm_fp8_rowwise", 64, 4096, 4096), "aiter"),  # aiter's own kernels
    ],
)
def test_no_library_backend_is_compiled_or_pruned(arch: str, problem: Problem, library: str) -> None:
    """Only the op's own kernels go through the compiler: a library backend beside the vendor baseline has
    no kernel calls, so its empty features never fail a static check (occupancy 0 pruned every TunableOp
    trial of a sweep before)."""
    from autotune.engine.checker import StaticChecker
    from autotune.kernels import get_op

    checker = StaticChecker(Target.for_arch(arch), workers=1)
    config = Config(backend=library)
    assert checker.ready(problem, config) and checker.findings(get_op(problem.op), problem, config) == []


def test_it_is_served_through_its_records(toy: ToyRecords, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels.serve import served_config

    small, large = Problem("toy_records", 4, 32, 32), Problem("toy_records", 16, 32, 32)
    table = Table.from_winners(INTERP, [(small, DEFAULT, 1.0), (large, DEFAULT, 1.0)])
    dispatcher = Dispatcher([table], device_key=INTERP.device_key())
    monkeypatch.setattr("autotune.dispatch.dispatcher._default", dispatcher)
    assert served_config(toy, small, INTERP) == DEFAULT
    assert served_config(toy, large, INTERP) == Config(backend="torch")  # 16 rows > the record's max_m
    inputs, out = toy.make_inputs(small, "cpu", seed=3), toy.make_output(small, "cpu")
    toy.prepare(small, served_config(toy, small, INTERP), INTERP, inputs, out)()
    ref = toy.reference(small, inputs)
    assert torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref) <= toy.tolerance(small)


def test_only_the_moes_baseline_is_not_served() -> None:
    """A table never serves the MoE's per-expert loop (it reads the routing back), nor aiter's MLA decode
    where it imports (its page lists are built on the host); every other backend of every registered op
    is served, and an op this process does not know is taken as served."""
    from autotune.core.registry import is_served, ops

    gpus = [Target.for_arch(a) for a in ("sm_90", "gfx942", "gfx950")]
    names = {(name, b) for name, op in ops().items() for t in gpus for b in op.backends(t)}
    unserved = sorted(pair for pair in names if not is_served(*pair) and pair != ("mla_decode", "aiter"))
    assert unserved == [("moe", "torch")]
    assert is_served("gemm", "torch") and is_served("moe", "triton")
    assert not is_served("moe", "no-such-backend") and is_served("no-such-op", "torch")
