"""Sweep orchestration: every problem of a spec through the Runner, the sweep's row kept up to date."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.problem import Problem
from autotune.runner import ProblemReport, Runner, TrialCallback
from autotune.sweeps.spec import SpecError, SweepSpec
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.bench import Benchmarker
    from autotune.db import Store

__all__ = ["SweepReport", "plan", "run_sweep"]

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What a sweep did; `interrupted` when Ctrl-C stopped it (everything finished is stored)."""

    sweep_id: int
    name: str
    target: Target
    problems: list[ProblemReport] = field(default_factory=list)
    interrupted: bool = False
    wall_s: float = 0.0

    @property
    def trials_run(self) -> int:
        return sum(p.ran for p in self.problems)

    @property
    def trials_cached(self) -> int:
        return sum(p.cached for p in self.problems)


def plan(spec: SweepSpec, target: Target) -> list[tuple[Problem, int, int]]:
    """(problem, valid configs, raw configs) for every problem; SpecError for an unknown backend."""
    from autotune.kernels import get_op

    out = []
    for entry, problem in spec.problems():
        op = get_op(entry.op)
        try:
            space = op.space(problem, target, entry.backends)
        except ValueError as exc:
            raise SpecError(f"{spec.path}: {exc}") from None
        out.append((problem, len(space), space.raw_size()))
    return out


def run_sweep(
    spec: SweepSpec,
    store: Store,
    target: Target,
    *,
    benchmarker_for: Callable[[str], Benchmarker] | None = None,
    on_trial: TrialCallback | None = None,
    on_problem: Callable[[ProblemReport], None] | None = None,
) -> SweepReport:
    """Tunes every problem of `spec` on `target`, writing each trial to `store` as it finishes.

    Ctrl-C (KeyboardInterrupt) stops the sweep between or inside trials; every finished trial is already
    stored, the sweep is marked "interrupted" and the report says so. Any other error marks it "failed"
    and propagates. Running the same spec again resumes: stored trials are not re-run.
    """
    from autotune.bench import Benchmarker
    from autotune.kernels import get_op

    plan(spec, target)  # validate everything before any work
    t0 = time.perf_counter()
    sweep_id = store.start_sweep(spec.name, spec.text, target)
    report = SweepReport(sweep_id=sweep_id, name=spec.name, target=target)
    benches: dict[str, Benchmarker] = {}
    status = "failed"
    runner: Runner | None = None
    try:
        for entry, problem in spec.problems():
            op = get_op(entry.op)
            if entry.op not in benches:
                benches[entry.op] = benchmarker_for(entry.op) if benchmarker_for else Benchmarker(op, target)
            runner = Runner(store, target, benches[entry.op], sweep_id=sweep_id, on_trial=on_trial)
            result = runner.tune(
                op,
                problem,
                strategy=entry.strategy,
                budget=entry.budget,
                seed=entry.seed,
                backends=entry.backends,
            )
            report.problems.append(result)
            if on_problem is not None:
                on_problem(result)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        report.interrupted = True
        if runner is not None and runner.current is not None and runner.current not in report.problems:
            report.problems.append(runner.current)  # the problem stopped mid-way: count its stored trials
        log.warning("sweep %s interrupted; every finished trial is stored", spec.name)
    finally:
        report.wall_s = time.perf_counter() - t0
        store.finish_sweep(sweep_id, status)
    return report
