"""What a new user hits first: a damaged database, a closed pipe, a mistyped --db, a table another user
must read, and tests that must not touch the user's own files."""

from __future__ import annotations

import os
import random
import stat
import sys
from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.cli import main
from autotune.core.result import Source
from autotune.db import NewTrial, Store

GPU = Target.for_arch("sm_90")


def _database(path: Path, problems: int = 300) -> None:
    """A database of `problems` measured vendor trials (several pages of trials)."""
    from autotune.core.op import kernel_versions
    from autotune.kernels import GEMM

    kernels = kernel_versions(GEMM, GEMM.backends(GPU))
    rng = random.Random(0)
    trials = []
    for m in range(1, problems + 1):
        t = 5.0 + rng.random()
        result = TrialResult(
            Config(backend="torch"), TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "graph")
        )
        trials.append(
            NewTrial(GPU, *kernels["torch"], Problem.of("gemm", m, 64, 64), result, Source.MEASURED)
        )
    with Store(str(path)) as store:
        store.record_many(trials)


def test_a_damaged_database_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "d.db"
    _database(db)
    size = db.stat().st_size
    with db.open("r+b") as f:  # the header and the schema intact, the last pages garbled
        f.seek(size - 8192)
        f.write(random.Random(1).randbytes(8192))
    for argv in (["status"], ["best", "--op", "gemm", "--m", "290", "--n", "64", "--k", "64"]):
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert "malformed" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_closed_pipe_ends_quietly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "p.db"
    _database(db, problems=3)
    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) has gone
    saved = os.dup(sys.stdout.fileno())
    try:
        monkeypatch.setattr(sys, "stdout", os.fdopen(write, "w", buffering=1))  # each line flushed
        assert main(["status", "--db", str(db)]) == 0
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def test_read_only_verbs_do_not_create_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo.db"
    for argv in (["status"], ["best", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64"]):
        assert main([*argv, "--db", str(typo)]) == 2
        assert f"no database at {typo}" in capsys.readouterr().err
    assert not typo.exists()


def test_an_emitted_table_is_readable_by_other_users(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    _database(db, problems=2)
    old = os.umask(0o022)
    try:
        assert main(["emit", "--db", str(db), "--out", str(tmp_path / "t.json")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t.json").stat().st_mode) == 0o644


def test_tests_never_write_the_users_untuned_log() -> None:
    from autotune.dispatch.dispatcher import untuned_log_path

    assert not untuned_log_path().is_relative_to(Path.home() / ".cache")


def test_best_shows_predictions_where_nothing_is_measured_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.core.op import kernel_versions
    from autotune.kernels import GEMM

    rng = random.Random(17)
    kernels = kernel_versions(GEMM, GEMM.backends(GPU))
    us = [rng.uniform(3.0, 30.0) for _ in range(3)]
    timing = [Timing(t, t, t, t, t, 0.0, 5, "graph") for t in us]
    result = [TrialResult(Config(backend="torch"), TrialStatus.OK, timing=t) for t in timing]
    db = tmp_path / "b.db"
    with Store(str(db)) as store:
        store.record_many([
            NewTrial(GPU, *kernels["torch"], Problem.of("gemm", 16, 64, 64), result[0], Source.MODEL),
            NewTrial(GPU, *kernels["torch"], Problem.of("gemm", 32, 64, 64), result[1], Source.MEASURED),
            NewTrial(GPU, *kernels["torch"], Problem.of("gemm", 48, 64, 64), result[2], Source.MODEL),
            NewTrial(GPU, *kernels["torch"], Problem.of("gemm", 48, 64, 64), result[1], Source.MEASURED),
        ])  # fmt: skip

    def best(m: int, *flags: str, code: int = 0) -> str:
        argv = ["best", "--db", str(db), "--op", "gemm", "--m", str(m), "--n", "64", "--k", "64", *flags]
        assert main(argv) == code
        return capsys.readouterr().out

    only_predicted = best(16)  # as `emit` and `report` do: the prediction, marked, and exit 0
    assert "nothing of gemm M=16" in only_predicted and "[predicted by the cost model" in only_predicted
    assert f"{us[0]:.2f}" in only_predicted
    both = best(48)  # measured where measured: no prediction, no note
    assert f"{us[1]:.2f}" in both and "predicted" not in both
    asked = best(48, "--predicted")  # the prediction also where a measurement exists
    assert f"{us[2]:.2f}" in asked and "[predicted by the cost model" in asked and "nothing of" not in asked
    assert "drop --predicted" in best(32, "--predicted", code=1)  # only a measurement of M = 32
    assert "--predicted" not in best(64, code=1).split(";")[-1]  # nothing at all: no hint


def test_plan_and_sweep_tables_name_a_models_layers(capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli.sweep_run import print_sweep_report
    from autotune.cli.tables import with_layers
    from autotune.engine.runner import ProblemReport
    from autotune.sweeps.run import SweepReport
    from autotune.sweeps.spec import parse_spec

    spec = parse_spec(
        'name = "x"\n[[sweep]]\nmodel = "llama-3.1-8b"\ntp = [8]\nm = [16]\n'
        '[[sweep]]\nop = "gemm"\nm = [16]\nnk = [[64, 64]]\n'
    )
    layers = spec.layers()
    problems = [p for _, p in spec.problems()]
    assert layers[Problem.of("gemm", 16, 768, 4096)] == "attn.qkv tp8"
    assert Problem.of("gemm", 16, 64, 64) in problems and Problem.of("gemm", 16, 64, 64) not in layers
    rows = with_layers([("problem",), *((str(p.N),) for p in problems)], problems, layers)
    assert rows[0] == ("layer", "problem") and ("attn.qkv tp8", "768") in rows and ("-", "64") in rows
    # an op entry alone: no layer column
    assert with_layers([("problem",), ("64",)], [Problem.of("gemm", 16, 64, 64)], {}) == [
        ("problem",),
        ("64",),
    ]

    report = SweepReport(1, "x", GPU, problems=[ProblemReport(p, space_size=1, raw_size=1) for p in problems])
    print_sweep_report(report, layers)
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[0] == "layer" and "attn.qkv tp8" in out and "lm_head tp8" in out


def test_the_prune_summary_says_it_counts_configs_summed_over_problems(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from autotune.cli.sweep_run import print_sweep_report
    from autotune.engine.runner import ProblemReport
    from autotune.sweeps.run import SweepReport

    problems = [
        ProblemReport(
            Problem.of("gemm", m, 64, 64), space_size=10, raw_size=100, pruned={"block_m_waste": 90}
        )
        for m in (16, 32)
    ]
    print_sweep_report(SweepReport(1, "x", GPU, problems=problems))
    line = next(x for x in capsys.readouterr().out.splitlines() if "block_m_waste" in x)
    assert line.startswith("configs pruned by constraints") and "summed over 2 problems" in line
    assert line.endswith("block_m_waste 180")
