"""M profiles: after a shape family's M buckets are tuned, its candidates timed at a ladder of M.

A shape family is every problem that differs only in M (op, N, K, dtypes, layout, own parameters). Once its
buckets are tuned, `profile_family` times, at each M of a ladder (`autotune.core.ladder`), the vendor library,
the op's heuristic default at that M (where the sweep's entry searches its backend), the config an imported
file (vLLM's, SGLang's, aiter's) serves at that M where the shape has one (so a table never loses to the file
it replaces), and the finalists of the tuned buckets on either side of that M (the configs the final round
timed, else the searches' fastest), the way they run when served (`ServedTiming`). Only backends the op's
run-time entry point serves are profiled (`Backend.served`). Each time is stored as a `Source.PROFILE` trial
of the problem at that M, so a sweep that stops resumes its profile, and `autotune emit` turns the profile
into the M ranges a table serves (`autotune.dispatch.ranges`). Nothing is searched; a config outside the op's
space at an M is not timed there, except the imported file's pick.

The profile is sparse (`COARSE`, `CLOSE`): the tuned M, the first and the last first; then every
fourth ladder M, and then, halving the step, every M between two timed ones, each only where a candidate
beat the vendor library at the timed M beside it below or above (elsewhere the vendor library is
served). Its timings race (`PROFILE_RACE`): a config clearly behind stops after its first replays.
Clearly losing candidates are pruned as the ladder is walked upwards: a config other than the vendor's
whose last timing was more than `HOPELESS` times that M's fastest (or failed) is not timed at the next
`REPROBE` M the profile times, then timed again (and skipped again while it stays hopeless). The vendor
library is timed at every M timed, every candidate at a tuned M, and a candidate never timed before (a
new bucket's finalist) at once; a trial read back from the store counts as a timing, so a resumed
profile skips the same ones. Where a candidate ran faster than the vendor library's first timing at an
M, the vendor library is timed `VENDOR_SAMPLES` times and its fastest is stored. A skipped config has no
time at that M, which `autotune.dispatch.ranges` reads as not measured there.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import is_served
from autotune.core.result import VENDOR_BACKEND, Source, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.dispatch.ranges import imported_pick
from autotune.engine.runner import Measurer, SweepStopped, TrialStore

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.db import NewTrial

__all__ = [
    "PROFILE_RACE",
    "FamilyProfile",
    "Plan",
    "ProfileReport",
    "ProfileStore",
    "bucket_candidates",
    "family_of",
    "point_candidates",
    "profile_family",
]

log = logging.getLogger(__name__)


def family_of(problem: Problem) -> Problem:
    """The family's identity: the problem at M = 1 (every problem that differs only in M has the same)."""
    return problem.with_m(1)


@dataclass(frozen=True)
class FamilyProfile:
    """A family to profile: its tuned problems (one per tuned M), the ladder, its op, and the backends its
    sweep entry searches (None: every backend of the op)."""

    op: TunableOp
    buckets: tuple[Problem, ...]
    ladder: tuple[int, ...]
    backends: tuple[str, ...] | None = None

    @property
    def family(self) -> Problem:
        return family_of(self.buckets[0])


@dataclass
class ProfileReport:
    """What profiling one family did."""

    family: Problem
    points: int = 0
    ran: int = 0
    cached: int = 0
    failed: int = 0
    skipped: int = 0  # (M, config) pairs outside the op's space at that M, or flagged by static checks
    pruned: int = 0  # (M, config) pairs not timed for losing by more than HOPELESS (`_due`)
    left_out: int = 0  # ladder M not timed at all: the vendor library clearly ahead on both sides
    retimed: int = 0  # further timings of a beaten vendor library (`VENDOR_SAMPLES`), not stored apart
    reused: int = 0  # a tuned M's final-round medians stored as its profile times, not timed again
    wall_s: float = 0.0


#: A bucket's finalist other than its fastest is profiled only within this factor of the fastest's time:
#: a config that loses by more at its own M seldom wins at the M next to it, and each costs a timing at
#: every M of the ladder near its bucket.
CONTENDER = 1.05

#: A candidate other than the vendor's whose last time was more than this factor of the fastest time at
#: that M (or that failed there) is not timed at the next `REPROBE` M the profile times: a config that
#: loses by that much seldom wins a few M further on, and each of its timings costs as much as a winner's.
HOPELESS = 1.25

