"""aiter's tuned GEMM tables: every table and column version read (fixtures written here, following aiter's
files), the op each maps to, the rows flagged or skipped with the reason; our winners written in aiter's
columns and read back as the same records."""

from __future__ import annotations

import csv
import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store, StoreError, TrialRecord, export_aiter, import_files
from autotune.db.aiter_gemm import (
    AITER_GEMM_KINDS,
    PRESHUFFLED,
    aiter_target,
    config_name,
    config_of_name,
    kind_for_op,
)
from autotune.db.foreign import IMPORTED_TOOLCHAIN, InteropError, JsonForm
from autotune.db.interop import read_imports

MI300X = Target.for_arch("gfx942")
MI355X = Target.for_arch("gfx950")
H100 = Target.for_arch("sm_90")

#: Headers as aiter's tuners wrote them, newest first.
BF16_KEY = "bias,dtype,outdtype,scaleAB,bpreshuffle"
BF16_GFX = f"gfx,cu_num,M,N,K,{BF16_KEY},libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw"
BF16_CU = f"cu_num,M,N,K,{BF16_KEY},libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw"
BF16_OLD = (
    "M,N,K,bias,dtype,outdtype,scaleAB,cu_num,libtype,solidx,splitK,soltimes,kernelName,err_ratio,tflops,bw"
)
A8W8_LIB = "gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
A8W8_GFX = "gfx,cu_num,M,N,K,q_dtype_w,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
CK_OLD = "cu_num,M,N,K,kernelId,splitK,us,kernelName"
BLOCKSCALE_MID = "cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
BLOCKSCALE_GFX = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"

ASM = "_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE"
ROWWISE = "a8w8_rowwise_256x16x64x512_16x16_1x1_32x8x1_32x8x1_1x16x1x16_4x4x1_1x1_intrawave_v3"
BLOCKSCALE = (
    "a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1"
)
PRESHUFFLE_ASM = "_ZN5aiter41I8gemm_bf16_perTokenI8_BpreShuffle_16x128E"
PRESHUFFLE_CKTILE = "a8w8_bpreshuffle_cktile_0x0x8x4x1x0x0x0x0x1_32x64x512_1x4x1_16x16x64_default"


def table(directory: Path, name: str, header: str, *rows: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "autotune.db")) as s:
        yield s


def imported(store: Store) -> dict[tuple[str, int, int, int, int], TrialRecord]:
    """The imported records by (op, CU count, M, N, K)."""
    return {
        (r.problem.op, r.gpu.target.cu_count, r.problem.M, r.problem.N, r.problem.K): r
        for r in store.trials()
    }


# -- the rule: which table is which op ---------------------------------------------------------------------


def test_each_table_maps_to_one_op_and_our_winners_to_the_unflagged_one() -> None:
    ops = {k.name: (k.op, bool(k.flag)) for k in AITER_GEMM_KINDS.values()}
    assert ops == {
        "bf16": ("gemm", False),
        "a8w8": ("gemm_fp8_rowwise", False),
        "a8w8_blockscale": ("gemm_fp8_blockwise", False),
        "a8w8_bpreshuffle": ("gemm_fp8_rowwise", True),
        "a8w8_blockscale_bpreshuffle": ("gemm_fp8_blockwise", True),
    }
    kinds = [kind_for_op(op) for op in ("gemm", "gemm_fp8_rowwise", "gemm_fp8_blockwise")]
    assert [k.file if k else None for k in kinds] == [
        "bf16_tuned_gemm.csv",
        "a8w8_tuned_gemm.csv",
        "a8w8_blockscale_tuned_gemm.csv",
    ]
    assert kind_for_op("moe") is None and kind_for_op("gemm_mxfp4") is None


@pytest.mark.parametrize(
    ("cu", "gfx", "name", "arch"),
    [
        (304, "gfx942", "AMD Instinct MI300X", "gfx942"),
        (80, "gfx942", "AMD Instinct MI308X", "gfx942"),
        (256, "gfx950", "AMD Instinct MI355X", "gfx950"),
        (304, None, "AMD Instinct MI300X", "gfx942"),
    ],
)
def test_devices_of_gfx_and_cu_num(cu: int, gfx: str | None, name: str, arch: str) -> None:
    target = aiter_target(cu, gfx)
    assert (target.name, target.arch, target.cu_count) == (name, arch, cu)
    assert target.toolchain == IMPORTED_TOOLCHAIN


def test_unknown_devices_are_errors() -> None:
    with pytest.raises(InteropError, match="gfx950 with 304 CUs is no GPU we know"):
        aiter_target(304, "gfx950")
    with pytest.raises(InteropError, match="cu_num 228 is no GPU we know"):
        aiter_target(228)


