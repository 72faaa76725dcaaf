"""Crash isolation and sweeps on several workers: real worker processes running the CPU interpreter."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store
from autotune.engine.executors import make_workers, parse_gpus
from autotune.engine.runner import Runner
from autotune.engine.workers import (
    MAX_CONSECUTIVE_CRASHES,
    BoundWorker,
    ProcessWorker,
    WorkerAborted,
    WorkerError,
    check_devices,
)
from autotune.kernels.faults import FaultyOp
from autotune.sweeps import run_sweep
from autotune.sweeps.spec import parse_spec

PROBLEM = Problem.of("gemm", 8, 32, 32)
CPU = Target.interpreter_target()


def fault(kind: str, rep: int = 0) -> Config:
    return Config(backend="faulty", fault=kind, rep=rep)


@pytest.fixture
def worker(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = ProcessWorker(name="w", interpret=True, timeout_s=4.0, log_path=tmp_path / "w.log")
    yield w
    w.close()


def test_start_returns_at_once_and_the_first_trial_uses_that_child(worker: ProcessWorker) -> None:
    t = time.monotonic()
    worker.start()
    assert time.monotonic() - t < 1.5  # spawned, not waited for (the child takes seconds to import torch)
    assert worker.pid is not None and worker.starts == 1 and worker.start_s is None
    worker.start()  # a second call changes nothing
    assert worker.starts == 1
    result = worker.run(FaultyOp(), PROBLEM, fault("none"))
    assert result.ok, result.error
    assert worker.starts == 1 and worker.start_s is not None and worker.start_s > 0


def test_threads_sharing_a_starting_worker_wait_for_the_same_child(worker: ProcessWorker) -> None:
    worker.start()
    targets: list[object] = []
    threads = [threading.Thread(target=lambda: targets.append(worker.target)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(targets) == 3 and len({str(t) for t in targets}) == 1 and worker.starts == 1
    assert worker.run(FaultyOp(), PROBLEM, fault("none")).ok


def test_a_worker_closed_while_starting_runs_nothing(worker: ProcessWorker) -> None:
    worker.start()
    pid = worker.pid
    worker.close()
    assert worker.pid is None and pid is not None
    with pytest.raises(WorkerAborted):
        worker.run(FaultyOp(), PROBLEM, fault("none"))


def test_crashes_aborts_and_hangs_are_trial_results_and_the_worker_is_replaced(worker: ProcessWorker) -> None:
    op = FaultyOp(("none", "segv", "abort", "hang", "error"))
    first = worker.run(op, PROBLEM, fault("none"))
    assert first.ok and first.extra["worker"] == "w" and first.rel_error is not None
    pid = worker.pid

    segv = worker.run(op, PROBLEM, fault("segv"))
    assert segv.status is TrialStatus.CRASHED
    assert segv.extra["exitcode"] == -11 and segv.extra["phase"] == "compile"
    assert "signal SIGSEGV" in segv.error and "during compile" in segv.error
    assert "Segmentation fault" in segv.error and "faults.py" in segv.error  # the stack faulthandler wrote

    again = worker.run(op, PROBLEM, fault("none"))
    assert again.ok and worker.pid != pid and worker.starts == 2

    abort = worker.run(op, PROBLEM, fault("abort"))
    assert abort.status is TrialStatus.CRASHED and "SIGABRT" in abort.error

    t0 = time.monotonic()
    hang = worker.run(op, PROBLEM, fault("hang"))
    assert hang.status is TrialStatus.TIMEOUT and "no result after 4 s" in hang.error
    assert time.monotonic() - t0 < 15

    error = worker.run(op, PROBLEM, fault("error"))  # an ordinary failure keeps the worker
    assert error.status is TrialStatus.RUNTIME_ERROR and "injected error" in error.error
    starts = worker.starts
    assert worker.run(op, PROBLEM, fault("none")).ok and worker.starts == starts


def test_a_worker_that_crashes_every_trial_is_taken_for_a_broken_gpu(worker: ProcessWorker) -> None:
    op = FaultyOp(("segv",), repeats=MAX_CONSECUTIVE_CRASHES)
    for rep in range(MAX_CONSECUTIVE_CRASHES - 1):
        assert worker.run(op, PROBLEM, fault("segv", rep)).status is TrialStatus.CRASHED
    with pytest.raises(WorkerError, match="in a row crashed the worker"):
        worker.run(op, PROBLEM, fault("segv", MAX_CONSECUTIVE_CRASHES - 1))


def test_close_from_another_thread_aborts_the_running_trial(worker: ProcessWorker) -> None:
    op = FaultyOp()
    assert worker.run(op, PROBLEM, fault("none")).ok
    timer = threading.Timer(0.5, worker.close)
    timer.start()
    with pytest.raises(WorkerAborted):
        worker.run(op, PROBLEM, fault("hang"))
    timer.join()


def test_runner_stores_each_fault_once_and_a_rerun_runs_nothing(tmp_path: Path) -> None:
    op = FaultyOp(("none", "segv", "abort", "hang", "error"), repeats=2)
    db = str(tmp_path / "f.db")
    with ProcessWorker(name="w", interpret=True, timeout_s=3.0) as w, Store(db) as store:
        report = Runner(store, w.target, BoundWorker(w, op)).tune(op, PROBLEM, strategy="exhaustive")
        assert report.ran == 10 and report.cached == 0
        statuses = sorted(t.status.value for t in store.trials())
        assert statuses == sorted(["ok"] * 2 + ["crashed"] * 4 + ["timeout"] * 2 + ["runtime_error"] * 2)
        again = Runner(store, w.target, BoundWorker(w, op)).tune(op, PROBLEM, strategy="exhaustive")
        assert again.ran == 0 and again.cached == 10
        assert len(store.trials()) == 10


def test_the_crash_that_ends_a_streak_is_stored_before_the_worker_gives_up(tmp_path: Path) -> None:
    """Five crashes in a row stop the worker, the fifth stored like the four before it: a resumed sweep
    runs none of them again."""
    op = FaultyOp(("segv",), repeats=MAX_CONSECUTIVE_CRASHES)
    with ProcessWorker(name="w", interpret=True, timeout_s=3.0) as w, Store(str(tmp_path / "c.db")) as store:
        runner = Runner(store, w.target, BoundWorker(w, op))
        with pytest.raises(WorkerError, match="in a row crashed the worker"):
            runner.tune(op, PROBLEM, strategy="exhaustive")
        crashed = store.trials()
        assert len(crashed) == MAX_CONSECUTIVE_CRASHES and {t.status.value for t in crashed} == {"crashed"}
        assert runner.current is not None and runner.current.ran == MAX_CONSECUTIVE_CRASHES
        again = Runner(store, w.target, BoundWorker(w, op)).tune(op, PROBLEM, strategy="exhaustive")
        assert again.ran == 0 and again.cached == MAX_CONSECUTIVE_CRASHES


SPEC = """
name = "multi"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 2, 3, 4]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 3
"""


def test_a_sweep_on_three_workers_shares_the_problems_and_stores_each_trial_once(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    workers = make_workers("local", gpus=[0, 1, 2], interpret=True, timeout_s=120, stem=tmp_path / "multi")
    with Store(str(tmp_path / "m.db")) as store:
        try:
            report = run_sweep(spec, store, CPU, workers=workers)
        finally:
            for w in workers:
                w.close()
        trials = store.trials()
        [sweep] = store.sweeps()
    assert not report.interrupted and len(report.problems) == 4
    assert len(trials) == 12
    keys = [(t.problem.key(), t.config.digest()) for t in trials]
    assert len(set(keys)) == 12
    by_problem = {t.problem.M: t.extra["worker"] for t in trials}
    assert len(set(by_problem.values())) >= 2  # the problems were shared out
    assert all(t.extra["worker"] == by_problem[t.problem.M] for t in trials)  # one worker per problem
    assert (sweep.status, sweep.workers, sweep.problems_total, sweep.problems_done, sweep.trials_done) == (
        "finished", 3, 4, 4, 12,
    )  # fmt: skip
    assert {p.name for p in tmp_path.iterdir()} >= {"multi.cpu0.log", "multi.cpu1.log", "multi.cpu2.log"}


class FlakyWorker:
    """A worker in this thread: measures with the vendor backend, or fails as a broken GPU would."""

    def __init__(self, name: str, broken: bool) -> None:
        self.name, self.broken, self.runs = name, broken, 0
        from autotune.engine.bench import Benchmarker
        from autotune.kernels import GEMM

        self.bench = Benchmarker(GEMM, CPU)

    @property
    def target(self) -> Target:
        return CPU

    def start(self) -> None:
        pass

    def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
        self.runs += 1
        if self.runs == 1 and not self.broken:
            time.sleep(0.5)  # the broken worker takes a problem meanwhile
        if self.broken:
            time.sleep(0.05)
            raise WorkerError(f"{self.name}: broken")
        return self.bench.run(problem, config)

    def close(self) -> None:
        pass


def test_a_broken_worker_hands_its_problem_back_and_the_others_finish(tmp_path: Path) -> None:
    spec = parse_spec(
        SPEC.replace('strategy = "exhaustive"', 'strategy = "exhaustive"\nbackends = ["torch"]')
    )
    good, bad = FlakyWorker("good", False), FlakyWorker("bad", True)
    with Store(str(tmp_path / "b.db")) as store:
        report = run_sweep(spec, store, CPU, workers=[bad, good])
        trials = store.trials()
    assert bad.runs == 1 and len(report.problems) == 4
    assert sorted(t.problem.M for t in trials) == [1, 2, 3, 4]


def test_every_worker_broken_fails_the_sweep_and_says_why(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    with Store(str(tmp_path / "c.db")) as store:
        with pytest.raises(WorkerError, match="broken"):
            run_sweep(spec, store, CPU, workers=[FlakyWorker("a", True), FlakyWorker("b", True)])
        assert store.sweeps()[0].status == "failed"


def test_gpu_indices_are_checked_before_any_work() -> None:
    assert parse_gpus(None) is None and parse_gpus("all") is None
    assert parse_gpus("0,2") == [0, 2] and parse_gpus("1-3") == [1, 2, 3]
    for bad in ("x", "1,1", "-1", "0,"):
        with pytest.raises(ValueError, match="--gpus"):
            parse_gpus(bad)
    import torch

    if not torch.cuda.is_available():
        assert check_devices(None) == []
        with pytest.raises(ValueError, match=r"GPU index 0 does not exist: 0 GPU\(s\) visible"):
            check_devices([0])


def test_the_heartbeat_goes_on_during_a_long_trial(tmp_path: Path) -> None:
    from autotune.sweeps.run import _Progress

    with Store(str(tmp_path / "h.db")) as store:
        sweep = store.start_sweep("long", "", CPU)
        before = store.sweeps()[0].heartbeat_at
        progress = _Progress(store, sweep, every_s=0.05)
        with progress.running():  # no trial finishes meanwhile
            time.sleep(1.0)
        after = store.sweeps()[0].heartbeat_at
    assert before is not None and after is not None and after > before
