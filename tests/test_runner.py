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
