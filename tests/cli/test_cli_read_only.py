"""The verbs that only read (status, best, diff, report, plan, export, emit) open the database read-only: a
copy, a file of mode 0444 or one in a read-only folder is inspected, and left exactly as it was; a writable
one too, with no -wal or -shm file left beside it."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.core.target import interpreting
from autotune.db import Store, StoreError

SPEC = """
name = "ro"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 16]
nk = [[64, 64]]
strategy = "exhaustive"
trials = 3
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database one small interpreter sweep wrote."""
    root = tmp_path_factory.mktemp("ro")
    (root / "spec.toml").write_text(SPEC)
    db = root / "made.db"
    argv = ["sweep", str(root / "spec.toml"), "--interpret", "--executor", "inline", "--db", str(db),
            "--no-progress", "--log-dir", str(root / "logs")]  # fmt: skip
    assert main(argv) == 0
    return db


@pytest.fixture
def locked(swept: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of `swept` of mode 0444 in a folder of mode 0555."""
    folder = tmp_path / "locked"
    folder.mkdir()
    copy = folder / "copy.db"
    copy.write_bytes(swept.read_bytes())
    copy.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield copy
    finally:
        folder.chmod(0o755)
        copy.chmod(0o644)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(not interpreting(), reason="the database is made by an interpreter sweep")
def test_read_only_verbs_read_a_locked_copy_and_change_nothing(
    locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (_digest(locked), sorted(os.listdir(locked.parent)), stat.S_IMODE(locked.stat().st_mode))
    db = ["--db", str(locked)]
    assert main(["status", *db]) == 0
    assert "trials    6" in capsys.readouterr().out.replace("\t", " ")
    assert main(["best", "--m", "16", "--n", "64", "--k", "64", *db]) == 0
    assert "gemm M=16 N=64 K=64" in capsys.readouterr().out
    assert main(["export", "--out", str(tmp_path / "csv"), *db]) == 0
    assert len(list((tmp_path / "csv").iterdir())) == 1
    assert main(["emit", "--out", str(tmp_path / "t.json"), *db]) == 0
    assert (tmp_path / "t.json").exists()
    capsys.readouterr()
    after = (_digest(locked), sorted(os.listdir(locked.parent)), stat.S_IMODE(locked.stat().st_mode))
    assert after == before  # the same bytes, no -wal or -shm beside it


def test_a_read_only_store_refuses_to_write(swept: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    copy.write_bytes(swept.read_bytes())
    with Store(str(copy), read_only=True) as store:
        [sweep] = store.sweeps()
        with pytest.raises(StoreError, match="readonly"):
            store.finish_sweep(sweep.id, "failed")
    with Store(str(copy)) as store:
        assert [s.status for s in store.sweeps()] == ["finished"]


def test_read_only_opens_no_missing_file_and_no_empty_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--db", str(tmp_path / "none.db")]) == 2
    assert "no database at" in capsys.readouterr().err and not (tmp_path / "none.db").exists()
    (tmp_path / "empty.db").write_bytes(b"")
    assert main(["best", "--m", "1", "--n", "64", "--k", "64", "--db", str(tmp_path / "empty.db")]) == 2
    assert "is not an autotune database" in capsys.readouterr().err


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.skipif(not interpreting(), reason="the database is made by an interpreter sweep")
def test_read_only_verbs_leave_no_files_beside_a_writable_database(
    swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    db = folder / "copy.db"
    db.write_bytes(swept.read_bytes())
    before = (_digest(db), _listing(folder))
    shown = ["--db", str(db)]
    for argv in (
        ["status", *shown],
        ["best", "--m", "16", "--n", "64", "--k", "64", *shown],
        ["emit", "--out", str(tmp_path / "t.json"), *shown],
        ["report", "--out", str(tmp_path / "r.html"), *shown],
        ["diff", str(db), str(swept)],
        ["plan", str(swept.parent / "spec.toml"), "--interpret", "--no-progress", *shown],
    ):
        assert main(argv) in (0, 1), argv  # diff: the same winners on both sides
        assert (_digest(db), _listing(folder)) == before, argv  # no -wal, no -shm
    capsys.readouterr()
    # a -wal left empty (a writer's, or one a crash left): read through a -shm made for the moment
    Path(f"{db}-wal").write_bytes(b"")
    before = (_digest(db), _listing(folder))
    assert main(["status", *shown]) == 0
    assert "trials    6" in capsys.readouterr().out.replace("\t", " ")
    assert (_digest(db), _listing(folder)) == before


def _holder(db: Path) -> subprocess.Popen[str]:
    """Another process that holds `db` open in WAL mode (its -wal and -shm) until its stdin closes."""
    script = (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(db)!r})\n"
        "c.execute('PRAGMA journal_mode = WAL')\n"
        "c.execute('SELECT count(*) FROM sqlite_master').fetchall()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_files_another_process_uses_are_never_removed(tmp_path: Path) -> None:
    from autotune.db.engine import _unused

    db = tmp_path / "held.db"
    Store(str(db)).close()
    shm = Path(f"{db}-shm")
    assert _unused(shm)  # no -shm: nobody has it open
    proc = _holder(db)
    try:
        assert shm.exists() and not _unused(shm)
        with Store(str(db), read_only=True) as store:  # -wal there: read through the holder's -shm
            assert store.sweeps() == []
        assert shm.exists() and Path(f"{db}-wal").exists()  # the holder's: left
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    assert not shm.exists() or _unused(shm)


def test_a_shm_this_process_made_is_removed_once_it_is_closed(tmp_path: Path) -> None:
    import autotune.db.engine as engine

    db = tmp_path / "made.db"
    Store(str(db)).close()
    Path(f"{db}-wal").write_bytes(b"")  # a -wal, no -shm: SQLite makes one to read through
    first = Store(str(db), read_only=True)
    second = Store(str(db), read_only=True)
    assert first.summary() is not None and second.summary() is not None
    assert Path(f"{db}-shm") in engine._made.get(db, set())
    first.close()
    assert db in engine._open  # the second still reads it: nothing removed yet
    second.close()
    assert _listing(tmp_path) == ["made.db", "made.db-wal"] and db not in engine._made
