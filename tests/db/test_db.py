"""The Store on SQLite and on PostgreSQL: round trips, idempotence, resume, winners, and clear failures."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import SCHEMA_VERSION, Store, StoreError, resolve_url

REPO = Path(__file__).resolve().parents[2]

TRITON = ("gemm.triton", "src-v1")
TORCH = ("gemm.torch", "torch-v1")
KERNELS = {"triton": TRITON, "torch": TORCH}


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as s:
        yield s


# -- helpers -------------------------------------------------------------------------------------------

H100 = Target.for_arch("sm_90")
OTHER = dataclasses.replace(H100, name="x")
PROBLEM = Problem.of("gemm", 16, 64, 64)


def cfg(bm: int = 16, bn: int = 64, backend: str = "triton") -> Config:
    if backend == "torch":
        return Config(backend="torch")
    return Config(backend=backend, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=32, num_warps=4, num_stages=2)


def ok(config: Config, median: float) -> TrialResult:
    timing = Timing(
        median_us=median,
        min_us=median * 0.9,
        p20_us=median * 0.95,
        p80_us=median * 1.05,
        mean_us=median * 1.01,
        std_us=median * 0.02,
        runs=10,
        method="events",
    )
    return TrialResult(
        config,
        TrialStatus.OK,
        timing=timing,
        rel_error=1e-3,
        compile_s=1.5,
        measure_s=0.25,
        extra={"regs": 128, "spills": 0},
    )


def failed(config: Config, status: TrialStatus = TrialStatus.WRONG_RESULT, error: str = "") -> TrialResult:
    return TrialResult(
        config,
        status,
        rel_error=0.5 if status is TrialStatus.WRONG_RESULT else None,
        error=error or f"{status.value}: max rel error 0.5 > 0.02",
        compile_s=2.0,
    )


def put(
    store: Store,
    result: TrialResult,
    *,
    target: Target = H100,
    problem: Problem = PROBLEM,
    kernel: tuple[str, str] | None = None,
    sweep_id: int | None = None,
    source: Source = Source.MEASURED,
) -> bool:
    name, source_hash = kernel or KERNELS[result.config.backend]
    return store.record(
        target=target,
        kernel=name,
        source_hash=source_hash,
        problem=problem,
        result=result,
        sweep_id=sweep_id,
        source=source,
    )


# -- round trips ---------------------------------------------------------------------------------------


def test_record_then_finished_returns_the_same_results(store: Store) -> None:
    results = [
        ok(cfg(16), 12.5),
        ok(cfg(32), 9.75),
        failed(cfg(64), TrialStatus.WRONG_RESULT, "wrong result: rel error 0.5 (NaN in output)"),
        failed(cfg(128), TrialStatus.COMPILE_ERROR, "triton.CompilationError: out of shared memory\nline 2"),
        ok(cfg(backend="torch"), 11.0),
    ]
    assert all(put(store, r) for r in results)

    got = store.finished(target=H100, problem=PROBLEM, kernels=KERNELS)

    assert set(got) == {r.config.digest() for r in results}
    for r in results:
        back = got[r.config.digest()]
        assert back.cached is True
        assert back == dataclasses.replace(r, cached=True)  # status, timing, error, extra, times: all equal
    wrong = got[cfg(64).digest()]
    assert wrong.status is TrialStatus.WRONG_RESULT and wrong.timing is None and wrong.rel_error == 0.5
    assert "NaN in output" in wrong.error
    assert got[cfg(32).digest()].time_us == 9.75


def test_record_twice_writes_one_row(store: Store) -> None:
    first = ok(cfg(16), 10.0)
    assert put(store, first) is True
    assert put(store, first) is False
    assert put(store, ok(cfg(16), 99.0)) is False  # same key, other numbers: the first stays
    rows = store.trials()
    assert len(rows) == 1
    assert rows[0].time_us == 10.0
    # The same config from another source is another trial.
    assert put(store, ok(cfg(16), 20.0), source=Source.IMPORTED) is True
    assert len(store.trials()) == 2
    assert len(store.trials(source=Source.MEASURED)) == 1


def test_failed_trials_are_stored_with_their_reason(store: Store) -> None:
    put(store, ok(cfg(16), 10.0))
    put(store, failed(cfg(32), TrialStatus.WRONG_RESULT, "rel error 0.31 > 0.02"))
    put(store, failed(cfg(64), TrialStatus.OUT_OF_RESOURCES, "shared memory 262144 > 232448"))

    wrong = store.trials(status=TrialStatus.WRONG_RESULT)
    assert [(r.config, r.error, r.rel_error, r.time_us) for r in wrong] == [
        (cfg(32), "rel error 0.31 > 0.02", 0.5, None)
    ]
    assert store.trials(status=TrialStatus.OUT_OF_RESOURCES)[0].error == "shared memory 262144 > 232448"
    assert len(store.trials(problem=PROBLEM)) == 3
    assert store.trials(problem=Problem.of("gemm", 32, 64, 64)) == []


def test_best_is_fastest_first(store: Store) -> None:
    for bm, t in [(16, 30.0), (32, 10.0), (64, 20.0)]:
        put(store, ok(cfg(bm), t))
    put(store, failed(cfg(128)))
    put(store, ok(cfg(16), 1.0), target=OTHER)  # faster, but on another GPU
    fp = H100.fingerprint()

    best = store.best(PROBLEM, fingerprint=fp)
    assert [r.time_us for r in best] == [10.0, 20.0, 30.0]
    assert [r.config["BLOCK_M"] for r in best] == [32, 64, 16]
    assert all(r.gpu.fingerprint == fp and r.kernel == "gemm.triton" for r in best)
    assert [r.time_us for r in store.best(PROBLEM, fingerprint=fp[:6], limit=2)] == [10.0, 20.0]
    assert store.best(PROBLEM)[0].time_us == 1.0  # any GPU
    assert store.best(PROBLEM, source=Source.IMPORTED) == []
    assert store.best(Problem.of("gemm", 17, 64, 64), fingerprint=fp) == []
    with pytest.raises(ValueError, match="at least 6"):
        store.best(PROBLEM, fingerprint=fp[:4])


def test_winners_give_the_speedup_over_the_vendor_library(store: Store) -> None:
    put(store, ok(cfg(16), 8.0))
    put(store, ok(cfg(32), 12.0))
    put(store, failed(cfg(64)))
    put(store, ok(cfg(backend="torch"), 10.0))
    slow = Problem.of("gemm", 4096, 4096, 4096)
    put(store, ok(cfg(16), 900.0), problem=slow)
    put(store, ok(cfg(backend="torch"), 600.0), problem=slow)

    winners = {w.problem: w for w in store.winners()}

    w = winners[PROBLEM]
    assert w.best.config == cfg(16) and w.time_us == 8.0
    assert w.vendor is not None and w.vendor.backend == "torch" and w.vendor.time_us == 10.0
    assert w.speedup_vs_vendor == pytest.approx(10.0 / 8.0)
    assert (w.n_ok, w.n_failed) == (3, 1)
    v = winners[slow]
    assert v.best.backend == "torch" and v.speedup_vs_vendor == pytest.approx(1.0)
    # Without a vendor trial there is no speedup.
    put(store, ok(cfg(16), 5.0), problem=Problem.of("gemm", 8, 64, 64))
    lone = {w.problem: w for w in store.winners()}[Problem.of("gemm", 8, 64, 64)]
    assert lone.vendor is None and lone.speedup_vs_vendor is None


def test_each_target_fingerprint_is_kept_apart(store: Store) -> None:
    assert H100.fingerprint() != OTHER.fingerprint()
    put(store, ok(cfg(16), 10.0), target=H100)
    put(store, ok(cfg(16), 20.0), target=OTHER)  # same config, same problem, another GPU
    put(store, ok(cfg(32), 15.0), target=OTHER)

    assert len(store.trials()) == 3
    mine = store.finished(target=H100, problem=PROBLEM, kernels=KERNELS)
    theirs = store.finished(target=OTHER, problem=PROBLEM, kernels=KERNELS)
    assert [r.time_us for r in mine.values()] == [10.0]
    assert sorted(r.time_us or 0 for r in theirs.values()) == [15.0, 20.0]

    gpus = store.gpus()
    assert [g.fingerprint for g in gpus] == [H100.fingerprint(), OTHER.fingerprint()]
    assert gpus[1].target == OTHER and gpus[1].target.name == "x" and gpus[1].interpreter is False
    assert gpus[0].target.toolchain == H100.toolchain
    winners = store.winners()
    assert [(w.gpu.target.name, w.time_us) for w in winners] == [(H100.name, 10.0), ("x", 15.0)]
    assert [w.time_us for w in store.winners(OTHER.fingerprint())] == [15.0]


def test_changed_kernel_source_is_tuned_afresh(store: Store) -> None:
    put(store, ok(cfg(16), 10.0), kernel=("gemm.triton", "old"))
    put(store, failed(cfg(32)), kernel=("gemm.triton", "old"))

    new_kernels = {"triton": ("gemm.triton", "new")}
    assert store.finished(target=H100, problem=PROBLEM, kernels=new_kernels) == {}
    assert len(store.finished(target=H100, problem=PROBLEM, kernels={"triton": ("gemm.triton", "old")})) == 2

    # Winners prefer the newest kernel version of a backend, even where the old one was faster.
    put(store, ok(cfg(16), 14.0), kernel=("gemm.triton", "new"))
    [w] = store.winners()
    assert (w.best.source_hash, w.time_us, w.n_ok, w.n_failed) == ("new", 14.0, 1, 0)
    assert store.best(PROBLEM)[0].source_hash == "old"  # best() lists every version


def test_sweeps_and_summary(store: Store) -> None:
    sweep = store.start_sweep("smoke", "name = 'smoke'\n", H100)
    put(store, ok(cfg(16), 10.0), sweep_id=sweep)
    put(store, failed(cfg(32)), sweep_id=sweep)
    store.finish_sweep(sweep)
    other = store.start_sweep("crashed", "", OTHER)
    store.finish_sweep(other, "interrupted")
    store.start_sweep("live", "", H100)
    with pytest.raises(ValueError, match="unknown sweep status"):
        store.finish_sweep(sweep, "done")
    with pytest.raises(StoreError, match="no sweep with id 9999"):
        store.finish_sweep(9999)

    assert {r.sweep_id for r in store.trials()} == {sweep}
    s = store.summary()
    assert (s.n_gpus, s.n_problems, s.n_kernels, s.n_trials) == (2, 1, 1, 2)
    assert s.sweeps_by_status == {"finished": 1, "interrupted": 1, "running": 1}
    assert s.trials_by_status == {"ok": 1, "wrong_result": 1}
    assert s.trials_by_source == {"measured": 2}
    assert [(g.gpu.fingerprint, g.n_trials, g.n_ok, g.n_problems_tuned) for g in s.per_gpu] == [
        (H100.fingerprint(), 2, 1, 1),
        (OTHER.fingerprint(), 0, 0, 0),
    ]
    lines = s.lines()
    assert any("trials    2" in line and "wrong_result 1" in line for line in lines)
    assert any(H100.fingerprint()[:8] in line and "1 problems tuned" in line for line in lines)


def test_concurrent_processes_record_each_trial_once(db_url: str) -> None:
    """Two processes open a new database and record the same trials at once: the schema is created once,
    every trial lands once, and exactly one writer wins each."""
    script = """
