"""Schema migrations (Alembic): a version-1 database, as autotune wrote it before Alembic, is refused by the
Store with the command that upgrades it; `autotune db upgrade` migrates it (SQLite and PostgreSQL), keeps
its data, and is idempotent; other databases are refused untouched; a new database is at the head."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, create_engine, inspect, text
from sqlalchemy.engine import make_url

from autotune.cli import main
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store, StoreError
from autotune.db.engine import mask_url, resolve_url
from autotune.db.migrations import alembic_config
from autotune.db.models import BASE_VERSION, HEAD_REVISION, REVISIONS, SCHEMA_VERSION, Base

REPO = Path(__file__).resolve().parents[2]

# -- a version-1 database, exactly as autotune created it before Alembic ---------------------------------

# The DDL that `Base.metadata.create_all` of schema version 1 emitted (SQLAlchemy 2, captured from that
# code); {ID} and {TS} are the only differences between SQLite and PostgreSQL.
V1_DDL = """
CREATE TABLE gpus (
    id {ID} NOT NULL, fingerprint VARCHAR(16) NOT NULL, vendor VARCHAR(32) NOT NULL,
    arch VARCHAR(32) NOT NULL, name VARCHAR(255) NOT NULL, cu_count INTEGER NOT NULL,
    xcds INTEGER NOT NULL, memory_bytes BIGINT NOT NULL, llc_bytes BIGINT NOT NULL,
    interpreter BOOLEAN NOT NULL, toolchain TEXT NOT NULL, target_json TEXT NOT NULL,
    created_at {TS} NOT NULL,
    PRIMARY KEY (id), UNIQUE (fingerprint)
);
CREATE TABLE kernels (
    id {ID} NOT NULL, name VARCHAR(128) NOT NULL, source_hash VARCHAR(64) NOT NULL,
    created_at {TS} NOT NULL,
    PRIMARY KEY (id), CONSTRAINT uq_kernels_name_hash UNIQUE (name, source_hash)
);
CREATE TABLE meta ("key" VARCHAR(64) NOT NULL, value VARCHAR(255) NOT NULL, PRIMARY KEY ("key"));
CREATE TABLE problems (
    id {ID} NOT NULL, "key" VARCHAR(255) NOT NULL, op VARCHAR(32) NOT NULL, m BIGINT NOT NULL,
    n BIGINT NOT NULL, k BIGINT NOT NULL, e INTEGER NOT NULL, topk INTEGER NOT NULL,
    dtype_a VARCHAR(32) NOT NULL, dtype_b VARCHAR(32) NOT NULL, dtype_out VARCHAR(32) NOT NULL,
    layout VARCHAR(16) NOT NULL,
    PRIMARY KEY (id), UNIQUE ("key")
);
CREATE TABLE static_features (
    id {ID} NOT NULL, arch VARCHAR(32) NOT NULL, toolchain TEXT NOT NULL,
    toolchain_hash VARCHAR(16) NOT NULL, kernel_id INTEGER NOT NULL, problem_id INTEGER NOT NULL,
    backend VARCHAR(64) NOT NULL, config_json TEXT NOT NULL, config_hash VARCHAR(16) NOT NULL,
    compiled BOOLEAN NOT NULL, features_json TEXT NOT NULL, findings_json TEXT NOT NULL,
    compile_s FLOAT NOT NULL, created_at {TS} NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT uq_static_features_key UNIQUE (arch, toolchain_hash, kernel_id, problem_id, config_hash),
    FOREIGN KEY(kernel_id) REFERENCES kernels (id), FOREIGN KEY(problem_id) REFERENCES problems (id)
);
CREATE TABLE sweeps (
    id {ID} NOT NULL, name VARCHAR(255) NOT NULL, spec_text TEXT NOT NULL, host VARCHAR(255) NOT NULL,
    status VARCHAR(16) NOT NULL, started_at {TS} NOT NULL, finished_at {TS}, gpu_id INTEGER NOT NULL,
    PRIMARY KEY (id), FOREIGN KEY(gpu_id) REFERENCES gpus (id)
);
CREATE TABLE trials (
    id {ID} NOT NULL, sweep_id INTEGER, gpu_id INTEGER NOT NULL, kernel_id INTEGER NOT NULL,
    problem_id INTEGER NOT NULL, backend VARCHAR(64) NOT NULL, config_json TEXT NOT NULL,
    config_hash VARCHAR(16) NOT NULL, status VARCHAR(32) NOT NULL, source VARCHAR(16) NOT NULL,
    time_us FLOAT, min_us FLOAT, p20_us FLOAT, p80_us FLOAT, mean_us FLOAT, std_us FLOAT, runs INTEGER,
    timing_method VARCHAR(16), rel_error FLOAT, error TEXT NOT NULL, compile_s FLOAT NOT NULL,
    measure_s FLOAT NOT NULL, extra TEXT NOT NULL, created_at {TS} NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT uq_trials_key UNIQUE (gpu_id, kernel_id, problem_id, config_hash, source),
    FOREIGN KEY(sweep_id) REFERENCES sweeps (id), FOREIGN KEY(gpu_id) REFERENCES gpus (id),
    FOREIGN KEY(kernel_id) REFERENCES kernels (id), FOREIGN KEY(problem_id) REFERENCES problems (id)
);
CREATE INDEX ix_trials_gpu_problem_status ON trials (gpu_id, problem_id, status);
"""

H100 = Target.for_arch("sm_90")
MI300X = Target.for_arch("gfx942")
P1, P2 = Problem.of("gemm", 16, 4096, 4096), Problem.of("gemm", 1, 64, 64)
TRIAL_COUNTS = {"gpus": 2, "kernels": 2, "problems": 2, "sweeps": 1, "trials": 3, "static_features": 1}


def _engine(db: str) -> Engine:
    return create_engine(resolve_url(db))


def old_key(p: Problem) -> str:
    """`p`'s key as schema versions 1 to 6 stored it: E and topk after M, N and K (0 without experts)."""
    own = dict(p.extra)
    e, topk = own.pop("E", 0), own.pop("topk", 0)
    params = ",".join(f"{k}={v}" for k, v in sorted(own.items()))
    return (
        f"{p.op}:M={p.M},N={p.N},K={p.K},E={e},topk={topk}:{p.dtype_a},{p.dtype_b},{p.dtype_out}:{p.layout}"
        + (f":{params}" if params else "")
    )


