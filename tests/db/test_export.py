"""export_csv: one tuned CSV per GPU, one row per winning problem, with the right columns and numbers."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store, StoreError, export_csv

REPO = Path(__file__).resolve().parents[2]
H100 = Target.for_arch("sm_90")
NO_PEAKS = dataclasses.replace(H100, name="Lab GPU #2 (x)", peak_tflops=0.0, mem_gbps=0.0)
SMALL = Problem.of("gemm", 16, 64, 64)
BIG = Problem.of("gemm", 4096, 8192, 1024)


def ok(config: Config, median: float) -> TrialResult:
    timing = Timing(median, median, median, median, median, 0.0, 10, "events")
    return TrialResult(config, TrialStatus.OK, timing=timing, rel_error=1e-3)


def put(
    store: Store, target: Target, problem: Problem, result: TrialResult, source: Source = Source.MEASURED
) -> None:
    kernel = ("gemm.torch", "torch-1") if result.config.backend == "torch" else ("gemm.triton", "abc123")
    store.record(
        target=target, kernel=kernel[0], source_hash=kernel[1], problem=problem, result=result, source=source
    )


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "autotune.db")) as s:
        yield s


@pytest.fixture
def filled(store: Store) -> Store:
    tiles = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    put(store, H100, SMALL, ok(tiles, 4.0))
    put(store, H100, SMALL, ok(tiles.replace(BLOCK_M=32), 6.0))
    put(store, H100, SMALL, TrialResult(tiles.replace(BLOCK_M=64), TrialStatus.WRONG_RESULT, error="bad"))
    put(store, H100, SMALL, ok(Config(backend="torch"), 5.0))
    split = tiles.replace(BLOCK_M=128, BLOCK_N=128, SPLIT_K=2)
    put(store, H100, BIG, ok(split, 200.0))
    put(store, H100, BIG, ok(Config(backend="torch"), 250.0))
    put(store, NO_PEAKS, SMALL, ok(tiles, 8.0))  # no vendor trial, no published peaks
    return store


def test_one_file_per_gpu_with_the_right_columns(filled: Store, tmp_path: Path) -> None:
    out = tmp_path / "tables" / "nested"
    paths = export_csv(filled, out)

    assert [p.name for p in paths] == [
        f"sm-90-nvidia-h100-80gb-hbm3-{H100.fingerprint()[:8]}.csv",
        f"sm-90-lab-gpu-2-x-{NO_PEAKS.fingerprint()[:8]}.csv",
    ]
    assert all(p.parent == out and p.is_file() for p in paths)
    assert sorted(os.listdir(out)) == sorted(p.name for p in paths)  # no temporary files left

    columns, rows = read(paths[0])
    cfg_columns = [
        "cfg_BLOCK_K",
        "cfg_BLOCK_M",
        "cfg_BLOCK_N",
        "cfg_SPLIT_K",
        "cfg_num_stages",
        "cfg_num_warps",
    ]
    assert columns == [
        "gpu_name",
        "arch",
        "cu_count",
        "fingerprint",
        "interpreter",
        "op",
        "m",
        "n",
        "k",
        "dtype",
        "layout",
        "backend",
        *cfg_columns,
        "time_us",
        "tflops",
        "gbps",
        "roofline_frac",
        "vendor_time_us",
        "speedup_vs_vendor",
        "torch",
        "triton",
        "runtime",
        "kernel",
        "source_hash",
        "source",
    ]
    assert [(r["m"], r["n"], r["k"]) for r in rows] == [("16", "64", "64"), ("4096", "8192", "1024")]
    assert {r["source"] for r in rows} == {"measured"}


def test_an_op_s_own_parameters_are_columns_of_their_own(store: Store, tmp_path: Path) -> None:
    """A moe winner's E and topk (its op's own parameters) are param_E and param_topk, after the problem's
    columns; a dense GEMM's row in the same file leaves them empty."""
    moe = Problem.of("moe", 16, 256, 512, E=8, topk=2)
    store.record(target=H100, kernel="moe.triton", source_hash="m", problem=moe,
                 result=ok(Config(backend="triton", BLOCK_SIZE_M=16), 9.0))  # fmt: skip
    put(store, H100, SMALL, ok(Config(backend="torch"), 5.0))
    [path] = export_csv(store, tmp_path)
    columns, rows = read(path)
    assert columns[columns.index("layout") + 1 : columns.index("backend")] == ["param_E", "param_topk"]
    by_op = {r["op"]: r for r in rows}
    assert (by_op["moe"]["param_E"], by_op["moe"]["param_topk"]) == ("8", "2")
    assert (by_op["gemm"]["param_E"], by_op["gemm"]["param_topk"]) == ("", "")