# -- bf16_tuned_gemm.csv ------------------------------------------------------------------------------------


def test_bf16_table_of_today(store: Store, tmp_path: Path) -> None:
    path = table(
        tmp_path,
        "bf16_tuned_gemm.csv",
        BF16_GFX,
        f"gfx950,256,64,256,5120,False,torch.bfloat16,torch.bfloat16,False,False,asm,5,13,7.9191,{ASM},0.0,21.19,417.92",
        "gfx942,304,32,6144,2048,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,61234,0,11.3329,Cijk_Ailk,0.0,71.06,2266.86",
        "gfx942,304,16,4096,4096,False,torch.float16,torch.float16,False,False,triton,0,0,9.5,,0.0,56.5,1773.2",
        "gfx950,256,64,256,6144,False,torch.bfloat16,torch.float32,False,False,asm,5,13,6.4183,x,0.0,15.68,370.14",
        "gfx942,304,8,2048,6144,True,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,7,0,12.9,Cijk_b,0.0,1.0,1.0",
        "gfx942,304,8,2048,6144,False,torch.bfloat16,torch.bfloat16,False,True,asm,3,0,11.0,y,0.0,1.0,1.0",
        "gfx942,304,8,2048,6144,False,torch.bfloat16,torch.bfloat16,True,False,hipblaslt,8,0,12.0,z,0.0,1.0,1.0",
        "gfx942,304,16,4096,4096,False,torch.float8_e4m3fnuz,torch.bfloat16,True,False,hipblaslt,9,0,6.1,f8,0.0,1.0,1.0",
        "gfx950,256,16,4096,4096,False,torch.float8_e4m3fnuz,torch.bfloat16,True,False,hipblaslt,9,0,6.1,f8,0.0,1,1",
        "gfx942,304,128,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,9,0,-1,None,0.0,-1,-1",
        "gfx942,228,16,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,9,0,6.1,f8,0.0,1,1",
    )
    (file,) = import_files(store, [path])
    assert file.error == "" and file.format == "aiter"
    assert (file.n_entries, file.n_ok, file.n_flagged, len(file.skipped)) == (11, 4, 5, 2)
    assert file.written == 9
    assert "bf16 tuned GEMM (gemm)" in file.summary
    rows = {(t.extra["row"]): t for t in store.trials()}
    first = rows[2]
    assert first.problem == Problem.of("gemm", 64, 256, 5120, "bf16", layout="nk")
    assert (first.gpu.name, first.gpu.arch, first.gpu.target.cu_count) == (
        "AMD Instinct MI355X",
        "gfx950",
        256,
    )
    assert first.config == Config(backend="aiter", libtype="asm", solidx=5, splitK=13, kernelName=ASM)
    assert first.ok and first.time_us == 7.9191 and first.kernel == "gemm.aiter"
    assert first.source is Source.IMPORTED and first.timing is not None and first.timing.method == "imported"
    assert first.extra["imported_from"] == "aiter" and first.extra["columns"]["tflops"] == "21.19"
    assert rows[3].config["solidx"] == 61234 and rows[3].gpu.name == "AMD Instinct MI300X"
    assert rows[4].problem.dtype == "fp16" and rows[4].ok
    flagged = {n: rows[n].error for n in (5, 6, 7, 8, 11)}
    assert "fp32 output of bf16 inputs" in flagged[5] and rows[5].problem.dtype_out == "fp32"
    assert "bias=True" in flagged[6] and rows[6].config["bias"] is True
    assert flagged[7] == PRESHUFFLED
    assert "scaleAB=True" in flagged[8]
    assert "no usable time (us=-1)" in flagged[11] and rows[11].timing is None
    assert all(rows[n].status is TrialStatus.PRUNED for n in flagged)
    assert rows[5].timing is not None and rows[5].timing.median_us == 6.4183  # flagged: aiter's time kept
    fp8 = rows[9]  # hipBLASLt FP8 with scalar scales: the per-tensor case of gemm_fp8_rowwise
    assert fp8.ok and fp8.problem == Problem.quant("gemm_fp8_rowwise", 16, 4096, 4096, "bf16", "fp8e4m3")
    skipped = dict(file.skipped)
    assert "gfx950's FP8 is the other e4m3 flavour" in skipped["row 10"]
    assert "gfx942 with 228 CUs is no GPU we know" in skipped["row 12"]


