"""`autotune doctor`: every check's line in order, on this machine (no GPU: the defaults compiled for gfx942)
and on a faked H100 and MI300X (torch made to report a GPU; the GPU work, running a default and timing,
replaced by stubs so that the reporting is what is checked); a second Triton shadowing the first; the
tables of $AUTOTUNE_TABLES; the database; a check that raises; the time budget."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from autotune.cli import doctor, main
from autotune.cli import doctor_checks as dc
from autotune.cli import doctor_ops as do
from autotune.core.target import Target, local_target, toolchain_versions

ROOT = Path(__file__).resolve().parents[2]
GiB, MiB = 1 << 30, 1 << 20

#: The lines every run prints, in order, before and after the ops' and speed lines.
HEAD = ["toolchain", "triton packages", "packages", "gpu"]
TAIL = ["tables", "database"]


def names(out: str) -> list[str]:
    """The check names of a text report, in order (hint lines and the summary left out)."""
    rows = [line for line in out.splitlines() if line[:1] in "✓✗–!" and line[:2] != "  "]
    return [" ".join(line[2:].split("  ")[0].split()) for line in rows]


def glyph(out: str, name: str) -> str:
    """The glyph and the text of check `name`'s line."""
    for line in out.splitlines():
        if line[:1] in "✓✗–!" and " ".join(line[2:].split("  ")[0].split()) == name:
            return line
    raise AssertionError(f"no line {name!r} in\n{out}")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No tables, and a database path that does not exist (returned)."""
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    return tmp_path / "none.db"


# -- this machine: no GPU -----------------------------------------------------------------------------


def _subprocess_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "AUTOTUNE_TABLES", "AUTOTUNE_DB")
    }
    env["AUTOTUNE_VERDICT_CACHE"] = str(tmp_path / "verdicts")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU report")
def test_without_a_gpu_the_defaults_compile_for_gfx942(tmp_path: Path) -> None:
    """The product's path (no interpreter: candidates compiled on the pool as `default_config` picks
    them), in a process of its own, on two ops (all eight take about 10 s cold here: `autotune doctor`)."""
    argv = [sys.executable, "-m", "autotune.cli", "doctor", "--op", "gemm", "--op", "mla_decode"]
    argv += ["--db", str(tmp_path / "none.db")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_subprocess_env(tmp_path), timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert names(out) == [*HEAD, "defaults", "op gemm", "op mla_decode", "speed", *TAIL]
    assert glyph(out, "gpu").startswith("– ") and "no GPU visible to torch" in out
    assert "`autotune sweep SPEC` compiles for gfx942 by default" in out and "--interpret" in out
    assert "each op's heuristic default is compiled for gfx942" in glyph(out, "defaults")
    for op in ("gemm", "mla_decode"):
        line = glyph(out, f"op {op}")
        assert line.startswith("✓ ") and "compiled for gfx942" in line and "spills" in line and "LDS" in line
    assert glyph(out, "speed").startswith("– ") and glyph(out, "tables").startswith("– ")
    assert glyph(out, "database").startswith("– ") and not (tmp_path / "none.db").exists()
    assert out.splitlines()[-1].startswith("doctor: nothing failed")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU report")
def test_json_has_every_check_and_compiles_in_the_pool_under_the_interpreter(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this (interpreter) process the pool still compiles: its processes run without TRITON_INTERPRET."""
    assert main(["doctor", "--json", "--op", "moe", "--db", str(clean_env)]) == 0
    checks = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in checks] == [*HEAD, "defaults", "op moe", "speed", *TAIL]
    assert all(set(c) == {"name", "ok", "detail", "hint"} for c in checks)
    moe = checks[5]
    assert moe["ok"] is True and "compiled for gfx942" in moe["detail"]
    assert "rule's pick" in checks[4]["detail"]  # TRITON_INTERPRET is set in this process


def _chooser(monkeypatch: pytest.MonkeyPatch, submit: Any) -> Any:
    """A `_DefaultChooser` on a fake pool for sm_90 (`submit(config)` -> a Future of its features) that
    checks candidates as a process that compiles would, keyed by config, with no verdict cache."""
    from autotune.engine import verdicts

    monkeypatch.setattr(verdicts, "can_check", lambda target: True)
    pool: Any = SimpleNamespace(
        target=Target.for_arch("sm_90"), submit=lambda op, problem, config: submit(config)
    )
    chooser = do._DefaultChooser(pool, dc.Budget(30))
    assert chooser.verdicts is not None
    chooser.verdicts.directory = None
    chooser.verdicts.key_of = lambda op, problem, config, target: config.canonical()  # no JIT here
    return chooser


