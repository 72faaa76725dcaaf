"""The contract every tunable op implements, and errors for bad kernel input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target

if TYPE_CHECKING:
    import torch

    from autotune.core.backend import Backend
    from autotune.core.space import SearchSpace

__all__ = ["FP_OPTIONS", "Inputs", "KernelCall", "Launch", "Recorder", "TunableOp", "kernel_versions"]

#: Compile options every Triton launch of ours passes: floating-point contraction (fused multiply-add) on,
#: whatever the installed Triton's default is (Triton 3.9 announces it will be off by default from 3.10),
#: so that a tuned config runs the code it was tuned with.
FP_OPTIONS = {"enable_fp_fusion": True}

Inputs = Sequence["torch.Tensor"]
#: A zero-argument launch. One may carry `extra`, a dict of what preparing it found (TunableOp's pin),
#: which the trial it is timed for stores in its result's extra.
Launch = Callable[[], None]


class KernelCall(NamedTuple):
    """One Triton kernel launch, captured instead of run: the JIT function, grid, arguments, options."""

    fn: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Recorder:
    """Stands in for a JIT function: `kernel[grid](*args, **kwargs)` appends a KernelCall to `calls`."""

    def __init__(self, fn: Any, calls: list[KernelCall]) -> None:
        self.fn, self.calls = fn, calls

    def __getitem__(self, grid: Any) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(KernelCall(self.fn, tuple(grid), args, kwargs))

        return record


def kernel_versions(op: TunableOp, backends: Sequence[str]) -> dict[str, tuple[str, str]]:
    """backend → (kernel name, source hash) of `op`: the kernel version every stored result is keyed by."""
    return {b: (f"{op.name}.{b}", op.source_hash(b)) for b in backends}


class TunableOp(Protocol):
    """What the tuner needs of an op (one module per op implements it).

    Everything here is pure or allocates on `device`; nothing times anything. `prepare` does the work that
    a caller would do once (allocating workspaces, building launch arguments) and returns a zero-argument
    launch that writes into `out`; the first call may compile.

    Optional, looked up by the shared layers where an op has them (never by its name): `entry_module`,
    the module of the op's run-time entry point, whose `entry_launch(problem, target, inputs, out,
    config=None) -> Launch` calls it on `make_inputs`'s inputs (what `autotune verify` times as served;
    without it, `prepare` of the served config), `entry_takes_config`, true where that entry point
    takes a config, and `format_modules`, the modules of the op's parts of other projects' file formats
    (names: the database imports them, `autotune.db.formats`).
    """

    name: str

    def backends(self, target: Target) -> tuple[str, ...]:
        """Backends available for this op on `target` (e.g. "triton", "torch")."""
        ...

    def backend(self, name: str) -> Backend:
        """The record of backend `name` (`autotune.core.backend.Backend`: its launch, version, space and
        cost-model kind); ValueError naming the known backends for any other name."""
        ...

    def source_hash(self, backend: str) -> str:
        """Hash of the code that runs for `backend`; part of every stored result's key."""
        ...

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        """The search space for `problem` on `target` (all backends, or those named; ValueError for an
        unknown one), vendor baseline and heuristic default first."""
        ...

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        """The heuristic's candidates for the default, in order, each a member of `space`: its rule's pick
        first, then configs that need fewer registers and less LDS (fewer warps' worth of accumulator a
        lane, shorter K tiles, fewer stages, smaller tiles). Pure: nothing is compiled."""
        ...

    def default_config(self, problem: Problem, target: Target) -> Config:
        """The heuristic config: the first of `default_candidates` whose binary passes the static checks
        on `target` (`autotune.engine.verdicts`; the first candidate where this process cannot compile for
        it). The first our kernels' search tries, and what `fallback_config` picks where it is known to be
        ahead of the vendor library."""
        ...

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        """The config a call that no table covers runs (see `autotune.kernels.serve`).

        The vendor library is the safe default: the vendor backend ("torch") where this op has one that
        runs `problem` on `target`, except in the regimes where the heuristic default is measured ahead
        of it (each op documents its own); else the heuristic default. No GPU work of its own and no
        tensors (a quantized GEMM asks its search space whether the vendor library runs the problem,
        which probes torch._scaled_mm on the GPU once per process, mode and M)."""
        ...

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        """Random inputs (never zeros) for `problem` on `device`."""
        ...

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        """An uninitialised output tensor for `problem`."""
        ...

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        """The exact result in fp32, computed with PyTorch."""
        ...

    def tolerance(self, problem: Problem) -> float:
        """Largest acceptable ‖out − ref‖ / ‖ref‖."""
        ...

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        """A zero-argument launch of `config` on `inputs` that writes `out`."""
        ...

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        """The Triton launches `config` makes on `problem` (main kernel first), captured without running
        anything, with inputs on torch's meta device: what a compile-only check compiles. Empty for a
        vendor backend."""
        ...
