"""`autotune import` and `export` flags for files no one here wrote: K and top-k per shape (--shape) and the
warnings when one flag set falls on files of different E and N, files of ambiguous shape shown wherever
their E and N match, and --predicted for the cost model's picks of compile-only sweeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store
from autotune.kernels.moe.params import experts

H100, MI300X = Target.for_arch("sm_90"), Target.for_arch("gfx942")
MIXTRAL = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"  # Mixtral-8x7B at TP1: K=4096, topk=2
QWEN = "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json"  # Qwen3-30B-A3B TP2 or Qwen3-235B-A22B TP4


def entry(bm: int) -> dict[str, int]:
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def folder(root: Path) -> Path:
    root.mkdir()
    (root / MIXTRAL).write_text(json.dumps({"1": entry(16), "16": entry(32)}))
    (root / QWEN).write_text(json.dumps({"1": entry(16), "64": entry(64)}))
    return root


def shapes(db: str) -> dict[str, set[tuple[int, int]]]:
    """(K, topk) of the imported records of each file."""
    out: dict[str, set[tuple[int, int]]] = {}
    with Store(db) as store:
        for r in store.trials(source=Source.IMPORTED):
            out.setdefault(r.extra["file"], set()).add((r.problem.K, experts(r.problem)[1]))
    return out


def test_one_flag_set_on_files_of_different_e_and_n_is_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "x.db")
    assert main(["import", str(folder(tmp_path / "in")), "--k", "2048", "--topk", "8", "--db", db]) == 0
    captured = capsys.readouterr()
    assert ("warning: --k 2048 --topk 8 applied to files of 2 different E and N (E=8,N=14336; E=128,N=384)"
            in captured.out)  # fmt: skip
    assert ("warning: K=2048, topk=8 given (--k 2048 --topk 8), but E=8, N=14336 is the layer of "
            "Mixtral-8x7B TP1 (K=4096, topk=2): stored as given") in captured.out  # fmt: skip
    assert shapes(db) == {MIXTRAL: {(2048, 8)}, QWEN: {(2048, 8)}}  # as given, but said


def test_shape_flags_per_shape_and_per_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = folder(tmp_path / "in")
    db = str(tmp_path / "x.db")
    assert main(["import", str(root), "--shape", "E=128,N=384:2048,8", "--db", db]) == 0
    assert "warning" not in capsys.readouterr().out
    assert shapes(db) == {MIXTRAL: {(4096, 2)}, QWEN: {(2048, 8)}}  # Mixtral's inferred, Qwen's given
    db2 = str(tmp_path / "y.db")
    argv = ["import", str(root), "--shape", f"{root / QWEN}:K=4096,topk=8", "--shape", "E=64,N=1:64,2"]
    assert main([*argv, "--db", db2]) == 0
    assert "warning: --shape E=64,N=1:64,2 names no config file" in capsys.readouterr().out
    assert shapes(db2) == {MIXTRAL: {(4096, 2)}, QWEN: {(4096, 8)}}
    assert main(["import", str(root), "--shape", "E=128,N=384", "--db", db2]) == 2
    assert "expected PATTERN:K,TOPK" in capsys.readouterr().err


def test_a_file_of_ambiguous_shape_is_shown_wherever_its_e_and_n_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = folder(tmp_path / "in")
    db = str(tmp_path / "x.db")
    assert main(["import", str(root), "--db", db]) == 0
    capsys.readouterr()
    assert shapes(db)[QWEN] == {(1, 1)}  # stored with K and topk unknown
    for k in (2048, 4096):  # either model's layer
        argv = ["best", "--op", "moe", "--m", "64", "--n", "384", "--k", str(k), "--e", "128", "--topk", "8"]
        assert main([*argv, "--db", db]) == 1  # nothing measured
        out = capsys.readouterr().out
        assert "reference records from imported files" in out and "[vllm]" in out
        assert '"BLOCK_SIZE_M":64' in out  # its entry of that M
    with Store(db) as store:
        [r] = store.trials(problem=Problem.of("moe", 64, 384, 2048, E=128, topk=8), source=Source.IMPORTED)
        assert (r.problem.K, experts(r.problem)[1]) == (1, 1) and r.extra["shape"] == "unknown"  # marked so
        assert (
            store.trials(problem=Problem.of("moe", 64, 384, 2048, E=64, topk=8), source=Source.IMPORTED) == []
        )
        assert (
            store.trials(problem=Problem.of("moe", 64, 512, 2048, E=128, topk=8), source=Source.IMPORTED)
            == []
        )
        assert (
            store.trials(problem=Problem.of("moe", 64, 384, 2048, E=128, topk=8)) == []
        )  # imported ones only
    assert main(["export", "--format", "vllm", "--out", str(tmp_path / "v"), "--db", db]) == 0
    out = capsys.readouterr().out
    qwen = next(line for line in out.splitlines() if QWEN in line)
    assert "K and topk unknown" in qwen
    mixtral = next(line for line in out.splitlines() if MIXTRAL in line)
    assert "K and topk unknown" not in mixtral


# -- --predicted ---------------------------------------------------------------------------------------


def predicted(store: Store, target: Target, kernel: str, problem: Problem, config: Config, us: float) -> None:
    timing = Timing(us, us, us, us, us, 0.0, 1, "model")
    result = TrialResult(config, TrialStatus.OK, timing=timing)
    store.record(target=target, kernel=kernel, source_hash="v1", problem=problem, result=result,
                 source=Source.MODEL)  # fmt: skip


def moe_tiles(bm: int, **more: Any) -> Config:
    return Config(backend="triton", BLOCK_SIZE_M=bm, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                  SPLIT_K=1, GATE_UP_FUSED=0, PERSISTENT=0, num_warps=4, num_stages=3, **more)  # fmt: skip


def test_export_of_predictions_is_asked_for_with_predicted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "x.db")
    with Store(db) as store:
        for m, bm in ((1, 16), (64, 64)):
            predicted(
                store,
                H100,
                "moe.triton",
                Problem.of("moe", m, 14336, 4096, E=8, topk=2),
                moe_tiles(bm, B_TMA=0),
                9.0,
            )
        gemm = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, SPLIT_K=1,
                      num_warps=4, num_stages=2)  # fmt: skip
        predicted(store, MI300X, "gemm.triton", Problem.of("gemm", 16, 4096, 8192), gemm, 12.0)
    for fmt in ("vllm", "sglang", "aiter"):  # refused, naming the flag
        argv = ["export", "--format", fmt, "--out", str(tmp_path / fmt), "--triton-version", "3.4.0"]
        assert main([*argv, "--db", db]) == 2
        err = capsys.readouterr().err
        assert "nothing to export" in err and "add --predicted to export the cost model's picks" in err
        assert main([*argv, "--predicted", "--db", db]) == 0
        out = capsys.readouterr().out
        assert "wrote " in out
        if fmt == "aiter":
            assert "note: 1 winners are the cost model's picks of compile-only sweeps, not measured" in out
        else:
            assert "2 of its 2 entries predicted by the cost model, not measured" in out
    doc = json.loads((tmp_path / "vllm" / MIXTRAL).read_text())
    assert doc["1"]["BLOCK_SIZE_M"] == 16 and doc["64"]["BLOCK_SIZE_M"] == 64
    rows = (tmp_path / "aiter" / "bf16_tuned_gemm.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("gfx942,304,16,4096,8192,")
