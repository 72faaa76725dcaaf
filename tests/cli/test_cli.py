"""The `autotune` command line end to end: sweep (CPU interpreter), best, export, emit, status, Ctrl-C."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.dense.api as api
from autotune import Config, Problem, Target
from autotune.cli import main
from autotune.core.result import TrialStatus
from autotune.core.target import interpreting
from autotune.db import Store
from autotune.dispatch import Dispatcher, Table
from autotune.engine.bench import Benchmarker
from autotune.kernels import launch_config

needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs sweeps in-process in the CPU interpreter (TRITON_INTERPRET=1)"
)

SMOKE = """\
name = "smoke"

[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 16]
nk = [[64, 64]]
strategy = "exhaustive"
trials = 6
"""

# Eight problems of ten trials: long enough in the interpreter to be interrupted part-way.
BIG = """\
name = "big"

[[sweep]]
op = "gemm"
m = [1, 2, 3, 4, 5, 6, 7, 8]
nk = [[64, 64]]
strategy = "exhaustive"
trials = 10
"""

P16 = Problem.of("gemm", 16, 64, 64)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def copy_db(src: Path, dst: Path) -> Path:
    """Copies a SQLite database with its WAL files, if any."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


def run_cli(*argv: str) -> tuple[int, str, str]:
    """main(argv) with stdout and stderr captured (for module-scoped fixtures, where capsys is absent)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def trial_count(db: Path) -> int:
    with Store(str(db)) as store:
        return len(store.trials())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, str]:
    """The smoke sweep run once into a fresh database: (db, exit code, stdout, stderr). Read-only."""
    if not interpreting():
        pytest.skip("runs sweeps in-process in the CPU interpreter (TRITON_INTERPRET=1)")
    tmp = tmp_path_factory.mktemp("smoke")
    spec = write(tmp / "smoke.toml", SMOKE)
    db = tmp / "a.db"
    code, out, err = run_cli("sweep", str(spec), "--interpret", "--db", str(db), "--no-progress")
    return db, code, out, err


@pytest.fixture
def smoke_db(smoke: tuple[Path, int, str, str]) -> Path:
    assert smoke[1] == 0, smoke[3]
    return smoke[0]


# -- sweep --------------------------------------------------------------------------------------------


def test_smoke_sweep_stores_twelve_interpreter_trials(smoke: tuple[Path, int, str, str]) -> None:
    db, code, out, err = smoke
    assert code == 0, err
    assert "sweep 'smoke': 2 problems on Triton CPU interpreter" in out
    assert "12 trials run, 0 read back from the database" in out
    with Store(str(db)) as store:
        trials = store.trials()
        gpus = store.gpus()
        summary = store.summary()
    assert len(trials) == 12
    assert all(t.status is TrialStatus.OK for t in trials), [t.error for t in trials if not t.ok]
    assert sorted(t.problem.M for t in trials) == [1] * 6 + [16] * 6
    assert {t.problem for t in trials} == {Problem.of("gemm", 1, 64, 64), P16}
    assert {t.backend for t in trials} == {"torch", "triton"}
    assert all(t.timing is not None and t.timing.method == "wallclock" for t in trials)
    assert len(gpus) == 1 and gpus[0].interpreter and gpus[0].target.interpreter
    assert gpus[0].fingerprint == Target.interpreter_target().fingerprint()
    assert all(t.gpu.interpreter for t in trials)
    assert summary.sweeps_by_status == {"finished": 1}


@needs_interpreter
def test_rerun_runs_nothing(smoke_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = copy_db(smoke_db, tmp_path / "a.db")
    with Store(str(db)) as store:
        before = [(t.id, t.config, t.timing) for t in store.trials()]
    spec = write(tmp_path / "smoke.toml", SMOKE)
    assert main(["sweep", str(spec), "--interpret", "--db", str(db), "--no-progress"]) == 0
    assert "0 trials run, 12 read back from the database" in capsys.readouterr().out
    with Store(str(db)) as store:
        assert [(t.id, t.config, t.timing) for t in store.trials()] == before
        assert store.summary().sweeps_by_status == {"finished": 2}


# -- best / export / emit / status -------------------------------------------------------------------


def test_best_lists_vendor_and_triton(smoke_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "--m", "16", "--n", "64", "--k", "64", "--db", str(smoke_db)]) == 0
    out = capsys.readouterr().out
    assert "gemm M=16 N=64 K=64 bf16 B:nk on Triton CPU interpreter" in out and "[interpreter" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\d+\s", line)]
    assert [int(r[0]) for r in rows] == list(range(1, 6))  # --limit defaults to 5
    assert {r[1] for r in rows} == {"torch", "triton"}
    with Store(str(smoke_db)) as store:
        fastest = store.best(P16, limit=1)[0]
    assert rows[0][1] == fastest.backend and rows[0][2] == fastest.config.canonical()


def test_best_unknown_shape_exits_1(smoke_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "--m", "17", "--n", "64", "--k", "64", "--db", str(smoke_db)]) == 1
    assert "no measured results for gemm M=17 N=64 K=64" in capsys.readouterr().out


def test_best_bad_gpu_prefix_is_a_usage_error(smoke_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", "--m", "16", "--n", "64", "--k", "64", "--gpu", "abc", "--db", str(smoke_db)]) == 2
    assert "too short" in capsys.readouterr().err


def test_export_writes_one_csv(smoke_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "tuned"
    assert main(["export", "--out", str(out_dir), "--db", str(smoke_db)]) == 0
    files = sorted(out_dir.iterdir())
    assert len(files) == 1 and files[0].suffix == ".csv"
    assert f"wrote {files[0]}" in capsys.readouterr().out
    with files[0].open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["m"]) for r in rows) == [1, 16]
    assert all(r["interpreter"] == "True" and r["n"] == "64" and r["k"] == "64" for r in rows)
    with Store(str(smoke_db)) as store:
        best16 = store.best(P16, limit=1)[0]
    row16 = next(r for r in rows if r["m"] == "16")
    assert row16["backend"] == best16.backend and float(row16["time_us"]) == pytest.approx(best16.time_us)


@pytest.fixture
def quiet_dispatch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)
    monkeypatch.setenv("AUTOTUNE_UNTUNED_LOG", str(tmp_path / "untuned.jsonl"))
    monkeypatch.setattr(dispatcher_mod, "_default", None)
    monkeypatch.setattr(api, "_plans", {})
    yield


@needs_interpreter
def test_emit_table_serves_the_best_config(
    smoke_db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    quiet_dispatch: None,
) -> None:
    path = tmp_path / "t.json"
    assert main(["emit", "--out", str(path), "--db", str(smoke_db)]) == 0
    assert (
        f"wrote {path}: 1 shape served by 2 M buckets (M policy round_up) (measured)"
        in capsys.readouterr().out
    )
    table = Table.load(path)
    assert table.target.interpreter and table.fingerprint == Target.interpreter_target().fingerprint()
    with Store(str(smoke_db)) as store:
        best = {m: store.best(Problem.of("gemm", m, 64, 64), limit=1)[0].config for m in (1, 16)}
    assert table.lookup("gemm", 16, 64, 64) == best[16]
    assert table.lookup("gemm", 1, 64, 64) == best[1]
    # gemm() serves that config once the table is loaded.
    target = Target.interpreter_target()
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 64, generator=gen).to(torch.bfloat16)
    b = torch.randn(64, 64, generator=gen).to(torch.bfloat16)
    assert torch.equal(api.gemm(a, b), launch_config(best[16], a, b))


def test_emit_on_empty_db_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.db import Store

    out = tmp_path / "t.json"
    Store(str(tmp_path / "empty.db")).close()
    assert main(["emit", "--out", str(out), "--db", str(tmp_path / "empty.db")]) == 2
    assert "run `autotune sweep` first" in capsys.readouterr().err
    assert not out.exists()


def test_status_prints_counts(smoke_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--db", str(smoke_db)]) == 0
    out = capsys.readouterr().out
    for pattern in (r"gpus\s+1\b", r"problems\s+2\b", r"sweeps\s+1 \(finished 1\)", r"trials\s+12 \(ok 12\)"):
        assert re.search(pattern, out), (pattern, out)
    assert "2 problems tuned, 12 trials (12 ok)" in out


@needs_interpreter
def test_a_spec_s_final_rounds_time_the_finalists_again_and_export_their_medians(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`final_rounds` set in the spec runs the final round even in the interpreter (off there by
    default): our two fastest configs and torch's timed again per problem, their medians exported."""
    from autotune.core.result import Source

    spec = write(tmp_path / "final.toml", SMOKE.replace("m = [1, 16]", "m = [16]") + "final_rounds = 2\n")
    db = tmp_path / "f.db"
    assert main(["sweep", str(spec), "--interpret", "--db", str(db), "--no-progress"]) == 0
    assert "* the final round's pick" in capsys.readouterr().out
    assert main(["best", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64", "--db", str(db)]) == 0
    assert "final round (2 rounds, head to head" in capsys.readouterr().out
    with Store(str(db)) as store:
        measured = store.trials(source=Source.MEASURED)
        finals = store.trials(source=Source.FINAL)
        winner = store.winners(final=True)[0]
    ours = sorted((t for t in measured if t.backend != "torch"), key=lambda t: t.time_us or 0.0)
    assert len(measured) == 6
    assert {t.config for t in finals} == {ours[0].config, ours[1].config, Config(backend="torch")}
    assert all(t.ok and len(t.extra["round_us"]) == 2 for t in finals)
    assert winner.best.source is Source.FINAL
    out_dir = tmp_path / "csv"
    assert main(["export", "--out", str(out_dir), "--db", str(db)]) == 0
    with next(out_dir.iterdir()).open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["time_us"]) == pytest.approx(winner.best.time_us)


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU fallback")
def test_sweep_without_a_gpu_is_compile_only_for_gfx942(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton")
    spec = write(tmp_path / "one.toml", 'name = "one"\n[static]\ncandidates = 1\n'
                 '[[sweep]]\nop = "gemm"\nm = [16]\nnk = [[256, 512]]\n')  # fmt: skip
    db = tmp_path / "a.db"
    assert main(["sweep", str(spec), "--db", str(db), "--no-progress", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no GPU here: a compile-only sweep for gfx942") and "--interpret" in out
    with Store(str(db)) as store:
        trials = store.trials()
    assert (
        trials
        and {t.source.value for t in trials} == {"model"}
        and {t.gpu.arch for t in trials} == {"gfx942"}
    )


def test_db_under_a_regular_file_exits_2(
    smoke_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bad --db is named; neither the file in the way nor the $AUTOTUNE_DB database is touched."""
    env_db = copy_db(smoke_db, tmp_path / "env.db")
    monkeypatch.setenv("AUTOTUNE_DB", str(env_db))
    monkeypatch.chdir(tmp_path)
    blocker = write(tmp_path / "blocker", "not a folder\n")
    bad = blocker / "a.db"
    spec = write(tmp_path / "smoke.toml", SMOKE)
    assert main(["sweep", str(spec), "--interpret", "--db", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a directory" in err
    assert blocker.read_text() == "not a folder\n"
    assert not (tmp_path / "autotune.db").exists()
    with Store(str(env_db)) as store:
        assert len(store.trials()) == 12 and store.summary().sweeps_by_status == {"finished": 1}


def test_db_that_is_not_a_database_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"some notes, not SQLite\n" * 10)
    spec = write(tmp_path / "smoke.toml", SMOKE)
    assert main(["sweep", str(spec), "--interpret", "--db", str(notes), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(notes) in err and "not an autotune database" in err
    assert notes.read_bytes() == b"some notes, not SQLite\n" * 10


@pytest.mark.parametrize(
    "text, message",
    [
        (SMOKE.replace('"exhaustive"', '"grid"'), "unknown strategy 'grid'"),
        (SMOKE + 'backends = ["cuda"]\n', "unknown gemm backend 'cuda'"),
        (SMOKE.replace("[1, 16]", "[1, 0]"), "`m` must be positive, got 0"),
        ("name = 'x'\n[[sweep]\n", "not valid TOML"),
    ],
    ids=["strategy", "backend", "zero-m", "toml"],
)
def test_malformed_spec_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    spec = write(tmp_path / "bad.toml", text)
    db = tmp_path / "a.db"
    assert main(["sweep", str(spec), "--interpret", "--db", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune sweep: error:") and message in err and str(spec) in err
    assert not db.exists()  # validated before the database is opened


def test_missing_spec_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["sweep", str(missing), "--interpret", "--db", str(tmp_path / "a.db")]) == 2
    assert f"{missing}: no such spec file" in capsys.readouterr().err


def test_binary_spec_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bin.toml"
    spec.write_bytes(b"\xff\xfe\x00\x80")
    assert main(["sweep", str(spec), "--interpret", "--db", str(tmp_path / "a.db")]) == 2
    assert str(spec) in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "usage: autotune"),
        (["best", "--m", "0", "--n", "64", "--k", "64"], "M must be a positive integer"),
        (["best", "--m", "1", "--n", "64", "--k", "64", "--limit", "0"], "--limit must be positive"),
        (["emit", "--out", "t.json", "--m-policy", "middle"], "unknown --m-policy 'middle'"),
    ],
)
def test_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    db = ["--db", str(tmp_path / "a.db")] if argv else []
    assert main(argv + db) == 2
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


# -- Ctrl-C -------------------------------------------------------------------------------------------


def interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Makes Benchmarker.run raise KeyboardInterrupt (as Ctrl-C would) on its call number n + 1."""
    real = Benchmarker.run
    calls = {"n": 0}

    def run(self: Benchmarker, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > n:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Benchmarker, "run", run)


@needs_interpreter
def test_interrupt_keeps_finished_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt_after(monkeypatch, 3)
    spec = write(tmp_path / "big.toml", BIG)
    db = tmp_path / "a.db"
    argv = ["sweep", str(spec), "--interpret", "--executor", "inline", "--db", str(db), "--no-progress"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "run the same command to resume" in err
    with Store(str(db)) as store:
        assert len(store.trials()) == 3 and all(t.ok for t in store.trials())
        assert store.summary().sweeps_by_status == {"interrupted": 1}


@needs_interpreter
def test_interrupt_message_counts_stored_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt_after(monkeypatch, 3)
    spec = write(tmp_path / "big.toml", BIG)
    argv = ["sweep", str(spec), "--interpret", "--executor", "inline", "--db", str(tmp_path / "a.db")]
    assert main([*argv, "--no-progress"]) == 130
    assert "interrupted: 3 trials run and stored" in capsys.readouterr().err


def _stored(db: Path) -> list[tuple[Any, ...]]:
    """(id, problem m, config hash, status, time_us, timing method) of every trial, read-only."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(
            "SELECT t.id, p.m, t.config_hash, t.status, t.time_us, t.timing_method "
            "FROM trials t JOIN problems p ON t.problem_id = p.id ORDER BY t.id"
        ).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        con.close()


@needs_interpreter
def test_sigint_stops_cleanly_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C on a running `autotune sweep`: exit 130, every stored trial whole, the sweep marked
    interrupted; running again reads the stored trials back instead of re-running them."""
    # 32 problems of 10 trials: more than a loaded machine finishes between the third stored trial and
    # the signal
    many_m = str(list(range(1, 33)))
    spec = write(tmp_path / "big.toml", BIG.replace("[1, 2, 3, 4, 5, 6, 7, 8]", many_m))
    db = tmp_path / "a.db"
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [
        sys.executable,
        "-m",
        "autotune.cli",
        "sweep",
        str(spec),
        "--interpret",
        "--db",
        str(db),
        "--no-progress",
    ]
    # A test run started in the background (`cmd &` in a script) inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: the sweep gets Ctrl-C's default handling back first.
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        seen: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 120
        while len(seen) < 3:
            assert proc.poll() is None, f"sweep ended before it was interrupted: {proc.communicate()}"
            assert time.monotonic() < deadline, "no 3 trials stored within 120 s"
            time.sleep(0.05)
            seen = _stored(db) if db.exists() else []
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "run the same command to resume" in err
    assert "Traceback" not in err

    after = _stored(db)
    assert set(seen) <= set(after)  # nothing finished was lost or changed
    statuses = {s.value for s in TrialStatus}
    for _id, _m, _hash, status, time_us, method in after:
        assert status in statuses
        assert status != "ok" or (time_us is not None and time_us > 0 and method == "wallclock")
    assert len(after) < 320
    with Store(str(db)) as store:
        assert store.summary().sweeps_by_status == {"interrupted": 1}

    # Resume a problem the sweep had begun (problems go longest first): its stored trials are read back,
    # the rest run.
    begun = min((row for row in after if row[1] is not None), key=lambda row: row[0])[1]
    stored_m = {row[2] for row in after if row[1] == begun}
    assert stored_m
    resume = write(tmp_path / "m.toml", BIG.replace("[1, 2, 3, 4, 5, 6, 7, 8]", f"[{begun}]"))
    assert main(["sweep", str(resume), "--interpret", "--db", str(db), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert f"{10 - len(stored_m)} trials run, {len(stored_m)} read back from the database" in text
    final = _stored(db)
    assert set(after) <= set(final)
    m = [row[2] for row in final if row[1] == begun]
    assert len(m) == len(set(m)) == 10  # no trial run twice


@needs_interpreter
def test_sweep_untuned_log_tunes_logged_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quiet_dispatch: None
) -> None:
    """gemm() on an untuned shape logs it; `sweep --untuned LOG` then tunes exactly that shape."""
    import os

    from autotune.kernels import gemm

    a, b = torch.randn(3, 32).bfloat16(), torch.randn(16, 32).bfloat16()
    with pytest.warns(UserWarning):
        gemm(a, b)
    log = os.environ["AUTOTUNE_UNTUNED_LOG"]
    db = tmp_path / "u.db"
    rc = main(
        [
            "sweep",
            "--untuned",
            log,
            "--trials",
            "2",
            "--strategy",
            "exhaustive",
            "--interpret",
            "--db",
            str(db),
            "--no-progress",
        ]
    )
    assert rc == 0
    with Store(str(db)) as store:
        trials = store.trials()
    assert {(t.problem.M, t.problem.N, t.problem.K) for t in trials} == {(3, 16, 32)}
    assert len(trials) == 2
    assert main(["sweep", "--interpret", "--db", str(db)]) == 2
    assert "either a SPEC.toml or --untuned" in capsys.readouterr().err
