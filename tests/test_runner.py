"""The Runner with a fake benchmarker: resume, device faults, budgets; no kernel runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.bench import DeviceFault
from autotune.db import Store
from autotune.kernels import GEMM
from autotune.runner import Runner
from autotune.strategies import Budget

TARGET = Target.for_arch("sm_90")
PROBLEM = Problem.gemm(16, 4096, 4096)


class FakeBench:
    """Replays a made-up time per config; raises DeviceFault on the `fault_at`-th call."""

    def __init__(self, fault_at: int | None = None) -> None:
        self.calls: list[Config] = []
        self.fault_at = fault_at

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls.append(config)
        if self.fault_at is not None and len(self.calls) == self.fault_at:
            raise DeviceFault("illegal memory access (simulated)")
        t = 10.0 + (hash(config.canonical()) % 1000) / 100
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


def _runner(store: Store, bench: FakeBench) -> Runner:
    return Runner(store, TARGET, bench)  # type: ignore[arg-type]


def test_resume_reads_back_and_runs_only_the_rest(tmp_path: Path) -> None:
    with Store(str(tmp_path / "r.db")) as store:
        first = FakeBench()
        rep1 = _runner(store, first).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=5))
        assert rep1.ran == 5 and rep1.cached == 0
        second = FakeBench()
        rep2 = _runner(store, second).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=8))
        assert rep2.cached == 5 and rep2.ran == 3
        assert not set(first.calls) & set(second.calls)
        assert len(store.trials()) == 8
        assert rep2.vendor is not None and rep2.best is not None


def test_a_device_fault_is_stored_as_crashed_and_never_rerun(tmp_path: Path) -> None:
    with Store(str(tmp_path / "f.db")) as store:
        bench = FakeBench(fault_at=3)
        with pytest.raises(DeviceFault):
            _runner(store, bench).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
        faulty = bench.calls[2]
        crashed = store.trials(status=TrialStatus.CRASHED)
        assert [t.config for t in crashed] == [faulty] and "illegal memory access" in crashed[0].error
        again = FakeBench()
        rep = _runner(store, again).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
        assert faulty not in again.calls and rep.cached == 3 and rep.ran == 3 and rep.failed == 1


class FakeChecker:
    """Compiles nothing; `ready` says which configs' compiles have finished."""

    lookahead = 8

    def __init__(self) -> None:
        self.ready_set: set[Config] = set()

    def prefetch(self, op: object, problem: Problem, configs: object) -> None:
        pass

    def findings(self, op: object, problem: Problem, config: Config) -> list[object]:
        self.ready_set.add(config)  # waited for: compiled now
        return []

    def ready(self, problem: Problem, config: Config) -> bool:
        return config in self.ready_set


def test_a_compiled_config_is_measured_before_one_still_compiling(tmp_path: Path) -> None:
    from autotune.strategies import make_strategy

    space = GEMM.space(PROBLEM, TARGET)
    order = make_strategy("exhaustive", space, Budget(trials=6)).upcoming(6)
    checker = FakeChecker()
    checker.ready_set = {order[0], order[4]}  # the 5th finished compiling before the 2nd to the 4th
    bench = FakeBench()
    with Store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, TARGET, bench, checker=checker)  # type: ignore[arg-type]
        report = runner.tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
    assert report.ran == 6
    assert bench.calls[:2] == [order[0], order[4]]  # the ready one jumped the queue
    assert sorted(c.canonical() for c in bench.calls) == sorted(c.canonical() for c in order)  # same set


def test_promote_changes_the_order_never_the_configs() -> None:
    from autotune.strategies import make_strategy

    space = GEMM.space(PROBLEM, TARGET)
    search = make_strategy("random", space, Budget(trials=5), seed=3)
    planned = search.upcoming(5)
    assert search.promote(planned[3]) and not search.promote(planned[3])  # already next: no change
    asked = []
    while (config := search.ask()) is not None:
        asked.append(config)
        search.tell(config, TrialResult(config, TrialStatus.OK, timing=Timing(1, 1, 1, 1, 1, 0, 1, "events")))
    assert asked[0] == planned[3] and set(asked) == set(planned) and len(asked) == 5
    optuna = make_strategy("optuna", space, Budget(trials=5))
    assert not optuna.promote(planned[0])  # a learning strategy keeps its own order
