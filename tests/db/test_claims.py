"""Claims of a shared sweep and the liveness of sweeps: leases, take-overs, interrupted and stale."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from autotune.cli import main
from autotune.core.target import Target
from autotune.db import Store
from autotune.db.liveness import HEARTBEAT_ENV, host, stale_after_s

H100 = Target.for_arch("sm_90")


def _set(db_url: str, sql: str, **params: object) -> None:
    url = db_url if "://" in db_url else f"sqlite:///{db_url}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(sql), params)
    engine.dispose()


def test_a_claim_is_held_until_done_or_its_lease_runs_out(db_url: str) -> None:
    with Store(db_url) as store:
        a = store.start_sweep("s", "", H100)
        b = store.start_sweep("s", "", H100)
        _set(db_url, "UPDATE sweeps SET host = 'node-b' WHERE id = :b", b=b)  # another host's
        assert store.claim("w", "p1", a) == "claimed"
        assert store.claim("w", "p1", a) == "claimed"  # its own again
        assert store.claim("w", "p1", b) == "held"
        assert store.claim("other-work", "p1", b) == "claimed"  # other work, other claims
        assert store.held([a, b]) == {a: ["p1"], b: ["p1"]}
        store.touch_sweep(a)  # the heartbeat keeps the lease alive
        assert store.claim("w", "p1", b) == "held"
        past = datetime.now(timezone.utc) - timedelta(seconds=1)
        _set(db_url, "UPDATE claims SET lease_until = :t WHERE sweep_id = :a", t=past, a=a)
        assert store.claim("w", "p1", b) == "claimed"  # a's lease ran out: taken over
        assert store.claim("w", "p1", a) == "held"
        store.release("w", "p1", a, done=True)  # not a's any more: left alone
        assert store.claim("w", "p1", a) == "held"
        store.release("w", "p1", b, done=True)
        assert store.claim("w", "p1", a) == store.claim("w", "p1", b) == "done"
        assert store.held([a, b]) == {b: ["p1"]}  # other-work's
        store.finish_sweep(b, "interrupted")  # frees what it holds
        assert store.claim("other-work", "p1", a) == "claimed"


def test_a_holder_whose_process_is_gone_loses_its_claims_at_once(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Store(str(tmp_path / "c.db")) as store:
        a = store.start_sweep("s", "", H100)
        b = store.start_sweep("s", "", H100)
        _set(str(tmp_path / "c.db"), "UPDATE sweeps SET pid = :p WHERE id = :a", p=dead.pid, a=a)
        assert store.claim("w", "p", a) == "claimed"
        assert store.claim("w", "p", b) == "claimed"  # a's lease runs, but its process is gone
        assert {s.id: s.status for s in store.sweeps()}[a] == "interrupted"


@pytest.mark.parametrize("seed", [0, 1])
def test_racing_claimers_each_take_distinct_problems(db_url: str, seed: int) -> None:
    """Threads of several stores claim the same random problems at once: each is claimed by one."""
    rng = random.Random(seed)
    items = [f"p{rng.randrange(10**9)}" for _ in range(30)]
    stores = [Store(db_url) for _ in range(3)]
    sweep_ids = [s.start_sweep("race", "", H100) for s in stores]
    for i in range(1, len(stores)):  # other hosts: no pid rule
        _set(db_url, "UPDATE sweeps SET host = :h WHERE id = :i", h=f"node-{i}", i=sweep_ids[i])
    won: list[tuple[int, str]] = []
    lock = threading.Lock()

    def claim_all(store: Store, sweep_id: int) -> None:
        for item in rng.sample(items, len(items)):
            if store.claim("race", item, sweep_id) == "claimed":
                with lock:
                    won.append((sweep_id, item))

    threads = [
        threading.Thread(target=claim_all, args=(s, i)) for s, i in zip(stores, sweep_ids, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sorted(item for _, item in won) == sorted(items)


def test_liveness_interrupted_at_once_on_this_host_stale_under_a_minute_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert 30 <= stale_after_s() < 60
    db = tmp_path / "l.db"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = datetime.now(timezone.utc)
    with Store(str(db)) as store:
        ids = [store.start_sweep(f"night-{c}", "", H100) for c in "abcd"]
        store.claim("w", "gemm:M=1", ids[3])
    rows = [  # (host, pid, heartbeat seconds ago)
        (host(), dead.pid, 1),  # killed here a second ago: interrupted at once
        ("node-9", 77, stale_after_s() + 5),  # another host, a few heartbeats missed: stale
        ("node-9", 78, stale_after_s() - 15),  # another host, within the window: running
        (host(), os.getpid(), 1),  # alive here
    ]
    for sweep_id, (h, pid, ago) in zip(ids, rows, strict=True):
        beat = now - timedelta(seconds=ago)
        _set(str(db), "UPDATE sweeps SET host = :h, pid = :p, heartbeat_at = :t WHERE id = :i",
             h=h, p=pid, t=beat, i=sweep_id)  # fmt: skip
    assert main(["status", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    cells = [line.split() for line in out.splitlines()]
    states = {c[1]: c[2] for c in cells if len(c) > 2 and c[1].startswith("night-")}
    assert states == {
        "night-a": "interrupted",
        "night-b": "stale",
        "night-c": "running",
        "night-d": "running",
    }
    assert f"sweep {ids[3]} ({host()}:{os.getpid()}, running) holds: gemm:M=1" in out
