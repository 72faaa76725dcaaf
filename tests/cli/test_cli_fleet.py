"""The fleet side of the CLI: worker and executor flags, the sweep's log file, status across hosts."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import torch

from autotune.cli import main
from autotune.core.target import Target, interpreting
from autotune.db import Store

TINY = """\
name = "tiny"

[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 16]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 3
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpus", "x"], "--gpus 'x': give indices like 0,1,3 or 0-3, or all"),
        (["--gpus", "0,0"], "an index repeats"),
        (["--gpus", "0", "--device", "0"], "--gpus and --device exclude each other"),
        (["--address", "auto"], "--address goes with --executor ray"),
        (["--target", "gfx942", "--gpus", "0"], "--target is a compile-only sweep"),
        (["--target", "gfx942", "--executor", "ray"], "--target is a compile-only sweep"),
        (["--interpret", "--trial-timeout", "0"], "--trial-timeout must be positive"),
        (["--interpret", "--executor", "inline", "--gpus", "0,1"], "the inline executor runs on one GPU"),
    ],
)
def test_bad_worker_flags_are_one_clear_error(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code = main(["sweep", str(spec), "--db", str(tmp_path / "a.db"), "--no-progress", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "a.db").exists()  # nothing started


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a GPU")
def test_a_gpu_index_on_a_machine_without_gpus_is_refused(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sweep", str(spec), "--db", str(tmp_path / "a.db"), "--gpus", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "no GPU visible to torch" in err


@pytest.mark.skipif(not interpreting(), reason="runs the kernels in the CPU interpreter")
def test_the_sweep_log_holds_every_trial_and_status_shows_where_it_is(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, logs = tmp_path / "a.db", tmp_path / "logs"
    argv = ["sweep", str(spec), "--interpret", "--db", str(db), "--no-progress", "--log-dir", str(logs)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    [log] = [p for p in logs.iterdir() if p.name.count(".") == 1]
    assert f"log: {log}" in out
    text = log.read_text()
    assert text.count(" | ") >= 2 * 6  # one line per trial: problem | config | result
    assert "done gemm M=1 N=32 K=32" in text and "done gemm M=16 N=32 K=32" in text
    assert (logs / f"{log.stem}.cpu0.log").exists()  # the worker's own output

    assert main(["status", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "finished" in shown and str(log.resolve()) in shown and "2/2" in shown


def test_status_lists_the_sweeps_of_every_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fleet.db"
    target = Target.for_arch("sm_90")
    with Store(str(db)) as store:
        live = store.start_sweep("night-a", "", target, problems_total=40, workers=8, log_path="/logs/a.log")
        store.touch_sweep(live, trials_done=1234, problems_done=17)
        dead = store.start_sweep("night-b", "", target, problems_total=10, workers=1)
        done = store.start_sweep("night-c", "", target, problems_total=3, workers=1)
        store.finish_sweep(done, "finished")
    old = (datetime.now(timezone.utc) - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S.000000")
    con = sqlite3.connect(db)
    with con:  # as other hosts wrote them: one alive, one killed two hours ago
        con.execute("UPDATE sweeps SET host = 'gpu-node-7', pid = 4242 WHERE id = ?", (live,))
        con.execute(
            "UPDATE sweeps SET host = 'gpu-node-9', pid = 99, heartbeat_at = ? WHERE id = ?", (old, dead)
        )
    con.close()
    assert main(["status", "--db", str(db)]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if "night-" in line}
    assert rows["night-a"].split()[2:5] == ["running", "gpu-node-7:4242", "NVIDIA"]
    assert "17/40" in rows["night-a"] and "1234" in rows["night-a"] and "/logs/a.log" in rows["night-a"]
    assert rows["night-b"].split()[2:4] == ["stale", "gpu-node-9:99"]
    assert rows["night-c"].split()[2] == "finished"
    assert main(["status", "--db", str(db), "--running"]) == 0
    running = [line.split()[1] for line in capsys.readouterr().out.splitlines() if "night-" in line]
    assert running == ["night-b", "night-a"]  # marked running, newest first (one of them stale)