def old_fields(p: Problem) -> dict[str, Any]:
    """`p`'s params as schema versions 4 to 6 stored them: E and topk beside the dtypes and layout."""
    own = dict(p.extra)
    fields: dict[str, Any] = {"E": own.pop("E", 0), "topk": own.pop("topk", 0), "dtype_a": p.dtype_a,
                              "dtype_b": p.dtype_b, "dtype_out": p.dtype_out, "layout": p.layout}  # fmt: skip
    if own:
        fields["extra"] = own
    return fields


def make_v1(db: str, *, static_features: bool = True) -> None:
    """A version-1 database with a few rows (without static_features, as before that table joined)."""
    engine = _engine(db)
    postgres = engine.dialect.name == "postgresql"
    ddl = V1_DDL.format(
        ID="SERIAL" if postgres else "INTEGER", TS="TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    )
    ts = "2025-01-02 03:04:05.000000" + ("+00:00" if postgres else "")
    with engine.begin() as conn:
        for statement in filter(str.strip, ddl.split(";")):
            if static_features or "static_features" not in statement:
                conn.exec_driver_sql(statement)
        conn.execute(text("INSERT INTO meta VALUES ('schema_version', '1')"))
        for t in (H100, MI300X):
            conn.execute(
                text(
                    "INSERT INTO gpus (fingerprint, vendor, arch, name, cu_count, xcds, memory_bytes,"
                    " llc_bytes, interpreter, toolchain, target_json, created_at) VALUES (:fp, :vendor,"
                    " :arch, :name, :cu, :xcds, :mem, :llc, :interp, :tc, :tj, :ts)"
                ),
                dict(fp=t.fingerprint(), vendor=t.vendor, arch=t.arch, name=t.name, cu=t.cu_count,
                     xcds=t.xcds, mem=t.memory_bytes, llc=t.llc_bytes, interp=False,
                     tc=json.dumps(t.toolchain, sort_keys=True), tj=json.dumps(t.to_dict(), sort_keys=True),
                     ts=ts),
            )  # fmt: skip
        conn.execute(
            text("INSERT INTO kernels (name, source_hash, created_at) VALUES (:n, :h, :ts)"),
            [dict(n="gemm.triton", h="src-v1", ts=ts), dict(n="gemm.torch", h="torch-v1", ts=ts)],
        )
        for p in (P1, P2):
            conn.execute(
                text(
                    'INSERT INTO problems ("key", op, m, n, k, e, topk, dtype_a, dtype_b, dtype_out, layout)'
                    " VALUES (:key, :op, :m, :n, :k, :e, :topk, :a, :b, :o, :layout)"
                ),
                dict(key=old_key(p), op=p.op, m=p.M, n=p.N, k=p.K, e=0, topk=0, a=p.dtype_a,
                     b=p.dtype_b, o=p.dtype_out, layout=p.layout),
            )  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO sweeps (name, spec_text, host, status, started_at, gpu_id)"
                " VALUES ('night', 'name = \"night\"', 'node7', 'finished', :ts, 1)"
            ),
            dict(ts=ts),
        )
        trial = text(
            "INSERT INTO trials (sweep_id, gpu_id, kernel_id, problem_id, backend, config_json, config_hash,"
            " status, source, time_us, min_us, p20_us, p80_us, mean_us, std_us, runs, timing_method,"
            " rel_error, error, compile_s, measure_s, extra, created_at) VALUES (:sweep, :gpu, :kernel, 1,"
            " :backend, :cj, :ch, :status, 'measured', :t, :t, :t, :t, :t, 0.0, :runs, :method, :rel,"
            " :error, 1.5, 0.25, '{}', :ts)"
        )
        for config, gpu, status, t, error in (
            (Config(backend="triton", BLOCK_M=16), 1, "ok", 12.5, ""),
            (Config(backend="torch"), 1, "ok", 20.0, ""),
            (Config(backend="triton", BLOCK_M=32), 2, "wrong_result", None, "max rel error 0.5 > 0.02"),
        ):
            kernel = 2 if config.backend == "torch" else 1
            conn.execute(
                trial,
                dict(sweep=1, gpu=gpu, kernel=kernel, backend=config.backend, cj=config.canonical(),
                     ch=config.digest(), status=status, t=t, runs=10 if t else None,
                     method="events" if t else None, rel=1e-3 if t else 0.5, error=error, ts=ts),
            )  # fmt: skip
        if static_features:
            conn.execute(
                text(
                    "INSERT INTO static_features (arch, toolchain, toolchain_hash, kernel_id, problem_id,"
                    " backend, config_json, config_hash, compiled, features_json, findings_json, compile_s,"
                    " created_at) VALUES ('gfx942', '{}', 'abc', 1, 2, 'triton', '{}', 'h', :yes, '{}',"
                    " '[]', 0.5, :ts)"
                ),
                dict(yes=True, ts=ts),
            )
    engine.dispose()


