"""The sweep's worker loop: threads that drain the problem queue on the workers, then profile the families.

Each worker is a `Lane` shared by the problems in flight on it (`IN_FLIGHT` while configs compile ahead);
`WorkerLoop` runs the threads and turns a thread's failure into the sweep's outcome.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import TrialResult
from autotune.db.liveness import heartbeat_s
from autotune.engine.bench import ServedTiming
from autotune.engine.runner import ProblemReport, Runner, SweepStopped, TrialCallback
from autotune.engine.strategies import Budget
from autotune.engine.workers import Worker, WorkerAborted, WorkerError
from autotune.sweeps.plans_ahead import PlansAhead
from autotune.sweeps.profile import PROFILE_RACE, FamilyProfile, Plan, profile_family
from autotune.sweeps.shared import WAIT_POLL_S, profile_item
from autotune.sweeps.spec import SweepEntry

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.db import Store
    from autotune.engine.checker import StaticChecker
    from autotune.sweeps.run import SweepReport, _ProblemQueue, _Progress

__all__ = ["IN_FLIGHT", "Lane", "WorkerLoop", "compile_ahead"]

log = logging.getLogger(__name__)


#: Problems in flight per worker while configs compile ahead: the one taken first measures whenever one of
#: its configs is ready; the one behind it measures while the first waits on a slow compile.
IN_FLIGHT = 2


class Lane:
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
class InLane:
    """The Runner's measurer for one problem on a lane."""

    lane: Lane
    ticket: int
    op: TunableOp

    def run(self, problem: Problem, config: Config) -> TrialResult:
        return self.lane.run(self.ticket, self.op, problem, config)


class LaneChecker:
    """The sweep's checker as one problem's Runner sees it: a wait on a compile tells the lane."""

    def __init__(self, checker: StaticChecker, lane: Lane, ticket: int) -> None:
        self.checker, self.lane, self.ticket = checker, lane, ticket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.checker, name)

    def findings(self, op: TunableOp, problem: Problem, config: Config) -> Any:
        if self.checker.ready(problem, config):
            return self.checker.findings(op, problem, config)
        with self.lane.compiling(self.ticket):
            return self.checker.findings(op, problem, config)


@dataclass
class Tuning:
    """A problem taken from the queue, and the Runner tuning it while it runs (what a sweep stopped
    mid-way reports of it)."""

    entry: SweepEntry
    problem: Problem
    budget: Budget
    runner: Runner | None = None


@dataclass
class Profiling:
    """A shape family to profile, and its plan once made (`PlansAhead`), kept when it is handed back."""

    family: FamilyProfile
    plan: tuple[Plan, int] | None = None


class WorkerLoop:
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
        self.lanes = [Lane(w, tickets) for w in workers]
        self.families = [Profiling(job) for job in jobs]  # the families left to profile
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

    def _run_phase(self, body: Callable[[Lane], None], per_worker: int) -> None:
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

    def _drain(self, lane: Lane) -> None:
        """Tunes the problems of the queue on `lane`'s worker until none is left or the sweep stops."""
        item: Tuning | None = None
        try:
            while not self.stop.is_set() and (item := self._take()) is not None:
                self._tune(lane, item)
                item = None
        except BaseException as exc:
            self._failed(lane, exc, item)

    def _profile(self, lane: Lane) -> None:
        """Profiles the families left on `lane`'s worker until none is left or the sweep stops."""
        job: Profiling | None = None
        try:
            while not self.stop.is_set() and (job := self._next_job()) is not None:
                self._profile_one(lane, job)
                job = None
        except BaseException as exc:
            self._failed(lane, exc, job)

    def _failed(self, lane: Lane, exc: BaseException, item: Tuning | Profiling | None) -> None:
        """What the failure `exc` of `lane`'s thread, with `item` in flight, makes of the sweep: the one
        place a worker's failure becomes the stored outcome (the class docstring says how)."""
        if isinstance(exc, WorkerError):  # this worker cannot go on; the others take its item
            log.error("%s stopped: %s", lane.worker.name, exc)
            with self.lock:
                if isinstance(item, Tuning):
                    self.queue.put_back(item.entry, item.problem)
                elif item is not None:
                    self.families.insert(0, item)
                self.errors.append(exc)
            return
        if not isinstance(exc, (SweepStopped, WorkerAborted)):  # a bug or a database error: stop the sweep
            with self.lock:
                self.errors.append(exc)
            self.stop.set()
        if isinstance(item, Tuning) and item.runner is not None and item.runner.current is not None:
            with self.lock:
                self.report.problems.append(item.runner.current)  # stopped mid-way: its stored trials count

    # -- tuning ---------------------------------------------------------------------------------------

    def _take(self) -> Tuning | None:
        taken = self.queue.take(self.stop.is_set)
        return None if taken is None else Tuning(*taken)

    def _tune(self, lane: Lane, item: Tuning) -> None:
        entry, problem, worker, checker = item.entry, item.problem, lane.worker, self.checker
        op = entry.op_for(problem)
        if checker is not None:  # this problem's first compiles, then the next problem's
            compile_ahead(checker, entry, problem)  # (queued first, so they are compiled first)
            if (following := self.queue.peek()) is not None:
                compile_ahead(checker, *following)
        ticket = lane.join()
        try:
            item.runner = Runner(
                self.store,
                worker.target,
                InLane(lane, ticket, op),
                served=InLane(lane, ticket, ServedTiming(op)),
                sweep_id=self.report.sweep_id,
                on_trial=self._on_trial,
                checker=None if checker is None else LaneChecker(checker, lane, ticket),  # type: ignore[arg-type]
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

    def _next_job(self) -> Profiling | None:
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

    def _profile_one(self, lane: Lane, job: Profiling) -> None:
        family = job.family
        if job.plan is None and self.ahead is not None:
            job.plan = self.ahead.wait(family, self.stop.is_set)
        ticket = lane.join()
        try:
            done = profile_family(
                family,
                store=self.store,
                target=lane.worker.target,
                measurer=InLane(lane, ticket, ServedTiming(family.op, race=PROFILE_RACE)),
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


def compile_ahead(checker: StaticChecker, entry: SweepEntry, problem: Problem) -> None:
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
