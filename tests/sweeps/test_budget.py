"""A time budget for a whole sweep (`autotune sweep --budget 8h`), shared across its problems."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.cli.common import CliError
from autotune.cli.sweep import parse_duration
from autotune.core.target import Target, interpreting
from autotune.db import Store
from autotune.sweeps import parse_spec, run_sweep

SPEC = (
    'name = "b"\n[[sweep]]\nop = "gemm"\nm = [1, 2, 3]\nnk = [[32, 32]]\n'
    'strategy = "exhaustive"\ntrials = 2\n'
)


@pytest.mark.parametrize("text, seconds", [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("600s", 600),
                                           ("2.5h", 9000), ("45", 45), ("1d", 86400)])  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "8 hours", "h", "1h30", "-5m", "0s", "1x"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(CliError, match="--budget"):
        parse_duration(text)


@pytest.mark.skipif(not interpreting(), reason="runs kernels in the CPU interpreter")
def test_a_spent_budget_stops_the_sweep_and_a_rerun_goes_on(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    target = Target.interpreter_target()
    with Store(str(tmp_path / "b.db")) as store:
        report = run_sweep(spec, store, target, budget_s=1e-9)
        assert report.budget_spent and report.interrupted and report.problems == []
        assert store.summary().n_trials == 0
        report = run_sweep(spec, store, target, budget_s=600.0)
        assert not report.budget_spent and len(report.problems) == 3
        assert all(p.ran == 2 for p in report.problems)
        assert store.summary().sweeps_by_status == {"interrupted": 1, "finished": 1}


@pytest.mark.skipif(not interpreting(), reason="runs kernels in the CPU interpreter")
def test_budget_through_the_cli(tmp_path: Path) -> None:
    spec = tmp_path / "b.toml"
    spec.write_text(SPEC)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["sweep", str(spec), "--interpret", "--db", str(tmp_path / "b.db"), "--no-progress",
                     "--budget", "0.000001s"])  # fmt: skip
    assert code == 0 and "time budget spent" in err.getvalue() and "3 problems not started" in err.getvalue()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["sweep", str(spec), "--interpret", "--db", str(tmp_path / "b.db"), "--budget", "1x"])
    assert code == 2