# -- helpers ---------------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tables(db: str) -> set[str]:
    engine = _engine(db)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def columns(db: str, table: str) -> set[str]:
    engine = _engine(db)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def counts(db: str) -> dict[str, int]:
    engine = _engine(db)
    with engine.connect() as conn:
        got = {name: conn.execute(text(f"SELECT COUNT(*) FROM {name}")).scalar_one() for name in TRIAL_COUNTS}
    engine.dispose()
    return got


def rows(db: str, table: str) -> list[dict[str, Any]]:
    engine = _engine(db)
    with engine.connect() as conn:
        got = [dict(r._mapping) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1"))]
    engine.dispose()
    return got


def meta_version(db: str) -> str | None:
    engine = _engine(db)
    with engine.connect() as conn:
        value = conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar()
    engine.dispose()
    return value


def schema_differences(db: str, metadata: MetaData = Base.metadata) -> tuple[str | None, list[Any]]:
    """The Alembic revision of the database and what autogenerate finds between it and `metadata`."""
    engine = _engine(db)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        got = ctx.get_current_revision(), compare_metadata(ctx, metadata)
    engine.dispose()
    return got


def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def v1_db(db_url: str) -> Iterator[str]:
    make_v1(db_url)
    yield db_url


# -- the revisions and a new database --------------------------------------------------------------------


def test_each_schema_version_is_one_revision() -> None:
    scripts = script()
    assert scripts.get_heads() == [HEAD_REVISION] == [REVISIONS[SCHEMA_VERSION]]
    chain = list(scripts.walk_revisions())  # head first
    assert {rev.module.schema_version: rev.revision for rev in chain} == REVISIONS
    assert [rev.module.schema_version for rev in reversed(chain)] == list(
        range(BASE_VERSION, SCHEMA_VERSION + 1)
    )
    assert chain[-1].revision == REVISIONS[BASE_VERSION] and chain[-1].down_revision is None


def test_a_new_database_is_at_the_head_with_nothing_pending(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Store(db_url).close()
    assert schema_differences(db_url) == (HEAD_REVISION, [])
    command.check(alembic_config(url=db_url))  # raises AutogenerateDiffsDetected on a pending change
    assert meta_version(db_url) == str(SCHEMA_VERSION)
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"is already at schema version {SCHEMA_VERSION}: nothing to do" in out


def test_the_migrations_alone_build_the_head_schema(db_url: str) -> None:
    """From an empty database, the revisions make exactly what the models describe."""
    if make_url(resolve_url(db_url)).get_backend_name() == "sqlite":
        sqlite3.connect(db_url).close()
    command.upgrade(alembic_config(url=db_url), "head")
    assert schema_differences(db_url) == (HEAD_REVISION, [])
    assert meta_version(db_url) == str(SCHEMA_VERSION)
    with Store(db_url) as store:
        assert store.summary().schema_version == SCHEMA_VERSION


def test_the_baseline_revision_is_the_version1_schema(v1_db: str) -> None:
    """The frozen tables of the baseline revision are exactly those autotune created before Alembic."""
    baseline = script().get_revision(REVISIONS[BASE_VERSION])
    assert baseline is not None
    assert schema_differences(v1_db, baseline.module._V1) == (None, [])
    assert schema_differences(v1_db)[1], "the head differs from version 1: the test would prove nothing"


# -- a version-1 database --------------------------------------------------------------------------------


def test_the_store_refuses_a_version1_database_naming_the_upgrade(v1_db: str) -> None:
    where = mask_url(resolve_url(v1_db))
    with pytest.raises(StoreError) as info:
        Store(v1_db)
    assert str(info.value) == (
        f"database {where} has schema version 1, this autotune needs {SCHEMA_VERSION}: "
        f"run `autotune db upgrade --db {shlex.quote(where)}` (back it up first)"
    )
    assert "alembic_version" not in tables(v1_db) and meta_version(v1_db) == "1"  # nothing written


def test_upgrade_migrates_a_version1_database_and_keeps_its_data(
    v1_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {name: rows(v1_db, name) for name in TRIAL_COUNTS}
    assert counts(v1_db) == TRIAL_COUNTS

    code, out, err = run_cli(capsys, "db", "upgrade", "--db", v1_db)
    assert (code, err) == (0, "")
    assert (
        out == f"upgraded database {mask_url(resolve_url(v1_db))} from schema version 1 to {SCHEMA_VERSION}\n"
    )

    assert counts(v1_db) == TRIAL_COUNTS
    for name, old in before.items():
        new = rows(v1_db, name)
        if name == "problems":  # version 4: the fields other than op, m, n and k moved into params;
            # version 7: E and topk are the moe's own parameters, in neither params nor key of a GEMM
            assert [r["key"] for r in new] == [P1.key(), P2.key()]
            assert [r["params"] for r in new] == [P1.params_json(), P2.params_json()]
            moved = {"dtype_a": "dtype_a", "dtype_b": "dtype_b", "dtype_out": "dtype_out", "layout": "layout"}
            new = [{**{k: v for k, v in r.items() if k != "params"}, "e": 0, "topk": 0, "key": old_key(p),
                    **{col: json.loads(r["params"])[field] for col, field in moved.items()}}
                   for r, p in zip(new, (P1, P2), strict=True)]  # fmt: skip
        assert [{k: r[k] for k in old[0]} for r in new] == old, name  # every old value, unchanged
    assert [r["host"] for r in rows(v1_db, "trials")] == [None, None, None]
    assert meta_version(v1_db) == str(SCHEMA_VERSION)
    assert schema_differences(v1_db) == (HEAD_REVISION, [])

    with Store(v1_db) as store:
        assert store.summary().schema_version == SCHEMA_VERSION
        ok = {r.config.short(): (r.status, r.time_us) for r in store.trials()}
        assert len(ok) == 3 and (TrialStatus.OK, 12.5) in ok.values()
        assert (TrialStatus.WRONG_RESULT, None) in ok.values()
        best = store.best(P1, fingerprint=H100.fingerprint())
        assert [(r.config.backend, r.time_us) for r in best] == [("triton", 12.5), ("torch", 20.0)]
        result = TrialResult(Config(backend="triton", BLOCK_M=64), TrialStatus.OK,
                             timing=Timing(9.0, 9.0, 9.0, 9.0, 9.0, 0.0, 3, "events"))  # fmt: skip
        assert store.record(
            target=H100, kernel="gemm.triton", source_hash="src-v1", problem=P1, result=result
        )
    assert rows(v1_db, "trials")[-1]["host"] == socket.gethostname()

    code, out, err = run_cli(capsys, "db", "upgrade", "--db", v1_db)
    assert (code, err) == (0, "")
    assert out.strip().endswith(f"is already at schema version {SCHEMA_VERSION}: nothing to do")


def test_upgrade_adopts_a_version1_database_without_static_features(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_v1(db_url, static_features=False)
    assert "static_features" not in tables(db_url)
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and "from schema version 1 to" in out
    assert schema_differences(db_url) == (HEAD_REVISION, [])
    assert {k: v for k, v in counts(db_url).items() if k != "static_features"} == {
        k: v for k, v in TRIAL_COUNTS.items() if k != "static_features"
    }


def test_an_upgrade_that_fails_changes_nothing(v1_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The baseline is adopted, then version 2 fails (its column is already there): all rolled back."""
    engine = _engine(v1_db)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE static_features")
        conn.exec_driver_sql("ALTER TABLE trials ADD COLUMN host VARCHAR(255)")
    engine.dispose()
    before = tables(v1_db)
    code, out, err = run_cli(capsys, "db", "upgrade", "--db", v1_db)
    assert code == 2 and out == ""
    assert err.startswith("autotune db: error: cannot upgrade database ") and "nothing was changed" in err
    assert err.count("\n") == 1
    assert tables(v1_db) == before  # neither static_features nor alembic_version was kept
    assert meta_version(v1_db) == "1"


def test_a_damaged_version1_database_is_refused(v1_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    engine = _engine(v1_db)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE gpus DROP COLUMN xcds")
    engine.dispose()
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", v1_db)
    assert code == 2 and "its table gpus lacks the columns xcds of schema version 1" in err
    assert "alembic_version" not in tables(v1_db) and meta_version(v1_db) == "1"


def test_downgrade_then_upgrade_again(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Versions 2, 3 and 4 are reversible (SQLite drops columns by copying the table in batch mode, or in
    place for ``problems``)."""
    with Store(db_url) as store:
        result = TrialResult(
            Config(backend="torch"), TrialStatus.OK, timing=Timing(5.0, 5, 5, 5, 5, 0, 3, "events")
        )
        store.record(target=H100, kernel="gemm.torch", source_hash="t", problem=P2, result=result)
        sweep = store.start_sweep("s", "", H100, problems_total=3, workers=2, log_path="s.log")
        store.touch_sweep(sweep, trials_done=7, problems_done=1)
    command.downgrade(alembic_config(url=db_url), REVISIONS[2])
    assert "params" not in columns(db_url, "problems") and "layout" in columns(db_url, "problems")
    assert "heartbeat_at" not in columns(db_url, "sweeps") and "host" in columns(db_url, "trials")
    assert meta_version(db_url) == "2"
    command.downgrade(alembic_config(url=db_url), REVISIONS[1])
    assert "host" not in columns(db_url, "trials")
    assert meta_version(db_url) == "1"
    with pytest.raises(StoreError, match="autotune db upgrade"):
        Store(db_url)
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"from schema version 1 to {SCHEMA_VERSION}" in out
    with Store(db_url) as store:
        assert [r.time_us for r in store.trials()] == [5.0]
        [row] = store.sweeps()
        assert (row.name, row.problems_total, row.trials_done, row.log_path) == ("s", None, None, None)


def test_two_upgrades_at_once_run_one_after_the_other(v1_db: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "autotune.cli", "db", "upgrade", "--db", v1_db]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    said = sorted(
        "already" if "already" in out else "upgraded" if "upgraded" in out else out for out, _ in outs
    )
    assert said == ["already", "upgraded"]
    assert schema_differences(v1_db) == (HEAD_REVISION, [])


# -- databases that are not to be upgraded ---------------------------------------------------------------


def test_upgrade_refuses_a_database_that_is_not_autotunes(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = _engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE foo (x INTEGER)")
        conn.exec_driver_sql("INSERT INTO foo VALUES (42)")
    engine.dispose()
    path = Path(db_url)
    sqlite = make_url(resolve_url(db_url)).get_backend_name() == "sqlite"
    before = fingerprint(path) if sqlite else None
    code, out, err = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 2 and out == ""
    assert "is not an autotune database (it has tables foo but no `meta` table)" in err
    assert err.count("\n") == 1
    assert tables(db_url) == {"foo"} and rows(db_url, "foo") == [{"x": 42}]
    if sqlite:
        assert fingerprint(path) == before  # not even switched to WAL
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_upgrade_refuses_what_is_no_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", str(missing))
    assert code == 2 and f"there is no database at {missing}" in err
    assert not missing.exists()  # not created
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    before = fingerprint(garbage)
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", str(garbage))
    assert code == 2 and "not an autotune database" in err and fingerprint(garbage) == before
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", str(empty))
    assert code == 2 and "is empty, not an autotune database" in err and tables(str(empty)) == set()


def test_upgrade_refuses_a_newer_database(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Store(db_url).close()
    engine = _engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": str(SCHEMA_VERSION + 1)}
        )
    engine.dispose()
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 2
    assert (
        f"has schema version {SCHEMA_VERSION + 1}, newer than this autotune supports ({SCHEMA_VERSION})"
        in err
    )
    assert meta_version(db_url) == str(SCHEMA_VERSION + 1)


def test_a_current_database_with_a_wrong_revision_is_damaged(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Store(db_url).close()
    engine = _engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM alembic_version"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"alembic_version \[\].*it is damaged"):
        Store(db_url)
    code, _, err = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 2 and "it is damaged" in err


def test_a_version3_database_upgrades_and_answers_best_the_same(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database of schema version 3 (the release before problems were stored generically), holding a
    dense, an MoE and a quantized problem, made by downgrading one written now: `autotune best` prints
    the same after `autotune db upgrade` as before the downgrade, and every field of every problem is
    carried over."""
    problems = [
        Problem.of("gemm", 16, 4096, 4096),
        Problem.of("gemm", 64, 1024, 512, "fp16", layout="kn"),
        Problem.of("moe", 32, 1536, 4096, variant="fp8e4m3", E=128, topk=8),
        Problem.quant("gemm_fp8_blockwise", 16, 7168, 2048),
    ]
    with Store(db_url) as store:
        for i, problem in enumerate(problems):
            for backend, us in (("torch", 20.0 + i), ("triton", 12.5 + i)):
                result = TrialResult(Config(backend=backend, BLOCK_M=16 * (i + 1)), TrialStatus.OK,
                                     timing=Timing(us, us, us, us, us, 0.0, 3, "graph"))  # fmt: skip
                store.record(target=H100, kernel=f"{problem.op}.{backend}", source_hash="v",
                             problem=problem, result=result)  # fmt: skip

    def best(problem: Problem) -> str:
        flags = ["--op", problem.op, "--m", str(problem.M), "--n", str(problem.N), "--k", str(problem.K)]
        if problem.op == "moe":
            own = dict(problem.extra)
            flags += ["--e", str(own["E"]), "--topk", str(own["topk"]), "--weights", problem.dtype_b]
        elif problem.op == "gemm":
            flags += ["--dtype", problem.dtype_a, "--layout", problem.layout]
        code, out, err = run_cli(capsys, "best", "--db", db_url, *flags)
        assert code == 0 and "triton" in out, err
        return out

    before = [best(p) for p in problems]
    command.downgrade(alembic_config(url=db_url), REVISIONS[3])
    assert meta_version(db_url) == "3" and "layout" in columns(db_url, "problems")
    v3 = {r["key"]: r for r in rows(db_url, "problems")}
    assert set(v3) == {old_key(p) for p in problems}
    with pytest.raises(StoreError, match="autotune db upgrade"):
        Store(db_url)
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"from schema version 3 to {SCHEMA_VERSION}" in out
    assert [best(p) for p in problems] == before
    by_key = {p.key(): p for p in problems}
    assert {r["key"] for r in rows(db_url, "problems")} == set(by_key)
    for row in rows(db_url, "problems"):
        old = v3[old_key(by_key[row["key"]])]
        experts = {"extra": {"E": old["e"], "topk": old["topk"]}} if old["e"] else {}
        assert json.loads(row["params"]) == {
            "dtype_a": old["dtype_a"], "dtype_b": old["dtype_b"], "dtype_out": old["dtype_out"],
            "layout": old["layout"], **experts,
        }  # fmt: skip


def test_a_version4_database_upgrades_to_shared_sweeps(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Schema version 5 adds `claims`: a version 4 database (made by downgrading) has no such table, is
    refused naming the upgrade, and after `autotune db upgrade` keeps its sweeps and takes claims."""
    with Store(db_url) as store:
        sweep = store.start_sweep("night", "", H100)
        assert store.claim("w", "gemm:M=1", sweep) == "claimed"
    command.downgrade(alembic_config(url=db_url), REVISIONS[4])
    assert meta_version(db_url) == "4" and "claims" not in inspect(_engine(db_url)).get_table_names()
    with pytest.raises(StoreError, match="autotune db upgrade"):
        Store(db_url)
    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"from schema version 4 to {SCHEMA_VERSION}" in out
    with Store(db_url) as store:
        assert [s.name for s in store.sweeps()] == ["night"]
        assert store.claim("w", "gemm:M=1", sweep) == "claimed" and store.held([sweep]) == {
            sweep: ["gemm:M=1"]
        }


# -- version 7: the MoE's E and topk are its own parameters ----------------------------------------------

V6_GEMM = Problem.of("gemm", 16, 4096, 4096)
V6_PROBLEMS = [
    V6_GEMM,
    Problem.of("gemm", 64, 1024, 512, "fp16", layout="kn"),
    Problem.of("moe", 32, 1536, 4096, E=128, topk=8),
    Problem.of("moe", 32, 1536, 4096, variant="fp8e4m3", E=128, topk=8),
    Problem.of("moe", 32, 1536, 1, E=128, topk=1),  # an imported file's config whose K and topk were unknown
    Problem.of("mla_decode", 4, 512, 576, heads=16, context=256, kv_dtype="bf16", page_size=16),
    Problem.quant("gemm_fp8_blockwise", 16, 7168, 2048),
]
V6_MOE, V6_UNKNOWN, V6_MLA = V6_PROBLEMS[2], V6_PROBLEMS[4], V6_PROBLEMS[5]
#: The claims of a shared sweep: (item, done), by a problem's key, a profile's, and an item of no key.
V6_CLAIMS = [(old_key(V6_MOE), True), ("profile:" + old_key(V6_MOE.with_m(1)), False),
             ("gemm:M=1", False), (old_key(V6_MLA), False)]  # fmt: skip


def make_v6(db: str) -> None:
    """A database of schema version 6, built by the revisions up to it, with rows written as version 6
    wrote them (SQL): every kind of problem, a trial of each (the unknown shape's imported), a static
    feature, a sweep and its claims."""
    if make_url(resolve_url(db)).get_backend_name() == "sqlite":
        sqlite3.connect(db).close()
    command.upgrade(alembic_config(url=db), REVISIONS[6])
    engine = _engine(db)
    ts = "2025-01-02 03:04:05.000000" + ("+00:00" if engine.dialect.name == "postgresql" else "")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO gpus (fingerprint, vendor, arch, name, cu_count, xcds, memory_bytes, llc_bytes,"
                " interpreter, toolchain, target_json, created_at) VALUES (:fp, :vendor, :arch, :name, :cu,"
                " :xcds, :mem, :llc, :interp, :tc, :tj, :ts)"
            ),
            dict(fp=H100.fingerprint(), vendor=H100.vendor, arch=H100.arch, name=H100.name, cu=H100.cu_count,
                 xcds=H100.xcds, mem=H100.memory_bytes, llc=H100.llc_bytes, interp=False,
                 tc=json.dumps(H100.toolchain, sort_keys=True), tj=json.dumps(H100.to_dict(), sort_keys=True),
                 ts=ts),
        )  # fmt: skip
        conn.execute(
            text("INSERT INTO kernels (name, source_hash, created_at) VALUES ('k.triton', 'v', :ts)"),
            dict(ts=ts),
        )
        for i, p in enumerate(V6_PROBLEMS):
            conn.execute(
                text('INSERT INTO problems ("key", op, m, n, k, params) VALUES (:key, :op, :m, :n, :k, :p)'),
                dict(key=old_key(p), op=p.op, m=p.M, n=p.N, k=p.K,
                     p=json.dumps(old_fields(p), sort_keys=True, separators=(",", ":"))),
            )  # fmt: skip
            config = Config(backend="triton", BLOCK_M=16 * (i + 1))
            conn.execute(
                text(
                    "INSERT INTO trials (gpu_id, kernel_id, problem_id, backend, config_json, config_hash,"
                    " status, source, time_us, error, compile_s, measure_s, extra, created_at) VALUES (1, 1,"
                    " :problem, 'triton', :cj, :ch, 'ok', :source, :t, '', 0.5, 0.25, '{}', :ts)"
                ),
                dict(problem=i + 1, cj=config.canonical(), ch=config.digest(), t=10.0 + i, ts=ts,
                     source="imported" if p == V6_UNKNOWN else "measured"),
            )  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO static_features (arch, toolchain, toolchain_hash, kernel_id, problem_id,"
                " backend, config_json, config_hash, compiled, features_json, findings_json, compile_s,"
                " created_at) VALUES ('sm_90', '{}', 'abc', 1, 3, 'triton', '{}', 'h', :yes, '{}', '[]', 0.5,"
                " :ts)"
            ),
            dict(yes=True, ts=ts),
        )
        conn.execute(
            text(
                "INSERT INTO sweeps (name, spec_text, host, status, started_at, gpu_id)"
                " VALUES ('shared', '', 'node7', 'running', :ts, 1)"
            ),
            dict(ts=ts),
        )
        for item, done in V6_CLAIMS:
            conn.execute(
                text(
                    "INSERT INTO claims (work, item, sweep_id, lease_until, done, claimed_at)"
                    " VALUES ('w', :item, 1, :ts, :done, :ts)"
                ),
                dict(item=item, done=done, ts=ts),
            )
    engine.dispose()


def test_a_version6_database_upgrades_with_every_problem_s_params_and_key(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Schema version 7 moves the MoE's E and topk from every problem's params into the moe's own
    parameters and out of every key (the claims' items too): after `autotune db upgrade` each row is
    the problem of this autotune, trials and all, a Store reads it, and a downgrade gives back version 6's
    rows exactly."""
    make_v6(db_url)
    counted = ("gpus", "kernels", "problems", "trials", "static_features", "sweeps", "claims")
    before = {name: rows(db_url, name) for name in counted}
    assert [r["key"] for r in before["problems"]][:3] == [
        "gemm:M=16,N=4096,K=4096,E=0,topk=0:bf16,bf16,bf16:nk",
        "gemm:M=64,N=1024,K=512,E=0,topk=0:fp16,fp16,fp16:kn",
        "moe:M=32,N=1536,K=4096,E=128,topk=8:bf16,bf16,bf16:nk",
    ]
    with pytest.raises(StoreError, match="autotune db upgrade"):
        Store(db_url)

    code, out, _ = run_cli(capsys, "db", "upgrade", "--db", db_url)
    assert code == 0 and f"from schema version 6 to {SCHEMA_VERSION}" in out
    assert meta_version(db_url) == str(SCHEMA_VERSION) == "7"
    assert schema_differences(db_url) == (HEAD_REVISION, [])
    after = {name: rows(db_url, name) for name in counted}
    for name in counted:  # every row kept; nothing but the problems' keys and params, the claims' items
        changed = {"problems": ("key", "params"), "claims": ("item",)}.get(name, ())
        assert [{k: v for k, v in r.items() if k not in changed} for r in after[name]] == [
            {k: v for k, v in r.items() if k not in changed} for r in before[name]
        ], name
    assert [r["key"] for r in after["problems"]] == [p.key() for p in V6_PROBLEMS]
    assert [r["params"] for r in after["problems"]] == [p.params_json() for p in V6_PROBLEMS]
    assert after["problems"][2]["key"] == "moe:M=32,N=1536,K=4096:bf16,bf16,bf16:nk:E=128,topk=8"
    assert after["problems"][5]["key"] == (
        "mla_decode:M=4,N=512,K=576:bf16,bf16,bf16:nk:context=256,heads=16,kv_dtype=bf16,page_size=16"
    )
    for r, p in zip(after["problems"], V6_PROBLEMS, strict=True):
        assert Problem.from_params(r["op"], r["m"], r["n"], r["k"], r["params"]) == p
    assert [r["item"] for r in after["claims"]] == [
        V6_MOE.key(),
        "profile:" + V6_MOE.with_m(1).key(),
        "gemm:M=1",
        V6_MLA.key(),
    ]

    with Store(db_url) as store:
        for i, p in enumerate(V6_PROBLEMS):
            source = Source.IMPORTED if p == V6_UNKNOWN else Source.MEASURED
            [best] = store.best(p, fingerprint=H100.fingerprint(), source=source)
            assert (best.problem, best.time_us, best.config["BLOCK_M"]) == (p, 10.0 + i, 16 * (i + 1))
        imported = store.trials(problem=V6_MOE, source=Source.IMPORTED)  # the unknown shape's counts
        assert [r.problem for r in imported] == [V6_UNKNOWN]
        sweep = store.start_sweep("again", "", H100)
        assert store.claim("w", V6_MOE.key(), sweep) == "done"  # finished before the upgrade: still
        assert store.claim("w", V6_MLA.key(), sweep) == "claimed"

    command.downgrade(alembic_config(url=db_url), REVISIONS[6])
    assert meta_version(db_url) == "6"
    assert rows(db_url, "problems") == before["problems"]
    assert [r["item"] for r in rows(db_url, "claims")] == [item for item, _ in V6_CLAIMS]


def test_version7_keys_of_every_form() -> None:
    """The revision's own rewrite of keys and params, both ways, on forms no database above holds."""
    rev = script().get_revision(REVISIONS[7])
    assert rev is not None
    v7 = rev.module
    for p in [*V6_PROBLEMS, Problem.of("moe", 1, 64, 128, variant="mxfp4", E=8, topk=2)]:
        assert v7.new_key(old_key(p)) == p.key() and v7.old_key(p.key()) == old_key(p)
        old = json.dumps(old_fields(p), sort_keys=True, separators=(",", ":"))
        assert v7.new_params(old) == p.params_json() and v7.old_params(p.params_json()) == old
        assert v7.new_key(p.key()) == p.key() and v7.old_key(old_key(p)) == old_key(p)  # no twice
    for other in ("gemm:M=1", "", "profile:", "w:x:y"):
        assert v7.new_key(other) == other == v7.old_key(other)