def test_bf16_tables_of_earlier_formats(store: Store, tmp_path: Path) -> None:
    cu_first = table(
        tmp_path / "a",
        "bf16_tuned_gemm.csv",
        BF16_CU,
        "304,64,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,41,0,14.25,Cijk_c,0.0,150.7,3530.2",
    )
    oldest = table(
        tmp_path / "b",
        "bf16_tuned_gemm.csv",
        BF16_OLD,
        "32,8192,1024,False,torch.bfloat16,torch.bfloat16,False,80,hipblaslt,77,0,13.67,Cijk_d,0.0,39.3,1283.4",
        "32,8192,1024,False,torch.bfloat16,torch.bfloat16,False,80,rocblas,12,0,14.1,,0.0,38.1,1244.0",
    )
    files = import_files(store, [cu_first, oldest])
    assert [f.written for f in files] == [1, 2]
    found = imported(store)
    assert found[("gemm", 304, 64, 4096, 4096)].time_us == 14.25
    old = found[("gemm", 80, 32, 8192, 1024)]
    assert old.gpu.name == "AMD Instinct MI308X" and old.time_us in (13.67, 14.1)


# -- the a8w8 tables -------------------------------------------------------------------------------------


def test_a8w8_rowwise_tables(store: Store, tmp_path: Path) -> None:
    path = table(
        tmp_path,
        "a8w8_tuned_gemm.csv",
        A8W8_GFX,
        f"gfx942,80,1,1280,8192,torch.int8,34,0,20.5611,{ROWWISE},1.02,510.5,0.0",
        f"gfx950,256,1,1280,8192,torch.float8_e4m3fn,79,3,7.6797,{ROWWISE},2.73,1366.79,0.1344",
        f"gfx942,304,16,1280,8192,torch.float8_e4m3fnuz,79,0,9.25,{ROWWISE},2.9,1300.1,0.0",
        f"gfx942,304,32,1280,8192,torch.float8_e5m2fnuz,79,0,9.25,{ROWWISE},2.9,1300.1,0.0",
    )
    (file,) = import_files(store, [path])
    assert (file.n_ok, file.n_flagged, len(file.skipped)) == (1, 1, 2)  # errRatio 0.1344: a wrong result
    skipped = dict(file.skipped)
    assert "torch.int8 has no op of ours" in skipped["row 2"]
    assert "float8_e5m2fnuz has no op of ours" in skipped["row 5"]
    assert "aiter's error ratio 0.1344 is above 0.05" in dict(file.flagged)["row 3"]
    mi355 = imported(store)[("gemm_fp8_rowwise", 256, 1, 1280, 8192)]
    assert mi355.problem == Problem.quant("gemm_fp8_rowwise", 1, 1280, 8192)
    assert mi355.config == Config(backend="aiter", libtype="ck", kernelId=79, splitK=3, kernelName=ROWWISE)
    assert mi355.kernel == "gemm_fp8_rowwise.aiter" and mi355.status is TrialStatus.WRONG_RESULT
    assert mi355.rel_error == 0.1344 and mi355.time_us is None and mi355.timing.median_us == 7.6797
    with_libtype = table(
        tmp_path / "lib",
        "a8w8_tuned_gemm.csv",
        A8W8_LIB,
        f"gfx942,304,16,1280,8192,torch.float8_e4m3fnuz,cktile,9,0,8.5,{PRESHUFFLE_CKTILE},3.1,1400.2,0.0",
    )
    (file,) = import_files(store, [with_libtype])
    assert file.written == 1
    assert imported(store)[("gemm_fp8_rowwise", 304, 16, 1280, 8192)].config["libtype"] in ("ck", "cktile")


def test_a8w8_table_without_q_dtype_w_holds_int8(store: Store, tmp_path: Path) -> None:
    path = table(tmp_path, "a8w8_tuned_gemm.csv", CK_OLD, f"304,16,1280,8192,34,0,20.5,{ROWWISE}")
    (file,) = import_files(store, [path])
    assert file.written == 0 and file.error == ""
    assert "hold int8 GEMMs" in file.skipped[0][1]


