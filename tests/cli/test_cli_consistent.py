"""One CLI: the common flags on every verb where they mean something, a verb's own usage on a bad flag,
SPEC (a file or a shipped name) in the usage lines, `check` defaulting like `plan`, no database created
but by `sweep` (and `import`), and predictions shown where nothing is measured."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.cli import VERBS, _parser, _verb_parsers, main
from autotune.core.result import Source
from autotune.core.target import interpreting
from autotune.db import NewTrial, Store

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU default: this host has a GPU")

#: The verbs that use the database, and those that draw a progress bar.
WITH_DB = {"sweep", "plan", "check", "best", "diff", "report", "export", "import", "emit", "verify", "status"}
WITH_BAR = {"sweep", "plan", "check", "verify"}

SPEC = 'name = "c"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[64, 64]]\nstrategy = "exhaustive"\ntrials = 2\n'


def _flags(parser: object) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}  # type: ignore[attr-defined]


def test_every_verb_takes_the_common_flags_where_they_mean_something() -> None:
    verbs = _verb_parsers(_parser())
    assert set(verbs) == {v.NAME for v in VERBS}
    for name, parser in verbs.items():
        flags = _flags(parser)
        assert {"-v", "--verbose"} <= flags, name
        if name != "db":  # its own verbs (db upgrade) take --db
            assert ("--db" in flags) == (name in WITH_DB | {"doctor"}), name
        if name in WITH_BAR:
            assert "--no-progress" in flags, name
        assert "-v, --verbose" in parser.format_help(), name


def test_a_bad_flag_prints_the_verbs_usage(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, usage in (
        (["plan", "smoke", "--bogus", "1"], "usage: autotune plan"),
        (["best", "--m", "1", "--n", "2", "--k", "3", "--bogus"], "usage: autotune best"),
        (["--bogus", "status"], "usage: autotune [-h]"),  # before the verb: the top level's
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(usage) and "unrecognized arguments: --bogus" in err, (argv, err)


def test_usage_lines_name_a_spec_not_a_toml_file() -> None:
    verbs = _verb_parsers(_parser())
    for name in ("sweep", "plan", "check", "verify"):
        text = verbs[name].format_help()
        assert "SPEC" in text and "SPEC.toml" not in text, name
    assert "ships with the package" in " ".join(verbs["plan"].format_help().split())


def test_only_sweep_creates_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    missing = tmp_path / "typo.db"
    # plan reads it where it exists; a name of none plans everything as not done, and creates nothing
    assert main(["plan", str(spec), "--target", "gfx942", "--db", str(missing), "--no-progress"]) == 0
    assert f"no database at {missing} yet" in capsys.readouterr().err and not missing.exists()
    monkeypatch.setenv("AUTOTUNE_DB", str(missing))
    assert main(["plan", str(spec), "--target", "gfx942", "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] and not missing.exists()
    monkeypatch.delenv("AUTOTUNE_DB")
    for argv in (
        ["check", str(spec), "--target", "gfx942", "--db", str(missing)],
        ["report", "--db", str(missing), "--out", str(tmp_path / "r.html")],
        ["diff", "--db", str(missing), "gfx942", "gfx950"],
        ["best", "--db", str(missing), "--m", "1", "--n", "64", "--k", "64"],
    ):
        assert main(argv) == 2, argv
        assert "no database at" in capsys.readouterr().err
        assert not missing.exists(), argv
    assert not (tmp_path / "autotune.db").exists()


@pytest.mark.skipif(not interpreting(), reason="runs an interpreter sweep in-process")
def test_a_sweep_says_when_it_creates_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.replace("trials = 2", "trials = 1"))
    db = tmp_path / "new.db"
    argv = ["sweep", str(spec), "--interpret", "--executor", "inline", "--db", str(db), "--no-progress",
            "--log-dir", "none"]  # fmt: skip
    assert main(argv) == 0
    assert "(new: created now)" in capsys.readouterr().out
    assert main(argv) == 0  # resumed: the database is there
    assert "(new" not in capsys.readouterr().out


@no_gpu
def test_check_defaults_like_plan_where_there_is_no_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    assert main(["check", str(spec), "--json", "--candidates", "1", "--workers", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "gfx942" and len(doc["problems"]) == 1
    assert main(["plan", str(spec), "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["target"] == doc["target"]


def _winners(db: Path, gpu: Target, rng: random.Random, sources: dict[int, Source]) -> dict[int, float]:
    """A torch winner of gemm M x 64 x 64 for each M of `sources`, of its source; M -> its µs."""
    from autotune.core.op import kernel_versions
    from autotune.kernels import GEMM

    kernels = kernel_versions(GEMM, GEMM.backends(gpu))
    times = {m: rng.uniform(3.0, 30.0) for m in sources}
    with Store(str(db)) as store:
        for m, source in sources.items():
            t = times[m]
            result = TrialResult(
                Config(backend="torch"), TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "graph")
            )
            store.record_many(
                [NewTrial(gpu, *kernels["torch"], Problem.of("gemm", m, 64, 64), result, source)]
            )
    return times


def test_diff_compares_predictions_where_neither_side_measured_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(23)
    gpu = Target.for_arch("gfx942")
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _winners(a, gpu, rng, {16: Source.MODEL, 32: Source.MODEL})
    _winners(b, gpu, rng, {16: Source.MODEL, 32: Source.MODEL})
    assert main(["diff", str(a), str(b)]) == 0  # a CPU machine's compile-only sweeps, before and after
    out = capsys.readouterr().out
    assert out.startswith("neither side holds measurements: comparing the cost model's predictions")
    assert "2 problems on both sides" in out
    assert main(["diff", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted"] is True
    # a side that measured: measurements are compared, and the flag for the predictions is named
    _winners(b, gpu, rng, {16: Source.MEASURED})
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("side A holds no measurements, only predictions: --predicted")
    assert "only in B 1" in out
    assert main(["diff", str(a), str(b), "--predicted"]) == 0
    assert "2 problems on both sides" in capsys.readouterr().out
