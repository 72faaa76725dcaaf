"""Sweep orchestration: every problem of a spec through the Runner, the sweep's row kept up to date."""

from __future__ import annotations

import functools
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import is_vendor
from autotune.core.result import TrialResult
from autotune.core.target import Target
from autotune.db.liveness import heartbeat_s
from autotune.db.unclosed import leave_unclosed
from autotune.engine.bench import ServedTiming
from autotune.engine.runner import ProblemReport, Runner, SweepStopped, TrialCallback
from autotune.engine.strategies import Budget
from autotune.engine.workers import InlineWorker, Worker, WorkerAborted, WorkerError
from autotune.sweeps.estimate import plan, plan_sweep
from autotune.sweeps.plans_ahead import PlansAhead
from autotune.sweeps.profile import (
    PROFILE_RACE,
    FamilyProfile,
    Plan,
    ProfileReport,
    family_of,
    profile_family,
)
from autotune.sweeps.shared import SharedWork, profile_item, work_key
from autotune.sweeps.spec import SweepEntry, SweepSpec

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
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
            _WorkerLoop(queue, workers, store, report, progress, counted, on_problem, checker, jobs).run()
        finally:
            report.budget_spent = queue.budget_spent
            if queue.budget_spent:
                report.interrupted = True
    return report


def families(spec: SweepSpec, target: Target) -> list[FamilyProfile]:
    """The shape families of `spec` to profile on `target`: per family (problems differing only in M),
    its tuned problems and the ladder of the entry that holds its first problem; families with an empty
    ladder are left out."""
    grouped: dict[Problem, tuple[SweepEntry, list[Problem]]] = {}
    for entry, problem in spec.problems():
        grouped.setdefault(family_of(problem), (entry, []))[1].append(problem)
    out = []
    for entry, problems in grouped.values():
        buckets = tuple(sorted(problems, key=lambda p: p.M))
        ladder = entry.ladder_on(target, tuple(p.M for p in buckets))
        if ladder:
            out.append(FamilyProfile(entry.op_for(buckets[0]), buckets, ladder))
    return out


#: How often a process whose problems left are all held elsewhere looks whether one was freed, in seconds.
WAIT_POLL_S = 0.25


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


#: Problems in flight per worker while configs compile ahead: the one taken first measures whenever one of
#: its configs is ready; the one behind it measures while the first waits on a slow compile.
IN_FLIGHT = 2


class _Lane:
    """One worker shared by the problems in flight on it, one trial at a time. The problem taken first
    (the front) has the worker whenever it asks; a problem behind it gets the worker only while the
    front waits on a compile. A problem's time budget counts its own time only: all of it while in
    front, its trials while behind. Thread-safe."""

    def __init__(self, worker: Worker, tickets: Iterator[int]) -> None:
        self.worker = worker
        self._tickets = tickets
        self._cv = threading.Condition()
        self._busy = False
        self._order: list[int] = []  # problems in flight, front first
        self._compiling: set[int] = set()  # problems waiting on a compile
        self._own: dict[int, float] = {}  # seconds counted so far per problem
        self._front_since = 0.0

    def join(self) -> int:
        with self._cv:
            ticket = next(self._tickets)
            self._order.append(ticket)
            self._own[ticket] = 0.0
            if len(self._order) == 1:
                self._front_since = time.monotonic()
            return ticket

    def leave(self, ticket: int) -> None:
        with self._cv:
            was_front = self._order[0] == ticket
            self._order.remove(ticket)
            self._own.pop(ticket, None)
            self._compiling.discard(ticket)
            if was_front and self._order:
                self._front_since = time.monotonic()
            self._cv.notify_all()

    def clock(self, ticket: int) -> Callable[[], float]:
        """Seconds counted for `ticket`'s problem (monotonic), for its strategy's time budget."""

        def now() -> float:
            with self._cv:
                own = self._own.get(ticket, 0.0)
                if self._order and self._order[0] == ticket:
                    own += time.monotonic() - self._front_since
                return own

        return now

    @contextmanager
    def compiling(self, ticket: int) -> Iterator[None]:
        """`ticket`'s problem waits on a compile meanwhile: a problem behind it may use the worker."""
        with self._cv:
            self._compiling.add(ticket)
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._compiling.discard(ticket)

    def run(self, ticket: int, op: TunableOp, problem: Problem, config: Config) -> TrialResult:
        with self._cv:
            while self._busy or (self._order[0] != ticket and self._order[0] not in self._compiling):
                self._cv.wait()
            self._busy = True
        t0 = time.monotonic()
        try:
            return self.worker.run(op, problem, config)
        finally:
            with self._cv:
                self._busy = False
                if self._order and self._order[0] != ticket and ticket in self._own:
                    self._own[ticket] += time.monotonic() - t0
                self._cv.notify_all()


