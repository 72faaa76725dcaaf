"""Runner: tunes one problem at a time: strategy asks, benchmarker measures, store keeps every trial."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import VENDOR_BACKEND, Source, TrialResult, TrialStatus
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.engine.bench import DeviceFault, timing_of
from autotune.engine.strategies import Budget, Strategy, make_strategy

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.engine.bench import Benchmarker
    from autotune.engine.checker import StaticChecker

__all__ = ["ProblemReport", "Runner", "SweepStopped", "TrialStore"]

log = logging.getLogger(__name__)


class SweepStopped(Exception):
    """Raised inside `Runner.tune` when its `should_stop` says so (between trials)."""


class Measurer(Protocol):
    """What the runner times configs with: a Benchmarker, or a worker bound to the op."""

    def run(self, problem: Problem, config: Config) -> TrialResult: ...


class TrialStore(Protocol):
    """What the runner needs of a store (autotune.db.Store implements it)."""

    def finished(
        self, *, target: Target, problem: Problem, kernels: dict[str, tuple[str, str]], source: Source = ...
    ) -> dict[str, TrialResult]: ...

    def record(
        self,
        *,
        target: Target,
        kernel: str,
        source_hash: str,
        problem: Problem,
        result: TrialResult,
        sweep_id: int | None = None,
        source: Source = ...,
    ) -> bool: ...

    def record_final(
        self,
        *,
        target: Target,
        problem: Problem,
        results: Sequence[tuple[str, str, TrialResult]],
        sweep_id: int | None = None,
    ) -> None: ...


@dataclass
class ProblemReport:
    """What tuning one problem did."""

    problem: Problem
    space_size: int = 0
    raw_size: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    #: Configs pruned by the static checks (compiled, never run), by check.
    static_pruned: dict[str, int] = field(default_factory=dict)
    ran: int = 0
    cached: int = 0
    failed: int = 0
    #: Known configs put first in the search (imported ones, winners at neighbouring M).
    seeded: int = 0
    best: TrialResult | None = None
    vendor: TrialResult | None = None
    #: The final round's results (medians of its rounds), fastest first; empty where it did not run.
    final: list[TrialResult] = field(default_factory=list)
    compile_s: float = 0.0
    measure_s: float = 0.0
    wall_s: float = 0.0

    def picks(self) -> tuple[TrialResult | None, TrialResult | None]:
        """(best result, vendor library's best): the final round's where one ran, else the search's."""
        if self.final:
            return self.final[0], next((r for r in self.final if r.config.backend == VENDOR_BACKEND), None)
        return self.best, self.vendor

    @property
    def speedup(self) -> float | None:
        """The vendor library's time over the best one: of the final round where it ran."""
        best, vendor = self.picks()
        if best is None or vendor is None or vendor.time_us is None or best.time_us is None:
            return None
        return vendor.time_us / best.time_us


#: Called after every trial: (problem, config, result).
TrialCallback = Callable[[Problem, Config, TrialResult], None]


class Runner:
    """Tunes problems in this process on one device.

    Each trial is written to the store as soon as it finishes; trials already in the store for the same
    GPU fingerprint, kernel source and config are told to the strategy from the store instead of run, so
    a sweep that stopped resumes where it was and never re-runs a finished or failed trial. Cached trials
    count toward the trial budget. With a `checker`, configs are compiled ahead on the CPU cores while
    the GPU measures, and a config the static checks flag is stored as `pruned` with the reason instead of
    being run. With `should_stop`, tune() raises SweepStopped before the next trial once it returns
    True. With `warm_start` (the default) and a store that knows configs (`Store.known_configs`), the
    search tries first, after the vendor baseline and the heuristic default, the imported config of the
    nearest M and the winners on this GPU at the nearest other M of the same shape. With `final_rounds`
    > 0, a search that ends (not one stopped) times its `finalists` fastest configs of other backends
    and the vendor library's fastest again in that many interleaved rounds, the way they run when served
    (`served_measurer`: CUDA-graph replays back to back), and stores each median as a `Source.FINAL`
    trial: the best of many single timings is biased towards a lucky run, and the head-to-head medians
    decide the emitted winner (`emit_table`). A resumed sweep reuses a stored final
    round. The final round is not counted in the budget. Not thread-safe: one Runner per thread (sweeps
    on several GPUs run one per worker).
    """

    def __init__(
        self,
        store: TrialStore,
        target: Target,
        benchmarker: Benchmarker | Measurer,
        *,
        sweep_id: int | None = None,
        on_trial: TrialCallback | None = None,
        checker: StaticChecker | None = None,
        should_stop: Callable[[], bool] | None = None,
        warm_start: bool = True,
        final_rounds: int = 0,
        finalists: int = 2,
        served: Measurer | None = None,
    ) -> None:
        if final_rounds < 0 or finalists < 1:
            raise ValueError(f"final_rounds must be >= 0 and finalists >= 1, got {final_rounds}, {finalists}")
        self.final_rounds, self.finalists = final_rounds, finalists
        self.store = store
        self.warm_start = warm_start
        self.checker = checker
        self.target = target
        self.bench = benchmarker
        self.served = served
        self._served_benches: dict[int, Measurer] = {}
        self.sweep_id = sweep_id
        self.on_trial = on_trial
        self.should_stop = should_stop
        #: The report of the problem being tuned (or last tuned), updated as each trial finishes, so a
        #: caller interrupted inside tune() still sees what was run and stored.
        self.current: ProblemReport | None = None

    def tune(
        self,
        op: TunableOp,
        problem: Problem,
        *,
        strategy: str = "optuna",
        budget: Budget | None = None,
        seed: int = 0,
        backends: tuple[str, ...] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> ProblemReport:
        """Tunes `problem`; `clock` is what the budget's seconds are counted on (default: wall time)."""
        t0 = time.perf_counter()
        space = op.space(problem, self.target, backends)
        space, seeded = with_seeds(space, self._known_configs(problem))
        report = ProblemReport(
            problem,
            space_size=len(space),
            raw_size=space.raw_size(),
            pruned=space.prune_summary(),
            seeded=seeded,
        )
        self.current = report
        from autotune.core.op import kernel_versions

        kernels = kernel_versions(op, space.backends)
        done = self.store.finished(target=self.target, problem=problem, kernels=kernels)
        search = make_strategy(strategy, space, budget, seed=seed, clock=clock)
        try:
            while True:
                if self.should_stop is not None and self.should_stop():
                    raise SweepStopped
                self._look_ahead(op, problem, search, done)
                config = search.ask()
                if config is None:
                    break
                result = done.get(config.digest())
                if result is not None:
                    report.cached += 1
                elif (pruned := self._static_check(op, problem, config)) is not None:
                    result = pruned
                    self._record(problem, kernels[config.backend], result)
                    first = result.extra["static"][0]  # a config counts once: by the first check it fails
                    report.static_pruned[first] = report.static_pruned.get(first, 0) + 1
                else:
                    kernel = kernels[config.backend]
                    try:
                        result = self.bench.run(problem, config)
                    except DeviceFault as fault:  # store it, so a resumed sweep never runs it again
                        self._record(
                            problem, kernel, TrialResult(config, TrialStatus.CRASHED, error=str(fault))
                        )
                        raise
                    except Exception as exc:  # a worker given up on after this trial: store the trial
                        last = getattr(exc, "result", None)
                        if isinstance(last, TrialResult) and last.config == config:
                            self._record(problem, kernel, last)
                            report.ran += 1
                        raise
                    crashpoints.point("trial.measured", f"{problem.key()} {config.digest()}")
                    self._record(problem, kernel, result)
                    report.ran += 1
                    report.compile_s += result.compile_s
                    report.measure_s += result.measure_s
                search.tell(config, result)
                report.failed += int(not result.ok and result.status is not TrialStatus.PRUNED)
                if result.ok and config.backend == VENDOR_BACKEND:
                    report.vendor = result
                if self.on_trial is not None:
                    self.on_trial(problem, config, result)
            if self.final_rounds:
                report.final = self._final_round(op, problem, kernels)
        finally:  # interrupted too: self.current then tells what finished
            best = search.best
            report.best = best[1] if best else None
            report.wall_s = time.perf_counter() - t0
        return report

    def final_round(
        self, op: TunableOp, problem: Problem, backends: Sequence[str] | None = None
    ) -> list[TrialResult]:
        """The final round of `problem` over the trials stored for this GPU and the current kernels of
        `backends` (default: all of the op's on this target), whichever searches ran them: the finalists
        (the `finalists` fastest configs of other backends than the vendor library's, and its fastest
        where it ran) timed `final_rounds` times each, interleaved, each stored with its median
        (`Source.FINAL`, replacing the problem's earlier final round); a final round already stored for
        the same finalists is returned instead. Fastest first; [] for fewer than two finalists. `tune`
        runs one over its own backends; call this after searches that split the backends between them."""
        from autotune.core.op import kernel_versions

        if self.final_rounds == 0:
            return []
        return self._final_round(
            op, problem, kernel_versions(op, tuple(backends or op.backends(self.target)))
        )

    def served_measurer(self, op: TunableOp) -> Measurer:
        """What the final round times `op`'s configs with: as they run when served (`ServedTiming`): the
        `served` measurer given, else a Benchmarker beside the runner's own, else the runner's measurer."""
        if self.served is not None:
            return self.served
        from autotune.engine.bench import Benchmarker, ServedTiming

        bench = self.bench
        if not isinstance(bench, Benchmarker):
            return bench
        found = self._served_benches.get(id(op))
        if found is None:
            found = self._served_benches[id(op)] = Benchmarker(
                ServedTiming(op), bench.target, device=bench.device, settings=bench.settings, seed=bench.seed
            )
        return found

    def _final_round(
        self, op: TunableOp, problem: Problem, kernels: dict[str, tuple[str, str]]
    ) -> list[TrialResult]:
        """`final_round` over the stored trials of `kernels` (earlier sweeps' too, not only this search's)."""
        stored = self.store.finished(target=self.target, problem=problem, kernels=kernels)
        ranked = sorted((r for r in stored.values() if r.ok), key=lambda r: r.score())
        finalists = [r.config for r in ranked if r.config.backend != VENDOR_BACKEND][: self.finalists]
        vendor = next((r.config for r in ranked if r.config.backend == VENDOR_BACKEND), None)
        if vendor is not None:
            finalists.append(vendor)
        if len(finalists) < 2:
            return []
        stored = self.store.finished(
            target=self.target, problem=problem, kernels=kernels, source=Source.FINAL
        )
        if all(c.digest() in stored for c in finalists):
            return sorted((stored[c.digest()] for c in finalists), key=lambda r: r.score())
        runs: dict[Config, list[TrialResult]] = {c: [] for c in finalists}
        measure = self.served_measurer(op)
        for _ in range(self.final_rounds):
            for config in finalists:
                if self.should_stop is not None and self.should_stop():
                    raise SweepStopped  # nothing of an unfinished round is stored
                runs[config].append(measure.run(problem, config))
        final = [_median_result(config, results, self.final_rounds) for config, results in runs.items()]
        self.store.record_final(
            target=self.target,
            problem=problem,
            results=[(*kernels[r.config.backend], r) for r in final],
            sweep_id=self.sweep_id,
        )
        return sorted(final, key=lambda r: r.score())

    def _known_configs(self, problem: Problem) -> list[Config]:
        known = getattr(self.store, "known_configs", None)
        if not self.warm_start or known is None:
            return []
        try:
            return list(known(problem, fingerprint=self.target.fingerprint()))
        except Exception as exc:  # a hint only: tuning goes on without it
            log.info("no known configs for %s: %s", problem, exc)
            return []

    def _look_ahead(
        self, op: TunableOp, problem: Problem, search: Strategy, done: dict[str, TrialResult]
    ) -> None:
        """Queues compiles of the configs the strategy will ask next; when the next one still compiles but
        a later one is ready (compiled, or stored), that one is measured first: the GPU does not wait on a
        slow compile. Optuna TPE names its random start-up trials and a few sampled ahead (see
        `OptunaTPE`); it lets only those be promoted, never past the anchors."""
        if self.checker is None:
            return
        ahead = search.upcoming(self.checker.lookahead)
        self.checker.prefetch(op, problem, [c for c in ahead if c.digest() not in done])
        if len(ahead) < 2 or self._is_ready(problem, ahead[0], done):
            return
        ready = next((c for c in ahead[1:] if self._is_ready(problem, c, done)), None)
        if ready is not None:
            search.promote(ready)

    def _is_ready(self, problem: Problem, config: Config, done: dict[str, TrialResult]) -> bool:
        assert self.checker is not None
        return config.digest() in done or self.checker.ready(problem, config)

    def _static_check(self, op: TunableOp, problem: Problem, config: Config) -> TrialResult | None:
        """A `pruned` result when the static checks flag `config` (waiting for its compile), else None."""
        if self.checker is None:
            return None
        from autotune.engine.checker import finding_text

        findings = self.checker.findings(op, problem, config)
        if not findings:
            return None
        checks = list(dict.fromkeys(f.check for f in findings))  # in the checker's order
        return TrialResult(config, TrialStatus.PRUNED, error=finding_text(findings), extra={"static": checks})

    def _record(self, problem: Problem, kernel: tuple[str, str], result: TrialResult) -> None:
        name, source_hash = kernel
        self.store.record(target=self.target, kernel=name, source_hash=source_hash, problem=problem,
                          result=result, sweep_id=self.sweep_id)  # fmt: skip


def _median_result(config: Config, results: list[TrialResult], rounds: int) -> TrialResult:
    """One final-round result of `config`: the statistics of its rounds' medians, or the first failure of
    a round that failed (a config that failed once is out of the final)."""
    failed = next((r for r in results if not r.ok or r.timing is None), None)
    if failed is not None:
        return replace(failed, extra={**failed.extra, "final_rounds": rounds})
    timings = [r.timing for r in results if r.timing is not None]
    times = sorted(t.median_us for t in timings)
    return TrialResult(
        config,
        TrialStatus.OK,
        timing=timing_of(times, timings[0].method),
        extra={"final_rounds": rounds, "round_us": times},
    )


def with_seeds(space: SearchSpace, seeds: Sequence[Config]) -> tuple[SearchSpace, int]:
    """`space` with the `seeds` that belong to it added to their backend's `first` configs (after those
    already there), and how many were added."""
    added = 0
    subspaces = []
    for sub in space.subspaces:
        extra: tuple[Config, ...] = ()
        for c in seeds:
            if c.backend == sub.backend and c not in sub.first and c not in extra and sub.check(c) is None:
                extra += (c,)
        added += len(extra)
        subspaces.append(replace(sub, first=(*sub.first, *extra)) if extra else sub)
    return (SearchSpace(subspaces), added) if added else (space, 0)
