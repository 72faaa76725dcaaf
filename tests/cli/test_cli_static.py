"""The compile-only side of the CLI: `autotune sweep --target`, `autotune check`, predicted tables, and
measurements superseding predictions. No GPU needed: configs are cross-compiled."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from autotune import Problem, Target
from autotune.cli import main
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.db import Store
from autotune.dispatch import Table

pytest.importorskip("triton")

# One decode problem, two candidates compiled: enough to see the whole pipeline, cheap to compile.
SPEC = """\
name = "tiny"

[static]
candidates = 2

[[sweep]]
op = "gemm"
m = [16]
nk = [[512, 1024]]
"""


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def predicted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A compile-only sweep for gfx950 into a fresh database: (spec, db, stdout)."""
    tmp = tmp_path_factory.mktemp("predict")
    spec = tmp / "tiny.toml"
    spec.write_text(SPEC)
    db = tmp / "p.db"
    code, out, err = run_cli("sweep", str(spec), "--target", "gfx950", "--db", str(db), "--no-progress",
                             "--workers", "2", "--log-dir", str(tmp / "logs"))  # fmt: skip
    assert code == 0, err
    return spec, db, out


def test_compile_only_sweep_stores_predictions(predicted) -> None:
    _, db, out = predicted
    assert "compile-only" in out and "predicted µs" in out
    problem = Problem.of("gemm", 16, 512, 1024)
    with Store(str(db)) as store:
        trials = store.trials(problem=problem)
        assert trials and all(t.source is Source.MODEL for t in trials)
        assert store.trials(problem=problem, source=Source.MEASURED) == []
        ok = [t for t in trials if t.status is TrialStatus.OK]
        assert {t.config.backend for t in ok} == {"triton", "torch"}
        assert all(t.timing is not None and t.timing.method == "model" and t.time_us > 0 for t in ok)
        assert all(t.gpu.arch == "gfx950" and not t.gpu.target.present for t in trials)
        target = Target.for_arch("gfx950")
        kernels = {"triton": ("gemm.triton", _hash("triton"))}
        features = store.features(arch="gfx950", toolchain=target.toolchain, problem=problem, kernels=kernels)
        assert len(features) >= 2  # the compiled candidates, kept for next time
        assert all(f.mma and f.mma[0].startswith("v_mfma_f32") for f, _ in features.values() if f.compiled)
        [sweep] = store.sweeps()  # `autotune status` counts the configs the compile-only sweep stored
        assert sweep.trials_done == len(trials) and sweep.problems_done == 1


def test_compile_only_sweep_resumes_without_recompiling(predicted) -> None:
    spec, db, _ = predicted
    with Store(str(db)) as store:
        before = len(store.trials())
    code, out, err = run_cli(
        "sweep", str(spec), "--target", "gfx950", "--db", str(db), "--no-progress", "--log-dir", "none"
    )
    assert code == 0, err
    assert "0 configs compiled" in out
    with Store(str(db)) as store:
        assert len(store.trials()) == before


def test_a_deleted_prediction_is_stored_again_on_resume(predicted, tmp_path) -> None:
    """Resume decides per row, as for measurements: a problem with one prediction missing (a sweep
    killed while older code stored its predictions one by one, or a row deleted) is checked again (from
    the stored features: nothing recompiled) and only the missing row stored."""
    import shutil
    import sqlite3

    spec, db, _ = predicted
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    con = sqlite3.connect(copy)
    keys = sorted(con.execute("SELECT config_hash, source, status FROM trials").fetchall())
    [(victim,)] = con.execute("SELECT id FROM trials WHERE status = 'ok' ORDER BY id LIMIT 1").fetchall()
    con.execute("DELETE FROM trials WHERE id = ?", (victim,))
    con.commit()
    con.close()
    code, out, err = run_cli(
        "sweep", str(spec), "--target", "gfx950", "--db", str(copy), "--no-progress", "--log-dir", "none"
    )
    assert code == 0, err
    assert "0 configs compiled" in out
    con = sqlite3.connect(copy)
    assert sorted(con.execute("SELECT config_hash, source, status FROM trials").fetchall()) == keys
    con.close()


