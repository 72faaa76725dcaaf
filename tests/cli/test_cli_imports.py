"""`autotune import` of a mixed folder (vLLM JSON, aiter CSVs, TunableOp results, junk), `best` showing the
imported reference records tagged beside the measured ones, `export --format aiter`, and what best, export
and emit say when there is nothing to show."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store

MI300X = Target.for_arch("gfx942")
LINEAR = Problem.of("gemm", 16, 4096, 8192)  # x (16, 8192) · W (4096, 8192)ᵀ
BEST = ["best", "--op", "gemm", "--m", "16", "--n", "4096", "--k", "8192"]
BF16 = (
    "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,"
    "tflops,bw"
)
TUNABLEOP = (
    "Validator,PT_VERSION,2.6.0\nValidator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-\n"
    "Validator,HIPBLASLT_VERSION,0.12.0-8d2a3e4b\n"
    "GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_31337,{ms}\n"
    "GemmStridedBatchedTunableOp_BFloat16_NT,nt_128_128_64_B_32_ld_128_128_128,Gemm_Hipblaslt_1_5,0.01\n"
)
VLLM = "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"  # Mixtral-8x7B at TP1


def mixed_folder(root: Path, rng: random.Random) -> tuple[float, float]:
    """A folder as a user collects it: a vLLM MoE file, aiter GEMM tables (one row flagged), a TunableOp
    results file in a subfolder, and a junk CSV. Returns aiter's and TunableOp's times of LINEAR (µs)."""
    aiter_us, tunable_us = rng.uniform(8.0, 30.0), rng.uniform(8.0, 30.0)
    root.mkdir()
    entry = dict(
        BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1, num_warps=4, num_stages=2
    )
    (root / VLLM).write_text(json.dumps({"1": entry, "16": entry}, indent=4) + "\n")
    (root / "bf16_tuned_gemm.csv").write_text(
        f"{BF16}\n"
        f"gfx942,304,16,4096,8192,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,4242,0,{aiter_us},"
        "Cijk_Alik_Bljk_BBS_BH,0.0,1.0,1.0\n"
        "gfx942,304,16,4096,8192,True,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,4243,0,9.5,"
        "Cijk_bias,0.0,1.0,1.0\n"
    )
    (root / "a8w8_blockscale_tuned_gemm.csv").write_text(
        "cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
        "304,16,1536,7168,8,0,19.3027,a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16\n"
    )
    (root / "tunableop").mkdir()
    (root / "tunableop" / "tunableop_results0.csv").write_text(TUNABLEOP.format(ms=tunable_us / 1000))
    (root / "notes.csv").write_text("what,when\nretune MI300X,friday\n")
    return aiter_us, tunable_us


def measure(db: Path, problem: Problem, us: float) -> Config:
    """Stores a measured Triton winner of `problem` on an MI300X, and a slower torch trial."""
    best = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, SPLIT_K=1,
                  num_warps=4, num_stages=2)  # fmt: skip
    with Store(str(db)) as store:
        for config, t in ((best, us), (Config(backend="torch"), us * 1.3)):
            result = TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 10, "graph"))
            store.record(target=MI300X, kernel=f"gemm.{config.backend}", source_hash="v1", problem=problem,
                         result=result)  # fmt: skip
    return best


def test_import_a_mixed_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed_folder(tmp_path / "in", random.Random(1))
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 0  # the junk file was readable: exit 0
    out = capsys.readouterr().out
    assert f"{VLLM}: vllm, AMD Instinct MI300X" in out
    assert "bf16_tuned_gemm.csv: aiter, aiter bf16 tuned GEMM (gemm)" in out
    assert "imported 2 entries: 1 ok, 1 flagged; 2 new" in out
    assert "flagged row 3: bias=True: our GEMMs have no bias epilogue" in out
    assert (
        "a8w8_blockscale_tuned_gemm.csv: aiter, aiter a8w8_blockscale tuned GEMM (gemm_fp8_blockwise)" in out
    )
    assert "tunableop_results0.csv: tunableop, PyTorch TunableOp results on AMD Instinct MI300X" in out
    assert "skipped line 5: batched GEMM (B=32): our ops have no batch" in out
    assert "notes.csv: skipped:" in out and "cannot tell its format" in out
    assert "imported 6 new trials from 4 files" in out and "1 files skipped" in out
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 0
    assert "imported 0 new trials" in capsys.readouterr().out
    # a file that cannot be read at all: exit 1, the others imported all the same
    (tmp_path / "in" / "zz.csv").write_bytes(b"\xff\xfe\x00cu_num")
    assert main(["import", str(tmp_path / "in"), "--db", str(tmp_path / "y.db")]) == 1
    out = capsys.readouterr().out
    assert "zz.csv: unreadable" in out and "imported 6 new trials" in out


def test_best_shows_imported_records_beside_the_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(2)
    aiter_us, tunable_us = mixed_folder(tmp_path / "in", rng)
    db = tmp_path / "x.db"
    measured_us = rng.uniform(5.0, 30.0)
    measure(db, LINEAR, measured_us)
    assert main(["import", str(tmp_path / "in"), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main([*BEST, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert main([*BEST[:1], *BEST[3:], "--db", str(db)]) == 2  # no --op: the database holds several
    assert "problems of several ops (gemm, gemm_fp8_blockwise, moe): name one" in capsys.readouterr().err
    measured, _, imported = out.partition("reference records from imported files")
    assert f"{measured_us:.2f}" in measured and "[aiter]" not in measured
    assert "(not measured here; never served)" in imported
    lines = imported.splitlines()
    aiter = next(line for line in lines if "4242" in line)
    tunable = next(line for line in lines if "31337" in line)
    flagged = next(line for line in lines if "4243" in line)
    assert "[aiter]" in aiter and f"{aiter_us:.2f}" in aiter
    assert "[tunableop]" in tunable and f"{tunable_us:.2f}" in tunable
    assert "[aiter]" in flagged and "[flagged: bias=True: our GEMMs have no bias epilogue]" in flagged
    assert lines.index(flagged) > max(lines.index(aiter), lines.index(tunable))  # flagged last
    ranked = sorted([(aiter_us, aiter), (tunable_us, tunable)])
    assert lines.index(ranked[0][1]) < lines.index(ranked[1][1])  # timed ones fastest first
    # --gpu of the measured MI300X keeps the imported records of that device
    assert main([*BEST, "--gpu", MI300X.fingerprint(), "--db", str(db)]) == 0
    assert "[tunableop]" in capsys.readouterr().out


def test_best_of_a_problem_only_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed_folder(tmp_path / "in", random.Random(3))
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 0
    capsys.readouterr()
    moe = ["best", "--op", "moe", "--m", "16", "--n", "14336", "--k", "4096", "--e", "8", "--topk", "2"]
    assert main([*moe, "--db", db]) == 1  # nothing measured
    out = capsys.readouterr().out
    assert "[vllm]" in out and "BLOCK_SIZE_M" in out
    assert "no measured results for moe" in out
    assert "the database holds 2 reference records from imported files and no measured trials of moe" in out
    assert main([*BEST, "--limit", "1", "--db", db]) == 1
    out = capsys.readouterr().out
    assert "(2 more; raise --limit to see them)" in out
    assert "3 reference records from imported files (1 flagged) and no measured trials of gemm" in out


def test_export_aiter_and_read_it_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "x.db"
    us = random.Random(4).uniform(5.0, 30.0)
    best = measure(db, LINEAR, us)
    assert main(["export", "--format", "aiter", "--out", str(tmp_path / "out"), "--db", str(db)]) == 0
    assert "wrote " in capsys.readouterr().out
    text = (tmp_path / "out" / "bf16_tuned_gemm.csv").read_text().splitlines()
    assert text[0] == BF16
    assert text[1].startswith("gfx942,304,16,4096,8192,False,torch.bfloat16,torch.bfloat16,False,False,"
                              "autotune-triton,-1,1,")  # fmt: skip
    assert best.short() in text[1]
    back = str(tmp_path / "back.db")
    assert main(["import", str(tmp_path / "out"), "--db", back]) == 0
    capsys.readouterr()
    assert main([*BEST, "--db", back]) == 1  # imported only: reference records, nothing measured
    out = capsys.readouterr().out
    assert "[aiter]" in out and best.canonical() in out and f"{us:.2f}" in out


def test_nothing_to_show_says_what_the_database_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed_folder(tmp_path / "in", random.Random(5))
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 0
    capsys.readouterr()
    holds = "it holds 6 reference records from imported files (1 flagged) and no measured trials"
    assert main(["emit", "--out", str(tmp_path / "t.json"), "--db", db]) == 2
    err = capsys.readouterr().err
    assert "no tuned results in the database" in err and holds in err
    assert "imported records are served only once measured here" in err
    for fmt in ("csv", "aiter"):
        assert main(["export", "--format", fmt, "--out", str(tmp_path / fmt), "--db", db]) == 2
        err = capsys.readouterr().err
        assert "nothing to export" in err and holds in err
    Store(str(tmp_path / "e.db")).close()
    assert (
        main(["export", "--format", "vllm", "--out", str(tmp_path / "v"), "--db", str(tmp_path / "e.db")])
        == 2
    )
    assert "it holds no trials of moe" in capsys.readouterr().err


def test_emit_serves_measured_configs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed_folder(tmp_path / "in", random.Random(6))
    db = tmp_path / "x.db"
    measure(db, Problem.of("gemm", 32, 4096, 8192), 20.0)
    assert main(["import", str(tmp_path / "in"), "--db", str(db)]) == 0
    assert main(["emit", "--out", str(tmp_path / "t.json"), "--db", str(db)]) == 0
    capsys.readouterr()
    table = json.loads((tmp_path / "t.json").read_text())
    served = [(e["op"], b["m"], b["config"]["backend"]) for e in table["entries"] for b in e["buckets"]]
    assert served == [("gemm", 32, "triton")]