@dataclass
class _InLane:
    """The Runner's measurer for one problem on a lane."""

    lane: _Lane
    ticket: int
    op: TunableOp

    def run(self, problem: Problem, config: Config) -> TrialResult:
        return self.lane.run(self.ticket, self.op, problem, config)


class _LaneChecker:
    """The sweep's checker as one problem's Runner sees it: a wait on a compile tells the lane."""

    def __init__(self, checker: StaticChecker, lane: _Lane, ticket: int) -> None:
        self.checker, self.lane, self.ticket = checker, lane, ticket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.checker, name)

    def findings(self, op: TunableOp, problem: Problem, config: Config) -> Any:
        if self.checker.ready(problem, config):
            return self.checker.findings(op, problem, config)
        with self.lane.compiling(self.ticket):
            return self.checker.findings(op, problem, config)


@dataclass
class _Tuning:
    """A problem taken from the queue, and the Runner tuning it while it runs (what a sweep stopped
    mid-way reports of it)."""

    entry: SweepEntry
    problem: Problem
    budget: Budget
    runner: Runner | None = None


@dataclass
class _Profiling:
    """A shape family to profile, and its plan once made (`PlansAhead`), kept when it is handed back."""

    family: FamilyProfile
    plan: tuple[Plan, int] | None = None


