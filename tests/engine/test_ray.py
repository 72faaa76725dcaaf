"""The Ray executor on a local Ray: the same sweep and crash isolation through Ray actors."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import TrialStatus
from autotune.core.target import Target
from autotune.db import Store
from autotune.engine.runner import Runner
from autotune.engine.workers import BoundWorker
from autotune.kernels.faults import FaultyOp
from autotune.sweeps import run_sweep
from autotune.sweeps.spec import parse_spec

ray = pytest.importorskip("ray", reason="the Ray executor's tests need Ray (pip install ray)")

from autotune.engine.executors import make_workers  # noqa: E402
from autotune.engine.rayworker import RayWorker  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

SPEC = """
name = "on-ray"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 2, 3]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 3
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TRITON_INTERPRET": "1"}})  # fmt: skip
    yield
    ray.shutdown()


def test_a_sweep_through_ray_actors_lands_in_the_database(local_ray: None, tmp_path: Path) -> None:
    workers = make_workers("ray", gpus=[0, 1], interpret=True, timeout_s=120, stem=None)
    assert all(isinstance(w, RayWorker) for w in workers)
    with Store(str(tmp_path / "r.db")) as store:
        try:
            report = run_sweep(parse_spec(SPEC), store, Target.interpreter_target(), workers=workers)
        finally:
            for w in workers:
                w.close()
        trials = store.trials()
        [sweep] = store.sweeps()
    assert len(report.problems) == 3 and not report.interrupted
    assert len(trials) == 9 and len({(t.problem.key(), t.config.digest()) for t in trials}) == 9
    assert all(t.ok for t in trials)
    assert {t.extra["worker"] for t in trials} <= {"ray0", "ray1"} and all(t.extra["node"] for t in trials)
    assert (sweep.status, sweep.workers, sweep.trials_done) == ("finished", 2, 9)


def test_ray_actor_crashes_and_hangs_are_trial_results(local_ray: None, tmp_path: Path) -> None:
    op = FaultyOp(("none", "segv", "hang", "error"))
    problem = Problem.of("gemm", 8, 32, 32)
    worker = RayWorker(name="r", interpret=True, timeout_s=5.0)
    try:
        with Store(str(tmp_path / "f.db")) as store:
            report = Runner(store, worker.target, BoundWorker(worker, op)).tune(
                op, problem, strategy="exhaustive"
            )
            by_fault = {t.config["fault"]: t for t in store.trials()}
        assert report.ran == 4
        assert by_fault["none"].status is TrialStatus.OK
        # the crash's details as under the local executor: signal, phase, the stack faulthandler wrote
        segv = by_fault["segv"]
        assert segv.status is TrialStatus.CRASHED and segv.extra["exitcode"] == -11
        assert segv.extra["phase"] == "compile" and segv.extra["worker"] == "r" and segv.extra["node"]
        assert "signal SIGSEGV" in segv.error and "during compile" in segv.error
        assert "Segmentation fault" in segv.error and "faults.py" in segv.error
        hang = by_fault["hang"]
        assert hang.status is TrialStatus.TIMEOUT and "no result after 5 s" in hang.error
        assert by_fault["error"].status is TrialStatus.RUNTIME_ERROR
        assert worker.starts == 1  # the actor's child process was replaced, not the actor
        assert worker.run(op, problem, Config(backend="faulty", fault="none", rep=0)).ok
    finally:
        worker.close()


def test_an_actor_that_dies_is_a_crashed_trial_and_replaced(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the actor itself dies (its node lost, say), the trial is `crashed` and a new actor takes the
    next one."""
    op = FaultyOp(("none",))
    problem = Problem.of("gemm", 8, 32, 32)
    worker = RayWorker(name="r", interpret=True, timeout_s=30.0)
    try:
        assert worker.target.interpreter  # started
        ray.kill(worker._actor, no_restart=True)
        dead = worker.run(op, problem, Config(backend="faulty", fault="none", rep=0))
        assert dead.status is TrialStatus.CRASHED and "Ray actor died" in dead.error
        assert worker.run(op, problem, Config(backend="faulty", fault="none", rep=0)).ok
        assert worker.starts == 2
    finally:
        worker.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_sweep_on_its_own_local_ray_leaves_no_process(tmp_path: Path) -> None:
    """kill -9 of a sweep that started its own Ray cluster: the actors, their trial processes and Ray's own
    (GCS, raylet, agents) are all gone 5 s later (everything Ray started works in the sweep's folder)."""
    (tmp_path / "spec.toml").write_text(SPEC.replace("trials = 3", "trials = 200"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "autotune.cli", "sweep", "spec.toml", "--interpret", "--executor", "ray",
           "--gpus", "0,1", "--db", "r.db", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not _stored(tmp_path / "r.db"):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no trial stored within 180 s"
            time.sleep(0.2)
        assert len(_in_folder(tmp_path)) >= 6  # the sweep, GCS, raylet, agents, actors, trial processes
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while (alive := _in_folder(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert alive == []


def _stored(db: Path) -> bool:
    if not db.exists():
        return False
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return bool(con.execute("SELECT count(*) FROM trials").fetchone()[0])
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()


def _in_folder(folder: Path) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/cwd") == str(folder):
                    out.append(int(entry))
    return out