def test_blockscale_tables(store: Store, tmp_path: Path) -> None:
    old = table(
        tmp_path / "old",
        "a8w8_blockscale_tuned_gemm.csv",
        CK_OLD,
        f"256,16,1536,7168,8,0,20.8535,{BLOCKSCALE}",
        f"304,16,1536,7000,8,0,20.8535,{BLOCKSCALE}",  # K no multiple of 128: our op refuses it
    )
    mid = table(
        tmp_path / "mid",
        "a8w8_blockscale_tuned_gemm.csv",
        BLOCKSCALE_MID,
        f"304,32,3072,1536,8,0,6.3665,{BLOCKSCALE},23.72,760.46,0.0",
    )
    new = table(
        tmp_path / "new",
        "a8w8_blockscale_tuned_gemm.csv",
        BLOCKSCALE_GFX,
        f"gfx942,304,64,7168,2048,ck,7,0,11.4514,{BLOCKSCALE},164.09,1373.51,0.0",
    )
    files = import_files(store, [old, mid, new])
    assert [f.written for f in files] == [1, 1, 1]
    assert "multiple of its scale block 128" in files[0].skipped[0][1]
    found = imported(store)
    blockwise = found[("gemm_fp8_blockwise", 256, 16, 1536, 7168)]
    assert blockwise.problem == Problem.quant("gemm_fp8_blockwise", 16, 1536, 7168)
    assert blockwise.ok and blockwise.config["kernelId"] == 8
    assert found[("gemm_fp8_blockwise", 304, 64, 7168, 2048)].time_us == 11.4514


def test_bpreshuffle_tables_are_flagged_records_of_the_same_ops(store: Store, tmp_path: Path) -> None:
    rowwise = table(
        tmp_path,
        "a8w8_bpreshuffle_tuned_gemm.csv",
        A8W8_LIB,
        f"gfx942,80,128,128,5120,torch.int8,asm,0,8,7.3189,{PRESHUFFLE_ASM},22.92,183.56,0.182",
        f"gfx942,80,192,1536,5120,torch.float8_e4m3fnuz,cktile,9,0,18.9229,{PRESHUFFLE_CKTILE},159.59,498.72,0.0",
    )
    blockwise = table(
        tmp_path,
        "a8w8_blockscale_bpreshuffle_tuned_gemm.csv",
        BLOCKSCALE_GFX,
        "gfx950,256,2048,512,7168,ck,17,3,21.5224,a8w8_blockscale_bpreshuffle_1x128x128_256x64x64x256,698.45,950.04,0.0",
    )
    files = import_files(store, [rowwise, blockwise])
    assert [(f.n_ok, f.n_flagged, len(f.skipped)) for f in files] == [(0, 1, 1), (0, 1, 0)]
    found = imported(store)
    shuffled = found[("gemm_fp8_rowwise", 80, 192, 1536, 5120)]
    assert shuffled.status is TrialStatus.PRUNED and shuffled.error == PRESHUFFLED
    assert shuffled.timing is not None and shuffled.timing.median_us == 18.9229
    assert found[("gemm_fp8_blockwise", 256, 2048, 512, 7168)].error == PRESHUFFLED
    assert store.winners(source=Source.IMPORTED) == []  # flagged: never anyone's best


def test_a_renamed_table_is_placed_by_aiter_kernel_names(tmp_path: Path) -> None:
    rows = {
        "a8w8": f"gfx942,304,16,1280,8192,torch.float8_e4m3fnuz,ck,1,0,9.0,{ROWWISE},1,1,0",
        "a8w8_bpreshuffle": (
            f"gfx942,304,16,1280,8192,torch.float8_e4m3fnuz,asm,1,0,9.0,{PRESHUFFLE_ASM},1,1,0"
        ),
    }
    for kind, row in rows.items():
        (file,) = read_imports([table(tmp_path / kind, "tuned.csv", A8W8_LIB, row)])
        assert file.error == "" and f"aiter {kind} tuned GEMM" in file.summary
    (blockscale,) = read_imports(
        [table(tmp_path / "b", "mine.csv", CK_OLD, f"304,16,1536,7168,8,0,20.8,{BLOCKSCALE}")]
    )
    assert "aiter a8w8_blockscale tuned GEMM" in blockscale.summary


UNTUNED = ("M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,cu_num",
           "1,2,3,False,torch.bfloat16,torch.bfloat16,False,False,304")  # fmt: skip
BAD = [
    ("other-family", "a4w4_blockscale_tuned_gemm.csv", CK_OLD, "304,16,1536,7168,8,0,20.8,a4w4_x",
     "a4w4 GEMM tables are not imported"),
    ("unplaceable", "tuned.csv", CK_OLD, "304,16,1536,7168,8,0,20.8,some_kernel",
     "cannot tell which aiter GEMM table"),
    ("untuned", "bf16_untuned_gemm.csv", *UNTUNED, "lacks the columns us, kernelName, solidx"),
    ("bad-number", "a8w8_tuned_gemm.csv", CK_OLD, f"304,sixteen,1280,8192,34,0,20.5,{ROWWISE}",
     "row 2: M is 'sixteen'"),
    ("bad-time", "a8w8_tuned_gemm.csv", CK_OLD, f"304,16,1280,8192,34,0,fast,{ROWWISE}",
     "row 2: us is 'fast'"),
    ("short-row", "a8w8_tuned_gemm.csv", CK_OLD, "304,16,1280", "row 2: its number of fields"),
    ("no-rows", "a8w8_tuned_gemm.csv", CK_OLD, "", "a header but no rows"),
]  # fmt: skip