#: How many of the M a profile times (in its order: the coarse ones upwards first) a hopeless candidate is
#: skipped before it is timed again. Counted in timed M, not ladder M, so that a sparse profile prunes as
#: much as a dense one.
REPROBE = 2


def _due(last: tuple[float, int] | None, step: int) -> bool:
    """Whether a candidate other than the vendor's is timed at the `step`-th M the profile times, given
    its last measured ratio to the fastest time there and that M's step (None: never measured): yes where
    it was within `HOPELESS`, or `REPROBE` timed M have passed since."""
    if last is None:
        return True
    ratio, at = last
    return ratio <= HOPELESS or step - at > REPROBE


#: A sparse profile times every tuned M, the first and the last first. Then every `COARSE`-th ladder M,
#: and then, halving the step each pass (every second, then every M), it times an M only where at the
#: nearest timed M below or above it a candidate other than the vendor's ran within `CLOSE` of the vendor
#: library's time (or the vendor library has no time there). Two tuned buckets at which the vendor
#: library won have nothing timed between them. Elsewhere the vendor library is served
#: (`autotune.dispatch.ranges` serves a config between two timed M only where it won at both). `CLOSE` is
#: 1: a table serves a config only where it beats the vendor by a margin (`autotune emit`), and one that
#: lost to the vendor at both neighbours seldom wins by that margin between them.
COARSE = 4
CLOSE = 1.0

#: The racing factor of a profile's timings (`ServedTiming(op, race=...)`): a config whose first replays
#: are already this factor slower than the fastest time at that M (the vendor library's, mostly: it is
#: timed first) stops there, stored with those runs. Its decision is made: it cannot be served at that M
#: (`autotune emit` asks more of a config than the vendor's time), and its rough time still says how far
#: behind it is (`HOPELESS`). A final round does not race this tightly: it compares close finalists.
PROFILE_RACE = 1.05


def _anchors(count: int, tuned: Sequence[int], sparse: bool) -> list[int]:
    """The ladder indices a profile times before any other: all of them, or (sparse) the first, the last
    and the tuned M's. A sparse profile then considers every `COARSE`-th index, timed only where an M
    timed beside it is contested (`_contested`)."""
    if not sparse or count < 3:
        return list(range(count))
    return sorted({0, count - 1, *tuned})


def _refinements(count: int) -> list[int]:
    """The ladder indices a sparse profile considers after the coarse ones, in order: those on every
    `COARSE`/2-th M, then on every `COARSE`/4-th, ... down to every M (each index once; the coarse ones are
    skipped by the caller)."""
    order: list[int] = []
    seen: set[int] = set()
    step = COARSE
    while step > 1:
        step //= 2
        for index in range(0, count, step):
            if index not in seen:
                seen.add(index)
                order.append(index)
    return order


def _contested(seen: dict[Config, TrialResult]) -> bool:
    """Whether, at one M, a candidate other than the vendor's ran within CLOSE of the vendor library's
    time, or the vendor library has no time there."""
    vendor = [r for c, r in seen.items() if c.backend == VENDOR_BACKEND and r.ok]
    if not vendor:
        return True
    ours = [r.score() for c, r in seen.items() if c.backend != VENDOR_BACKEND and r.ok]
    return bool(ours) and min(ours) <= vendor[0].score() * CLOSE


#: Times the vendor library is timed at an M where another candidate ran faster than its first timing:
#: its fastest is stored. The same vendor call runs at one of two speeds per CUDA-graph capture on some
#: shapes (about 10% apart), so one timing can make a config look faster than the vendor where it is not.
VENDOR_SAMPLES = 3


def _beaten(seen: dict[Config, TrialResult], vendor: TrialResult) -> bool:
    """Whether a candidate other than the vendor's ran faster than `vendor` at this M."""
    return vendor.ok and any(
        c.backend != VENDOR_BACKEND and r.ok and r.score() < vendor.score() for c, r in seen.items()
    )


def _vendor_best(measurer: Measurer, problem: Problem, config: Config, first: TrialResult) -> TrialResult:
    """The fastest of `first` and `VENDOR_SAMPLES` - 1 more timings of the vendor's `config`."""
    best = first
    for _ in range(VENDOR_SAMPLES - 1):
        r = measurer.run(problem, config)
        if r.ok and r.score() < best.score():
            best = r
    return best


def _due_at(last: dict[Config, tuple[float, int]], step: int, config: Config) -> bool:
    """`_due` of `config` at the `step`-th timed M, by its last timing in `last`."""
    return _due(last.get(config), step)


