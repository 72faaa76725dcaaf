"""Two problems in flight on one worker while configs compile ahead: the one behind fills the front's
waits on slow compiles; each problem's time budget counts its own time only."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.db import Store
from autotune.sweeps import run_sweep
from autotune.sweeps.spec import parse_spec
from autotune.sweeps.worker_loop import Lane

TARGET = Target.for_arch("sm_90")


class RecordingWorker:
    """Measures nothing: each trial takes `trial_s` and is logged with its problem's M."""

    name = "fake"

    def __init__(self, trial_s: float = 0.02) -> None:
        self.trial_s = trial_s
        self.log: list[tuple[int, Config]] = []
        self.running = 0
        self.overlapped = False
        self._lock = threading.Lock()

    @property
    def target(self) -> Target:
        return TARGET

    def start(self) -> None:
        pass

    def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
        with self._lock:
            self.running += 1
            self.overlapped |= self.running > 1
        time.sleep(self.trial_s)
        with self._lock:
            self.running -= 1
            self.log.append((problem.M, config))
        t = 10.0 + (hash(config.canonical()) % 1000) / 100
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))

    def close(self) -> None:
        pass


class SlowCompiles:
    """A checker whose compiles of the M=`slow_m` problem take `compile_s` each, one at a time (the
    others are ready at once)."""

    lookahead = 4

    def __init__(self, slow_m: int, compile_s: float) -> None:
        self.slow_m, self.compile_s = slow_m, compile_s
        self.target = TARGET

    def warm_up(self) -> None:
        pass

    def prefetch(self, op: object, problem: Problem, configs: object) -> None:
        pass

    def findings(self, op: object, problem: Problem, config: Config) -> list[object]:
        if self.slow_m == problem.M and config.backend != "torch":
            time.sleep(self.compile_s)
        return []

    def ready(self, problem: Problem, config: Config) -> bool:
        return self.slow_m != problem.M


SPEC = """\
name = "lanes"

[[sweep]]
op = "gemm"
dtype = "bf16"
m = [16, 32]
nk = [[4096, 4096]]
strategy = "random"
trials = 6
final_rounds = 0
profile_m = false
"""


def test_the_problem_behind_measures_while_the_front_waits_on_compiles(tmp_path: Path) -> None:
    worker = RecordingWorker()
    checker = SlowCompiles(slow_m=16, compile_s=0.3)  # the first problem taken compiles slowly
    with Store(str(tmp_path / "l.db")) as store:
        report = run_sweep(parse_spec(SPEC), store, TARGET, workers=[worker], checker=checker)  # type: ignore[arg-type]
        trials = store.trials()
    assert not worker.overlapped  # one trial at a time on the worker
    ms = [m for m, _ in worker.log]
    assert sorted(ms) == [16] * 6 + [32] * 6
    # M=32 went behind M=16 and ran all its trials in M=16's first compile wait (M=16's first trial is the
    # vendor library's, which compiles nothing).
    assert ms[-5:] == [16] * 5 and ms.count(32) == 6
    assert {p.problem.M for p in report.problems} == {16, 32}
    assert all(p.ran == 6 for p in report.problems)
    assert len(trials) == 12 and len({(t.problem.M, t.config.digest()) for t in trials}) == 12


def test_without_compiling_ahead_problems_run_one_after_the_other(tmp_path: Path) -> None:
    worker = RecordingWorker()
    with Store(str(tmp_path / "s.db")) as store:
        run_sweep(parse_spec(SPEC), store, TARGET, workers=[worker])  # type: ignore[arg-type]
    ms = [m for m, _ in worker.log]
    assert ms in ([16] * 6 + [32] * 6, [32] * 6 + [16] * 6)  # whole problems, longest estimate first


def _run_trials(lane: Lane, ticket: int, name: str, n: int, order: list[str], compile_s: float = 0.0) -> None:
    for _ in range(n):
        if compile_s:
            with lane.compiling(ticket):
                time.sleep(compile_s)
        lane.run(ticket, None, Problem.of("gemm", 1, 8, 8), Config(backend="torch"))  # type: ignore[arg-type]
        order.append(name)
        time.sleep(0.01)  # bookkeeping between trials: not a compile wait, the worker stays the front's


