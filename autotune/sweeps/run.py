"""Sweep orchestration: every problem of a spec through the Runner, the sweep's row kept up to date."""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.core import crashpoints
from autotune.core.problem import Problem
from autotune.core.registry import is_vendor
from autotune.core.result import TrialResult
from autotune.core.target import Target
from autotune.db.liveness import heartbeat_s
from autotune.db.unclosed import leave_unclosed
from autotune.engine.runner import ProblemReport, TrialCallback
from autotune.engine.strategies import Budget
from autotune.engine.workers import InlineWorker, Worker
from autotune.sweeps.estimate import plan, plan_sweep
from autotune.sweeps.profile import (
    FamilyProfile,
    ProfileReport,
    family_of,
)
from autotune.sweeps.shared import WAIT_POLL_S, SharedWork, work_key
from autotune.sweeps.spec import SweepEntry, SweepSpec
from autotune.sweeps.worker_loop import WorkerLoop

if TYPE_CHECKING:
    from autotune.db import Store
    from autotune.engine.bench import Benchmarker
    from autotune.engine.checker import StaticChecker
    from autotune.engine.predict import ProblemCheck

__all__ = ["SweepReport", "families", "plan", "predict_sweep", "run_sweep"]

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
    #: The M profiles made after tuning (one per shape family with a ladder), and the seconds they took.
    profiles: list[ProfileReport] = field(default_factory=list)
    profile_s: float = 0.0

    @property
    def trials_run(self) -> int:
        return sum(p.ran for p in self.problems)

    @property
    def trials_cached(self) -> int:
        return sum(p.cached for p in self.problems)


def run_sweep(
    spec: SweepSpec,
    store: Store,
    target: Target,
    *,
    benchmarker_for: Callable[[str], Benchmarker] | None = None,
    workers: Sequence[Worker] | None = None,
    on_trial: TrialCallback | None = None,
    on_problem: Callable[[ProblemReport], None] | None = None,
    checker: StaticChecker | None = None,
    budget_s: float | None = None,
    log_path: str | None = None,
) -> SweepReport:
    """Tunes every problem of `spec` on `target`, writing each trial to `store` as it finishes.

    Where trials run: with `workers` (a ProcessWorker per GPU, or Ray actors), each worker has a thread
    here that takes the next problem from a shared queue, longest estimated first, so that the workers
    finish together; a config that crashes or hangs a worker costs that trial (stored as `crashed` or
    `timeout`), and a worker that cannot work at all hands its problem back to the others. Results are
    recorded under the target each worker reports. Without workers, trials run in this process (an
    InlineWorker) on a Benchmarker per op (`benchmarker_for(op name)` makes them; tests inject fakes).

    With a `checker` (a GPU target), configs compile ahead on the CPU cores and those the spec's static
    checks flag are stored as `pruned` without GPU time.

    `budget_s` is a time budget for the whole sweep, shared across the problems: each problem gets an
    equal share of what is left per worker (time a problem does not use goes to the ones after it),
    capped by its own `seconds`. When it is spent the sweep stops like an interrupted one
    (`report.budget_spent`); running it again resumes.

    Once every problem is tuned, each shape family whose entry has an M ladder (`SweepEntry.ladder_on`:
    by default the serving ladder on a GPU) is profiled (`autotune.sweeps.profile`): its candidates timed at
    the ladder's M (sparse, as that module says) the way they run when served, stored as profile trials,
    so that `autotune emit` builds M ranges; on the workers, a family at a time each. A sweep stopped or
    out of budget profiles nothing; running it again does.

    Processes (and hosts) that run the same spec on the same kind of GPU against one database share the
    sweep (`autotune.sweeps.shared`): each problem is claimed before it is tuned, so that one process
    tunes it; a process with nothing left to claim waits for the problems others hold, and takes over
    those of a holder that died. A problem another process finished is read back, not run.

    Ctrl-C (KeyboardInterrupt) stops the sweep between or inside trials (a trial cut short is not
    stored); every finished trial is already stored, the sweep is marked "interrupted" and the report
    says so. Any other error marks it "failed" and propagates. Running the same spec again resumes:
    stored trials are not re-run. The sweep's row keeps a heartbeat and progress counts, which
    ``autotune status`` shows from any host; `log_path` is recorded with it.
    """
    for worker in workers or ():
        worker.start()  # worker processes import torch and open their GPUs while the sweep sets up
    planned = plan(spec, target)  # validate everything before any work
    crashpoints.point("sweep.planned", spec.name)
    todo = spec.problems()
    n_workers = len(workers) if workers else None  # as the sweep's row records it
    if not workers:
        make = (lambda op: benchmarker_for(op.name)) if benchmarker_for else None
        workers = [InlineWorker(target, make=make)]
    # Longest first, whether the workers are this process's or other processes' sharing the sweep: the
    # workers then finish together.
    todo = _longest_first(spec, target, store, todo, planned)
    queue = _ProblemQueue(todo, budget_s, len(workers))
    if checker is not None:
        checker.warm_up()  # the compile processes start while the GPU workers do
    jobs = families(spec, target)
    with _sweep_row(spec, store, target, problems_total=len(todo), workers=n_workers, log_path=log_path) as (
        report,
        progress,
    ):
        queue.shared = SharedWork(store, work_key(spec.text, target), report.sweep_id)
        counted = progress.wrap(on_trial)
        try:
            WorkerLoop(queue, workers, store, report, progress, counted, on_problem, checker, jobs).run()
        finally:
            report.budget_spent = queue.budget_spent
            if queue.budget_spent:
                report.interrupted = True
    return report


