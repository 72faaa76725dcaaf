"""The profile's plans are made on a thread, family after family, while the families before are timed:
each plan is `family_plan`'s, a family that cannot be planned fails alone, and a stop ends the wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_profile import TimedWorker

from autotune import Config, Problem, Target, TrialResult
from autotune.core.result import Source
from autotune.db import Store
from autotune.engine.bench import ServedTiming
from autotune.engine.runner import SweepStopped
from autotune.sweeps import plans_ahead, run_sweep
from autotune.sweeps.plans_ahead import PlansAhead
from autotune.sweeps.profile import FamilyProfile, family_plan
from autotune.sweeps.run import families
from autotune.sweeps.spec import parse_spec

GPU = Target.for_arch("sm_90")

SPEC = """\
name = "ahead"

[[sweep]]
op = "gemm"
m = [1, 64]
nk = [[256, 512], [512, 256], [384, 256]]
backends = ["torch", "triton"]
strategy = "exhaustive"
trials = 4
final_rounds = 0
profile_m = [1, 2, 8, 16, 24, 64]
"""


class Clocked(TimedWorker):
    """`TimedWorker` (our configs win below M = 20, the vendor above) that also logs each timing's clock:
    (clock, served?, problem) in `clocked`."""

    def __init__(self) -> None:
        super().__init__()
        self.clocked: list[tuple[float, bool, Problem]] = []

    def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
        self.clocked.append((time.monotonic(), isinstance(op, ServedTiming), problem))
        return super().run(op, problem, config)


class Compiles:
    """A static checker whose compiles are instant and find nothing; records what is queued, in order."""

    lookahead = 2
    target = GPU

    def __init__(self) -> None:
        self.queued: list[tuple[Problem, Config]] = []

    def warm_up(self) -> None:
        pass

    def prefetch(self, op: object, problem: Problem, configs: list[Config]) -> None:
        self.queued += [(problem, c) for c in configs]

    def findings(self, op: object, problem: Problem, config: Config) -> list[object]:
        return []

    def ready(self, problem: Problem, config: Config) -> bool:
        return True


def _tuned(tmp_path: Path) -> tuple[Store, list[FamilyProfile]]:
    """A store with SPEC's problems tuned, and its families."""
    spec = parse_spec(SPEC.replace("profile_m = [1, 2, 8, 16, 24, 64]", "profile_m = false"))
    store = Store(str(tmp_path / "t.db"))
    run_sweep(spec, store, GPU, workers=[Clocked()])
    return store, families(parse_spec(SPEC), GPU)


def test_each_plan_is_family_plans_and_its_compiles_are_queued_in_family_order(tmp_path: Path) -> None:
    store, jobs = _tuned(tmp_path)
    with store:
        compiles = Compiles()
        ahead = PlansAhead(jobs, store=store, target=GPU, checker=compiles)  # type: ignore[arg-type]
        try:
            plans = [ahead.wait(job) for job in jobs]
        finally:
            ahead.close()
        assert plans == [family_plan(job, store=store, target=GPU) for job in jobs]
        assert all(any(c.backend != "torch" for _, cs in plan for c in cs) for plan, _ in plans)
        order = [problem.with_m(1) for problem, _ in compiles.queued]
        assert order == sorted(order, key=[job.family for job in jobs].index)  # family by family
        assert {f for f in order} == {job.family for job in jobs}


def test_a_plan_compiles_nothing_and_keeps_what_the_ops_space_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan asks each candidate's backend whether the M's space holds it (`Backend.check`), not the
    op's space, whose first config is the heuristic default checked by compiling it."""
    from autotune.engine import verdicts

    store, jobs = _tuned(tmp_path)

    def refuse(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a plan compiled a default")

    monkeypatch.setattr(verdicts.Verdicts, "first_passing", refuse)
    monkeypatch.setattr(verdicts.Verdicts, "features", refuse)
    with store:
        for job in jobs:
            plan, _ = family_plan(job, store=store, target=GPU)
            for problem, configs in plan:
                assert configs and all(
                    job.op.backend(c.backend).check(problem, GPU, c) is None for c in configs
                )


def test_a_family_that_cannot_be_planned_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, jobs = _tuned(tmp_path)
    real = plans_ahead.family_plan

    def broken_second(job: FamilyProfile, **kw: Any) -> Any:
        if job.family == jobs[1].family:
            raise ValueError("no space at M = 2")
        return real(job, **kw)

    monkeypatch.setattr(plans_ahead, "family_plan", broken_second)
    with store:
        ahead = PlansAhead(jobs, store=store, target=GPU, checker=Compiles())  # type: ignore[arg-type]
        try:
            assert ahead.wait(jobs[0])[0]
            with pytest.raises(ValueError, match="no space at M = 2"):
                ahead.wait(jobs[1])
            assert ahead.wait(jobs[2])[0]
        finally:
            ahead.close()


def test_a_stop_ends_the_wait_for_a_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, jobs = _tuned(tmp_path)
    release = threading.Event()

    def stuck(job: FamilyProfile, **kw: Any) -> Any:
        release.wait(30)
        raise ValueError("released")

    monkeypatch.setattr(plans_ahead, "family_plan", stuck)
    with store:
        ahead = PlansAhead(jobs, store=store, target=GPU, checker=Compiles())  # type: ignore[arg-type]
        t0 = time.monotonic()
        with pytest.raises(SweepStopped):
            ahead.wait(jobs[0], should_stop=lambda: time.monotonic() - t0 > 0.2)
        release.set()
        ahead.close()
        with pytest.raises(SweepStopped):  # closed: no plan is waited for
            ahead.wait(jobs[2])


def test_a_sweep_times_the_first_family_while_the_last_is_still_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = plans_ahead.family_plan
    last = families(parse_spec(SPEC), GPU)[-1].family
    planned: dict[Problem, float] = {}

    def slow_last(job: FamilyProfile, **kw: Any) -> Any:
        if job.family == last:
            time.sleep(1.5)  # long beside the first family's plan and first timing, even on a loaded machine
        out = real(job, **kw)
        planned[job.family] = time.monotonic()
        return out

    monkeypatch.setattr(plans_ahead, "family_plan", slow_last)
    worker = Clocked()
    with Store(str(tmp_path / "s.db")) as store:
        report = run_sweep(parse_spec(SPEC), store, GPU, workers=[worker], checker=Compiles())  # type: ignore[arg-type]
        profiled = store.trials(source=Source.PROFILE)
    assert len(report.profiles) == 3 and all(p.ran > 0 for p in report.profiles)
    assert {t.problem.with_m(1) for t in profiled} == set(planned)
    first_served = min(at for at, served, _ in worker.clocked if served)
    assert first_served < planned[last]  # the first family was timed before the last one's plan was made
