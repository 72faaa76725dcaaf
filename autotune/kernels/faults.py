"""FaultyOp: a GEMM op with configs that crash, abort or hang, to exercise crash isolation.

Each config has a ``fault`` parameter: "none" runs the dense GEMM's vendor backend; "segv" kills the
process with SIGSEGV and "abort" calls abort() (what a compiler that aborts does), both while the config
is being prepared, as a compile would be; "hang" sleeps past any timeout; "error" raises like an ordinary
bad config; "illegal_address" launches a Triton kernel that stores far out of bounds (on a GPU: an
illegal memory access that leaves the device unusable to the process). It lives in the package (not the
tests) so that worker processes and Ray actors on any host can import it. Not registered as an op:
nothing tunes it by accident.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.core.config import Config, Value
from autotune.core.op import Inputs, KernelCall, Launch
from autotune.core.problem import Problem
from autotune.core.space import SearchSpace, SubSpace
from autotune.core.target import Target

if TYPE_CHECKING:
    import torch

    from autotune.kernels.dense.op import GemmOp

__all__ = ["FAULTS", "FaultyOp"]

FAULTS: tuple[str, ...] = ("none", "segv", "abort", "hang", "error", "illegal_address")


class FaultyOp:
    """The dense GEMM (torch backend) behind a ``fault`` parameter; `faults` and `repeats` shape the
    space: each fault value appears `repeats` times (told apart by a ``rep`` parameter)."""

    name = "faulty_gemm"

    def __init__(self, faults: Sequence[str] = FAULTS, repeats: int = 1) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        self.faults, self.repeats = tuple(faults), repeats

    def _gemm(self) -> GemmOp:
        from autotune.kernels import GEMM

        return GEMM

    def backends(self, target: Target) -> tuple[str, ...]:
        return ("faulty",)

    def source_hash(self, backend: str) -> str:
        return "faulty-v1"

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        params: dict[str, list[Value]] = {"fault": list(self.faults), "rep": list(range(self.repeats))}
        return SearchSpace([SubSpace("faulty", params)])

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        return self.default_config(problem, target)  # no vendor library in this op's space

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        return (Config(backend="faulty", fault="none", rep=0),)

    def default_config(self, problem: Problem, target: Target) -> Config:
        return self.default_candidates(problem, target)[0]

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        return self._gemm().make_inputs(problem, device, seed)

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        return self._gemm().make_output(problem, device)

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        return self._gemm().reference(problem, inputs)

    def tolerance(self, problem: Problem) -> float:
        return self._gemm().tolerance(problem)

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        fault = config["fault"]
        if fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif fault == "abort":
            os.abort()
        elif fault == "hang":
            time.sleep(3600)
        elif fault == "error":
            raise RuntimeError("injected error")
        elif fault == "illegal_address":
            return lambda: _store_out_of_bounds(out)
        return self._gemm().prepare(problem, Config(backend="torch"), target, inputs, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        return []


def _store_out_of_bounds(out: torch.Tensor) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def far_store(ptr):
        tl.store(ptr + (1 << 40), 1.0)

    far_store[(1,)](out)
