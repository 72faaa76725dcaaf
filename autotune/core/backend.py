"""Backend: one backend of one op as one record (its version, launch, search space and cost-model kind).

An op declares its backends as `Backend` records in its own package and looks them up by name
(`Backends`); the layers below the kernels ask the record (through `autotune.core.registry.backend_of`
and `is_vendor`), never the name. Standard library only: what a record runs is imported when it runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from autotune.core.codehash import modules_hash
from autotune.core.config import Config
from autotune.core.space import Constraint, SubSpace

if TYPE_CHECKING:
    from autotune.core.op import Launch
    from autotune.core.problem import Problem
    from autotune.core.target import Target

__all__ = ["GEMV", "LIBRARY", "TILED", "TILED_TMA", "Backend", "Backends", "Cost"]

#: The package whose modules a backend's version follows (`modules_hash`'s `within`).
KERNELS = "autotune.kernels"


@dataclass(frozen=True)
class Cost:
    """How the dense GEMM's cost model (`autotune.engine.model`) times a backend's configs.

    `kind` "library": a vendor library at the roofline of the target's peaks; "tiled": a grid of
    BLOCK_M x BLOCK_N tiles in waves over the CUs (`tma`: tiles loaded through tensor descriptors, C staged
    in shared memory); "gemv": B streamed once. `block_k` is the K step of a config that names none.
    """

    kind: str
    tma: bool = False
    block_k: int = 32

    def __post_init__(self) -> None:
        if self.kind not in ("library", "tiled", "gemv"):
            raise ValueError(f"unknown cost kind {self.kind!r}; known: library, tiled, gemv")


LIBRARY = Cost("library")
TILED = Cost("tiled")
TILED_TMA = Cost("tiled", tma=True)
GEMV = Cost("gemv")


def _everywhere(target: Target) -> bool:
    return True


def _no_exemption(target: Target) -> frozenset[str]:
    return frozenset()


@cache
def _code_version(modules: tuple[str, ...]) -> str:
    return modules_hash(*modules, within=KERNELS)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Backend:
    """One backend of one op.

    - `name`: what configs name (their ``backend``); unique within the op.
    - `launch(problem, config, target, inputs, out, calls=None)`: a zero-argument launch; with a list
      `calls` (inputs on torch's meta device) its Triton launches are recorded there instead of run.
    - `subspace(problem, target, default)`: its configs for `problem`, `default` being the op's heuristic
      default where that is one of this backend's (else None); None: one config without parameters.
    - `library`: it runs no kernel of ours, so there is nothing to compile (a vendor library, or plain
      torch ops); the op's library backend named `VENDOR_BACKEND` is its vendor baseline.
    - Its version, part of every stored result's key: `modules_hash` of `modules` (the kernel modules
      and every module of `autotune.kernels` they import); with `version`, the sha256 of that text
      (a library's version) followed by the modules' hash; `variant` (an op instance's own setting that
      changes what runs, such as the MoE's routing skew) is hashed after it.
    - `cost`: how the dense GEMM's cost model times it; None where the op's own model does.
    - `runs_on(target)`: whether the backend exists on `target`; `absent(problem, target)`: why it cannot
      run `problem` there ("" when it can; its one config is then pruned with the reason).
    - `max_m`: the most rows of A its kernels take (a table's config serves no larger M); None: any.
    - `served`: whether the op's run-time entry point runs its configs. False for a baseline kept only to
      be measured against (the MoE's per-expert loop reads the routing back, so no graph can hold it): a
      table never serves it and an M profile never times it.
    - `exempt(target)`: the static checks (`autotune.core.static.CHECKS`) that do not prune its configs
      on `target`, where measurement showed configs failing them winning (the MLA decode's spilling
      64-head tiles on sm_90). A sweep still records the findings.
    - `opt_in`: searched only where a sweep names it in `backends` (its tuning is costly, or it serves
      only where a table pins it); otherwise a backend of the target like any other.
    - `pins`: a trial of it keeps in `extra[name]` what serving it needs beside its config, {"validators":
      {...}, "row": [...]}, which `emit` writes into the table (`Table.pins[name]`).
    """

    name: str
    launch: Callable[..., Launch]
    subspace: Callable[[Problem, Target, Config | None], SubSpace] | None = None
    library: bool = False
    modules: tuple[str, ...] = ()
    version: Callable[[], str] | None = None
    variant: str = ""
    cost: Cost | None = None
    runs_on: Callable[[Target], bool] = _everywhere
    absent: Callable[[Problem, Target], str] | None = None
    max_m: int | None = None
    served: bool = True
    exempt: Callable[[Target], frozenset[str]] = _no_exemption
    opt_in: bool = False
    pins: bool = False

    def __post_init__(self) -> None:
        if not self.modules and self.version is None:
            raise ValueError(f"backend {self.name!r} needs its kernel modules or a version")

    def source_hash(self) -> str:
        """The backend's version (16 hex digits); the modules' hash is computed once per process."""
        code = _code_version(self.modules) if self.modules else ""
        digest = code if self.version is None else _digest(" ".join(filter(None, (self.version(), code))))
        return _digest(f"{digest} {self.variant}") if self.variant else digest

    def space(self, problem: Problem, target: Target, default: Config | None) -> SubSpace:
        """Its configs for `problem` on `target`, where `default` is the op's heuristic default (None: not
        known; the default only orders the configs, it adds none)."""
        reason = "" if self.absent is None else self.absent(problem, target)
        if reason:
            return SubSpace(self.name, constraints=(Constraint(f"{self.name}_unsupported", reason, _never),))
        if self.subspace is None:
            return SubSpace(self.name)
        return self.subspace(
            problem, target, default if default is not None and default.backend == self.name else None
        )

    def check(
        self, problem: Problem, target: Target, config: Config, *, search_only: bool = True
    ) -> str | None:
        """None where `config` is one of this backend's configs for `problem` on `target` (as the op's
        space holds it), else why not; without `search_only`, whether it runs there (`SubSpace.check`).
        Needs no heuristic default, so nothing is compiled."""
        return self.space(problem, target, None).check(config, search_only=search_only)


def _never(config: Any) -> bool:
    return False


class Backends:
    """The backends of one op in their declared order (the order `backends(target)` lists them), looked
    up by name; ValueError naming the known ones for any other name."""

    def __init__(self, op: str, records: Sequence[Backend]) -> None:
        self.op = op
        self._by_name = {r.name: r for r in records}
        if len(self._by_name) != len(records):
            raise ValueError(f"duplicate backend names of {op}: {[r.name for r in records]}")

    def __iter__(self) -> Iterator[Backend]:
        return iter(self._by_name.values())

    def __getitem__(self, name: str) -> Backend:
        record = self._by_name.get(name)
        if record is None:
            raise ValueError(f"unknown {self.op} backend {name!r}; known: {', '.join(self._by_name)}")
        return record

    def names(self, target: Target) -> tuple[str, ...]:
        """The names of the backends that exist on `target`."""
        return tuple(r.name for r in self._by_name.values() if r.runs_on(target))

    def chosen(self, target: Target, names: Sequence[str] | None) -> list[Backend]:
        """The records of `names` (all that exist on `target` for None, but those that are `opt_in`), in
        the order given; ValueError for a name that does not exist on `target`."""
        available = self.names(target)
        if names is None:
            names = tuple(n for n in available if not self._by_name[n].opt_in)
        for name in names:
            if name not in available:
                raise ValueError(
                    f"unknown {self.op} backend {name!r} on {target.arch}; known: {', '.join(available)}"
                )
        return [self._by_name[n] for n in names]