def test_the_compiled_default_is_the_first_candidate_that_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.core.static import StaticFeatures

    op = do.registered_ops(["gemm"])[0]
    target = Target.for_arch("sm_90")
    candidates = op.default_candidates(do.small_problem("gemm"), target)

    def submit(config: Any) -> Future[StaticFeatures]:
        spills = 12 if config == candidates[0] else 0  # the rule's pick spills: the default is the next one
        future: Future[StaticFeatures] = Future()
        future.set_result(StaticFeatures("sm_90", spills=spills, scratch_bytes=4 * spills, occupancy=2))
        return future

    check = _chooser(monkeypatch, submit).compile(op, target)
    assert check.ok is True and "compiled for sm_90" in check.detail and "0 spills" in check.detail
    assert check.detail.endswith(f"({candidates[1].short()})")


def test_a_pick_the_budget_cut_short_is_skipped_not_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def submit(config: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_exception(TimeoutError())  # as `result(timeout=...)` raises when the budget runs out
        return future

    chooser = _chooser(monkeypatch, submit)
    logger = logging.getLogger("autotune.engine.verdicts")
    logger.addFilter(chooser)
    try:
        check = chooser.compile(do.registered_ops(["gemm"])[0], Target.for_arch("sm_90"))
    finally:
        logger.removeFilter(chooser)
    assert check == do._budget_line("op gemm")
    assert "cannot check" not in caplog.text


def test_an_unknown_op_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--op", "nope"]) == 2
    assert "unknown op 'nope'" in capsys.readouterr().err


# -- a faked GPU --------------------------------------------------------------------------------------

H100 = SimpleNamespace(
    name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132, total_memory=80 * GiB,
    L2_cache_size=50 * MiB, clock_rate=1_980_000, gcnArchName="NVIDIA H100 80GB HBM3",  # torch 2.11's
)  # fmt: skip
MI300X = SimpleNamespace(
    name="AMD Instinct MI300X", major=9, minor=4, multi_processor_count=304, total_memory=192 * GiB,
    L2_cache_size=4 * MiB, gcnArchName="gfx942:sramecc+:xnack-",
)  # fmt: skip
A100 = SimpleNamespace(
    name="NVIDIA A100-SXM4-80GB", major=8, minor=0, multi_processor_count=108, total_memory=80 * GiB,
    L2_cache_size=40 * MiB,
)  # fmt: skip


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> Iterator[Any]:
    """`fake_gpu(props, hip=None)` makes torch report one GPU with `props` (a ROCm build where `hip`
    names a HIP version) and stubs the GPU work: every default right, every GEMM timed at set µs."""

    def install(props: SimpleNamespace, hip: str | None = None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=0: props)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.version, "cuda", None if hip else "12.8")
        local_target.cache_clear()
        toolchain_versions.cache_clear()

    monkeypatch.setattr(do, "run_default", _right)
    monkeypatch.setattr(do, "time_gemm", _timed)
    yield install
    local_target.cache_clear()
    toolchain_versions.cache_clear()


def _right(op: Any, problem: Any, target: Target) -> do.OpRun:
    return do.OpRun("triton BM16 BN64", "right", rel_error=1e-3, tolerance=op.tolerance(problem))


def _timed(target: Target, m: int, n: int, k: int) -> do.GemmTimes:
    return do.GemmTimes(10.0, 12.5, 8.0, served="torch", default="triton BM16")  # a stub, not a measurement