@pytest.mark.parametrize("case", [b[0] for b in BAD])
def test_bad_tables_are_reported_and_stop_no_other_file(case: str, store: Store, tmp_path: Path) -> None:
    _, name, header, row, message = next(b for b in BAD if b[0] == case)
    bad = table(tmp_path / "bad", name, header, *([row] if row else []))
    good = table(
        tmp_path, "a8w8_blockscale_tuned_gemm.csv", CK_OLD, f"304,16,1536,7168,8,0,20.8,{BLOCKSCALE}"
    )
    files = import_files(store, [bad, good])
    assert message in files[0].error and files[0].readable and name in files[0].error
    assert files[1].written == 1


def test_import_twice_writes_nothing_new(store: Store, tmp_path: Path) -> None:
    path = table(
        tmp_path, "a8w8_blockscale_tuned_gemm.csv", CK_OLD, f"304,16,1536,7168,8,0,20.8,{BLOCKSCALE}"
    )
    assert [f.written for f in import_files(store, [path])] == [1]
    assert [f.written for f in import_files(store, [path])] == [0]


# -- rows of one kind, read once ---------------------------------------------------------------------------


def _bf16(m: int, n: int, k: int, rest: str, us: str = "9.5", bias: str = "False") -> str:
    return f"gfx942,304,{m},{n},{k},{bias},torch.bfloat16,torch.bfloat16,False,False,{rest},{us}"


QUOTED = ',"Cijk ""q"" \\ µ, x",0.0,5.5,6.5'
KIND_ROWS = (
    _bf16(16, 4096, 1024, "hipblaslt,7,0", "11.5") + ",Cijk_a,0.0,1.5,2.5",  # row 2: a kind's first row
    _bf16(32, 8192, 2048, "hipblaslt,7,0", "12.5") + ",Cijk_a,0.0,3.5,4.5",  # its second
    _bf16(0, 8192, 2048, "asm,5,2", "3.0") + f",{ASM},0.0,1,1",  # another kind's first row: M=0
    _bf16(64, 1024, 1024, "asm,5,2", "4.0") + f",{ASM},0.0,1,1",
    _bf16(64, 1024, 0, "asm,5,2", "5.0") + f",{ASM},0.0,1,1",  # a later one: K=0
    _bf16(8, 2048, 6144, "hipblaslt,9,0", "12.9", "True") + ",Cijk_b,0.0,1,1",  # flagged kind
    _bf16(8, 2048, 2048, "hipblaslt,9,0", "-1", "True") + ",Cijk_b,0.0,1,1",  # flagged twice
    _bf16(8, 2048, 1024, "hipblaslt,9,0", "13.9", "True") + ",Cijk_b,0.0,1,1",
    _bf16(48, 4096, 1024, "hipblaslt,7,0", "14.5") + ",Cijk_a,0.0,5.5,6.5",  # the first kind again
    _bf16(48, 4096, 1024, "hipblaslt,7,0", "15.5") + ",Cijk_a,0.0,5.5,6.5",  # its problem and config again
    _bf16(48, 4096, 1024, "hipblaslt,7,1", "16.5") + ",Cijk_a,0.0,5.5,6.5",  # another splitK: another kind
    _bf16(96, 4096, 1024, " hipblaslt ,7,0", "17.5") + QUOTED,  # spaced, quoted, escaped: its extra's JSON
    _bf16(97, 4096, 1024, " hipblaslt ,7,0", "18.5") + QUOTED,
)