def _between(
    last: dict[Config, tuple[float, int]],
    lo: dict[Config, TrialResult],
    hi: dict[Config, TrialResult],
    config: Config,
) -> bool:
    """Whether `config` is timed at an M between two timed ones (what is known at them: `lo`, `hi`): where
    it ran within HOPELESS at one of them, or was never timed."""
    return _near(config, lo, hi) or config not in last


def _near(config: Config, *sides: dict[Config, TrialResult]) -> bool:
    """Whether `config` ran within HOPELESS of the fastest at one of these M."""
    for seen in sides:
        r = seen.get(config)
        fastest = min((x.score() for x in seen.values()), default=math.inf)
        if r is not None and _ratio(r, fastest) <= HOPELESS:
            return True
    return False


def _ratio(result: TrialResult, fastest: float) -> float:
    """`result`'s time over the fastest time at its M; +inf where it failed (a failure is hopeless)."""
    if not result.ok:
        return math.inf
    return result.score() / fastest if fastest > 0 else 1.0


def bucket_candidates(
    store: TrialStore,
    target: Target,
    op: TunableOp,
    buckets: Sequence[Problem],
    kernels: dict[str, tuple[str, str]],
    finalists: int = 2,
) -> tuple[dict[int, list[Config]], Config | None]:
    """Per tuned M, the configs of other backends than the vendor's to profile: of its final round's
    where one is stored, else of the measured ones, the `finalists` fastest, those within `CONTENDER` of
    the fastest; and the vendor library's fastest config of any bucket (None where it never ran). Only
    backends the run-time entry point serves (`Backend.served`) are profiled."""
    per_m: dict[int, list[Config]] = {}
    vendor: tuple[float, Config] | None = None
    for problem in buckets:
        final = [
            r
            for r in store.finished(
                target=target, problem=problem, kernels=kernels, source=Source.FINAL
            ).values()
            if r.ok
        ]
        measured = [
            r for r in store.finished(target=target, problem=problem, kernels=kernels).values() if r.ok
        ]
        pool = [r for r in final or measured if is_served(op.name, r.config.backend)]
        ranked = sorted(
            (r for r in pool if r.config.backend != VENDOR_BACKEND),
            key=lambda r: (r.score(), r.config.canonical()),
        )
        per_m[problem.M] = [
            r.config for r in ranked[:finalists] if r.score() <= ranked[0].score() * CONTENDER
        ]
        for r in measured:
            if (
                r.config.backend == VENDOR_BACKEND
                and is_served(op.name, r.config.backend)
                and (vendor is None or r.score() < vendor[0])
            ):
                vendor = (r.score(), r.config)
    return per_m, None if vendor is None else vendor[1]


def point_candidates(
    M: int,
    per_m: dict[int, list[Config]],
    vendor: Config | None,
    default: Config | None,
    pick: Config | None = None,
) -> list[Config]:
    """The configs to time at `M`: the vendor's, the default, the imported file's `pick` at `M` (where the
    shape has imported configs: `imported_pick`), then the finalists of the nearest tuned M at or below
    `M` and at or above it (the nearest one only, outside the tuned range); no config twice."""
    ms = sorted(per_m)
    below = [m for m in ms if m <= M]
    above = [m for m in ms if m >= M]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    out: list[Config] = []
    for config in [vendor, default, pick, *(c for m in near for c in per_m[m])]:
        if config is not None and config not in out:
            out.append(config)
    return out


class ProfileStore(TrialStore, Protocol):
    """What a profile needs of a store (autotune.db.Store implements it): the runner's, and `record_many`."""

    def record_many(self, trials: Sequence[NewTrial], *, sweep_id: int | None = None) -> list[bool]: ...


#: Per ladder M, the problem there and the configs to time there, in that order (`family_plan`).
Plan = list[tuple[Problem, list[Config]]]


def baseline_picks(
    store: TrialStore, family: Problem, target: Target, ladder: Sequence[int]
) -> Callable[[int], Config | None]:
    """Per M, the config vLLM runs for `family`'s shape on `target` (`Store.baseline_configs`: an imported
    file of its device, else vLLM's fallback rule for a MoE) as `imported_pick` picks it, None where
    neither applies: the baseline a profile times at every M it times, never left out as hopeless
    (`autotune emit` serves another config only where it beats that pick, as it does the vendor's)."""
    find = getattr(store, "baseline_configs", None)
    imported = find(family, target, ladder) if find is not None else {}
    return functools.partial(imported_pick, imported) if imported else lambda M: None


