"""kill -9 in the middle of a sweep on two worker processes, then the same command again."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.db import Store

REPO = Path(__file__).resolve().parents[2]

SPEC = """
name = "killed"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 2, 3, 4, 5, 6]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 5
"""


def _rows(db: Path) -> list[tuple[Any, ...]]:
    """(id, sweep, problem, config hash, status, time) of every trial, read-only."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(
            "SELECT id, sweep_id, problem_id, config_hash, status, time_us, created_at "
            "FROM trials ORDER BY id"
        ).fetchall()
    except sqlite3.OperationalError:  # no schema yet
        return []
    finally:
        con.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kill -9 and PR_SET_PDEATHSIG are Linux's")
def test_kill_9_mid_sweep_then_resume_runs_nothing_twice_and_loses_nothing(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SPEC)
    db = tmp_path / "k.db"
    cmd = [sys.executable, "-m", "autotune.cli", "sweep", "spec.toml", "--interpret", "--gpus", "0,1",
           "--db", str(db), "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while len(_rows(db)) < 7:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no 7 trials stored within 180 s"
            time.sleep(0.02)
        children = [int(p) for p in (Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    before = _rows(db)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in children):  # the workers die with their parent, not orphaned
        assert time.monotonic() < deadline, f"worker processes outlived the killed sweep: {children}"
        time.sleep(0.1)
    assert len(before) < 30

    with Store(str(db)) as store:
        [killed] = store.sweeps()
        assert killed.status == "running" and killed.trials_done is not None  # nobody marked it yet

    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{30 - len(before)} trials run, {len(before)} read back from the database" in done.stdout

    after = _rows(db)
    assert after[: len(before)] == before  # every row stored before the kill is there, unchanged
    keys = [(r[2], r[3]) for r in after]
    assert len(after) == len(set(keys)) == 30  # each (problem, config) once: nothing ran twice
    assert {r[1] for r in after[len(before) :]} == {2}  # the rest were run by the second sweep
    assert all(r[4] == "ok" and r[5] > 0 for r in after)
    with Store(str(db)) as store:
        states = {s.id: s.status for s in store.sweeps()}
    assert states == {1: "interrupted", 2: "finished"}  # the killed sweep's process is gone: marked so
