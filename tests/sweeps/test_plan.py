"""`autotune plan` and the sweep-duration estimate."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from autotune import Problem, Target
from autotune.cli import main
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.db import Store
from autotune.engine.bench import BenchSettings
from autotune.sweeps import parse_spec
from autotune.sweeps.estimate import FIXED_TRIAL_S, plan_sweep, trial_seconds

SPEC = """\
name = "p"

[[sweep]]
op = "gemm"
m = [16, 4096]
nk = [[4096, 4096]]
strategy = "exhaustive"
trials = 20
"""


def test_trial_seconds_follows_the_settings() -> None:
    s = BenchSettings(precision=None)
    short, long = trial_seconds(5.0, s, 15e-6), trial_seconds(2000.0, s, 15e-6)
    assert FIXED_TRIAL_S < short < long
    # A 2 ms kernel is timed min_reps..max_reps times to reach target_time_s (0.15 s): 75 runs.
    assert long == pytest.approx(FIXED_TRIAL_S + (s.warmup + 1) * 2e-3 + 75 * (2e-3 + 110e-6 + 15e-6))
    assert trial_seconds(5.0, BenchSettings(flush=False, precision=None), 15e-6) < short
    # With a precision target a steady kernel gets 2 x min_reps runs.
    steady = trial_seconds(2000.0, BenchSettings(), 15e-6)
    assert steady == pytest.approx(FIXED_TRIAL_S + (s.warmup + 1) * 2e-3 + 2 * s.min_reps * (2e-3 + 125e-6))
    # A raced config gets min_reps timed runs only.
    raced = trial_seconds(2000.0, s, 15e-6, raced=True)
    assert raced == pytest.approx(FIXED_TRIAL_S + (s.warmup + 1) * 2e-3 + s.min_reps * (2e-3 + 125e-6))


def test_plan_counts_configs_racing_stops_early() -> None:
    spec = parse_spec(SPEC.replace("m = [16, 4096]", "m = [4096]").replace("trials = 20", "trials = 60"))
    target = Target.for_arch("sm_90")
    racing = plan_sweep(spec, target, workers=64)[0].est_s
    full = plan_sweep(spec, target, workers=64, settings=BenchSettings(race=None, precision=None))[0].est_s
    assert 0 < racing < 0.9 * full


def test_plan_of_a_measured_sweep_counts_what_is_stored(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    h100 = Target.for_arch("sm_90")
    rows = plan_sweep(spec, h100, workers=16)
    assert [r.problem for r in rows] == [Problem.gemm(16, 4096, 4096), Problem.gemm(4096, 4096, 4096)]
    assert all(r.trials == 20 and r.done == 0 and r.valid > 20 and r.raw >= r.valid for r in rows)
    assert all(20 * FIXED_TRIAL_S < r.est_s < 60 for r in rows)
    assert rows[1].est_s > rows[0].est_s  # 4096 rows: longer kernels, more time per timed run
    from autotune.kernels import GEMM

    first = GEMM.space(rows[0].problem, h100).configs()[:3]
    timing = Timing(10.0, 10.0, 10.0, 10.0, 10.0, 0.0, 10, "graph")
    with Store(str(tmp_path / "p.db")) as store:
        for config in first:
            result = TrialResult(config, TrialStatus.OK, timing=timing)
            kernel, source_hash = f"gemm.{config.backend}", GEMM.source_hash(config.backend)
            store.record(
                target=h100, kernel=kernel, source_hash=source_hash, problem=rows[0].problem, result=result
            )
        again = plan_sweep(spec, h100, store=store, workers=16)
    assert again[0].done == 3 and again[0].est_s < rows[0].est_s and again[1].done == 0


def test_plan_command_json_for_a_compile_only_target(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "p.toml"
    spec.write_text(SPEC)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plan", str(spec), "--target", "gfx942", "--json", "--workers", "2"])
    assert code == 0
    doc = json.loads(out.getvalue())
    assert doc["compile_only"] and doc["target"] == "gfx942" and len(doc["problems"]) == 2
    assert all(p["trials"] == 8 and p["est_s"] > 0 for p in doc["problems"])  # [static] candidates
    assert not (tmp_path / "autotune.db").exists(), "planning creates no database"


def test_plan_rejects_a_bad_spec(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.replace('op = "gemm"', 'op = "conv"'))
    assert main(["plan", str(spec), "--target", "gfx942"]) == 2
    assert "conv" in capsys.readouterr().err


def test_vendor_configs_cost_no_compile() -> None:
    spec = parse_spec(SPEC.replace("trials = 20", 'trials = 1\nbackends = ["torch"]'))
    rows = plan_sweep(spec, Target.for_arch("sm_90"), workers=1)
    assert all(r.trials == 1 and r.valid == 1 and r.est_s < 1.0 for r in rows)


def test_makespan_shares_problems_longest_first() -> None:
    from autotune.sweeps.estimate import makespan

    assert makespan([2.0, 2.0, 2.0, 2.0], 4) == 2.0
    assert makespan([5.0, 4.0, 3.0, 3.0, 3.0], 2) == 10.0  # 5+3 and 4+3+3, as the sweep's queue does it
    assert makespan([5.0, 4.0, 3.0], 1) == 12.0
    assert makespan([], 3) == 0.0
    with pytest.raises(ValueError, match="at least 1"):
        makespan([1.0], 0)


def test_plan_gpus_must_be_positive(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "p.toml"
    spec.write_text(SPEC)
    assert main(["plan", str(spec), "--target", "gfx942", "--gpus", "0"]) == 2
    assert "--gpus must be at least 1" in capsys.readouterr().err