def test_rows_hold_the_winner_and_its_numbers(filled: Store, tmp_path: Path) -> None:
    h100_csv, other_csv = export_csv(filled, tmp_path)
    _, (small, big) = read(h100_csv)

    assert small["gpu_name"] == "NVIDIA H100 80GB HBM3" and small["arch"] == "sm_90"
    assert small["cu_count"] == "132" and small["fingerprint"] == H100.fingerprint()
    assert small["interpreter"] == "False" and small["op"] == "gemm" and small["dtype"] == "bf16"
    assert small["layout"] == "nk" and not any(c.startswith("param_") for c in small)
    assert (
        small["backend"] == "triton" and small["kernel"] == "gemm.triton" and small["source_hash"] == "abc123"
    )
    assert (small["cfg_BLOCK_M"], small["cfg_BLOCK_N"], small["cfg_num_warps"]) == ("16", "64", "4")
    assert small["cfg_SPLIT_K"] == ""  # only the big problem's winner has it
    assert float(small["time_us"]) == 4.0
    assert float(small["tflops"]) == pytest.approx(2 * 16 * 64 * 64 / 4.0 / 1e6)
    assert float(small["gbps"]) == pytest.approx(SMALL.min_bytes() / 4.0 / 1e3)
    roofline = H100.roofline_us(SMALL.flops(), SMALL.min_bytes())
    assert float(small["roofline_frac"]) == pytest.approx(roofline / 4.0)
    assert float(small["vendor_time_us"]) == 5.0
    assert float(small["speedup_vs_vendor"]) == pytest.approx(1.25)
    assert small["torch"] == H100.toolchain.get("torch", "")
    assert small["triton"] == H100.toolchain.get("triton", "")
    assert small["runtime"] == (H100.toolchain.get("hip") or H100.toolchain.get("cuda") or "")

    assert big["cfg_SPLIT_K"] == "2" and big["cfg_BLOCK_M"] == "128"
    assert float(big["tflops"]) == pytest.approx(2 * 4096 * 8192 * 1024 / 200.0 / 1e6)
    assert float(big["speedup_vs_vendor"]) == pytest.approx(250.0 / 200.0)

    _, (lone,) = read(other_csv)
    assert lone["gpu_name"] == "Lab GPU #2 (x)" and float(lone["time_us"]) == 8.0
    assert lone["roofline_frac"] == "" and lone["vendor_time_us"] == "" and lone["speedup_vs_vendor"] == ""
    assert "cfg_SPLIT_K" not in lone


def test_fingerprint_selects_one_gpu(filled: Store, tmp_path: Path) -> None:
    [path] = export_csv(filled, tmp_path, fingerprint=NO_PEAKS.fingerprint()[:8])
    assert NO_PEAKS.fingerprint()[:8] in path.name
    assert [r["fingerprint"] for r in read(path)[1]] == [NO_PEAKS.fingerprint()]


def test_nothing_to_export_is_a_clear_error(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nothing to export"):
        export_csv(store, tmp_path / "out")
    put(store, H100, SMALL, TrialResult(Config(backend="triton", BLOCK_M=16), TrialStatus.COMPILE_ERROR))
    with pytest.raises(StoreError, match="no successful trials"):
        export_csv(store, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unwritable_output_directory_is_a_clear_error(filled: Store, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create output directory") as info:
        export_csv(filled, blocker / "out")
    assert str(blocker / "out") in str(info.value)


def test_importing_the_db_package_does_not_import_pandas() -> None:
    code = "import sys, autotune.db; assert 'pandas' not in sys.modules, 'pandas imported'; print('ok')"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_predictions_export_marked_where_nothing_was_measured(store: Store, tmp_path: Path) -> None:
    """A compile-only sweep's picks export (source "model"); a problem measured on the GPU keeps its
    measured winner. Floats carry 7 significant digits."""
    predicted = TrialResult(
        Config(backend="triton", BLOCK_M=16), TrialStatus.OK, timing=Timing(*[1 / 3] * 5, 0.0, 1, "model")
    )
    put(store, H100, SMALL, predicted, source=Source.MODEL)
    put(store, H100, BIG, predicted, source=Source.MODEL)
    put(store, H100, BIG, ok(Config(backend="triton", BLOCK_M=128), 200.0))
    [path] = export_csv(store, tmp_path)
    _, rows = read(path)
    by_m = {r["m"]: r for r in rows}
    assert by_m["16"]["source"] == "model" and by_m["4096"]["source"] == "measured"
    assert by_m["16"]["time_us"] == "0.3333333"
