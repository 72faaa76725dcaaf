"""`autotune plan` and the sweep-duration estimate."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from autotune import Config, Problem, Target
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
    assert [r.problem for r in rows] == [
        Problem.of("gemm", 16, 4096, 4096),
        Problem.of("gemm", 4096, 4096, 4096),
    ]
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


def test_a_trial_estimated_near_the_timeout_counts_the_whole_of_it() -> None:
    from autotune.sweeps.estimate import TIMEOUT_RISK, WORKER_START_S, timed_out_s

    rng = random.Random(29)
    timeout = rng.uniform(60.0, 600.0)
    short, near, over = (rng.uniform(0.01, TIMEOUT_RISK) * timeout, rng.uniform(TIMEOUT_RISK, 1.0) * timeout,
                         rng.uniform(1.0, 10.0) * timeout)  # fmt: skip
    assert timed_out_s(short, timeout) == short and timed_out_s(over, None) == over
    assert timed_out_s(near, timeout) == timed_out_s(over, timeout) == timeout + WORKER_START_S
    # the interpreter's trials of a 1024-wide GEMM run seconds each: a timeout of a few counts every one
    spec = parse_spec(SPEC.replace("m = [16, 4096]", "m = [16]").replace("[[4096, 4096]]", "[[1024, 1024]]")
                      .replace("trials = 20", "trials = 3"))  # fmt: skip
    interp = Target.interpreter_target()
    free = plan_sweep(spec, interp)[0]
    assert plan_sweep(spec, interp, trial_timeout_s=1e9)[0].est_s == free.est_s
    capped = plan_sweep(spec, interp, trial_timeout_s=0.01)[0]
    assert capped.est_s == pytest.approx(capped.trials * (0.01 + WORKER_START_S))


def test_a_compile_only_plan_counts_waves_of_the_heaviest_compile_and_the_pools_start() -> None:
    from autotune.sweeps.estimate import POOL_START_S, compile_seconds

    gfx942 = Target.for_arch("gfx942")
    problem = Problem.of("gemm", 4096, 4096, 4096)
    small = Config(backend="triton", BLOCK_M=16, BLOCK_N=16, num_warps=4)
    big = Config(backend="triton", BLOCK_M=256, BLOCK_N=256, num_warps=4)
    assert compile_seconds(gfx942, problem, big) > 2 * compile_seconds(gfx942, problem, small) > 0
    assert compile_seconds(gfx942, problem, big, 2) == pytest.approx(
        2 * compile_seconds(gfx942, problem, big)
    )
    assert compile_seconds(gfx942, problem, Config(backend="torch")) == 0.0  # the vendor's: nothing
    assert compile_seconds(Target.interpreter_target(), problem, big) == 0.0
    spec = parse_spec(SPEC.replace("m = [16, 4096]", "m = [4096]"))  # [static] candidates: 8 a problem
    by_workers = {w: plan_sweep(spec, gfx942, compile_only=True, workers=w)[0].est_s for w in (1, 3, 8, 64)}
    wave = by_workers[8] - POOL_START_S
    assert wave > 0 and by_workers[64] == by_workers[8]  # one wave: as long as its heaviest compile
    assert by_workers[3] - POOL_START_S == pytest.approx(3 * wave)  # 3 + 3 + 2
    assert by_workers[1] - POOL_START_S == pytest.approx(8 * wave)
    two = plan_sweep(parse_spec(SPEC), gfx942, compile_only=True, workers=8)
    alone = plan_sweep(
        parse_spec(SPEC.replace("m = [16, 4096]", "m = [16]")), gfx942, compile_only=True, workers=8
    )
    assert two[0].est_s == alone[0].est_s  # the pool starts once, before the first compile
    assert two[1].est_s == pytest.approx(by_workers[8] - POOL_START_S)


def test_the_defaults_a_sweep_compiles_first_count_unless_their_verdicts_are_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.core.static import StaticFeatures
    from autotune.engine import verdicts as verdicts_module
    from autotune.engine.verdicts import Verdicts, known_only
    from autotune.kernels import GEMM
    from autotune.sweeps.estimate import compile_seconds

    def never(*_: object) -> StaticFeatures:
        raise AssertionError("planning compiles nothing")

    rng = random.Random(31)
    n, k = 16 * rng.randint(200, 400), 16 * rng.randint(200, 400)  # a shape of this test alone
    spec = parse_spec(SPEC.replace("m = [16, 4096]", "m = [4096]").replace("[[4096, 4096]]", f"[[{n}, {k}]]"))
    gfx942 = Target.for_arch("gfx942")
    fake = Verdicts(
        None, features_of=never, key_of=lambda op, p, c, t: c.canonical(), checkable=lambda t: True
    )
    monkeypatch.setattr(verdicts_module, "_verdicts", fake)
    monkeypatch.setattr(verdicts_module, "can_check", lambda target: True)
    with known_only():
        unknown = plan_sweep(spec, gfx942, compile_only=True, workers=2)[0].est_s
        problem = Problem.of("gemm", 4096, n, k)
        first = GEMM.default_candidates(problem, gfx942)[0]
        key = fake.key(GEMM, problem, first, gfx942)
        assert key is not None
        fake._keep(gfx942, key, GEMM, first, StaticFeatures(arch="gfx942", occupancy=2))
        known = plan_sweep(spec, gfx942, compile_only=True, workers=2)[0].est_s
    assert unknown - known == pytest.approx(compile_seconds(gfx942, problem, first) / 2)


def test_plan_compiles_no_default(compile_per_arch: Any, tmp_path: Path) -> None:
    """A GEMM at M = 4096 whose rule's pick spills on gfx942: a sweep compiles its candidates first;
    `autotune plan` compiles none, from an empty verdict cache (in a process that can compile)."""
    spec = tmp_path / "p.toml"
    spec.write_text(SPEC.replace("m = [16, 4096]", "m = [4096]"))
    script = """
import contextlib, io
from autotune.cli import main
from autotune.engine.verdicts import verdicts
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["plan", json.loads(sys.argv[2]), "--target", target.arch, "--json", "--no-progress"])
print(json.dumps({"code": code, "compiled": verdicts().compiled, "plan": json.loads(out.getvalue())}))
"""
    cache = tmp_path / "verdicts"
    found = compile_per_arch(script, ("gfx942",), str(spec), env={"AUTOTUNE_VERDICT_CACHE": str(cache)})
    doc = found["gfx942"]
    if "skip" in doc:
        pytest.skip(doc["skip"])
    assert doc["code"] == 0 and doc["compiled"] == 0 and not cache.exists()
    assert doc["plan"]["problems"][0]["trials"] == 8


def test_a_config_compiling_more_source_costs_more() -> None:
    from autotune.core.registry import get_op
    from autotune.sweeps.estimate import _compiled_source

    gfx942 = Target.for_arch("gfx942")
    gemm, moe = Problem.of("gemm", 256, 4096, 4096), Problem.of("moe", 256, 7168, 4096, E=8, topk=2)
    sizes = {}
    for problem in (gemm, moe):
        op = get_op(problem.op)
        sizes[problem.op] = _compiled_source(op, problem, op.default_candidates(problem, gfx942)[0], gfx942)
    assert sizes["gemm"] == pytest.approx(1.0, rel=0.2)  # the dense GEMM's one kernel: the unit
    assert sizes["moe"] > 2.5  # the fused MoE: two launches (gate/up, then down) of a longer kernel