class _WorkerLoop:
    """The sweep's threads over its workers: they drain the problem queue, `IN_FLIGHT` per worker when
    compiling ahead (else one), then, once every problem is tuned, profile the shape families, one thread
    per worker. Ctrl-C in `run` aborts the running trials and stops them all.

    Contract: `run` is called once. The report, the callbacks, `errors` and the families left are guarded
    by `lock`; `stop` tells every thread to stop between trials. A thread's failure becomes the sweep's
    outcome in one place, `_failed`: a stop (SweepStopped, WorkerAborted) ends the thread, the problem in
    flight reporting what it stored; a WorkerError (this worker cannot go on) hands its item back to
    the other workers; anything else (a bug, a database error) stops the sweep. `run` then raises the
    first error that stopped the sweep, or, where work is left that no worker could do, the first
    WorkerError.
    """

    def __init__(
        self,
        queue: _ProblemQueue,
        workers: Sequence[Worker],
        store: Store,
        report: SweepReport,
        progress: _Progress,
        on_trial: TrialCallback | None,
        on_problem: Callable[[ProblemReport], None] | None,
        checker: StaticChecker | None,
        jobs: Sequence[FamilyProfile] = (),
    ) -> None:
        self.queue, self.workers, self.store, self.report = queue, workers, store, report
        self.progress, self.on_trial, self.on_problem, self.checker = progress, on_trial, on_problem, checker
        self.stop = threading.Event()
        self.lock = threading.Lock()  # the report, the callbacks, `errors` and `families`
        self.errors: list[BaseException] = []
        tickets = itertools.count()
        self.lanes = [_Lane(w, tickets) for w in workers]
        self.families = [_Profiling(job) for job in jobs]  # the families left to profile
        self.ahead: PlansAhead | None = None  # the profile's plans, made on a thread once tuning is done

    def run(self) -> None:
        one_thread = len(self.workers) == 1 and self.checker is None
        try:
            self._run_phase(self._drain, IN_FLIGHT if self.checker is not None else 1)
            self._check_errors(bool(self.queue.todo))
            queue = self.queue
            if self.families and not self.stop.is_set() and not queue.budget_spent and not queue.todo:
                self._profile_all()
        finally:
            if one_thread:
                self.workers[0].close()

    def _profile_all(self) -> None:
        t0 = time.perf_counter()
        if self.checker is not None:  # planned in order while the families before are timed
            families = [job.family for job in self.families]
            target = self.workers[0].target
            self.ahead = PlansAhead(families, store=self.store, target=target, checker=self.checker)
        try:
            self._run_phase(self._profile, 1)
        finally:
            self.report.profile_s = time.perf_counter() - t0
            if self.ahead is not None:
                self.ahead.close()
        self._check_errors(bool(self.families))

    def _run_phase(self, body: Callable[[_Lane], None], per_worker: int) -> None:
        if len(self.workers) * per_worker == 1:  # one thread: this one, so Ctrl-C lands inside the trial
            body(self.lanes[0])
            return
        threads = [
            threading.Thread(target=body, args=(lane,), name=f"sweep-{lane.worker.name}-{i}", daemon=True)
            for i in range(per_worker)
            for lane in self.lanes
        ]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
        except KeyboardInterrupt:
            self.stop.set()
            for w in self.workers:
                w.close()  # a running trial is cut short, and not stored
            for t in threads:
                t.join()
            raise

    def _check_errors(self, left: bool) -> None:
        fatal = [e for e in self.errors if not isinstance(e, WorkerError)]
        if fatal:
            raise fatal[0]
        if left and not self.stop.is_set() and not self.queue.budget_spent:
            raise self.errors[0] if self.errors else RuntimeError("work left with no worker to do it")

    # -- the threads ----------------------------------------------------------------------------------

    def _drain(self, lane: _Lane) -> None:
        """Tunes the problems of the queue on `lane`'s worker until none is left or the sweep stops."""
        item: _Tuning | None = None
        try:
            while not self.stop.is_set() and (item := self._take()) is not None:
                self._tune(lane, item)
                item = None
        except BaseException as exc:
            self._failed(lane, exc, item)

    def _profile(self, lane: _Lane) -> None:
        """Profiles the families left on `lane`'s worker until none is left or the sweep stops."""
        job: _Profiling | None = None
        try:
            while not self.stop.is_set() and (job := self._next_job()) is not None:
                self._profile_one(lane, job)
                job = None
        except BaseException as exc:
            self._failed(lane, exc, job)

    def _failed(self, lane: _Lane, exc: BaseException, item: _Tuning | _Profiling | None) -> None:
        """What the failure `exc` of `lane`'s thread, with `item` in flight, makes of the sweep: the one
        place a worker's failure becomes the stored outcome (the class docstring says how)."""
        if isinstance(exc, WorkerError):  # this worker cannot go on; the others take its item
            log.error("%s stopped: %s", lane.worker.name, exc)
            with self.lock:
                if isinstance(item, _Tuning):
                    self.queue.put_back(item.entry, item.problem)
                elif item is not None:
                    self.families.insert(0, item)
                self.errors.append(exc)
            return
        if not isinstance(exc, (SweepStopped, WorkerAborted)):  # a bug or a database error: stop the sweep
            with self.lock:
                self.errors.append(exc)
            self.stop.set()
        if isinstance(item, _Tuning) and item.runner is not None and item.runner.current is not None:
            with self.lock:
                self.report.problems.append(item.runner.current)  # stopped mid-way: its stored trials count

    # -- tuning ---------------------------------------------------------------------------------------

    def _take(self) -> _Tuning | None:
        taken = self.queue.take(self.stop.is_set)
        return None if taken is None else _Tuning(*taken)

    def _tune(self, lane: _Lane, item: _Tuning) -> None:
        entry, problem, worker, checker = item.entry, item.problem, lane.worker, self.checker
        op = entry.op_for(problem)
        if checker is not None:  # this problem's first compiles, then the next problem's
            _compile_ahead(checker, entry, problem)  # (queued first, so they are compiled first)
            if (following := self.queue.peek()) is not None:
                _compile_ahead(checker, *following)
        ticket = lane.join()
        try:
            item.runner = Runner(
                self.store,
                worker.target,
                _InLane(lane, ticket, op),
                served=_InLane(lane, ticket, ServedTiming(op)),
                sweep_id=self.report.sweep_id,
                on_trial=self._on_trial,
                checker=None if checker is None else _LaneChecker(checker, lane, ticket),  # type: ignore[arg-type]
                should_stop=self.stop.is_set,
                warm_start=entry.warm_start,
                final_rounds=entry.final_rounds_on(worker.target),
            )
            result = item.runner.tune(
                op,
                problem,
                strategy=entry.strategy,
                budget=item.budget,
                seed=entry.seed,
                backends=entry.backends,
                clock=lane.clock(ticket),
            )
        finally:
            lane.leave(ticket)
        self.queue.done(problem)
        item.runner = None  # tuned: its report is the one below, whatever follows
        with self.lock:
            self.report.problems.append(result)
            self.progress.problem_done(result)
            if self.on_problem is not None:
                self.on_problem(result)

    def _on_trial(self, problem: Problem, config: Any, result: Any) -> None:
        if self.on_trial is not None:
            with self.lock:
                self.on_trial(problem, config, result)

    # -- profiling ------------------------------------------------------------------------------------

    def _next_job(self) -> _Profiling | None:
        """The next family to profile: for a shared sweep, one no other live process holds (waiting
        while others hold every one left)."""
        shared = self.queue.shared
        while True:
            with self.lock:
                if not self.families:
                    return None
                for i, job in enumerate(self.families):
                    if shared is None or shared.claim(profile_item(job.family.family)) != "held":
                        return self.families.pop(i)
                items = [profile_item(job.family.family) for job in self.families]
            deadline = time.monotonic() + min(5.0, heartbeat_s() / 2)  # until one is freed: read often
            while not (shared is not None and shared.claimable(items)):
                if self.stop.wait(WAIT_POLL_S):
                    return None
                if time.monotonic() > deadline:
                    break

    def _profile_one(self, lane: _Lane, job: _Profiling) -> None:
        family = job.family
        if job.plan is None and self.ahead is not None:
            job.plan = self.ahead.wait(family, self.stop.is_set)
        ticket = lane.join()
        try:
            done = profile_family(
                family,
                store=self.store,
                target=lane.worker.target,
                measurer=_InLane(lane, ticket, ServedTiming(family.op, race=PROFILE_RACE)),
                sweep_id=self.report.sweep_id,
                should_stop=self.stop.is_set,
                on_point=lambda *_: self.progress.beat(),
                compiler=self.checker,
                plan=job.plan,
            )
        finally:
            lane.leave(ticket)
        if self.queue.shared is not None:
            self.queue.shared.done(profile_item(family.family))
        with self.lock:
            self.report.profiles.append(done)


