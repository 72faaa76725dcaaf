"""Four processes share one sweep (same spec, same database), one of them killed with -9 midway: each
problem is tuned once and nothing is lost, counted by the trials each process started, not only by rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autotune.db import Store
from autotune.db.liveness import HEARTBEAT_ENV, HOST_ENV

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("shared_sweep_worker.py")
PROBLEMS, TRIALS = 12, 4
SPEC = f"""
name = "shared"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = {list(range(1, PROBLEMS + 1))}
nk = [[32, 32]]
strategy = "exhaustive"
trials = {TRIALS}
"""


def _url(db_url: str) -> str:
    return db_url if "://" in db_url else f"sqlite:///{db_url}"


def _stored(db_url: str) -> list[tuple[int, str, str]]:
    """(sweep id, problem key, config hash) of every stored trial."""
    engine = create_engine(_url(db_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT t.sweep_id, p.key, t.config_hash FROM trials t "
                    "JOIN problems p ON p.id = t.problem_id"
                )
            )
            return [(int(s), str(k), str(h)) for s, k, h in rows]
    finally:
        engine.dispose()


def _starts(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.strip()]  # type: ignore[misc]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kill -9 of a process group is Linux's")
@pytest.mark.parametrize(
    "hosts",
    [
        pytest.param("four", id="four-hosts"),  # the killed one's problems are taken when its lease runs out
        pytest.param("one", id="one-host"),  # at once: its process is seen gone
    ],
)
def test_four_processes_share_a_sweep_and_survive_a_kill(
    db_url: str, tmp_path: Path, hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if hosts == "one" and "://" in db_url:
        pytest.skip("the one-host case is the pid rule: SQLite covers it")
    heartbeat = "0.5" if hosts == "four" else "30"  # one host: a lease of 135 s, never waited for
    monkeypatch.setenv(HEARTBEAT_ENV, heartbeat)
    (tmp_path / "spec.toml").write_text(SPEC)
    Store(db_url).close()  # the schema, made once
    procs: list[subprocess.Popen[str]] = []
    logs = [tmp_path / f"starts-{i}.txt" for i in range(4)]

    def launch(i: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), HEARTBEAT_ENV: heartbeat, "SHARED_TRIAL_S": "0.25"}
        if hosts == "four":
            env[HOST_ENV] = f"node-{i}"
        cmd = [sys.executable, str(WORKER), str(tmp_path / "spec.toml"), db_url, str(logs[i])]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )

    t0 = time.monotonic()
    try:
        for i in range(3):  # the fourth starts later, as a host that joins a sweep under way
            launch(i)
        deadline = time.monotonic() + 240
        while len(_starts(logs[0])) < 2:
            assert procs[0].poll() is None, procs[0].communicate()
            assert time.monotonic() < deadline, "the first process started no 2 trials within 240 s"
            time.sleep(0.02)
        procs[0].send_signal(signal.SIGKILL)  # midway through a problem it holds
        procs[0].wait(30)
        launch(3)
        outs = [p.communicate(timeout=300) for p in procs[1:]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.monotonic() - t0
    assert procs[0].returncode == -signal.SIGKILL
    for p, (_, err) in zip(procs[1:], outs, strict=True):
        assert p.returncode == 0, err

    stored = _stored(db_url)
    keys = [(k, h) for _, k, h in stored]
    assert len(stored) == len(set(keys)) == PROBLEMS * TRIALS  # nothing lost, no row twice
    with Store(db_url) as store:
        sweeps = {s.host if hosts == "four" else s.pid: s for s in store.sweeps()}
        victim = next(s for s in store.sweeps() if s.pid == procs[0].pid)
        states = {s.id: s.state(datetime.now(timezone.utc)) for s in store.sweeps()}
        assert store.held([s.id for s in store.sweeps()]) == {}  # every problem done, none held
    assert len(sweeps) == 4
    assert states[victim.id] == ("stale" if hosts == "four" else "interrupted")
    assert sorted(v for k, v in states.items() if k != victim.id) == ["finished"] * 3

    # Each trial started once across all processes, but the one the kill cut short (never stored by the
    # killed process, so started again by the one that took its problem over).
    started = [start for log in logs for start in _starts(log)]
    assert set(started) == set(keys)
    by_victim = {(k, h) for s, k, h in stored if s == victim.id}
    cut_short = [x for x in _starts(logs[0]) if x not in by_victim]
    assert len(cut_short) <= 1
    twice = [x for x, n in Counter(started).items() if n > 1]
    assert twice == cut_short or twice == [], (twice, cut_short)
    ran = sum(int(out.split("ran ")[-1]) for out, _ in outs)
    assert ran == len(stored) - len(by_victim)  # the survivors' trials run are exactly their rows
    assert 0 < len(by_victim) < PROBLEMS * TRIALS
    # A problem's trials come from one sweep, but the one the killed process held (then taken over).
    owners = Counter(k for k in {(s, k) for s, k, _ in stored})
    split = [(s, k) for s, k in {(s, k) for s, k, _ in stored} if owners[k] > 1]
    assert len({k for _, k in split}) <= 1
    assert all(victim.id in {s for s, k2 in split if k2 == k} for _, k in split)
    assert wall < 200


def test_a_shared_sweep_profiles_each_family_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes tune one spec with an M ladder: the family is profiled by one of them, not by both
    at once: each profile timing (an M that no problem of the spec has) is started by one process."""
    monkeypatch.setenv(HEARTBEAT_ENV, "0.5")
    ladder = [1, 16, 24, 32, 48, 64]
    spec = SPEC.replace("m = ", f"profile_m = {ladder}\nm = ").replace(str(TRIALS), "2")
    (tmp_path / "spec.toml").write_text(spec)
    db = str(tmp_path / "p.db")
    Store(db).close()
    env = {**os.environ, "PYTHONPATH": str(REPO), HEARTBEAT_ENV: "0.5", "SHARED_TRIAL_S": "0.05"}
    logs = [tmp_path / f"starts-{i}.txt" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path / "spec.toml"), db, str(log)],
            env={**env, HOST_ENV: f"node-{i}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, log in enumerate(logs)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    untuned = {f"M={m}," for m in ladder if m > PROBLEMS}
    starters: dict[tuple[str, str], set[int]] = {}
    for i, log in enumerate(logs):
        for key, digest in _starts(log):
            if any(m in key for m in untuned):
                starters.setdefault((key, digest), set()).add(i)
    assert starters and all(len(who) == 1 for who in starters.values())
    assert all(_starts(log) for log in logs)  # both processes worked