def test_rows_of_one_kind_are_read_once_and_each_is_stored_as_its_own(store: Store, tmp_path: Path) -> None:
    """Rows alike but in their shape and time share the GPU, problem kind and config read for the first
    of them: each is stored with its own problem, time, row and columns; a shape the op refuses is
    skipped as the first row of a kind would be; a repeated trial is written once."""
    path = table(tmp_path, "bf16_tuned_gemm.csv", BF16_GFX, *KIND_ROWS)
    (file,) = import_files(store, [path])
    assert (file.n_ok, file.n_flagged, file.written) == (8, 3, 10)  # rows 10 and 11: one trial
    assert dict(file.skipped) == {
        "row 4": "M must be a positive integer, got 0",
        "row 6": "K must be a positive integer, got 0",
    }
    rows = {t.extra["row"]: t for t in store.trials()}
    assert sorted(rows) == [2, 3, 5, 7, 8, 9, 10, 12, 13, 14]
    for number, line in enumerate(KIND_ROWS, start=2):
        if number not in rows:
            continue
        record, values = rows[number], next(csv.reader([line]))
        m, n, k = (int(v) for v in values[2:5])
        assert record.problem == Problem.of("gemm", m, n, k, "bf16") and record.extra["columns"]["M"] == str(
            m
        )
        assert record.extra["columns"]["kernelName"] == values[14].strip()
        assert record.extra["columns"]["tflops"] == values[16] and record.extra["table"] == "bf16"
        assert record.config["solidx"] == int(values[11]) and record.config["splitK"] == int(values[12])
        assert record.gpu.name == "AMD Instinct MI300X"
    assert rows[2].config is not rows[3].config and rows[2].config == rows[3].config  # read back
    assert rows[10].time_us == 14.5 and rows[12].config["splitK"] == 1
    assert rows[5].config == Config(backend="aiter", libtype="asm", solidx=5, splitK=2, kernelName=ASM)
    assert [rows[n].error for n in (7, 8, 9)] == [
        "bias=True: our GEMMs have no bias epilogue",
        "bias=True: our GEMMs have no bias epilogue; aiter recorded no usable time (us=-1)",
        "bias=True: our GEMMs have no bias epilogue",
    ]
    assert rows[13].config["kernelName"] == 'Cijk "q" \\ µ, x' == rows[14].extra["columns"]["kernelName"]
    assert rows[13].config["libtype"] == "hipblaslt"


def test_a_kinds_config_is_shared_but_each_row_keeps_its_own_extra(tmp_path: Path) -> None:
    """The config of a kind is one immutable value; the extras, and the JSON the Store writes of them, are
    each row's own (as `json.dumps` writes the extra)."""
    path = table(tmp_path, "bf16_tuned_gemm.csv", BF16_GFX, *KIND_ROWS)
    (file,) = read_imports([path])
    by_row = {t.result.extra["row"]: t for t in file.trials}
    first, second = by_row[2], by_row[3]
    assert first.result.config is second.result.config
    with pytest.raises((AttributeError, TypeError)):
        first.result.config["solidx"] = 8  # type: ignore[index]
    first.result.config.to_dict()["solidx"] = 8
    assert second.result.config["solidx"] == 7 and first.result.config["solidx"] == 7
    assert first.result.extra["columns"] is not second.result.extra["columns"]
    first.result.extra["columns"]["M"] = "1"
    assert second.result.extra["columns"]["M"] == "32"
    assert first.problem is not second.problem and first.problem.M == 16 and second.problem.M == 32
    encoded = [t for t in file.trials if t.extra_json]
    assert {t.result.extra["row"] for t in encoded} >= {3, 8, 9, 10, 11, 14}  # a kind's second row on
    for trial in by_row.values():
        if trial is not first and trial.extra_json:
            assert trial.extra_json == json.dumps(trial.result.extra, sort_keys=True)


@pytest.mark.parametrize("seed", range(3))
def test_a_json_form_writes_what_json_dumps_does(seed: int) -> None:
    rng = random.Random(seed)
    texts = ["", "a", 'q"uote', "back\\slash", "µs", "tab\t", "\u2028", "😀", " spaced ", "{}", "[1]", "null"]
    for _ in range(20):
        values: list[str | int] = [rng.choice(texts) + rng.choice(texts) for _ in range(4)]
        values.append(rng.randrange(-(2**70), 2**70))
        keys = rng.sample(["M", "N", "K", "us", "row", "b", "a", "Z", "z"], 5)
        fixed = {
            rng.choice(texts) + str(i): rng.choice([1, 2.5, None, True, rng.choice(texts)]) for i in range(3)
        }
        sample = {
            **fixed,
            "inner": {key: JsonForm.slot(i) for i, key in enumerate(keys)},
            "n": JsonForm.slot(4),
        }
        value = {**fixed, "inner": {key: values[i] for i, key in enumerate(keys)}, "n": values[4]}
        assert JsonForm(sample).text(values) == json.dumps(value, sort_keys=True)


# -- our configs' names --------------------------------------------------------------------------------


CONFIGS = [
    Config(backend="torch"),
    Config(backend="triton", BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=4,
           num_stages=2, waves_per_eu=0, matrix_instr_nonkdim=16, kpack=2, NUM_XCDS=8),
    Config(backend="triton_gemv", BLOCK_N=4, BLOCK_K=1024, num_warps=8, num_stages=3, STREAM_K=0),
    Config(backend="triton", BLOCK_SIZE_M=16, EVEN_K=True, x2=3, ratio=0.5, mode="fast"),
]  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.backend)
def test_config_names_read_back_to_the_config(config: Config) -> None:
    name = config_name(config)
    assert config_of_name(name) == config
    assert "," not in name and name.startswith(config.backend)


