"""PyTorch TunableOp results: validators, every GEMM op signature and parameter signature (fixtures written
here, following the files PyTorch writes), what maps to our ops, and what is flagged or skipped and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, TrialStatus
from autotune.db import Store, TrialRecord, import_files
from autotune.db.foreign import IMPORTED_TOOLCHAIN
from autotune.db.interop import read_imports
from autotune.db.tunableop import looks_like_tunableop

#: The validators a ROCm build of PyTorch writes first (in its map's order, which varies).
VALIDATORS = (
    "Validator,PT_VERSION,2.6.0",
    "Validator,ROCBLAS_VERSION,4.3.0-1e1d4ef8",
    "Validator,HIPBLASLT_VERSION,0.12.0-8d2a3e4b",
    "Validator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-",
    "Validator,ROCM_VERSION,6.3.1.0-48-2b1ba1b",
)
SCALED = "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN"


def results(directory: Path, *lines: str, validators: tuple[str, ...] = VALIDATORS, name: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or "tunableop_results0.csv")
    path.write_text("\n".join([*validators, *lines]) + "\n")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "autotune.db")) as s:
        yield s


def by_line(store: Store) -> dict[int, TrialRecord]:
    return {r.extra["line"]: r for r in store.trials()}


def test_gemm_signatures_map_to_our_gemm(store: Store, tmp_path: Path) -> None:
    path = results(
        tmp_path,
        # nn.Linear: x (16, 8192) · W (4096, 8192)ᵀ is BLAS TN with m = 4096 (our N), n = 16 (our M)
        "GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_12345,0.0123",
        "GemmTunableOp_Half_NN,nn_1024_64_512_ld_1024_512_1024,Gemm_Rocblas_5518,0.00411",
        "GemmTunableOp_float_TN,tn_256_32_128_ld_128_128_256,Default,0.0031",
        "GemmStridedBatchedTunableOp_BFloat16_TN,tn_512_8_1024_B_1_ld_1024_1024_512,Gemm_Hipblaslt_1_77,0.0022",
    )
    (file,) = import_files(store, [path])
    assert file.format == "tunableop" and file.error == "" and file.written == 4
    assert "PyTorch TunableOp results on AMD Instinct MI300X (gfx942, 304 CUs)" in file.summary
    assert "PT_VERSION 2.6.0" in file.summary
    lines = by_line(store)
    linear = lines[6]
    assert linear.problem == Problem.of("gemm", 16, 4096, 8192, "bf16", layout="nk")
    assert linear.config == Config(backend="tunableop", solution="Gemm_Hipblaslt_1_12345")
    assert linear.time_us == pytest.approx(12.3) and linear.ok and linear.source is Source.IMPORTED
    assert linear.kernel == "gemm.tunableop" and linear.gpu.target.toolchain == IMPORTED_TOOLCHAIN
    assert linear.extra["validators"]["GCN_ARCH_NAME"] == "gfx942:sramecc+:xnack-"
    assert linear.extra["op_signature"] == "GemmTunableOp_BFloat16_TN"
    assert lines[7].problem == Problem.of("gemm", 64, 1024, 512, "fp16", layout="kn")  # B as (K, N)
    assert lines[7].time_us == pytest.approx(4.11)
    assert lines[8].problem.dtype == "fp32" and lines[8].config["solution"] == "Default"
    assert lines[9].problem == Problem.of("gemm", 8, 512, 1024) and lines[9].ok  # one batch: a plain GEMM


def test_scaled_gemm_maps_to_gemm_fp8_rowwise(store: Store, tmp_path: Path) -> None:
    path = results(
        tmp_path,
        f"{SCALED},tn_4096_16_8192_ld_8192_8192_4096_rw_1_bias_None,Gemm_Hipblaslt_1_55,0.008",
        f"{SCALED},tn_4096_32_8192_ld_8192_8192_4096_rw_0_bias_None,Gemm_Hipblaslt_1_56,0.0095",
        f"{SCALED},tn_4096_64_8192_ld_8192_8192_4096_rw_1_bias_BFloat16,Gemm_Hipblaslt_1_57,0.011",
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_Half_TN,tn_2048_16_4096_ld_4096_4096_2048_rw_1_bias_None,"
        "Gemm_Hipblaslt_1_58,0.006",
    )
    (file,) = import_files(store, [path])
    assert (file.n_ok, file.n_flagged, len(file.skipped)) == (3, 1, 0)
    lines = by_line(store)
    rowwise = lines[6]
    assert rowwise.problem == Problem.quant("gemm_fp8_rowwise", 16, 4096, 8192, "bf16", "fp8e4m3")
    assert rowwise.config == Config(backend="tunableop", solution="Gemm_Hipblaslt_1_55", scaling="rowwise")
    assert rowwise.kernel == "gemm_fp8_rowwise.tunableop" and rowwise.time_us == pytest.approx(8.0)
    assert lines[7].ok and lines[7].config["scaling"] == "tensor"  # per-tensor: rowwise's special case
    assert lines[8].status is TrialStatus.PRUNED and "bias epilogue (BFloat16)" in lines[8].error
    assert lines[9].problem.dtype_out == "fp16"


def test_what_is_flagged_and_what_is_skipped(store: Store, tmp_path: Path) -> None:
    path = results(
        tmp_path,
        "GemmAndBiasTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_99,0.013",
        "GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8320_8192_4096,Gemm_Hipblaslt_1_100,0.014",
        "GemmTunableOp_BFloat16_TN,tn_4096_24_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_101",
        "GemmTunableOp_BFloat16_TN,tn_4096_32_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_102,0",
        "GemmTunableOp_BFloat16_TN,tn_4096_40_8192_ld_8192_8192_4096_xyz_1,Gemm_Hipblaslt_1_103,0.02",
        "GemmStridedBatchedTunableOp_BFloat16_NT,nt_128_128_64_B_32_ld_128_128_128,Gemm_Hipblaslt_1_5,0.01",
        "GemmTunableOp_Half_TT,tt_4096_16_8192_ld_8192_16_4096,Default,0.03",
        "GemmTunableOp_double_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Rocblas_1,0.2",
        "GemmTunableOp_c10::complex<float>_TN,tn_64_64_64_ld_64_64_64,Gemm_Rocblas_2,0.1",
        "ScaledGemmTunableOp_Float8_e5m2fnuz_Float8_e5m2fnuz_BFloat16_TN,tn_64_64_64_ld_64_64_64_rw_1_bias_None,A,0.1",
        "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_BFloat16_TN,tn_64_64_64_ld_64_64_64_rw_1_bias_None,B,0.1",
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_float_TN,tn_64_64_64_ld_64_64_64_rw_1_bias_None,C,0.1",
        "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_NN,nn_64_64_64_ld_64_64_64_rw_1_bias_None,D,0.1",
        "GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_104,slow",
        "GemmTunableOp_BFloat16_TN,nt_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_105,0.01",
        "LayerNormTunableOp_BFloat16,n_4096,Default,0.01",
        "GemmTunableOp_BFloat16_TN",
    )
    (file,) = import_files(store, [path])
    assert (file.n_ok, file.n_flagged) == (0, 5)
    flagged = dict(file.flagged)
    assert "bias epilogue (GemmAndBias)" in flagged["line 6"]
    assert "strided operands: ld 8320, 8192, 4096 where dense ones are 8192, 8192, 4096" in flagged["line 7"]
    assert flagged["line 8"] == flagged["line 9"] == "TunableOp recorded no time"
    assert "signature fields we do not read: xyz_1" in flagged["line 10"]
    skipped = dict(file.skipped)
    assert "batched GEMM (B=32)" in skipped["line 11"]
    assert "A stored transposed" in skipped["line 12"]
    assert "double GEMM: no op of ours" in skipped["line 13"]
    assert "no op of ours" in skipped["line 14"]
    assert "our FP8 GEMMs take e4m3" in skipped["line 15"]
    assert "gfx942's FP8 is the other e4m3 flavour" in skipped["line 16"]
    assert "our FP8 GEMMs write bf16 or fp16" in skipped["line 17"]
    assert "our FP8 GEMMs take B as (N, K)" in skipped["line 18"]
    assert "time 'slow' is not a number" in skipped["line 19"]
    assert "differ from the op's" in skipped["line 20"]
    assert "is no TunableOp GEMM we read" in skipped["line 21"]
    assert "not a result line" in skipped["line 22"]
    records = by_line(store)
    assert records[6].config["bias"] is True and records[6].timing is not None  # flagged: its time kept
    assert records[8].timing is None
    assert store.best(records[6].problem, source=Source.IMPORTED) == []  # flagged: never a best


def test_blas_log_lines_and_files_without_ld(store: Store, tmp_path: Path) -> None:
    blas = "BLAS_PARAMS: - { function: matmul, M: 4096, N: 16, K: 8192, lda: 8192, transA: T, transB: N }"
    path = results(
        tmp_path,
        f"GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Gemm_Hipblaslt_1_1,0.0123,{blas}",
        "GemmTunableOp_BFloat16_TN,tn_4096_32_8192,1216,0.033",  # PyTorch 2.2: no ld, the index alone
    )
    (file,) = import_files(store, [path])
    assert file.written == 2 and not file.flagged
    lines = by_line(store)
    assert lines[6].extra["more"] == blas and lines[6].time_us == pytest.approx(12.3)
    assert lines[7].problem == Problem.of("gemm", 32, 4096, 8192) and lines[7].config["solution"] == "1216"


def test_devices_of_the_arch_validator(tmp_path: Path) -> None:
    line = "GemmTunableOp_BFloat16_TN,tn_4096_16_8192_ld_8192_8192_4096,Default,0.01"
    mi355 = results(tmp_path / "a", line, validators=("Validator,GCN_ARCH_NAME,gfx950:sramecc+:xnack-",))
    (file,) = read_imports([mi355])
    assert file.trials[0].target.name == "AMD Instinct MI355X" and file.trials[0].target.arch == "gfx950"
    cuda = results(
        tmp_path / "b", line, validators=("Validator,PT_VERSION,2.6.0", "Validator,CUDA_VERSION,12.6")
    )
    (file,) = read_imports([cuda])
    assert "no Validator GCN_ARCH_NAME" in file.error and file.readable
    mi250 = results(tmp_path / "c", line, validators=("Validator,GCN_ARCH_NAME,gfx90a:sramecc+:xnack-",))
    (file,) = read_imports([mi250])
    assert "GCN_ARCH_NAME gfx90a:sramecc+:xnack- is no GPU we know" in file.error
    bad = results(tmp_path / "d", line, validators=("Validator,GCN_ARCH_NAME",))
    (file,) = read_imports([bad])
    assert "line 1: a Validator line is Validator,KEY,VALUE" in file.error
    only = results(tmp_path / "e", validators=VALIDATORS)
    (file,) = read_imports([only])
    assert "no result lines" in file.error


def test_detected_by_content_whatever_the_name(tmp_path: Path) -> None:
    assert looks_like_tunableop("\n".join(VALIDATORS))
    assert looks_like_tunableop("GemmTunableOp_BFloat16_TN,tn_1_2_3,Default,0.1\n")
    assert not looks_like_tunableop("cu_num,M,N,K\n")
    path = results(
        tmp_path, "GemmTunableOp_BFloat16_TN,tn_64_16_128_ld_128_128_64,Default,0.01", name="tuned-gemms.csv"
    )
    (file,) = read_imports([path])
    assert file.format == "tunableop" and len(file.trials) == 1


def test_import_twice_writes_nothing_new(store: Store, tmp_path: Path) -> None:
    path = results(tmp_path, "GemmTunableOp_BFloat16_TN,tn_64_16_128_ld_128_128_64,Default,0.01")
    assert [f.written for f in import_files(store, [path])] == [1]
    assert [f.written for f in import_files(store, [path])] == [0]