def test_emit_marks_a_predicted_table_and_measurements_supersede_it(predicted, tmp_path) -> None:
    _, db, _ = predicted
    local = tmp_path / "p.db"
    local.write_bytes(db.read_bytes())
    out_json = tmp_path / "table.json"
    code, out, err = run_cli("emit", "--db", str(local), "--out", str(out_json))
    assert code == 0, err
    assert "(predicted)" in out
    table = Table.load(out_json)
    assert table.predicted
    # A measured sweep on a real gfx950 (same hardware, other toolchain) supersedes the prediction.
    real = Target.for_arch("gfx950")
    real = Target.from_dict({**real.to_dict(), "toolchain": {"torch": "9.9", "hip": "7.0"}, "present": True})
    problem = Problem.of("gemm", 16, 512, 1024)
    timing = Timing(5.0, 5.0, 5.0, 5.0, 5.0, 0.0, 10, "graph")
    with Store(str(local)) as store:
        store.record(target=real, kernel="gemm.torch", source_hash=_hash("torch"), problem=problem,
                     result=TrialResult(_torch(), TrialStatus.OK, timing=timing))  # fmt: skip
    code, out, err = run_cli("emit", "--db", str(local), "--out", str(out_json))
    assert code == 0, err
    assert "(measured)" in out and not Table.load(out_json).predicted


def test_best_shows_predictions_where_nothing_is_measured_and_says_so(predicted) -> None:
    _, db, _ = predicted
    code, out, _ = run_cli("best", "--db", str(db), "--m", "16", "--n", "512", "--k", "1024")
    assert code == 0 and "nothing of" in out and "is measured" in out
    assert "[predicted by the cost model" in out
    code, out, _ = run_cli("best", "--db", str(db), "--m", "16", "--n", "512", "--k", "1024", "--predicted")
    assert code == 0 and "predicted by the cost model" in out


def test_check_json(predicted, tmp_path) -> None:
    spec, _, _ = predicted
    code, out, err = run_cli("check", "--target", "gfx942", str(spec), "--json", "--workers", "2")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target"] == "gfx942" and len(doc["problems"]) == 1
    p = doc["problems"][0]
    assert p["space_size"] > 100 and p["compiled"] >= 2
    assert p["best"] and all(b["predicted_us"] > 0 for b in p["best"])
    compiled = [b for b in p["best"] if b["features"] is not None]
    assert compiled and all(b["features"]["vgprs"] > 0 for b in compiled)
    mixes = [dict(b["features"]["mix"]) for b in compiled]
    assert all(m["mma"] > 0 and m["valu"] > 0 and m["vmem"] > 0 for m in mixes), mixes
    assert p["static_warned"] == {} and p["warned_configs"] == []
    assert all(b["warnings"] == [] for b in p["best"])
    assert not list(tmp_path.iterdir()), "check writes nothing without --db"


def test_check_prints_pruned_configs_and_candidates(tmp_path) -> None:
    spec = tmp_path / "s.toml"
    # Occupancy floor 9 waves per SIMD: more than any CDNA CU holds, so every compiled config is pruned.
    spec.write_text(SPEC.replace("candidates = 2", "candidates = 1\nmin_occupancy = 9"))
    code, out, err = run_cli("check", "--target", "mi300x", str(spec), "--workers", "1", "--candidates", "1")
    assert code == 0, err
    assert "space" in out and "pruned" in out and "occupancy" in out
    assert "best candidates by the cost model" in out


def test_check_prints_the_instruction_mix_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    from autotune import Config
    from autotune.cli.check import _print_check
    from autotune.core.static import StaticFeatures, StaticFinding
    from autotune.engine.predict import Candidate, ProblemCheck

    mix = StaticFeatures.mix_of({"valu": 5173, "salu": 412, "mma": 64, "vmem": 96, "lds": 128, "spill": 353})
    features = StaticFeatures(arch="gfx950", mma=("v_mfma_f32_16x16x32_bf16",), mix=mix)
    config = Config(backend="triton", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_warps=4)
    warning = StaticFinding("valu_per_mma", "80.8 vector ALU instructions per matrix instruction, 4.0x ...")
    check = ProblemCheck(Problem.of("gemm", 16, 512, 1024), Target.for_arch("gfx950"), 10, 20, {},
                         compiled=[Candidate(config, 3.0, features, warnings=[warning])])  # fmt: skip
    _print_check(check)
    out = capsys.readouterr().out
    assert f"warning {config.short()}: valu_per_mma: 80.8 vector ALU" in out
    assert "     1  valu 5173  salu 412  mma 64  vmem 96  lds 128  spill 353  (valu/mma 80.8)\n" in out
    assert check.to_dict()["static_warned"] == {"valu_per_mma": 1}


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--target", "gfx1234"), "unknown target"),
        (("--target", "interpreter"), "compiles nothing"),
        (("--target", "gfx942", "--interpret"), "exclude each other"),
        (("--target", "gfx942", "--workers", "0"), "--workers must be positive"),
    ],
)
def test_bad_targets_are_one_clear_error(tmp_path, argv: tuple[str, ...], message: str) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    code, _, err = run_cli("sweep", str(spec), "--db", str(tmp_path / "x.db"), *argv)
    assert code == 2 and message in err, err


def _hash(backend: str) -> str:
    from autotune.kernels import GEMM

    return GEMM.source_hash(backend)


def _torch():
    from autotune import Config

    return Config(backend="torch")