def family_plan(
    job: FamilyProfile, *, store: TrialStore, target: Target, finalists: int = 2
) -> tuple[Plan, int]:
    """`job`'s plan, and how many candidates were left out for being outside the op's space at their M.
    Nothing is compiled: the heuristic default at an M is its rule's pick (`default_candidates`' first),
    not `default_config`, which compiles its candidates to check them, one after another in this process
    (`profile_family`'s compiler checks the pick alongside the other candidates, on its processes); and a
    candidate's place in the space is asked of its backend (`Backend.check`), not of the op's space,
    whose first config is that checked default. A candidate is left out only where it cannot run at an
    M: a search-only constraint (`Constraint.search_only`, such as `split_k_needless`) narrows what the
    search tries, not what the profile times."""
    from autotune.core.op import kernel_versions

    op = job.op
    kernels = kernel_versions(op, op.backends(target))
    per_m, vendor = bucket_candidates(store, target, op, job.buckets, kernels, finalists)
    picks = baseline_picks(store, job.buckets[0], target, job.ladder)
    plan: Plan = []
    skipped = 0
    for M in job.ladder:
        problem = job.buckets[0].with_m(M)
        try:  # the rule's pick, unchecked: the profile's compiler skips it where the static checks fail
            default: Config | None = next(iter(op.default_candidates(problem, target)), None)
        except ValueError:
            default = None
        if default is not None and job.backends is not None and default.backend not in job.backends:
            default = None  # a backend the spec left out is never served, so never timed
        todo = []
        pick = picks(M)
        for config in point_candidates(M, per_m, vendor, default, pick):
            # the imported file's pick is timed where it runs, even outside the search's constraints; the
            # others where they run (a bucket's finalist past a search-only rule at this M too)
            backend = op.backend(config.backend) if config.backend in kernels else None
            if backend is not None and (
                config == pick or backend.check(problem, target, config, search_only=False) is None
            ):
                todo.append(config)
            else:
                skipped += 1
        plan.append((problem, todo))
    return plan, skipped


def _variant(M: int) -> tuple[bool, bool]:
    """What a Triton kernel may specialize an integer argument on: equal to 1, divisible by 16. Two M
    with the same variant run the same compiled kernel. The dense GEMM's `triton` kernels specialize on
    neither (their M is `do_not_specialize`): a compile queued for another variant of those finds
    Triton's cache."""
    return M == 1, M % 16 == 0


def compile_once(
    plan: Sequence[tuple[Problem, list[Config]]],
) -> dict[tuple[Config, tuple[bool, bool]], Problem]:
    """Per (config, specialization variant of M), the first problem of `plan` that needs it: what to
    compile ahead (compiling it compiles the kernel every other M of that variant runs)."""
    out: dict[tuple[Config, tuple[bool, bool]], Problem] = {}
    for problem, configs in plan:
        for config in configs:
            out.setdefault((config, _variant(problem.M)), problem)
    return out


class Compiler(Protocol):
    """What a profile compiles ahead with: the sweep's StaticChecker."""

    def prefetch(self, op: TunableOp, problem: Problem, configs: Sequence[Config]) -> None: ...

    def findings(self, op: TunableOp, problem: Problem, config: Config) -> Sequence[object]: ...


def prefetch_family(op: TunableOp, plan: Plan, compiler: Compiler) -> None:
    """Queues, on `compiler`'s processes, the compiles a profile of `plan` will need (one per config and
    specialization variant of M), in ladder order; returns at once."""
    by_problem: dict[Problem, list[Config]] = {}
    for (config, _v), problem in compile_once(plan).items():
        by_problem.setdefault(problem, []).append(config)
    for problem, configs in by_problem.items():
        compiler.prefetch(op, problem, configs)