def test_config_names_are_the_short_form_where_it_reads_back() -> None:
    assert config_name(CONFIGS[1]) == CONFIGS[1].short()
    assert config_name(CONFIGS[3]) == "triton BLOCK_SIZE_M=16 EVEN_K=True mode=fast ratio=0.5 x2=3"
    with pytest.raises(ValueError, match="cannot be written"):
        config_name(Config(backend="triton", mode="a b"))
    with pytest.raises(ValueError, match="cannot be written"):
        config_name(Config(backend="triton", tag="16"))
    for bad in ("", "BM=1", "triton BM", "triton ???", "triton BM16 BLOCK_M=16"):
        with pytest.raises(ValueError):
            config_of_name(bad)


# -- export --format aiter ---------------------------------------------------------------------------------


def timed(config: Config, us: float) -> TrialResult:
    return TrialResult(
        config, TrialStatus.OK, timing=Timing(us, us, us, us, us, 0.0, 10, "graph"), rel_error=1e-3
    )


def put(store: Store, target: Target, problem: Problem, config: Config, us: float) -> None:
    store.record(
        target=target,
        kernel=f"{problem.op}.{config.backend}",
        source_hash="v1",
        problem=problem,
        result=timed(config, us),
    )


TRITON = CONFIGS[1]


@pytest.fixture
def measured(store: Store) -> Store:
    """Winners of the three ops on an MI300X and an MI355X (random times), beside a slower torch trial; a
    kn gemm, an H100 gemm and an MI300X moe, which no aiter table holds."""
    rng = random.Random(7)
    for target in (MI300X, MI355X):
        for M in (1, 16, 256):
            for problem in (
                Problem.of("gemm", M, 4096, 4096),
                Problem.of("gemm", M, 1024, 8192, "fp16"),
                Problem.quant("gemm_fp8_rowwise", M, 1280, 8192),
                Problem.quant("gemm_fp8_blockwise", M, 1536, 7168),
            ):
                us = rng.uniform(3.0, 300.0)
                best = TRITON.replace(BLOCK_M=16 if M < 64 else 128, SPLIT_K=1 + M % 3)
                put(store, target, problem, best, us)
                put(store, target, problem, Config(backend="torch"), us * rng.uniform(1.05, 2.0))
    put(store, MI300X, Problem.of("gemm", 16, 4096, 4096, layout="kn"), TRITON, 9.0)
    put(store, H100, Problem.of("gemm", 16, 4096, 4096), TRITON, 9.0)
    put(store, MI300X, Problem.of("moe", 16, 256, 7168, E=32, topk=8), Config(backend="torch"), 30.0)
    return store