import json, sys
from autotune.core.config import Config
from autotune.db import Store
from autotune.core.problem import Problem
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.core.target import Target
url, target = sys.argv[1], Target.from_dict(json.loads(sys.argv[2]))
wins = 0
with Store(url) as store:
    for bm in range(1, 41):
        r = TrialResult(Config(backend="triton", BLOCK_M=bm), TrialStatus.OK,
                        timing=Timing(float(bm), 1.0, 1.0, 1.0, 1.0, 0.0, 3, "events"))
        wins += store.record(target=target, kernel="gemm.triton", source_hash="h",
                             problem=Problem.of("gemm", 16, 64, 64), result=r)
print(wins)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", script, db_url, json.dumps(H100.to_dict())]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert sum(int(out) for out, _ in outs) == 40
    with Store(db_url) as store:
        assert len(store.trials()) == 40
        assert len(store.gpus()) == 1


def test_a_lost_race_is_not_an_error(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process inserts a row between our look and our insert: the unique key catches it."""
    with Store(db_url) as first:
        assert put(first, ok(cfg(16), 10.0)) is True
    with Store(db_url) as second:
        calls = itertools.count()
        real_scalar = Session.scalar

        def first_look_misses(self: Session, *args: Any, **kwargs: Any) -> Any:
            return None if next(calls) % 2 == 0 else real_scalar(self, *args, **kwargs)

        monkeypatch.setattr(Session, "scalar", first_look_misses)
        assert put(second, ok(cfg(16), 99.0)) is False  # GPU, kernel, problem and trial rows all "raced"
        monkeypatch.undo()
        assert next(calls) == 8
        assert [r.time_us for r in second.trials()] == [10.0]
        assert len(second.gpus()) == 1


# -- nothing lost --------------------------------------------------------------------------------------


def test_an_error_in_a_later_record_loses_nothing_earlier(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(db_url) as store:
        put(store, ok(cfg(16), 10.0))
        put(store, failed(cfg(32)))
        # Bad input is refused before anything is written.
        with pytest.raises(ValueError, match="not JSON-serializable"):
            put(store, dataclasses.replace(ok(cfg(64), 5.0), extra={"obj": object()}))

        # A failure inside the transaction of a later record rolls back that record only.
        def boom(self: Session, objects: object = None) -> None:
            raise RuntimeError("worker died mid-write")

        monkeypatch.setattr(Session, "flush", boom)
        with pytest.raises(RuntimeError, match="mid-write"):
            put(store, ok(cfg(128), 4.0))
        monkeypatch.undo()
        assert put(store, ok(cfg(256), 3.0)) is True  # the store is still usable

    with Store(db_url) as reopened:
        got = reopened.finished(target=H100, problem=PROBLEM, kernels=KERNELS)
    assert set(got) == {cfg(16).digest(), cfg(32).digest(), cfg(256).digest()}


def test_a_killed_process_keeps_every_trial_it_recorded(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    script = """
import json, os, sys
from autotune.core.config import Config
from autotune.db import Store
from autotune.core.problem import Problem
from autotune.core.result import TrialResult, TrialStatus
from autotune.core.target import Target
store = Store(sys.argv[1])
target = Target.from_dict(json.loads(sys.argv[2]))
for bm in (16, 32, 64):
    store.record(target=target, kernel="gemm.triton", source_hash="h", problem=Problem.of("gemm", 16, 64, 64),
                 result=TrialResult(Config(backend="triton", BLOCK_M=bm), TrialStatus.CRASHED, error="x"))
os._exit(9)  # no close, no atexit: as if the process were killed
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(db), json.dumps(H100.to_dict())],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 9, proc.stderr
    with Store(str(db)) as store:
        rows = store.trials()
    assert sorted(int(r.config["BLOCK_M"]) for r in rows) == [16, 32, 64]
    assert {r.status for r in rows} == {TrialStatus.CRASHED}