def profile_family(
    job: FamilyProfile,
    *,
    store: ProfileStore,
    target: Target,
    measurer: Measurer,
    finalists: int = 2,
    sweep_id: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_point: Callable[[Problem, int, int], None] | None = None,
    compiler: Compiler | None = None,
    plan: tuple[Plan, int] | None = None,
    sparse: bool = True,
) -> ProfileReport:
    """Times `job`'s candidates at every M of its ladder with `measurer` (served timing), storing each as a
    `Source.PROFILE` trial; what is stored already is read back, not run. With a `compiler` (the sweep's
    StaticChecker, after `prefetch_family`), each config is measured once its compile for that M's
    specialization is done, and one the static checks flag is left out. `on_point(problem, ran,
    candidates)` is called after each M. SweepStopped when `should_stop` says so, checked before each
    timing (a stopped profile keeps what it stored). `plan` is `family_plan`'s, where the caller made it
    already (to compile ahead). A hopeless candidate is skipped for `REPROBE` M (the module's rule),
    never the vendor's nor the baseline's pick there (`baseline_picks`), nor any at a tuned M; the report
    counts such skips as `pruned`. At a tuned M, a candidate other than the vendor's that its final round
    timed is stored with that round's median (`reused`) instead of being timed again: the final round
    times as served too, head to head. The vendor library is timed anew there, its fastest of
    `VENDOR_SAMPLES` where beaten, as at every M (its two speeds per capture)."""
    from autotune.core.op import kernel_versions

    t0 = time.perf_counter()
    op = job.op
    report = ProfileReport(job.family)
    kernels = kernel_versions(op, op.backends(target))
    points, report.skipped = plan or family_plan(job, store=store, target=target, finalists=finalists)
    walk = _Walk(
        job, store, target, measurer, kernels, points, report, sweep_id, should_stop, on_point, compiler
    )
    walk.run(sparse)
    report.wall_s = time.perf_counter() - t0
    log.info("profiled %s at %d M: %d timed (%d of them the vendor library again), %d read back, %d failed, "
             "%d pruned as hopeless, %d M left to the vendor library, %.1f s", job.family, report.points,
             report.ran + report.retimed, report.retimed, report.cached, report.failed, report.pruned,
             report.left_out, report.wall_s)  # fmt: skip
    return report