def families(spec: SweepSpec, target: Target) -> list[FamilyProfile]:
    """The shape families of `spec` to profile on `target`: per family (problems differing only in M),
    its tuned problems, the ladder and the backends of the entry that holds its first problem; families with
    an empty ladder are left out."""
    grouped: dict[Problem, tuple[SweepEntry, list[Problem]]] = {}
    for entry, problem in spec.problems():
        grouped.setdefault(family_of(problem), (entry, []))[1].append(problem)
    out = []
    for entry, problems in grouped.values():
        buckets = tuple(sorted(problems, key=lambda p: p.M))
        ladder = entry.ladder_on(target, tuple(p.M for p in buckets))
        if ladder:
            out.append(FamilyProfile(entry.op_for(buckets[0]), buckets, ladder, entry.backends))
    return out


class _ProblemQueue:
    """The problems left, handed out one at a time with their share of the time budget. Thread-safe.

    With `shared` (a sweep shared with other processes), a problem is handed out only once claimed: one
    that another live sweep holds is passed over for the next, one already done is handed out to be
    read back, and when every problem left is held elsewhere `take` waits for them to be done or their
    lease to run out."""

    def __init__(self, todo: list[tuple[SweepEntry, Problem]], budget_s: float | None, workers: int) -> None:
        self.todo = list(todo)
        self.total = len(todo)
        self.workers = workers
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.budget_spent = False
        self.shared: SharedWork | None = None
        self._held_until: dict[Problem, float] = {}  # problems another sweep held, until when not to ask
        self._lock = threading.Lock()

    def take(
        self, should_stop: Callable[[], bool] = lambda: False
    ) -> tuple[SweepEntry, Problem, Budget] | None:
        waited = False
        while True:
            with self._lock:
                if not self.todo:
                    return None
                budget_left = self._budget_left()
                if budget_left is not None and budget_left <= 0:
                    return None
                for i, (entry, problem) in enumerate(self.todo):
                    if self.shared is not None and not self._claim(problem):
                        continue
                    budget = entry.budget
                    if budget_left is not None:
                        # Equal shares of what is left, running `workers` problems at a time.
                        share = budget_left * min(self.workers, len(self.todo)) / len(self.todo)
                        budget = Budget(
                            budget.trials, share if budget.seconds is None else min(budget.seconds, share)
                        )
                    self.todo.pop(i)
                    return entry, problem, budget
            if should_stop():
                return None
            if not waited:
                log.info("every problem left is held by another process of this sweep: waiting")
                waited = True
            self._wait_for_free(should_stop)

    def _wait_for_free(self, should_stop: Callable[[], bool]) -> None:
        """Waits until a problem left may be claimed (its holder finished it, stopped or died: read every
        `WAIT_POLL_S`), or half a heartbeat has passed, or `should_stop`."""
        deadline = time.monotonic() + min(5.0, heartbeat_s() / 2)
        while time.monotonic() < deadline and not should_stop():
            with self._lock:
                left = {p.key(): p for _, p in self.todo}
            if not left or self.shared is None:
                return
            free = self.shared.claimable(list(left))
            if free:
                with self._lock:
                    for key in free:
                        self._held_until.pop(left[key], None)
                return
            time.sleep(WAIT_POLL_S)

    def _claim(self, problem: Problem) -> bool:
        """Whether this sweep may take `problem` (claimed, or done elsewhere: read back). One found held
        is not asked for again for a heartbeat, so that a take costs few writes however many are held."""
        assert self.shared is not None
        now = time.monotonic()
        if self._held_until.get(problem, 0.0) > now:
            return False
        if self.shared.claim(problem.key()) == "held":
            self._held_until[problem] = now + heartbeat_s()
            return False
        return True

    def _budget_left(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0 and not self.budget_spent:
            log.warning("time budget spent: %d of %d problems not started", len(self.todo), self.total)
            self.budget_spent = True
        return left

    def done(self, problem: Problem) -> None:
        """`problem` is tuned (for a shared sweep: no process runs it again)."""
        if self.shared is not None:
            self.shared.done(problem.key())

    def peek(self) -> tuple[SweepEntry, Problem] | None:
        """The problem `take` would hand out next, left in the queue."""
        with self._lock:
            return self.todo[0] if self.todo else None

    def put_back(self, entry: SweepEntry, problem: Problem) -> None:
        with self._lock:
            self.todo.insert(0, (entry, problem))


def _longest_first(
    spec: SweepSpec,
    target: Target,
    store: Store,
    todo: list[tuple[SweepEntry, Problem]],
    planned: list[tuple[Problem, int, int]],
    *,
    compile_only: bool = False,
) -> list[tuple[SweepEntry, Problem]]:
    """`todo` ordered by estimated time left, longest first (greedy scheduling then finishes the workers
    together); by trial count where the estimate cannot be made."""
    try:
        rows = plan_sweep(spec, target, store=store, compile_only=compile_only)
        est = {row.problem: row.est_s for row in rows}
    except Exception as exc:  # the estimate is an optimisation only
        log.debug("no duration estimate (%s): ordering by trials", exc)
        sizes = {p: n for p, n, _ in planned}
        est = {p: float(min(sizes[p], e.budget.trials or sizes[p])) for e, p in todo}
    return sorted(todo, key=lambda item: -est.get(item[1], 0.0))


class _Progress:
    """The sweep's heartbeat and progress counts in its row (and the leases of the problems it holds),
    written at most every `every_s` seconds (the heartbeat, `heartbeat_s()`) as trials finish, when a
    problem finishes, and by a background thread every `every_s` seconds while `running()` (so a long
    trial never makes a live sweep look dead or lose its problems). Thread-safe; a failed write is
    logged, never fatal."""

    def __init__(self, store: Store, sweep_id: int, every_s: float | None = None) -> None:
        self.store, self.sweep_id = store, sweep_id
        self.every_s = heartbeat_s() if every_s is None else every_s
        self.trials = 0
        self.problems = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()

    @contextmanager
    def running(self) -> Iterator[None]:
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.wait(self.every_s):
                self.beat(force=True)

        thread = threading.Thread(target=heartbeat, name="sweep-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    def wrap(self, on_trial: TrialCallback | None) -> TrialCallback:
        def counted(problem: Problem, config: Any, result: Any) -> None:
            with self._lock:
                self.trials += 1
            what = f"{result.time_us:.2f} us" if result.ok else f"{result.status.value} {result.error[:300]}"
            where = result.extra.get("worker", "")
            log.info("%s | %s | %s%s", problem, config.short(), what, f" [{where}]" if where else "")
            self.beat()
            if on_trial is not None:
                on_trial(problem, config, result)

        return counted

    def problem_done(self, report: ProblemReport) -> None:
        with self._lock:
            self.problems += 1
        best = report.best.config.short() if report.best else "-"
        speedup = "" if report.speedup is None else f", {report.speedup:.2f}x the vendor library"
        log.info("done %s: %d trials run, %d read back, %d failed; best %s%s",
                 report.problem, report.ran, report.cached, report.failed, best, speedup)  # fmt: skip
        self.beat(force=True)

    def beat(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self.every_s:
                return
            self._last = now
            trials, problems = self.trials, self.problems
        try:
            self.store.touch_sweep(self.sweep_id, trials_done=trials, problems_done=problems)
        except Exception as exc:  # the heartbeat must never stop a sweep
            log.info("cannot update the sweep's progress: %s", exc)


@contextmanager
def _sweep_row(
    spec: SweepSpec,
    store: Store,
    target: Target,
    predicted: bool = False,
    *,
    problems_total: int | None = None,
    workers: int | None = None,
    log_path: str | None = None,
) -> Iterator[tuple[SweepReport, _Progress]]:
    """The sweep's row, report and progress: "finished" when the body completes, "interrupted" on
    Ctrl-C (which is swallowed: the report says so), "failed" on any other error (which propagates, also
    where the database no longer takes the write that marks the sweep failed)."""
    t0 = time.perf_counter()
    sweep_id = store.start_sweep(
        spec.name, spec.text, target, problems_total=problems_total, workers=workers, log_path=log_path
    )
    report = SweepReport(sweep_id=sweep_id, name=spec.name, target=target, predicted=predicted)
    progress = _Progress(store, sweep_id)
    status = "failed"
    try:
        with progress.running():
            yield report, progress
        status = "interrupted" if report.interrupted else "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        report.interrupted = True
        log.warning("sweep %s interrupted; everything finished is stored", spec.name)
    finally:
        report.wall_s = time.perf_counter() - t0
        if status != "failed":
            progress.beat(force=True)
        failure = sys.exc_info()[1]
        error = None if status != "failed" or failure is None else _reason(failure)
        try:
            store.finish_sweep(sweep_id, status, error)
        except Exception as exc:
            # The database is gone too: the next sweep of this host writes the end (`db.unclosed`).
            leave_unclosed(store.url, sweep_id, status, error)
            if failure is None:
                raise
            # The error that stopped the sweep is the one to report.
            log.info("cannot mark sweep %d %s: %s", sweep_id, status, exc)


def _reason(exc: BaseException) -> str:
    """Why a sweep failed, in one line for its row."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:1000]


def predict_sweep(
    spec: SweepSpec,
    store: Store,
    checker: StaticChecker,
    *,
    keep: int = 5,
    on_trial: TrialCallback | None = None,
    on_problem: Callable[[ProblemReport], None] | None = None,
    on_step: Callable[[Problem, str], None] | None = None,
    log_path: str | None = None,
) -> SweepReport:
    """The compile-only sweep: every problem of `spec` on the checker's target, no GPU needed.

    Per problem the cost model ranks the space, the best `spec.static.candidates` configs are compiled on
    all CPU cores, the static checks prune (stored as `pruned` with the reason) and the `keep` best
    survivors plus the vendor library are stored as predictions (source "model", timing method "model"),
    never mixed with measurements. A problem already predicted for this target and kernel version is
    skipped, so the sweep resumes; processes that run the same spec share its problems, as `run_sweep`'s
    do. Ctrl-C marks the sweep "interrupted". `on_step` is told of each step of a problem as it starts
    (`check_problem`'s). `log_path` (the sweep's log file) is recorded with its row.
    """
    target = checker.target
    planned = plan(spec, target)
    crashpoints.point("sweep.planned", spec.name)
    todo = _longest_first(spec, target, store, spec.problems(), planned, compile_only=True)
    queue = _ProblemQueue(todo, None, 1)
    total = len(spec.problems())
    with _sweep_row(spec, store, target, predicted=True, problems_total=total, log_path=log_path) as (
        report,
        progress,
    ):
        queue.shared = SharedWork(store, work_key(spec.text, target), report.sweep_id)
        counted = progress.wrap(on_trial)  # the sweep's row counts the configs it stores, as a GPU sweep's
        while (item := queue.take()) is not None:
            entry, problem, _ = item
            steps = None if on_step is None else functools.partial(on_step, problem)
            result = _predict_problem(
                spec, entry, problem, store, checker, report.sweep_id, keep, counted, steps
            )
            queue.done(problem)
            report.problems.append(result)
            progress.problem_done(result)
            if on_problem is not None:
                on_problem(result)
    return report


def _predict_problem(
    spec: SweepSpec,
    entry: SweepEntry,
    problem: Problem,
    store: Store,
    checker: StaticChecker,
    sweep_id: int,
    keep: int,
    on_trial: TrialCallback,
    on_step: Callable[[str], None] | None,
) -> ProblemReport:
    """One problem of `predict_sweep`: its predictions read back where a whole batch is stored, else
    checked (`check_problem`) and stored in one transaction."""
    from autotune.core.op import kernel_versions
    from autotune.core.result import Source
    from autotune.db import NewTrial
    from autotune.engine.predict import check_problem

    target = checker.target
    op = entry.op_for(problem)
    p0 = time.perf_counter()
    space = op.space(problem, target, entry.backends)
    kernels = kernel_versions(op, space.backends)
    done = store.finished(target=target, problem=problem, kernels=kernels, source=Source.MODEL)
    result = ProblemReport(
        problem, space_size=len(space), raw_size=space.raw_size(), pruned=space.prune_summary()
    )
    if _complete(done):
        result.cached = len(done)
        ok = [r for r in done.values() if r.ok]
        result.best = min(ok, key=lambda r: r.score(), default=None)
        result.vendor = next((r for r in ok if is_vendor(problem.op, r.config.backend)), None)
    else:
        compiled_before = checker.compiled[problem.key()]
        found = check_problem(
            op,
            problem,
            checker,
            candidates=spec.static.candidates,
            keep=keep,
            backends=entry.backends,
            on_step=on_step,
        )
        trials = _predictions(found, keep)
        batch = [NewTrial(target, *kernels[t.config.backend], problem, t, Source.MODEL) for t in trials]
        crashpoints.point("predict.batch", problem.key())
        written = store.record_many(batch, sweep_id=sweep_id)  # one transaction
        for trial, new in zip(trials, written, strict=True):
            if new:
                on_trial(problem, trial.config, trial)
            else:
                result.cached += 1
            if trial.ok and (result.best is None or trial.score() < result.best.score()):
                result.best = trial
            if trial.ok and is_vendor(problem.op, trial.config.backend):
                result.vendor = trial
        result.ran = checker.compiled[problem.key()] - compiled_before  # not read back
        result.static_pruned = found.static_pruned
        result.compile_s = sum(c.features.compile_s for c in found.compiled if c.features)
    result.wall_s = time.perf_counter() - p0
    return result


def _predictions(found: ProblemCheck, keep: int) -> list[TrialResult]:
    """The trials a compile-only check of one problem stores, as one batch: every compiled config a static
    check pruned, then the `keep` best predictions and the vendor library's; each says how many rows its
    batch holds (``extra["batch"]``), so that a resumed sweep can tell a whole batch from part of one."""
    from autotune.engine.predict import model_result

    best = found.best(keep)
    if found.vendor is not None and found.vendor not in best:
        best.append(found.vendor)
    picks = [(c, None) for c in found.compiled if c.pruned] + [(c, i) for i, c in enumerate(best)]
    n = len(picks)
    return [model_result(c, {"batch": n} if i is None else {"rank": i, "batch": n}) for c, i in picks]


def _complete(done: dict[str, TrialResult]) -> bool:
    """Whether the stored predictions of a problem are its whole batch (`_predictions`): every row there
    and none missing. Rows of an older sweep, which do not say their batch, count as incomplete: the
    problem is checked again and only the missing rows are stored."""
    if not done:
        return False
    sizes = {r.extra.get("batch") for r in done.values()}
    return len(sizes) == 1 and isinstance(n := sizes.pop(), int) and len(done) >= n