def _compile_ahead(checker: StaticChecker, entry: SweepEntry, problem: Problem) -> None:
    """Queues compiles of the configs `problem`'s strategy will ask first (where the strategy can say),
    so that they run while the GPU is still busy with the problem before it, or still starting."""
    from autotune.engine.strategies import make_strategy

    op = entry.op_for(problem)
    try:
        space = op.space(problem, checker.target, entry.backends)
        first = make_strategy(entry.strategy, space, entry.budget, seed=entry.seed).upcoming(
            checker.lookahead
        )
    except Exception as exc:  # only an optimisation: the runner compiles what it needs anyway
        log.debug("no compile-ahead for %s: %s", problem, exc)
        return
    checker.prefetch(op, problem, first)


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
    from autotune.core.op import kernel_versions
    from autotune.core.result import Source
    from autotune.db import NewTrial
    from autotune.engine.predict import check_problem

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
                    on_step=None if on_step is None else functools.partial(on_step, problem),
                )
                trials = _predictions(found, keep)
                batch = [
                    NewTrial(target, *kernels[t.config.backend], problem, t, Source.MODEL) for t in trials
                ]
                crashpoints.point("predict.batch", problem.key())
                written = store.record_many(batch, sweep_id=report.sweep_id)  # one transaction
                for trial, new in zip(trials, written, strict=True):
                    if new:
                        counted(problem, trial.config, trial)
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
            queue.done(problem)
            report.problems.append(result)
            progress.problem_done(result)
            if on_problem is not None:
                on_problem(result)
    return report


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
