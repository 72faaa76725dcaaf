"""The verbs that only read (status, best, export, emit) open the database read-only: a copy, a file of
mode 0444 or one in a read-only folder is inspected, and left exactly as it was."""

from __future__ import annotations

import hashlib
import os
import stat
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