def _in_threads(*jobs: tuple) -> None:
    threads = [threading.Thread(target=_run_trials, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_the_back_waits_while_the_front_measures_and_runs_while_it_compiles() -> None:
    lane = Lane(RecordingWorker(trial_s=0.02), itertools.count())  # type: ignore[arg-type]
    front, back = lane.join(), lane.join()
    order: list[str] = []
    done = threading.Event()

    def front_job() -> None:
        _run_trials(lane, front, "front", 4, order)
        time.sleep(0.1)
        lane.leave(front)  # the back comes to the front
        done.set()

    def back_job() -> None:
        _run_trials(lane, back, "back", 3, order)

    threads = [threading.Thread(target=front_job), threading.Thread(target=back_job)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ["front"] * 4 + ["back"] * 3  # no compile waits: the back never got in

    lane = Lane(RecordingWorker(trial_s=0.02), itertools.count())  # type: ignore[arg-type]
    front, back = lane.join(), lane.join()
    order = []
    _in_threads((lane, front, "front", 2, order, 0.3), (lane, back, "back", 6, order))
    # The front waits 0.3 s on each compile: the back's trials (~0.03 s each) fill those waits.
    assert order.index("front") >= 3 and order.count("back") == 6 and order.count("front") == 2


def test_a_problem_behind_counts_only_its_own_trials_against_its_time_budget() -> None:
    worker = RecordingWorker(trial_s=0.05)
    lane = Lane(worker, itertools.count())  # type: ignore[arg-type]
    front, back = lane.join(), lane.join()
    front_clock, back_clock = lane.clock(front), lane.clock(back)
    b0 = back_clock()
    time.sleep(0.2)  # the front's time: the back's clock stands still
    assert back_clock() - b0 == 0.0
    assert front_clock() >= 0.2
    with lane.compiling(front):  # the front waits on a compile: the back measures
        lane.run(back, None, Problem.of("gemm", 2, 8, 8), Config(backend="torch"))  # type: ignore[arg-type]
    assert 0.04 < back_clock() - b0 < 0.2  # its own trial counts
    lane.leave(front)  # the back comes to the front: from now on all its time counts
    before = back_clock()
    time.sleep(0.1)
    assert back_clock() - before >= 0.1


def test_two_problems_in_flight_on_a_real_worker_process(tmp_path: Path) -> None:
    """Both threads of the lane share one ProcessWorker (started without waiting, as a sweep does)."""
    from autotune.engine.workers import ProcessWorker

    cpu = Target.interpreter_target()
    spec = parse_spec(
        SPEC.replace("m = [16, 32]", "m = [8, 16]")
        .replace("[[4096, 4096]]", '[[32, 32]]\nbackends = ["torch", "triton"]')
        .replace("trials = 6", "trials = 3")
    )
    checker = SlowCompiles(slow_m=8, compile_s=0.5)
    checker.target = cpu
    worker = ProcessWorker(name="w", interpret=True, timeout_s=120, log_path=tmp_path / "w.log")
    try:
        with Store(str(tmp_path / "p.db")) as store:
            report = run_sweep(spec, store, cpu, workers=[worker], checker=checker)  # type: ignore[arg-type]
            trials = store.trials()
    finally:
        worker.close()
    assert worker.starts == 1
    assert sorted(p.problem.M for p in report.problems) == [8, 16]
    assert all(p.ran == 3 and p.failed == 0 for p in report.problems), [p.failed for p in report.problems]
    assert len(trials) == 6 and all(t.ok for t in trials)


class BrokenWorker(RecordingWorker):
    """A GPU that fails every trial as a broken one would."""

    name = "broken"

    def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
        from autotune.engine.workers import WorkerError

        time.sleep(0.01)
        raise WorkerError("broken: 5 trials in a row crashed")


def test_a_broken_worker_hands_back_both_problems_in_flight(tmp_path: Path) -> None:
    spec = parse_spec(SPEC.replace("m = [16, 32]", "m = [16, 32, 64, 128]"))
    good, bad = RecordingWorker(), BrokenWorker()
    checker = SlowCompiles(slow_m=16, compile_s=0.05)
    with Store(str(tmp_path / "b.db")) as store:
        report = run_sweep(spec, store, TARGET, workers=[bad, good], checker=checker)  # type: ignore[arg-type]
        trials = store.trials()
    assert sorted(m for m, _ in good.log) == sorted([16, 32, 64, 128] * 6)  # the good worker ran them all
    assert sorted(p.problem.M for p in report.problems if p.ran == 6) == [16, 32, 64, 128]
    assert len(trials) == 24 and len({(t.problem.M, t.config.digest()) for t in trials}) == 24