@dataclass
class _Walk:
    """One profile under way (`profile_family`): what it times and stores with, its plan, and what it
    knows so far: per config its last time over the fastest and that timed M's step (`last`), per timed
    ladder index what is known there (`known`), the ladder indices left to the vendor library (`left`).
    Not thread-safe: one walk, one thread."""

    job: FamilyProfile
    store: ProfileStore
    target: Target
    measurer: Measurer
    kernels: dict[str, tuple[str, str]]
    points: Plan
    report: ProfileReport
    sweep_id: int | None
    should_stop: Callable[[], bool] | None
    on_point: Callable[[Problem, int, int], None] | None
    compiler: Compiler | None
    last: dict[Config, tuple[float, int]] = field(default_factory=dict)
    known: dict[int, dict[Config, TrialResult]] = field(default_factory=dict)
    left: set[int] = field(default_factory=set)
    first: dict[tuple[Config, tuple[bool, bool]], Problem] = field(init=False)  # `compile_once`'s
    tuned: set[int] = field(init=False)  # the tuned M
    picks: Callable[[int], Config | None] = field(init=False)  # `baseline_picks`'

    def __post_init__(self) -> None:
        self.first = compile_once(self.points)
        self.tuned = {p.M for p in self.job.buckets}
        self.picks = baseline_picks(self.store, self.job.buckets[0], self.target, self.job.ladder)

    def run(self, sparse: bool) -> None:
        """Times the anchors (`_anchors`), then every `COARSE`-th ladder M beside a contested timed one, then
        the refinements (`_refinements`) between two timed M where either is contested."""
        points, known = self.points, self.known
        tuned_at = [i for i, (p, _) in enumerate(points) if p.M in self.tuned]
        for index in _anchors(len(points), tuned_at, sparse):
            self.time_point(index, functools.partial(_due_at, self.last, len(known)))
        for index in (i for i in range(0, len(points), COARSE) if i not in known):
            if self.contested_beside(index) is not None:
                self.time_point(index, functools.partial(_due_at, self.last, len(known)))
        for index in (i for i in _refinements(len(points)) if i not in known and i not in self.left):
            if (near := self.contested_beside(index)) is not None:
                self.time_point(index, functools.partial(_between, self.last, known[near[0]], known[near[1]]))

    def time_point(self, index: int, due: Callable[[Config], bool]) -> None:
        """Times ladder index `index`'s configs (`_measure`; a hopeless one only where `due`), the vendor's
        again where beaten, stores what is not stored yet, and notes each config's ratio to the fastest."""
        from autotune.db import NewTrial

        step = len(self.known)  # how many M were timed before this one
        problem, todo = self.points[index]
        seen, results, ran = self._measure(problem, todo, due)
        self._retime_vendor(problem, seen, results)
        fastest = min((r.score() for r in seen.values()), default=math.inf)
        for config, r in seen.items():
            self.last[config] = (_ratio(r, fastest), step)
        self.known[index] = seen
        if results:  # the vendor library's, and the final rounds' medians reused
            trials = [
                NewTrial(self.target, *self.kernels[r.config.backend], problem, r, Source.PROFILE)
                for r in results
            ]
            self.store.record_many(trials, sweep_id=self.sweep_id)
        self.report.ran += ran
        self.report.points += 1
        if self.on_point is not None:
            self.on_point(problem, ran, len(todo))

    def _measure(
        self, problem: Problem, todo: list[Config], due: Callable[[Config], bool]
    ) -> tuple[dict[Config, TrialResult], list[TrialResult], int]:
        """What is known at `problem` of `todo`: read back from the store, its final round's median (not
        the vendor's), or timed now and stored at once (the vendor's later); then the results still to
        store and how many were timed."""
        from autotune.db import NewTrial

        report = self.report
        done = self.store.finished(
            target=self.target, problem=problem, kernels=self.kernels, source=Source.PROFILE
        )
        final = (
            self.store.finished(
                target=self.target, problem=problem, kernels=self.kernels, source=Source.FINAL
            )
            if problem.M in self.tuned
            else {}
        )
        ran = 0
        results: list[TrialResult] = []
        seen: dict[Config, TrialResult] = {}  # what is known at this M: read back or timed now
        for config in todo:
            if (stored := done.get(config.digest())) is not None:
                report.cached += 1
                seen[config] = stored
                continue
            if config.backend != VENDOR_BACKEND and (head := final.get(config.digest())) and head.ok:
                results.append(head)  # its final round's median, timed as served: stored, not retimed
                seen[config] = head
                report.reused += 1
                continue
            if self._leaves_out(problem, config, due):
                continue
            result = self.measurer.run(problem, config)
            seen[config] = result
            ran += 1
            report.failed += int(result.status is not TrialStatus.OK)
            if config.backend == VENDOR_BACKEND:  # stored below, once it is known whether to time it again
                results.append(result)
                continue
            crashpoints.point("profile.measured", f"{problem.key()} {config.digest()}")
            new = NewTrial(self.target, *self.kernels[config.backend], problem, result, Source.PROFILE)
            self.store.record_many([new], sweep_id=self.sweep_id)  # each as it is timed: a crash loses one
        return seen, results, ran

    def _leaves_out(self, problem: Problem, config: Config, due: Callable[[Config], bool]) -> bool:
        """Whether `config` is not timed at `problem`, counted: pruned where not `due` (never the vendor's,
        the baseline's pick, nor at a tuned M), or flagged by the static checks. SweepStopped where
        `should_stop` says so, checked before each timing."""
        baseline = config.backend == VENDOR_BACKEND or config == self.picks(problem.M)
        if not baseline and problem.M not in self.tuned and not due(config):
            self.report.pruned += 1
            return True
        if self.should_stop is not None and self.should_stop():
            raise SweepStopped
        variant = self.first[(config, _variant(problem.M))]
        if self.compiler is not None and self.compiler.findings(self.job.op, variant, config):
            self.report.skipped += 1  # flagged by the static checks (spills, LDS, ...): not served
            return True
        return False

    def _retime_vendor(
        self, problem: Problem, seen: dict[Config, TrialResult], results: list[TrialResult]
    ) -> None:
        """Where another config ran faster than the vendor's timing just taken, the vendor's fastest of
        `VENDOR_SAMPLES` timings in its place, in `seen` and `results`."""
        for config, r in list(seen.items()):
            if config.backend == VENDOR_BACKEND and r in results and _beaten(seen, r):
                best = _vendor_best(self.measurer, problem, config, r)
                results[results.index(r)] = seen[config] = best
                self.report.retimed += VENDOR_SAMPLES - 1

    def contested_beside(self, index: int) -> tuple[int, int] | None:
        """The nearest timed ladder indices below and above `index` where either is contested; else None,
        and the M is left to the vendor library (counted, not timed)."""
        known = self.known
        lo = max(i for i in known if i < index)
        hi = min(i for i in known if i > index)
        if _contested(known[lo]) or _contested(known[hi]):
            return lo, hi
        self.left.add(index)
        self.report.left_out += 1
        self.report.points += 1
        if self.on_point is not None:
            self.on_point(self.points[index][0], 0, 0)
        return None