def rows_of(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_export_writes_aiters_columns(measured: Store, tmp_path: Path) -> None:
    paths = export_aiter(measured, tmp_path / "out")
    assert sorted(p.name for p in paths) == [
        "a8w8_blockscale_tuned_gemm.csv",
        "a8w8_tuned_gemm.csv",
        "bf16_tuned_gemm.csv",
    ]
    out = tmp_path / "out"
    header, bf16 = rows_of(out / "bf16_tuned_gemm.csv")
    assert header == list(AITER_GEMM_KINDS["bf16"].columns)
    assert header[:5] == ["gfx", "cu_num", "M", "N", "K"] and header[-4:] == [
        "kernelName",
        "err_ratio",
        "tflops",
        "bw",
    ]
    assert len(bf16) == 2 * 3 * 2  # two GPUs, three M, bf16 and fp16: no kn, no H100, no moe
    assert [(r["gfx"], r["cu_num"]) for r in bf16[:1]] == [("gfx942", "304")]
    winners = {(w.gpu.arch, w.problem): w for w in measured.winners()}
    row = next(
        r for r in bf16 if (r["gfx"], r["M"], r["N"], r["dtype"]) == ("gfx950", "16", "1024", "torch.float16")
    )
    w = winners[("gfx950", Problem.of("gemm", 16, 1024, 8192, "fp16"))]
    assert (row["cu_num"], row["K"], row["outdtype"]) == ("256", "8192", "torch.float16")
    assert (row["bias"], row["scaleAB"], row["bpreshuffle"], row["solidx"]) == (
        "False",
        "False",
        "False",
        "-1",
    )
    assert row["libtype"] == "autotune-triton" and row["kernelName"] == w.config.short()
    assert row["splitK"] == str(w.config["SPLIT_K"]) and float(row["us"]) == w.time_us
    assert float(row["tflops"]) == pytest.approx(2 * 16 * 1024 * 8192 / w.time_us / 1e6, abs=0.006)
    assert float(row["bw"]) == pytest.approx(w.problem.min_bytes() / w.time_us / 1e3, abs=0.006)
    assert row["err_ratio"] == "0.0"
    header, a8w8 = rows_of(out / "a8w8_tuned_gemm.csv")
    assert header == ["gfx", "cu_num", "M", "N", "K", "q_dtype_w", "libtype", "kernelId", "splitK", "us",
                      "kernelName", "tflops", "bw", "errRatio"]  # fmt: skip
    assert {(r["gfx"], r["q_dtype_w"]) for r in a8w8} == {
        ("gfx942", "torch.float8_e4m3fnuz"),
        ("gfx950", "torch.float8_e4m3fn"),
    }
    header, blockscale = rows_of(out / "a8w8_blockscale_tuned_gemm.csv")
    assert header == list(AITER_GEMM_KINDS["a8w8_blockscale"].columns) and len(blockscale) == 6
    assert [(r["gfx"], int(r["N"]), int(r["M"])) for r in blockscale] == sorted(
        (r["gfx"], int(r["N"]), int(r["M"])) for r in blockscale
    )


def test_round_trip_gives_the_same_records(measured: Store, tmp_path: Path) -> None:
    export_aiter(measured, tmp_path / "out")
    with Store(str(tmp_path / "back.db")) as back:
        files = import_files(back, [tmp_path / "out"])
        assert all(f.error == "" and not f.skipped and not f.flagged for f in files)
        got = {
            (r.gpu.arch, r.gpu.target.cu_count, r.problem, r.config, r.time_us)
            for r in back.trials(source=Source.IMPORTED)
        }
        assert all(r.kernel == f"{r.problem.op}.triton" for r in back.trials())
        export_aiter_again = tmp_path / "again"
        # the imported records are no measurements: they are not exported again
        with pytest.raises(StoreError, match="reference records from imported files"):
            export_aiter(back, export_aiter_again)
    expected = {
        (w.gpu.arch, w.gpu.target.cu_count, w.problem, w.config, w.time_us)
        for w in measured.winners()
        if w.gpu.target.is_amd and w.problem.op != "moe" and w.problem.layout == "nk"
    }
    assert got == expected and len(got) == 24


def test_export_is_byte_stable(measured: Store, tmp_path: Path) -> None:
    first = [p.read_bytes() for p in sorted(export_aiter(measured, tmp_path / "a"))]
    assert first == [p.read_bytes() for p in sorted(export_aiter(measured, tmp_path / "b"))]


def test_export_of_one_gpu_and_of_two_gpus_of_one_key(measured: Store, tmp_path: Path) -> None:
    paths = export_aiter(measured, tmp_path / "one", fingerprint=MI355X.fingerprint()[:8])
    assert {r["gfx"] for p in paths for r in rows_of(p)[1]} == {"gfx950"}
    other = dataclasses.replace(MI300X, toolchain={"torch": "0.0-other"})
    put(measured, other, Problem.of("gemm", 16, 4096, 4096), TRITON, 5.0)
    with pytest.raises(StoreError, match="both gfx942 with 304 CUs; pick one with --gpu"):
        export_aiter(measured, tmp_path / "two")


def test_export_without_gemm_winners_says_what_the_database_holds(store: Store, tmp_path: Path) -> None:
    put(store, H100, Problem.of("gemm", 16, 4096, 4096), TRITON, 9.0)
    with pytest.raises(StoreError, match=r"no measured winners .* on an AMD GPU; it holds 1 measured trial"):
        export_aiter(store, tmp_path / "out")


def test_export_leaves_out_what_no_table_holds(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    put(store, MI300X, Problem.of("gemm", 16, 4096, 4096), TRITON, 9.0)
    put(store, MI300X, Problem.of("gemm", 32, 4096, 4096), Config(backend="triton", mode="a b"), 9.0)
    put(store, MI300X, Problem.quant("gemm_fp8_rowwise", 16, 1280, 8192, "fp16"), TRITON, 9.0)
    with caplog.at_level("WARNING"):
        (path,) = export_aiter(store, tmp_path / "out")
    assert [r["M"] for r in rows_of(path)[1]] == ["16"]
    assert "cannot be written in a kernel name" in caplog.text
    assert "fp16 output: aiter's a8w8 table holds bf16 outputs" in caplog.text
