"""M profiles: after a shape family's M buckets are tuned, its candidates timed at a ladder of M.

A shape family is every problem that differs only in M (op, N, K, E, topk, dtypes, layout). Once its
buckets are tuned, `profile_family` times, at each M of a ladder (`autotune.core.ladder`), the vendor
library, the op's heuristic default at that M and the finalists of the tuned buckets on either side of
that M (the configs the final round timed, else the searches' fastest), the way they run when served
(`ServedTiming`). Each time is stored as a `Source.PROFILE` trial of the problem at that M, so a sweep
that stops resumes its profile, and `autotune emit` turns the profile into the M ranges a table serves
(`autotune.dispatch.ranges`). Nothing is searched; a config outside the op's space at an M is not timed
there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import VENDOR_BACKEND, Source, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.engine.runner import Measurer, SweepStopped, TrialStore

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.db import NewTrial

__all__ = [
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
    """A family to profile: its tuned problems (one per tuned M), the ladder, and its op."""

    op: TunableOp
    buckets: tuple[Problem, ...]
    ladder: tuple[int, ...]

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
    wall_s: float = 0.0


#: A bucket's finalist other than its fastest is profiled only within this factor of the fastest's time:
#: a config that loses by more at its own M seldom wins at the M next to it, and each costs a timing at
#: every M of the ladder near its bucket.
CONTENDER = 1.05


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
    the fastest; and the vendor library's fastest config of any bucket (None where it never ran)."""
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
        pool = final or measured
        ranked = sorted(
            (r for r in pool if r.config.backend != VENDOR_BACKEND),
            key=lambda r: (r.score(), r.config.canonical()),
        )
        per_m[problem.M] = [
            r.config for r in ranked[:finalists] if r.score() <= ranked[0].score() * CONTENDER
        ]
        for r in measured:
            if r.config.backend == VENDOR_BACKEND and (vendor is None or r.score() < vendor[0]):
                vendor = (r.score(), r.config)
    return per_m, None if vendor is None else vendor[1]


def point_candidates(
    M: int, per_m: dict[int, list[Config]], vendor: Config | None, default: Config | None
) -> list[Config]:
    """The configs to time at `M`: the vendor's, the default, then the finalists of the nearest tuned M at
    or below `M` and at or above it (the nearest one only, outside the tuned range); no config twice."""
    ms = sorted(per_m)
    below = [m for m in ms if m <= M]
    above = [m for m in ms if m >= M]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    out: list[Config] = []
    for config in [vendor, default, *(c for m in near for c in per_m[m])]:
        if config is not None and config not in out:
            out.append(config)
    return out


class ProfileStore(TrialStore, Protocol):
    """What a profile needs of a store (autotune.db.Store implements it): the runner's, and `record_many`."""

    def record_many(self, trials: Sequence[NewTrial], *, sweep_id: int | None = None) -> list[bool]: ...


#: Per ladder M, the problem there and the configs to time there, in that order (`family_plan`).
Plan = list[tuple[Problem, list[Config]]]


def family_plan(
    job: FamilyProfile, *, store: TrialStore, target: Target, finalists: int = 2
) -> tuple[Plan, int]:
    """`job`'s plan, and how many candidates were left out for being outside the op's space at their M."""
    from autotune.core.op import kernel_versions

    op = job.op
    kernels = kernel_versions(op, op.backends(target))
    per_m, vendor = bucket_candidates(store, target, op, job.buckets, kernels, finalists)
    plan: Plan = []
    skipped = 0
    for M in job.ladder:
        problem = job.buckets[0].with_m(M)
        space = op.space(problem, target)
        try:
            default: Config | None = op.default_config(problem, target)
        except ValueError:
            default = None
        todo = []
        for config in point_candidates(M, per_m, vendor, default):
            if config.backend in kernels and space.check(config) is None:
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
) -> ProfileReport:
    """Times `job`'s candidates at every M of its ladder with `measurer` (served timing), storing each as a
    `Source.PROFILE` trial; what is stored already is read back, not run. With a `compiler` (the sweep's
    StaticChecker, after `prefetch_family`), each config is measured once its compile for that M's
    specialization is done, and one the static checks flag is left out. `on_point(problem, ran,
    candidates)` is called after each M. SweepStopped when `should_stop` says so, checked before each
    timing (a stopped profile keeps what it stored). `plan` is `family_plan`'s, where the caller made it
    already (to compile ahead)."""
    from autotune.core.op import kernel_versions
    from autotune.db import NewTrial

    t0 = time.perf_counter()
    op = job.op
    report = ProfileReport(job.family)
    kernels = kernel_versions(op, op.backends(target))
    points, report.skipped = plan or family_plan(job, store=store, target=target, finalists=finalists)
    first = compile_once(points)
    for problem, todo in points:
        done = store.finished(target=target, problem=problem, kernels=kernels, source=Source.PROFILE)
        ran = 0
        results: list[TrialResult] = []
        for config in todo:
            if config.digest() in done:
                report.cached += 1
                continue
            if should_stop is not None and should_stop():
                raise SweepStopped
            if compiler is not None and compiler.findings(op, first[(config, _variant(problem.M))], config):
                report.skipped += 1  # flagged by the static checks (spills, LDS, ...): not served
                continue
            result = measurer.run(problem, config)
            results.append(result)
            ran += 1
            report.failed += int(result.status is not TrialStatus.OK)
        if results:  # one transaction per M
            trials = [
                NewTrial(target, *kernels[r.config.backend], problem, r, Source.PROFILE) for r in results
            ]
            store.record_many(trials, sweep_id=sweep_id)
        report.ran += ran
        report.points += 1
        if on_point is not None:
            on_point(problem, ran, len(todo))
    report.wall_s = time.perf_counter() - t0
    log.info("profiled %s at %d M: %d timed, %d read back, %d failed, %.1f s", job.family, report.points,
             report.ran, report.cached, report.failed, report.wall_s)  # fmt: skip
    return report
