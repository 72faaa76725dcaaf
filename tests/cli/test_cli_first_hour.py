"""More of a new user's first hour: the interpreter's cost said before it runs, untuned shapes of no GPU,
`sweep --untuned` on a machine without one, the sweep table's pruned and failed columns, prune counts
of configs, and a --dtype no sweep can tune."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.cli import main
from autotune.core.static import StaticFinding
from autotune.core.target import interpreting
from autotune.db import Store

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU fallback: this host has a GPU")


def spec(path: Path, nks: list[tuple[int, int]], trials: int = 2) -> Path:
    tables = "".join(
        f'\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[{n}, {k}]]\nstrategy = "exhaustive"\ntrials = {trials}\n'
        for n, k in nks
    )
    path.write_text('name = "first-hour"\n' + tables)
    return path


def test_plan_interpret_estimates_the_interpreters_own_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.sweeps.estimate import INTERPRETER_LAUNCH_S, INTERPRETER_PROGRAM_S

    rng = random.Random(11)
    small, big = rng.choice([32, 64]), rng.choice([1024, 2048])
    path = spec(tmp_path / "s.toml", [(small, small), (big, big)])
    assert main(["plan", str(path), "--interpret", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "interpreter" and not doc["compile_only"]
    est = {row["N"]: row["est_s"] / row["trials"] for row in doc["problems"]}
    # each trial launches at least twice (the correctness check, one timed run), each of one program or more
    assert est[small] >= 2 * (INTERPRETER_LAUNCH_S + INTERPRETER_PROGRAM_S) - 0.05
    assert est[big] > 10 * est[small]  # the interpreter's cost follows the program instances it runs
    assert main(["plan", str(path), "--interpret", "--target", "gfx942"]) == 2
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.skipif(not interpreting(), reason="runs a sweep in-process in the CPU interpreter")
def test_an_interpreter_sweep_says_what_it_costs_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = spec(tmp_path / "s.toml", [(16, 16)], trials=1)
    argv = [
        "sweep",
        str(path),
        "--interpret",
        "--db",
        str(tmp_path / "i.db"),
        "--no-progress",
        "--log-dir",
        "none",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    note = next(i for i, line in enumerate(out) if "trials left, about" in line)
    table = next(i for i, line in enumerate(out) if line.startswith("problem"))
    assert note < table and "1 trials left" in out[note] and "--target ARCH" in out[note]


def test_the_interpreter_times_one_run_after_its_check() -> None:
    from autotune.engine.bench import BenchSettings

    s = BenchSettings.for_interpreter()
    assert (s.warmup, s.min_reps, s.max_reps) == (0, 1, 1)


def _log(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _record(m: int, n: int, k: int, device_key: str | None) -> dict[str, object]:
    return {
        "op": "gemm",
        "m": m,
        "n": n,
        "k": k,
        "e": 0,
        "topk": 0,
        "dtype": "bf16",
        "layout": "nk",
        "device_key": device_key,
    }


@no_gpu
def test_untuned_shapes_of_no_gpu_are_left_out_and_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep --untuned` with no GPU falls back to compile-only (as `sweep SPEC` does); shapes logged by a
    process on no GPU are not this target's."""
    rng = random.Random(12)
    unkeyed = [_record(rng.randint(1, 64), 512, 1024, None) for _ in range(3)]
    log = _log(tmp_path / "untuned.jsonl", unkeyed)
    db = tmp_path / "u.db"
    argv = ["sweep", "--untuned", str(log), "--db", str(db), "--no-progress", "--log-dir", "none"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "no GPU here: a compile-only sweep for gfx942" in captured.out
    assert "3 logged shapes came from a process that ran on no GPU" in captured.err
    assert "no untuned shapes of this GPU" in captured.err
    for target in ("gfx950", "sm_90"):  # an explicit target takes none of them either
        assert main([*argv, "--target", target]) == 2
        assert "ran on no GPU" in capsys.readouterr().err


@no_gpu
def test_untuned_without_a_gpu_tunes_the_compile_targets_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = Target.for_arch("gfx942").device_key()
    log = _log(tmp_path / "untuned.jsonl", [_record(16, 512, 1024, key), _record(8, 256, 256, None)])
    db, logs = tmp_path / "u.db", tmp_path / "logs"
    argv = [
        "sweep",
        "--untuned",
        str(log),
        "--db",
        str(db),
        "--no-progress",
        "--log-dir",
        str(logs),
        "--workers",
        "2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "compile-only sweep 'untuned': 1 problems" in out
    assert "1 logged shape came from a process that ran on no GPU" in out
    with Store(str(db)) as store:
        assert {t.problem for t in store.trials()} == {Problem.of("gemm", 16, 512, 1024)}
        [sweep] = store.sweeps()
    # a compile-only sweep writes its log file, as a measured one does, and its row names it
    assert sweep.log_path is not None and Path(sweep.log_path).is_file()
    assert f"log: {logs}" in out and Path(sweep.log_path).parent == logs.resolve()
    header = next(line for line in out.splitlines() if line.startswith("problem"))
    row = next(line for line in out.splitlines() if line.startswith("16x512x1024"))
    cells = dict(zip(re.split(r"\s{2,}", header), re.split(r"\s{2,}", row), strict=True))
    assert cells["failed"] == "0" and cells["compiled"] == "8"  # compiled, not run: nothing failed
    assert main(["status", "--db", str(db)]) == 0
    assert sweep.log_path in capsys.readouterr().out


def test_prune_counts_count_each_config_once() -> None:
    from autotune.engine.predict import Candidate, ProblemCheck

    rng = random.Random(13)
    checks = ["spills", "lds", "occupancy"]
    compiled = []
    for i in range(20):
        found = [StaticFinding(c, "r") for c in rng.sample(checks, rng.randint(0, 3))]
        compiled.append(Candidate(Config(backend="triton", BLOCK_M=16 * (i + 1)), 1.0, findings=found))
    check = ProblemCheck(
        Problem.of("gemm", 16, 64, 64), Target.for_arch("gfx942"), 20, 20, constraint_pruned={}
    )
    check.compiled = compiled
    assert sum(check.static_pruned.values()) == check.n_pruned == sum(1 for c in compiled if c.findings)
    first: dict[str, int] = {}
    for c in compiled:
        if c.findings:
            first[c.findings[0].check] = first.get(c.findings[0].check, 0) + 1
    assert check.static_pruned == first


def test_best_refuses_a_dtype_no_sweep_tunes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "d.db"
    Store(str(db)).close()
    shape = ["--m", "16", "--n", "256", "--k", "256", "--db", str(db)]
    for flags in (["--dtype", "fp32"], ["--op", "moe", "--e", "8", "--topk", "2", "--dtype", "fp32"]):
        assert main(["best", *shape, *flags]) == 2
        err = capsys.readouterr().err
        assert "is tuned in bf16 or fp16 only" in err and "not fp32" in err
    assert main(["best", *shape, "--dtype", "fp16"]) == 1  # a dtype sweeps tune: nothing stored yet
    assert "tune it with `autotune sweep`" in capsys.readouterr().out


def test_a_bar_nothing_updates_still_ticks_until_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long phase without steps (a compile pool starting, say) redraws its time every tick, so it never
    looks stalled; a closed bar draws nothing more."""
    import io
    import sys
    import time

    from autotune.cli import common

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setattr(common, "TICK_S", 0.05)
    bar = common.progress(None, False, desc="starting compile processes")
    time.sleep(0.5)
    drawn = screen.getvalue().count("starting compile processes")
    bar.close()
    assert drawn >= 4  # drawn at once, then about once a tick
    closed = screen.getvalue()
    time.sleep(0.2)
    assert screen.getvalue() == closed
