"""Sweep orchestration: every problem of a spec through the Runner, the sweep's row kept up to date."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.problem import Problem
from autotune.runner import ProblemReport, Runner, TrialCallback
from autotune.strategies import Budget
from autotune.sweeps.spec import SpecError, SweepSpec
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.bench import Benchmarker
    from autotune.checker import StaticChecker
    from autotune.db import Store

__all__ = ["SweepReport", "plan", "predict_sweep", "run_sweep"]

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
    predicted: bool = False  # a compile-only sweep: the results are the cost model's, not measurements
    budget_spent: bool = False  # the sweep's time budget ran out before every problem was tuned

    @property
    def trials_run(self) -> int:
        return sum(p.ran for p in self.problems)

    @property
    def trials_cached(self) -> int:
        return sum(p.cached for p in self.problems)


def plan(spec: SweepSpec, target: Target) -> list[tuple[Problem, int, int]]:
    """(problem, valid configs, raw configs) for every problem; SpecError for an unknown backend."""

    out = []
    for entry, problem in spec.problems():
        op = entry.op_for(problem)
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
    checker: StaticChecker | None = None,
    budget_s: float | None = None,
) -> SweepReport:
    """Tunes every problem of `spec` on `target`, writing each trial to `store` as it finishes.

    With a `checker` (a GPU target), configs compile ahead on the CPU cores and those the spec's static
    checks flag are stored as `pruned` without GPU time.

    `budget_s` is a time budget for the whole sweep, shared across the problems: each problem gets an
    equal share of what is left (time a problem does not use goes to the ones after it), capped by its
    own `seconds`. When it is spent the sweep stops like an interrupted one (`report.budget_spent`);
    running it again resumes.

    Ctrl-C (KeyboardInterrupt) stops the sweep between or inside trials; every finished trial is already
    stored, the sweep is marked "interrupted" and the report says so. Any other error marks it "failed"
    and propagates. Running the same spec again resumes: stored trials are not re-run.
    """
    from autotune.bench import Benchmarker

    plan(spec, target)  # validate everything before any work
    benches: dict[str, Benchmarker] = {}
    runner: Runner | None = None
    deadline = None if budget_s is None else time.monotonic() + budget_s
    todo = spec.problems()
    with _sweep_row(spec, store, target) as report:
        for i, (entry, problem) in enumerate(todo):
            op = entry.op_for(problem)
            key = f"{problem.op}:{getattr(op, 'zipf', '')}"  # one Benchmarker per op (and MoE routing)
            if key not in benches:
                benches[key] = benchmarker_for(problem.op) if benchmarker_for else Benchmarker(op, target)
            budget = entry.budget
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    report.budget_spent = True
                    report.interrupted = True
                    log.warning("time budget spent: %d of %d problems not started", len(todo) - i, len(todo))
                    break
                share = left / (len(todo) - i)
                budget = Budget(
                    budget.trials, share if budget.seconds is None else min(budget.seconds, share)
                )
            runner = Runner(store, target, benches[key], sweep_id=report.sweep_id, on_trial=on_trial,
                            checker=checker)  # fmt: skip
            result = runner.tune(
                op,
                problem,
                strategy=entry.strategy,
                budget=budget,
                seed=entry.seed,
                backends=entry.backends,
            )
            report.problems.append(result)
            if on_problem is not None:
                on_problem(result)
    stopped = runner.current if report.interrupted and runner is not None else None
    if stopped is not None and stopped not in report.problems:
        report.problems.append(stopped)  # the problem stopped mid-way: count its stored trials
    return report


@contextmanager
def _sweep_row(
    spec: SweepSpec, store: Store, target: Target, predicted: bool = False
) -> Iterator[SweepReport]:
    """The sweep's row and report: "finished" when the body completes, "interrupted" on Ctrl-C (which is
    swallowed: the report says so), "failed" on any other error (which propagates)."""
    t0 = time.perf_counter()
    sweep_id = store.start_sweep(spec.name, spec.text, target)
    report = SweepReport(sweep_id=sweep_id, name=spec.name, target=target, predicted=predicted)
    status = "failed"
    try:
        yield report
        status = "interrupted" if report.interrupted else "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        report.interrupted = True
        log.warning("sweep %s interrupted; everything finished is stored", spec.name)
    finally:
        report.wall_s = time.perf_counter() - t0
        store.finish_sweep(sweep_id, status)


def predict_sweep(
    spec: SweepSpec,
    store: Store,
    checker: StaticChecker,
    *,
    keep: int = 5,
    on_trial: TrialCallback | None = None,
    on_problem: Callable[[ProblemReport], None] | None = None,
) -> SweepReport:
    """The compile-only sweep: every problem of `spec` on the checker's target, no GPU needed.

    Per problem the cost model ranks the space, the best `spec.static.candidates` configs are compiled on
    all CPU cores, the static checks prune (stored as `pruned` with the reason) and the `keep` best
    survivors plus the vendor library are stored as predictions (source "model", timing method "model"),
    never mixed with measurements. A problem already predicted for this target and kernel version is
    skipped, so the sweep resumes. Ctrl-C marks the sweep "interrupted".
    """
    from autotune.kernels.base import kernel_versions
    from autotune.predict import check_problem, model_result
    from autotune.result import Source

    target = checker.target
    plan(spec, target)
    with _sweep_row(spec, store, target, predicted=True) as report:
        for entry, problem in spec.problems():
            op = entry.op_for(problem)
            p0 = time.perf_counter()
            space = op.space(problem, target, entry.backends)
            kernels = kernel_versions(op, space.backends)
            done = store.finished(target=target, problem=problem, kernels=kernels, source=Source.MODEL)
            result = ProblemReport(problem, space_size=len(space), raw_size=space.raw_size(),
                                   pruned=space.prune_summary())  # fmt: skip
            if any(r.ok for r in done.values()):
                result.cached = len(done)
                ok = [r for r in done.values() if r.ok]
                result.best = min(ok, key=lambda r: r.score())
                result.vendor = next((r for r in ok if r.config.backend == "torch"), None)
            else:
                found = check_problem(op, problem, checker, candidates=spec.static.candidates, keep=keep,
                                      backends=entry.backends)  # fmt: skip
                best = found.best(keep)
                if found.vendor is not None and found.vendor not in best:
                    best.append(found.vendor)
                picks = [(c, None) for c in found.compiled if c.pruned] + [(c, i) for i, c in enumerate(best)]
                for candidate, rank in picks:
                    trial = model_result(candidate, None if rank is None else {"rank": rank})
                    name, source_hash = kernels[candidate.config.backend]
                    store.record(target=target, kernel=name, source_hash=source_hash, problem=problem,
                                 result=trial, sweep_id=report.sweep_id, source=Source.MODEL)  # fmt: skip
                    if on_trial is not None:
                        on_trial(problem, candidate.config, trial)
                    if trial.ok and (result.best is None or trial.score() < result.best.score()):
                        result.best = trial
                    if trial.ok and candidate.config.backend == "torch":
                        result.vendor = trial
                result.ran = len(found.compiled)
                result.failed = found.n_pruned
                result.static_pruned = found.static_pruned
                result.compile_s = sum(c.features.compile_s for c in found.compiled if c.features)
            result.wall_s = time.perf_counter() - p0
            report.problems.append(result)
            if on_problem is not None:
                on_problem(result)
    return report