# -- opening: URLs and clear failures ------------------------------------------------------------------


def test_resolve_url_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    assert resolve_url(None) == f"sqlite:///{tmp_path / 'autotune.db'}"
    monkeypatch.setenv("AUTOTUNE_DB", "from-env.db")
    assert resolve_url(None) == f"sqlite:///{tmp_path / 'from-env.db'}"
    assert resolve_url("given.db") == f"sqlite:///{tmp_path / 'given.db'}"
    assert resolve_url("/abs/x.db") == "sqlite:////abs/x.db"
    assert resolve_url("postgresql+psycopg://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    monkeypatch.setenv("AUTOTUNE_DB", "postgresql+psycopg://h/fleet")
    assert resolve_url(None) == "postgresql+psycopg://h/fleet"
    assert resolve_url(":memory:") == "sqlite:///:memory:"


def test_store_opens_env_database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    with Store() as store:
        put(store, ok(cfg(16), 1.0))
        assert store.url == f"sqlite:///{tmp_path / 'env.db'}"
    assert (tmp_path / "env.db").is_file()


def test_unwritable_path_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file")
    bad = blocker / "autotune.db"
    with pytest.raises(StoreError, match="not a directory") as info:
        Store(str(bad))
    assert str(bad) in str(info.value)
    with pytest.raises(StoreError, match="does not exist"):
        Store(str(tmp_path / "missing" / "autotune.db"))
    with pytest.raises(StoreError, match="is a directory"):
        Store(str(tmp_path))


def test_another_apps_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE foo (x INTEGER)")
    with pytest.raises(StoreError, match="not an autotune database") as info:
        Store(str(path))
    assert "foo" in str(info.value)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(StoreError, match="not an autotune database"):
        Store(str(garbage))


@pytest.mark.parametrize(("found", "message"), [(0, "no migration from it"), (SCHEMA_VERSION + 1, "newer")])
def test_schema_version_mismatch_is_refused(db_url: str, found: int, message: str) -> None:
    Store(db_url).close()
    engine = create_engine(resolve_url(db_url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": str(found)})
    engine.dispose()
    with pytest.raises(StoreError, match=message) as info:
        Store(db_url)
    assert f"schema version {found}" in str(info.value) and str(SCHEMA_VERSION) in str(info.value)


def test_unreachable_server_is_a_store_error_with_the_password_masked() -> None:
    with pytest.raises(StoreError, match="cannot open database") as info:
        Store("postgresql+psycopg://postgres:s3cret@127.0.0.1:1/nothing")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


def test_closed_store_and_memory_store() -> None:
    with Store(":memory:") as store:
        assert put(store, ok(cfg(16), 1.0)) is True
        assert len(store.trials()) == 1
    with pytest.raises(StoreError, match="closed"):
        store.trials()