def _doctor(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> tuple[int, str]:
    code = main(["doctor", "--db", str(db), *extra])
    return code, capsys.readouterr().out


def test_an_h100_runs_every_op_and_times_three_gemms(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu(H100)
    code, out = _doctor(capsys, clean_env)
    ops = [f"op {op.name}" for op in do.registered_ops()]
    speed = [f"speed {m}x{n}x{k}" for m, n, k in do.SPEED_SHAPES]
    assert names(out) == [*HEAD[:3], "gpu 0", *ops, *speed, *TAIL], out
    assert code == 0, out
    assert "CUDA 12.8 build" in glyph(out, "toolchain")
    gpu = glyph(out, "gpu 0")
    assert gpu.startswith("✓ ") and "sm_90" in gpu and "132 SMs" in gpu and "clock 1980 MHz" in gpu
    assert "sm_90," in gpu  # a CUDA build's gcnArchName is the GPU's name, not its arch
    assert "tuned arch" in gpu
    assert glyph(out, "op gemm").startswith("✓ ") and "right on 16x512x512" in glyph(out, "op gemm")
    line = glyph(out, "speed 16x4096x4096")
    assert (
        "torch.mm 10.0 µs" in line
        and "served (torch) 12.5 µs (speed-up 0.80x)" in line
        and "(speed-up 1.25x)" in line
    )


def test_an_mi300x_reports_a_wrong_result_and_a_compile_failure(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(MI300X, hip="6.4.43482")

    def run(op: Any, problem: Any, target: Target) -> do.OpRun:
        assert target.arch == "gfx942" and target.cu_count == 304
        if op.name == "gemm":
            return do.OpRun("triton BM16", "wrong", rel_error=0.7, tolerance=0.01)
        if op.name == "moe":
            return do.OpRun("triton BM16", "wrong", rel_error=None, tolerance=0.01)  # NaN
        if op.name == "mla_decode":
            return do.OpRun("triton BN32", "compile_error", "CompilationError: at 12:4: out of LDS")
        return _right(op, problem, target)

    monkeypatch.setattr(do, "run_default", run)
    code, out = _doctor(capsys, clean_env)
    assert code == 1
    assert "ROCm 6.4.43482 build" in glyph(out, "toolchain")
    gpu = glyph(out, "gpu 0")
    assert "gfx942 (gfx942:sramecc+:xnack-)" in gpu and "304 CUs" in gpu and "8 XCDs" in gpu
    assert "192 GiB" in gpu and "tuned arch" in gpu
    assert glyph(out, "op gemm").startswith("✗ ") and "rel. error 7.00e-01 > 0.01" in glyph(out, "op gemm")
    assert "NaN or inf" in glyph(out, "op moe")
    mla = glyph(out, "op mla_decode")
    assert (
        mla.startswith("✗ ") and "failed to compile" in mla and "CompilationError: at 12:4: out of LDS" in mla
    )
    assert glyph(out, "op gemm_fp8_rowwise").startswith("✓ ")
    assert "doctor: 3 failed" in out.splitlines()[-1]


def test_an_arch_we_do_not_tune_is_noted_not_failed(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu(A100)
    code, out = _doctor(capsys, clean_env, "--op", "gemm")
    assert code == 0
    gpu = glyph(out, "gpu 0")
    assert gpu.startswith("! ") and "sm_80" in gpu and "not tuned for" in gpu and "clock" in gpu
    assert "tuned on gfx942, gfx950, sm_90" in out


def test_an_op_the_gpu_cannot_run_does_not_apply(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(H100)

    def refuses(problem: Any, target: Target) -> Any:
        raise ValueError("gemm_mxfp4 needs gfx950\nmore")

    op = do.registered_ops(["gemm_mxfp4"])[0]
    monkeypatch.setattr(op, "default_candidates", refuses)
    code, out = _doctor(capsys, clean_env, "--op", "gemm_mxfp4")
    assert code == 0
    line = " ".join(glyph(out, "op gemm_mxfp4").split())
    assert line == "– op gemm_mxfp4 sm_90 does not run it: gemm_mxfp4 needs gfx950"


def test_a_check_that_raises_is_a_failed_line_and_the_rest_go_on(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(H100)

    def broken(op: Any, problem: Any, target: Target) -> do.OpRun:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors ...")

    def no_packages() -> Any:
        raise OSError("metadata unreadable")

    monkeypatch.setattr(do, "run_default", broken)
    monkeypatch.setattr(dc, "packages", no_packages)
    code, out = _doctor(capsys, clean_env, "--op", "gemm", "--op", "moe")
    assert code == 1
    assert glyph(out, "packages").startswith("✗ ") and "OSError: metadata unreadable" in out
    line = glyph(out, "op gemm")
    assert line.startswith("✗ ") and line.endswith(
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert glyph(out, "op moe").startswith("✗ ") and names(out)[-2:] == TAIL


def test_a_spent_budget_skips_the_slow_checks_with_a_line(
    fake_gpu: Any, clean_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(H100)
    monkeypatch.setattr(doctor, "BUDGET_S", 0.0)
    code, out = _doctor(capsys, clean_env, "--op", "gemm", "--json")
    checks = {c["name"]: c for c in json.loads(out)}
    assert code == 0
    assert checks["op gemm"]["ok"] is None and "budget" in checks["op gemm"]["detail"]
    assert all(checks[f"speed {m}x{n}x{k}"]["ok"] is None for m, n, k in do.SPEED_SHAPES)


def test_the_speed_line_reports_a_failed_call() -> None:
    times = do.GemmTimes(10.0, math.nan, 8.0, "torch", "triton", error="served: runtime_error: boom")
    check = do._speed_line("speed 16x4096x4096", times)
    assert check.ok is False and "served (torch) failed" in check.detail and "boom" in check.detail


# -- a second Triton --------------------------------------------------------------------------------


def _fake_metadata(monkeypatch: pytest.MonkeyPatch, dists: dict[str, str]) -> None:
    real = dc.metadata.version

    def version(name: str) -> str:
        if name in dists:
            return dists[name]
        if name in dc.TRITON_DISTRIBUTIONS:
            raise dc.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(dc.metadata, "packages_distributions", lambda: {"triton": list(dists)})
    monkeypatch.setattr(dc.metadata, "version", version)


def test_a_second_triton_shadowing_the_first_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_metadata(monkeypatch, {"triton": "3.3.1", "pytorch-triton-rocm": "3.3.0+git96316ce5"})
    monkeypatch.setattr(dc, "torch_pinned_triton", lambda: ("pytorch-triton-rocm", "3.3.0+git96316ce5"))
    check = dc.triton_packages("3.3.1")
    assert check.ok is False
    assert (
        "2 distributions provide `triton` (pytorch-triton-rocm 3.3.0+git96316ce5, triton 3.3.1)"
        in check.detail
    )
    assert "keep only pytorch-triton-rocm==3.3.0+git96316ce5" in check.hint
    assert "pip uninstall -y pytorch-triton-rocm triton" in check.hint


def test_one_triton_other_than_torch_pins_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_metadata(monkeypatch, {"triton": "3.9.0"})
    monkeypatch.setattr(dc, "torch_pinned_triton", lambda: ("triton", "3.5.1"))
    check = dc.triton_packages("3.9.0")
    assert check.ok is True and "torch pins triton 3.5.1" in check.detail and "triton==3.5.1" in check.hint
    monkeypatch.setattr(dc, "torch_pinned_triton", lambda: ("triton", "3.9.0"))
    assert dc.triton_packages("3.9.0") == dc.Check(
        "triton packages", True, "one distribution provides `triton`: triton 3.9.0"
    )


def test_the_shadowing_shows_in_the_report(
    clean_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_metadata(monkeypatch, {"triton": "3.9.0", "pytorch-triton": "3.9.0"})
    for slow in ("op_checks_compile", "op_checks_gpu", "speed"):  # nothing compiled or run: not this test's
        monkeypatch.setattr(do, slow, lambda *a: iter(()))
    code, out = _doctor(capsys, clean_env)
    assert code == 1 and glyph(out, "triton packages").startswith("✗ ")
    assert "pip uninstall -y pytorch-triton triton" in out


# -- tables and the database --------------------------------------------------------------------------


def _table(path: Path, arch: str) -> Path:
    from autotune.dispatch import Table

    Table(target=Target.for_arch(arch), entries=[]).save(path)
    return path


def test_tables_that_fit_do_not_fit_or_are_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)
    [none] = dc.tables(Target.for_arch("sm_90"))
    assert none.ok is None and "not set" in none.detail and "autotune emit" in none.hint

    mi300x, h100 = _table(tmp_path / "mi300x.json", "gfx942"), _table(tmp_path / "h100.json", "sm_90")
    (tmp_path / "bad.json").write_text("{not json")
    folder = tmp_path / "tables"
    folder.mkdir()
    _table(folder / "a.json", "sm_90")
    items = [mi300x, h100, tmp_path / "missing.json", tmp_path / "bad.json", folder]
    monkeypatch.setenv("AUTOTUNE_TABLES", os.pathsep.join(map(str, items)))
    found = list(dc.tables(Target.for_arch("sm_90")))
    assert [c.ok for c in found] == [False, True, False, False, True]
    other, fits, missing, bad, in_folder = found
    assert "tuned on AMD Instinct MI300X (gfx942, 304 CUs): does not fit this device" in other.detail
    assert "autotune emit" in other.hint and "AUTOTUNE_TABLES" in other.hint
    assert fits.detail.endswith("fits this device") and "0 shapes, measured" in fits.detail
    assert missing.detail == "does not exist" and missing.name.endswith("missing.json")
    assert bad.detail.startswith("not loaded:")
    assert in_folder.name.endswith("a.json")
    no_gpu = next(iter(dc.tables(None)))
    assert no_gpu.ok is False and "does not fit this device (no GPU here)" in no_gpu.detail


def test_the_database_is_read_never_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.db import SCHEMA_VERSION, Store

    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    missing = tmp_path / "missing.db"
    [check] = dc.database(str(missing))
    assert check.ok is None and "no database at" in check.detail and not missing.exists()

    good = tmp_path / "good.db"
    Store(str(good)).close()
    [check] = dc.database(str(good))
    assert (
        check.ok is True
        and f"schema version {SCHEMA_VERSION}" in check.detail
        and "read-only" in check.detail
    )

    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    [check] = dc.database(str(junk))
    assert check.ok is False and "not an autotune database" in check.detail and "--db" in check.hint
