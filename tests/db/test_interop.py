"""Interop: vLLM/SGLang fused-MoE config files and aiter tuned CSVs, read (each file on its own), written."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import NewTrial, Store, StoreError, export_csv, export_vllm, import_files, trial_writes
from autotune.db.foreign import IMPORTED_TOOLCHAIN, ImportedFile, device_target
from autotune.db.interop import InteropError, read_imports
from autotune.kernels.moe.formats.aiter import AITER_COLUMNS
from autotune.kernels.moe.formats.shape import infer_moe_shape
from autotune.kernels.moe.formats.vllm import AMD_KEYS, OUR_KEYS, VLLM_KEYS, VllmFileName, check_vllm_config
from autotune.kernels.moe.formats.vllm_export import vllm_json

H100 = Target.for_arch("sm_90")
MI300X = Target.for_arch("gfx942")
TRITON = ("moe.triton", "src-1")
TORCH = ("moe.torch", "torch-1")
# Mixtral-8x7B at TP2 (E=8, N=7168, K=4096, top-2) and DeepSeek-V3 at EP8 TP8 (E=32, N=256, K=7168, top-8).
MIXTRAL = dict(N=7168, K=4096, E=8, topk=2)
DEEPSEEK = dict(N=256, K=7168, E=32, topk=8)
MIXTRAL_H100 = "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"
DEEPSEEK_MI300X = "E=32,N=256,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"
GOOD_AMD = "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"
AITER_HEADER = (
    "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
    "doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw"
)


def moe(M: int, shape: dict[str, int], weights: str = "bf16") -> Problem:
    return Problem.of("moe", M, shape["N"], shape["K"], "bf16", weights, E=shape["E"], topk=shape["topk"])


def timed(config: Config, us: float) -> TrialResult:
    return TrialResult(config, TrialStatus.OK, timing=Timing(us, us, us, us, us, 0.0, 10, "events"))


def tiles(
    bm: int, bn: int, bk: int = 64, group: int = 1, warps: int = 4, stages: int = 3, **amd: int
) -> Config:
    return Config(
        backend="triton",
        BLOCK_SIZE_M=bm,
        BLOCK_SIZE_N=bn,
        BLOCK_SIZE_K=bk,
        GROUP_SIZE_M=group,
        SPLIT_K=1,
        GATE_UP_FUSED=0,
        num_warps=warps,
        num_stages=stages,
        PERSISTENT=0,
        **({} if amd else {"B_TMA": 0}),  # the knob exists on the H100, not on the MI300X
        **amd,
    )


def put(store: Store, target: Target, problem: Problem, result: TrialResult) -> None:
    name, source_hash = TORCH if result.config.backend == "torch" else TRITON
    store.record(target=target, kernel=name, source_hash=source_hash, problem=problem, result=result)


def vllm_entry(bm: int = 16, bn: int = 64, stages: int = 2, **more: int) -> dict[str, int]:
    entry = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=128, GROUP_SIZE_M=1, num_warps=4)
    entry["num_stages"] = stages
    entry.update(more)
    return entry


def write(directory: Path, name: str, content: object) -> Path:
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=4) + "\n")
    return path


def counts(store: Store) -> tuple[int, int, int, int]:
    s = store.summary()
    return s.n_gpus, s.n_kernels, s.n_problems, s.n_trials


@pytest.fixture(autouse=True)
def no_installed_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files' own Triton versions decide the flags, whatever Triton this machine has."""
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm.installed_triton", lambda: None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "autotune.db")) as s:
        yield s


#: The Triton config each measured (target, shape, M) is expected to export.
EXPECTED: dict[tuple[str, int], Config] = {}


@pytest.fixture
def measured(store: Store) -> Store:
    """Measured moe winners on an H100 (bf16 Mixtral) and an MI300X (FP8 DeepSeek), a dense GEMM winner,
    and one M where the vendor library beats every Triton config."""
    EXPECTED.clear()
    for M, bm in ((1, 16), (2, 16), (16, 32), (64, 64)):
        best = tiles(bm, 64, warps=4 if bm < 64 else 8)
        put(store, H100, moe(M, MIXTRAL), timed(best, 10.0 + M))
        put(store, H100, moe(M, MIXTRAL), timed(best.replace(BLOCK_SIZE_N=128), 50.0 + M))
        put(store, H100, moe(M, MIXTRAL), timed(Config(backend="torch"), 90.0 + M))
        EXPECTED[("h100", M)] = best
    # M=256: torch wins; the fastest Triton config (of the newest kernel version) is what vLLM gets.
    put(store, H100, moe(256, MIXTRAL), timed(Config(backend="torch"), 100.0))
    put(store, H100, moe(256, MIXTRAL), timed(tiles(64, 128, group=16, warps=8), 130.0))
    put(store, H100, moe(256, MIXTRAL), timed(tiles(128, 128, group=32, warps=8), 120.0))
    EXPECTED[("h100", 256)] = tiles(128, 128, group=32, warps=8)
    for M in (1, 8, 128, 4096):
        amd = dict(matrix_instr_nonkdim=16, waves_per_eu=M % 3, kpack=2)
        best = tiles(16 if M < 128 else 64, 128, bk=128, group=1 if M < 128 else 16, stages=2, **amd)
        put(store, MI300X, moe(M, DEEPSEEK, "fp8e4m3"), timed(best, 20.0 + M))
        put(store, MI300X, moe(M, DEEPSEEK, "fp8e4m3"), timed(best.replace(num_warps=8), 40.0 + M))
        EXPECTED[("mi300x", M)] = best
    gemm = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    store.record(target=H100, kernel="gemm.triton", source_hash="g", problem=Problem.of("gemm", 16, 64, 64),
                 result=timed(gemm, 3.0))  # fmt: skip
    return store


# -- file names and devices ----------------------------------------------------------------------------


def test_file_names_parse_and_format_both_spellings() -> None:
    sglang = "E=256,N=256,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128, 128].json"
    vllm = sglang.replace("[128, 128]", "[128,128]")
    for name in (sglang, vllm):
        parts = VllmFileName.parse(name)
        assert parts == VllmFileName(256, 256, "NVIDIA_H100_80GB_HBM3", "fp8_w8a8", (128, 128))
        assert parts.weights() == "fp8e4m3"
    assert parts.filename("vllm") == vllm and parts.filename("sglang") == sglang
    plain = VllmFileName.parse("E=8,N=14336,device_name=AMD_Instinct_MI300X.json")
    assert (plain.E, plain.N, plain.device_name, plain.dtype, plain.block_shape) == (
        8,
        14336,
        "AMD_Instinct_MI300X",
        None,
        None,
    )
    assert (
        plain.weights() == "bf16" and plain.filename() == "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"
    )


def test_file_name_of_a_problem() -> None:
    fp8 = moe(16, DEEPSEEK, "fp8e4m3")
    assert VllmFileName.of(fp8, MI300X).filename() == DEEPSEEK_MI300X
    assert VllmFileName.of(fp8, MI300X, "sglang").filename("sglang") == DEEPSEEK_MI300X.replace(
        ",128]", ", 128]"
    )
    assert VllmFileName.of(moe(1, MIXTRAL), H100).filename() == MIXTRAL_H100
    h200 = dataclasses.replace(H100, name="NVIDIA H200 NVL")
    assert VllmFileName.of(moe(1, MIXTRAL), h200).device_name == "NVIDIA_H200"  # vLLM's one H200 name
    assert VllmFileName.of(moe(1, MIXTRAL), h200, "sglang").device_name == "NVIDIA_H200_NVL"
    with pytest.raises(InteropError, match="vLLM names no config file for MXFP4 weights"):
        VllmFileName.of(moe(1, MIXTRAL, "fp4e2m1"), H100)


@pytest.mark.parametrize(
    ("device", "arch", "name", "cu_count"),
    [
        ("NVIDIA_H100_80GB_HBM3", "sm_90", "NVIDIA H100 80GB HBM3", 132),
        ("NVIDIA_H200", "sm_90", "NVIDIA H200", 132),
        ("AMD_Instinct_MI300X", "gfx942", "AMD Instinct MI300X", 304),
        ("AMD_Instinct_MI325X", "gfx942", "AMD Instinct MI325X", 304),
        ("AMD_Instinct_MI308X", "gfx942", "AMD Instinct MI308X", 80),
        ("AMD_Instinct_MI355X", "gfx950", "AMD Instinct MI355X", 256),
        ("AMD_Instinct_MI350X", "gfx950", "AMD Instinct MI350X", 256),
    ],
)
def test_device_targets(device: str, arch: str, name: str, cu_count: int) -> None:
    target = device_target(device)
    assert (target.arch, target.name, target.cu_count) == (arch, name, cu_count)
    assert target.toolchain == IMPORTED_TOOLCHAIN and target.present is False
    assert target.fingerprint() != dataclasses.replace(target, toolchain=H100.toolchain).fingerprint()
    if "H200" in device:
        assert target.mem_gbps == 4800.0 and target.mem_gbps != H100.mem_gbps
    if "MI325X" in device:
        assert target.mem_gbps == 6000.0


def test_unknown_device_is_an_error() -> None:
    with pytest.raises(InteropError, match="unknown device 'NVIDIA_A100-SXM4-80GB'"):
        device_target("NVIDIA_A100-SXM4-80GB")


# -- K and top-k from (E, N) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("E", "N", "K", "topk", "model"),
    [
        (8, 14336, 4096, 2, "Mixtral-8x7B TP1"),
        (8, 1792, 4096, 2, "Mixtral-8x7B TP8"),
        (256, 2048, 7168, 8, "DeepSeek-V3 TP1"),
        (32, 256, 7168, 8, "DeepSeek-V3 TP8 EP8"),
        (256, 128, 7168, 8, "DeepSeek-V3 TP16"),  # two 8-GPU hosts: vLLM ships files for it
        (8, 512, 7168, 8, "DeepSeek-V3 TP4 EP32"),
        (128, 1536, 4096, 8, "Qwen3-235B-A22B TP1"),
        (128, 96, 2048, 8, "Qwen3-30B-A3B TP8"),
        (128, 2880, 2880, 4, "gpt-oss-120b TP1"),
    ],
)
def test_infer_k_and_topk(E: int, N: int, K: int, topk: int, model: str) -> None:
    assert infer_moe_shape(E, N) == (K, topk, model)


def test_infer_ambiguous_and_unknown_shapes_are_errors() -> None:
    # Qwen3-30B-A3B at TP1 and Qwen3-235B-A22B at TP2 both have 128 experts of N=768.
    with pytest.raises(
        InteropError, match=r"ambiguous.*Qwen3-30B-A3B TP1.*Qwen3-235B-A22B TP2.*--k and --topk"
    ):
        infer_moe_shape(128, 768)
    assert infer_moe_shape(128, 768, k=2048) == (2048, 8, "Qwen3-30B-A3B TP1")  # --k alone settles it
    assert infer_moe_shape(128, 768, k=1000, topk=4) == (1000, 4, "")  # given values always win
    with pytest.raises(InteropError, match=r"E=7, N=100 is no known model.*--k and --topk"):
        infer_moe_shape(7, 100)
    with pytest.raises(InteropError, match="topk=16"):
        infer_moe_shape(8, 14336, k=4096, topk=16)
    with pytest.raises(InteropError, match="at least 1"):
        infer_moe_shape(8, 14336, k=4096, topk=0)


# -- export -> import -> export -----------------------------------------------------------------------


def test_export_writes_one_vllm_file_per_gpu_and_shape(measured: Store, tmp_path: Path) -> None:
    paths = export_vllm(measured, tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted([MIXTRAL_H100, DEEPSEEK_MI300X])
    h100 = json.loads((tmp_path / "out" / MIXTRAL_H100).read_text())
    top = {"triton_version": H100.toolchain["triton"]} if "triton" in H100.toolchain else {}
    assert {k: h100.pop(k) for k in list(h100) if k == "triton_version"} == top  # as vLLM's writer
    assert list(h100) == ["1", "2", "16", "64", "256"]  # numeric order, not string order
    for m, entry in h100.items():
        assert list(entry) == list(VLLM_KEYS)  # NVIDIA: no AMD keys
        assert entry == {k: EXPECTED[("h100", int(m))][k] for k in VLLM_KEYS}
    assert h100["256"]["BLOCK_SIZE_M"] == 128  # torch won at M=256: the fastest Triton config instead
    mi300x = json.loads((tmp_path / "out" / DEEPSEEK_MI300X).read_text())
    assert {k: mi300x.pop(k) for k in list(mi300x) if k == "triton_version"} == top
    assert list(mi300x) == ["1", "8", "128", "4096"]
    for m, entry in mi300x.items():
        assert list(entry) == [*VLLM_KEYS, *AMD_KEYS]
        assert all(type(v) is int for v in entry.values())
        want = EXPECTED[("mi300x", int(m))]
        assert entry == {k: v for k, v in want.items() if k not in ("backend", *OUR_KEYS)}
    text = (tmp_path / "out" / DEEPSEEK_MI300X).read_text()
    assert text == json.dumps({**top, **mi300x}, indent=4) + "\n"


@pytest.mark.parametrize(
    "knob, value, slower",
    [
        # vLLM's kernel has no SPLIT_K: a split winner gives way to the fastest unsplit Triton config
        ("SPLIT_K", 4, [(tiles(32, 64), 9.0)]),
        # GATE_UP_FUSED 1 is another tile in vLLM's kernel (its B tile holds gate and up): the file takes
        # the fastest config measured in vLLM's structure
        ("GATE_UP_FUSED", 1, [(tiles(16, 64), 8.0)]),
        # B_TMA 1 loads the weight tiles through tensor descriptors, which vLLM's kernel does not
        ("B_TMA", 1, []),
        # PERSISTENT 1 walks the tiles on a program an SM; vLLM's kernel runs a program a tile
        ("PERSISTENT", 1, []),
    ],
)
def test_winners_vllms_kernel_cannot_run_give_way_to_the_fastest_it_can(
    store: Store, tmp_path: Path, knob: str, value: int, slower: list[tuple[Config, float]]
) -> None:
    """A winner at a value of our own knob that vLLM's kernel lacks is skipped for the fastest config
    measured at vLLM's value, and a file never carries the knob."""
    ours = tiles(16, 64).replace(**{knob: value})
    put(store, H100, moe(1, MIXTRAL), timed(ours, 5.0))
    put(store, H100, moe(1, MIXTRAL), timed(tiles(16, 128), 7.0))
    for config, us in slower:
        put(store, H100, moe(1, MIXTRAL), timed(config, us))
    (path,) = export_vllm(store, tmp_path / "out")
    doc = json.loads(path.read_text())
    doc.pop("triton_version", None)
    assert doc == {"1": {k: tiles(16, 128)[k] for k in VLLM_KEYS}}
    with pytest.raises(InteropError, match=f"{knob}={value} has no place in a vLLM config"):
        vllm_json({1: ours}, amd=False)


def test_round_trip_is_byte_identical(measured: Store, tmp_path: Path) -> None:
    first = export_vllm(measured, tmp_path / "a")
    with Store(str(tmp_path / "fresh.db")) as fresh:
        files = import_files(fresh, first, source_hash="imported")  # K and topk inferred from (E, N)
        assert [f.written for f in files] == [f.n_trials for f in files] == [4, 5]
        assert all(f.n_flagged == 0 for f in files)
        second = export_vllm(fresh, tmp_path / "b")
        imported = fresh.trials(source=Source.IMPORTED)
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
    # The imported configs are the originals, on problems with the right K and top-k.
    assert len(imported) == 9
    for r in imported:
        gpu = "h100" if r.gpu.target.is_nvidia else "mi300x"
        assert r.config == EXPECTED[(gpu, r.problem.M)]
        assert r.problem == moe(r.problem.M, MIXTRAL if gpu == "h100" else DEEPSEEK, r.problem.dtype_b)
        assert r.ok and r.timing is None and r.kernel == "moe.triton"
        assert r.extra["imported_from"] == "vllm" and r.extra["file"] in (MIXTRAL_H100, DEEPSEEK_MI300X)
        assert r.gpu.target.toolchain == IMPORTED_TOOLCHAIN
    assert {r.problem.dtype_b for r in imported} == {"bf16", "fp8e4m3"}


def test_sglang_flavor_round_trips_too(measured: Store, tmp_path: Path) -> None:
    first = export_vllm(measured, tmp_path / "a", flavor="sglang")
    assert DEEPSEEK_MI300X.replace(",128]", ", 128]") in [p.name for p in first]
    with Store(str(tmp_path / "fresh.db")) as fresh:
        import_files(fresh, first, source_hash="imported")
        second = export_vllm(fresh, tmp_path / "b", flavor="sglang")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_export_is_byte_stable(measured: Store, tmp_path: Path) -> None:
    a = export_vllm(measured, tmp_path / "a")
    b = export_vllm(measured, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_export_clash_of_two_k_variants_is_an_error(store: Store, tmp_path: Path) -> None:
    put(store, H100, moe(1, MIXTRAL), timed(tiles(16, 64), 5.0))
    put(store, H100, moe(2, {**MIXTRAL, "K": 2048}), timed(tiles(16, 64), 5.0))
    with pytest.raises(InteropError, match=r"K=4096 topk=2.*K=2048 topk=2"):
        export_vllm(store, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # checked before anything was written


def test_export_clash_of_two_gpus_of_one_name(store: Store, tmp_path: Path) -> None:
    other = dataclasses.replace(H100, toolchain={"torch": "0.0"})
    put(store, H100, moe(1, MIXTRAL), timed(tiles(16, 64), 5.0))
    put(store, other, moe(2, MIXTRAL), timed(tiles(16, 64), 5.0))
    with pytest.raises(InteropError, match="--gpu"):
        export_vllm(store, tmp_path / "out")
    assert len(export_vllm(store, tmp_path / "out", fingerprint=other.fingerprint())) == 1


def test_export_without_moe_winners_is_an_error(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nothing to export"):
        export_vllm(store, tmp_path / "out")


def test_vllm_json_rejects_what_vllm_cannot_read() -> None:
    with pytest.raises(InteropError, match="SPLIT_K=2 has no place"):
        vllm_json({1: tiles(16, 64).replace(SPLIT_K=2)}, amd=False)
    with pytest.raises(InteropError, match="'STREAM_K' has no place"):
        vllm_json({1: tiles(16, 64).replace(STREAM_K=1)}, amd=False)
    with pytest.raises(InteropError, match="lacks 'num_stages'"):
        vllm_json(
            {1: Config(BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=1, num_warps=4)},
            amd=False,
        )
    with pytest.raises(InteropError, match="not an integer"):
        vllm_json({1: tiles(16, 64).replace(num_warps=4.5)}, amd=False)


# -- importing: flags, aiter ---------------------------------------------------------------------------


def test_mi300x_file_with_num_stages_0_is_flagged(store: Store, tmp_path: Path) -> None:
    amd = dict(matrix_instr_nonkdim=16, waves_per_eu=0, kpack=2)
    doc = {
        "1": vllm_entry(stages=0, **amd),
        "2": vllm_entry(stages=2, **amd),
        "4": vllm_entry(bn=96, stages=2, **amd),
        "8": vllm_entry(stages=1, **amd),
    }
    path = write(tmp_path, GOOD_AMD, {"triton_version": "3.2.0", **doc})  # a Triton that refused it
    (file,) = import_files(store, [path], source_hash="imported")
    assert (file.n_entries, file.n_ok, file.n_flagged, file.written) == (4, 2, 2, 4)
    by_m = {r.problem.M: r for r in store.trials()}
    assert by_m[1].status is TrialStatus.PRUNED
    assert "num_stages=0 is rejected on AMD by Triton 3.2.0" in by_m[1].error
    assert by_m[4].status is TrialStatus.PRUNED and "BLOCK_SIZE_N=96 is not a power of two" in by_m[4].error
    assert by_m[2].ok and by_m[8].ok and by_m[2].error == ""
    assert all(r.source is Source.IMPORTED and r.gpu.arch == "gfx942" for r in by_m.values())
    assert by_m[2].problem == Problem.of("moe", 2, 14336, 4096, E=8, topk=2)  # Mixtral TP1, inferred
    assert file.flagged[0][0] == "M=1"


def test_num_stages_0_is_fine_on_nvidia_and_with_old_triton() -> None:
    entry = vllm_entry(stages=0)
    assert check_vllm_config(entry, H100, "3.2.0") == []
    assert check_vllm_config(entry, MI300X, "2.3.1") == []
    assert check_vllm_config(entry, MI300X, "3.0.0") != [] and check_vllm_config(entry, MI300X, "3.2.0") != []
    assert check_vllm_config(entry, MI300X, "3.9.0") == []  # compiles again for gfx942 and gfx950
    assert check_vllm_config(entry, MI300X, None) == []  # no version known: nothing to say


def test_import_twice_writes_nothing_new(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_AMD, {"1": vllm_entry(), "2": vllm_entry(bm=32)})
    assert [f.written for f in import_files(store, [path], source_hash="imported")] == [2]
    assert [f.written for f in import_files(store, [path, path], source_hash="imported")] == [0, 0]
    assert counts(store)[3] == 2


def aiter_csv(*rows: str) -> str:
    return "\n".join([AITER_HEADER, *rows]) + "\n"


def aiter_row(cu: int = 304, token: int = 16, q_type: str = "QuantType.per_1x128", us: str = "35.5") -> str:
    fp8 = "torch.float8_e4m3fnuz"
    w = fp8 if q_type != "QuantType.No" else "torch.bfloat16"
    return (
        f"{cu},{token},7168,256,256,8,ActivationType.Silu,torch.bfloat16,{w},{w},{q_type},1,0,32,0,"
        f"20.1,moe_stage1_kernel,0.0%,15.4,moe_stage2_kernel,0.0%,{us},0,1.5,300.2"
    )


def test_aiter_csv_import(store: Store, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tuned_fmoe.csv",
        aiter_csv(
            aiter_row(),
            aiter_row(token=32, q_type="QuantType.No", us="50.25"),
            aiter_row(token=64, q_type="QuantType.per_Token"),  # not modelled: skipped
            aiter_row(token=128, us="inf"),  # no usable time: flagged
            aiter_row(cu=256, token=16, us="20"),
            aiter_row(cu=80, token=16, us="70"),
        ),
    )
    (file,) = import_files(store, [path])
    assert (file.n_entries, file.n_ok, file.n_flagged, len(file.skipped), file.written) == (6, 4, 1, 1, 5)
    assert "per_Token" in file.skipped[0][1] and file.skipped[0][0] == "row 4"
    records = {(r.gpu.name, r.problem.M): r for r in store.trials()}
    first = records[("AMD Instinct MI300X", 16)]
    assert first.gpu.arch == "gfx942" and first.gpu.target.cu_count == 304
    assert first.gpu.target.toolchain == IMPORTED_TOOLCHAIN
    assert first.problem == Problem.of("moe", 16, 256, 7168, "bf16", "fp8e4m3", E=256, topk=8)
    assert first.config == Config(
        backend="aiter",
        kernelName1="moe_stage1_kernel",
        kernelName2="moe_stage2_kernel",
        block_m=32,
        ksplit=0,
        run_1stage=0,
    )
    assert first.timing is not None and first.time_us == 35.5 and first.timing.min_us == 35.5
    assert (first.timing.runs, first.timing.method) == (0, "imported")
    assert first.source is Source.IMPORTED and first.kernel == "moe.aiter"
    assert first.extra["imported_from"] == "aiter" and first.extra["row"] == 2
    assert records[("AMD Instinct MI300X", 32)].problem.dtype_b == "bf16"
    assert records[("AMD Instinct MI300X", 128)].status is TrialStatus.PRUNED
    assert records[("AMD Instinct MI355X", 16)].gpu.arch == "gfx950"
    mi308 = records[("AMD Instinct MI308X", 16)].gpu
    assert mi308.arch == "gfx942" and mi308.target.cu_count == 80
    # aiter rows are timings: the best imported result of a shape is aiter's.
    best = store.best(first.problem, fingerprint=first.gpu.fingerprint, source=Source.IMPORTED)
    assert [r.time_us for r in best] == [35.5]


def test_vllm_and_aiter_of_one_device_share_its_gpu(store: Store, tmp_path: Path) -> None:
    vllm = write(tmp_path, GOOD_AMD, {"1": vllm_entry(matrix_instr_nonkdim=16)})
    aiter = write(tmp_path, "t.csv", aiter_csv(aiter_row()))
    import_files(store, [vllm, aiter], source_hash="imported")
    assert len(store.gpus()) == 1


# -- bad input: each file on its own, reported with the reason ---------------------------------------


BAD_JSON: list[tuple[str, str, object, str]] = [
    ("invalid-json", GOOD_AMD, '{"1": {"BLOCK_SIZE_M": 16,', "not valid JSON"),
    ("not-an-object", GOOD_AMD, [vllm_entry()], "expected a JSON object mapping M"),
    ("empty-object", GOOD_AMD, {}, "expected a JSON object mapping M"),
    ("m-not-int", GOOD_AMD, {"16": vllm_entry(), "many": vllm_entry()}, "not a positive integer M"),
    ("m-zero", GOOD_AMD, {"0": vllm_entry()}, "not a positive integer M"),
    ("m-negative", GOOD_AMD, {"-4": vllm_entry()}, "not a positive integer M"),
    ("split-k", GOOD_AMD, {"1": vllm_entry(SPLIT_K=2)}, "SPLIT_K=2: vLLM's fused MoE kernel has no split-K"),
    (
        "missing-key",
        GOOD_AMD,
        {"1": {k: v for k, v in vllm_entry().items() if k != "num_warps"}},
        "missing required parameter 'num_warps'",
    ),
    ("config-not-object", GOOD_AMD, {"1": 16}, "the config must be a JSON object"),
    ("value-not-int", GOOD_AMD, {"1": vllm_entry(num_warps="4")}, "num_warps must be a non-negative integer"),
    ("duplicate-m", GOOD_AMD, '{"1": {}, "1": {}}', "key '1' appears twice"),
    ("only-top-keys", GOOD_AMD, {"triton_version": "3.5.0"}, "no M entries"),
    ("bad-name", "config.json", {"1": vllm_entry()}, "config.json: not a fused-MoE config file name"),
    ("name-without-device", "E=8,N=14336.json", {"1": vllm_entry()}, "not a fused-MoE config file name"),
    (
        "unknown-device",
        "E=8,N=14336,device_name=NVIDIA_A100-SXM4-80GB.json",
        {"1": vllm_entry()},
        "unknown device",
    ),
    (
        "unknown-dtype",
        "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=bogus.json",
        {"1": vllm_entry()},
        "dtype=bogus is not supported",
    ),
]
BAD_CSV: list[tuple[str, str, str]] = [
    ("csv-missing-columns", AITER_HEADER.replace(",inter_dim", "") + "\n", "lacks the columns inter_dim"),
    ("csv-not-a-number", aiter_csv(aiter_row().replace(",7168,", ",big,", 1)), "row 2: model_dim is 'big'"),
    ("csv-bad-us", aiter_csv(aiter_row(us="fast")), "row 2: us is 'fast'"),
    ("csv-unknown-cu", aiter_csv(aiter_row(cu=228)), "row 2: cu_num 228 is no GPU we know"),
    ("csv-topk-over-e", aiter_csv(aiter_row().replace(",256,8,", ",4,8,", 1)), "row 2: expert=4 and topk=8"),
    ("csv-short-row", aiter_csv("304,16,7168"), "row 2: its number of fields"),
    ("csv-empty", "", "empty file"),
]


def bad_file(tmp_path: Path, case: str) -> tuple[Path, str]:
    """The bad file of `case` and the message fragment its error must carry."""
    for name, filename, content, message in BAD_JSON:
        if name == case:
            return write(tmp_path / "bad", filename, content), message
    for name, content, message in BAD_CSV:
        if name == case:
            return write(tmp_path / "bad", "tuned_fmoe.csv", content), message
    raise KeyError(case)


ALL_BAD = [c[0] for c in BAD_JSON] + [c[0] for c in BAD_CSV]


def reasons(file: ImportedFile) -> str:
    return "\n".join([file.error, *(r for _, r in file.skipped), *(r for _, r in file.flagged)])


@pytest.mark.parametrize("case", ALL_BAD)
def test_bad_input_is_reported_and_stops_no_other_file(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad").mkdir()
    good = write(tmp_path, GOOD_AMD, {"1": vllm_entry(bm=64), "2": vllm_entry(bm=32)})
    bad, message = bad_file(tmp_path, case)
    db = tmp_path / "x.db"
    with Store(str(db)) as store:
        files = import_files(store, [bad, good], source_hash="imported")
        assert files[1].written == 2 and files[1].error == ""  # the good file after it is imported
        assert message in reasons(files[0])
        assert bad.name in files[0].error or not files[0].error  # a file-level error names the file
    # The same through the command line: a reason on the bad file's lines; exit 0 where it was readable
    # and held a good entry (or is no config file at all), 1 where every entry it has is bad, as for a
    # file that cannot be read.
    all_bad = case in ALL_ENTRIES_BAD
    assert files[0].all_bad == all_bad and bool(files[0].error) >= all_bad
    assert main(["import", str(bad), str(good), "--db", str(tmp_path / "y.db")]) == int(all_bad)
    out = capsys.readouterr().out
    assert message in out and "imported 2 entries" in out


#: The bad files whose every entry is bad: each fails its import, whatever is wrong with the entries.
ALL_ENTRIES_BAD = ("m-zero", "m-negative", "missing-key", "config-not-object", "value-not-int")


BAD_K_TOPK = [
    (["--topk", "0"], "--topk"),
    (["--k", "0"], "--k"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_K_TOPK)
def test_bad_k_or_topk_is_an_error(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, GOOD_AMD, {"1": vllm_entry()})
    db = tmp_path / "x.db"
    assert main(["import", str(good), *argv, "--db", str(db)]) == 2
    assert message in capsys.readouterr().err
    with Store(str(db)) as store:
        assert counts(store) == (0, 0, 0, 0)


def test_read_imports_writes_nothing_and_detects_format_by_content(tmp_path: Path) -> None:
    csv_text = aiter_csv(aiter_row())
    no_ext = write(tmp_path, "tuned_fmoe", csv_text)
    (found,) = read_imports([no_ext])
    assert found.format == "aiter" and len(found.trials) == 1
    (notes,) = read_imports([write(tmp_path, "notes.txt", "hello")])
    assert "cannot tell its format" in notes.error and notes.readable
    (missing,) = read_imports([tmp_path / "missing.json"])
    assert "cannot read it" in missing.error and not missing.readable
    (topk,) = read_imports([write(tmp_path, GOOD_AMD, {"1": vllm_entry()})], topk=16)
    assert "E=8 experts cannot route each token to topk=16" in topk.error


# -- Store.record_many: one transaction ----------------------------------------------------------------


def batch(n: int = 3) -> list[NewTrial]:
    target = device_target("AMD_Instinct_MI300X")
    result = TrialResult(tiles(16, 64), TrialStatus.OK, extra={"file": "f", "imported_from": "vllm"})
    return [
        NewTrial(target, "moe.triton", "h", moe(M, MIXTRAL), result, Source.IMPORTED) for M in range(1, n + 1)
    ]


def test_record_many_is_all_or_nothing(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = trial_writes.trial_row
    calls = {"n": 0}

    def failing(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("disk on fire")
        return real(*args, **kwargs)

    with Store(db_url) as store:
        monkeypatch.setattr(trial_writes, "trial_row", failing)
        with pytest.raises(RuntimeError, match="disk on fire"):
            store.record_many(batch(4))
        assert calls["n"] == 3  # it failed after the GPU, kernel, problem and two trial rows were added
        assert counts(store) == (0, 0, 0, 0)
        monkeypatch.setattr(trial_writes, "trial_row", real)
        assert store.record_many(batch(4)) == [True] * 4  # the cached ids of the failed try are not used
        assert counts(store) == (1, 1, 4, 4)


def test_record_many_is_idempotent(db_url: str) -> None:
    trials = batch(3)
    with Store(db_url) as store:
        assert store.record_many([*trials, trials[0]]) == [True, True, True, False]
        assert store.record_many(trials) == [False, False, False]
        assert store.record_many([]) == []
        assert counts(store)[3] == 3
        # Mixed with what `record` wrote: the keys are the same.
        extra = dataclasses.replace(trials[0], problem=moe(99, MIXTRAL))
        store.record(target=extra.target, kernel=extra.kernel, source_hash=extra.source_hash,
                     problem=extra.problem, result=extra.result, source=extra.source)  # fmt: skip
        assert store.record_many([extra, *trials]) == [False, False, False, False]
    with Store(db_url) as again:  # a fresh Store (no cached ids) agrees
        assert again.record_many(trials) == [False, False, False]


def test_record_many_rejects_bad_extra_before_writing(store: Store) -> None:
    bad = dataclasses.replace(
        batch(1)[0], result=TrialResult(tiles(16, 64), TrialStatus.OK, extra={"x": {1, 2}})
    )
    with pytest.raises(ValueError, match="not JSON-serializable"):
        store.record_many([*batch(2), bad])
    assert counts(store) == (0, 0, 0, 0)


def test_a_streamed_write_stores_what_record_many_does(db_url: str, tmp_path: Path) -> None:
    """`record_stream` writes on the driver's cursor what `record_many` writes through the ORM: the same
    columns and values (times, datetimes, an extra's JSON given as it is), a trial once however often it
    comes, in chunks or not."""
    timing = Timing(2.5, 2.0, 2.25, 3.0, 2.6, 0.25, 7, "events")
    trials = [*batch(3), *batch(2)]  # repeated, across chunks of two
    timed = TrialResult(tiles(32, 64), TrialStatus.OK, timing=timing, rel_error=1e-3, compile_s=1,
                        measure_s=0.5, extra={"µ": [1, "x"]})  # fmt: skip
    pruned = TrialResult(tiles(32, 64), TrialStatus.PRUNED, error="too big")
    trials += [
        dataclasses.replace(trials[0], problem=moe(9, MIXTRAL), result=timed),
        dataclasses.replace(
            trials[0], problem=moe(10, MIXTRAL), result=pruned, extra_json='{"given": "as is"}'
        ),
    ]
    with Store(str(tmp_path / "many.db")) as many:
        assert many.record_many(trials).count(True) == 5
        expected = many.trials()
    with Store(db_url) as streamed:
        assert streamed.record_stream(iter(trials), chunk=2) == 5
        got = streamed.trials()
        assert streamed.record_stream(iter(trials), chunk=3) == 0
    key = lambda r: (r.problem.M, r.config.digest())  # noqa: E731
    for a, b in zip(sorted(expected, key=key), sorted(got, key=key), strict=True):
        assert dataclasses.replace(b, id=a.id, created_at=a.created_at, gpu=a.gpu) == a
        assert (
            b.gpu.fingerprint == a.gpu.fingerprint and abs(b.created_at - a.created_at).total_seconds() < 60
        )
    assert [r.extra for r in got if r.problem.M == 10] == [{"given": "as is"}]
    if "://" not in db_url:  # SQLite: each value stored as SQLAlchemy stores it (its datetimes' text)
        assert _stored_as(db_url) == _stored_as(str(tmp_path / "many.db"))


def _stored_as(path: str) -> set[tuple[object, ...]]:
    """How the trials of the SQLite file `path` hold their values: each column's type, and the length of
    each text."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT * FROM trials").fetchall()
    return {tuple((type(v).__name__, len(v) if isinstance(v, str) else None) for v in row) for row in rows}


def test_cli_unreadable_file_exits_1_after_importing_the_others(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, GOOD_AMD, {"1": vllm_entry(), "2": vllm_entry(bm=32)})
    binary = tmp_path / "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"
    binary.write_bytes(b"\xff\xfe\x00")
    assert main(["import", str(binary), str(good), str(tmp_path / "gone.json"), "--db", db_url]) == 1
    out = capsys.readouterr().out
    assert "unreadable" in out and "not a UTF-8 text file" in out and "cannot read it" in out
    with Store(db_url) as store:
        assert counts(store)[3] == 2


# -- the command line ----------------------------------------------------------------------------------


def test_cli_import_prints_counts_and_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    amd = dict(matrix_instr_nonkdim=16, waves_per_eu=0, kpack=2)
    doc = {"triton_version": "3.1.0", "1": vllm_entry(stages=0, **amd), "2": vllm_entry(**amd)}
    path = write(tmp_path, GOOD_AMD, doc)
    csv_path = write(
        tmp_path, "tuned_fmoe.csv", aiter_csv(aiter_row(), aiter_row(q_type="QuantType.per_Tensor"))
    )
    db = str(tmp_path / "x.db")
    assert main(["import", str(path), str(csv_path), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "2 entries: 1 ok, 1 flagged; 2 new, 0 already stored" in out
    assert "flagged M=1: num_stages=0 is rejected on AMD by Triton 3.1.0" in out
    assert "Mixtral-8x7B TP1" in out and "AMD Instinct MI300X" in out
    assert "2 entries: 1 ok, 0 flagged, 1 skipped; 1 new" in out and "skipped row 3" in out
    assert main(["import", str(path), "--db", db]) == 0
    assert "0 new, 2 already stored" in capsys.readouterr().out


def test_cli_import_with_k_and_topk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json", {"64": vllm_entry(stages=3)})
    db = str(tmp_path / "x.db")
    assert main(["import", str(path), "--db", db]) == 0  # ambiguous: kept with K and topk unknown
    assert "(K and topk unknown: E=128, N=768 is ambiguous" in capsys.readouterr().out
    assert main(["import", str(path), "--k", "4096", "--topk", "8", "--db", db]) == 0
    with Store(db) as store:
        problems = sorted(r.problem for r in store.trials())
    assert problems == sorted(
        [Problem.of("moe", 64, 768, 1, E=128, topk=1), Problem.of("moe", 64, 768, 4096, E=128, topk=8)]
    )


def test_cli_export_vllm_and_csv(measured: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = measured.url
    assert main(["export", "--format", "vllm", "--out", str(tmp_path / "v"), "--db", db]) == 0
    out = capsys.readouterr().out
    assert MIXTRAL_H100 in out and DEEPSEEK_MI300X in out
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == sorted([MIXTRAL_H100, DEEPSEEK_MI300X])
    assert main(["export", "--out", str(tmp_path / "c"), "--db", db]) == 0  # csv stays the default
    assert sorted(p.suffix for p in (tmp_path / "c").iterdir()) == [".csv", ".csv"]
    assert len(export_csv(measured, tmp_path / "c2")) == 2
    gpu = H100.fingerprint()[:8]
    assert main(["export", "--format", "vllm", "--out", str(tmp_path / "one"), "--gpu", gpu, "--db", db]) == 0
    assert [p.name for p in (tmp_path / "one").iterdir()] == [MIXTRAL_H100]


def test_cli_export_vllm_of_an_empty_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Store(str(tmp_path / "e.db")).close()
    assert (
        main(["export", "--format", "vllm", "--out", str(tmp_path / "v"), "--db", str(tmp_path / "e.db")])
        == 2
    )
    assert "nothing to export" in capsys.readouterr().err


def test_cli_best_moe(measured: Store, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["best", "--op", "moe", "--m", "16", "--n", "7168", "--k", "4096", "--e", "8", "--topk", "2"]
    assert main([*argv, "--db", measured.url]) == 0
    out = capsys.readouterr().out
    assert "BLOCK_SIZE_M" in out and "26.00" in out and "torch" in out
    fp8 = ["best", "--op", "moe", "--m", "8", "--n", "256", "--k", "7168", "--e", "32", "--topk", "8"]
    assert main([*fp8, "--weights", "fp8e4m3", "--db", measured.url]) == 0
    assert "28.00" in capsys.readouterr().out
    assert main([*fp8, "--db", measured.url]) == 1  # bf16 weights: nobody tuned that
    capsys.readouterr()
    gemm_with_e = ["best", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64", "--e", "8", "--topk", "2"]
    assert main([*gemm_with_e, "--db", measured.url]) == 2
    assert "gemm has no parameter 'E' (its own parameters: none)" in capsys.readouterr().err
    assert main(["best", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64", "--db", measured.url]) == 0
    capsys.readouterr()
    assert main(["best", "--m", "16", "--n", "64", "--k", "64", "--db", measured.url]) == 2  # which op?
    assert "holds problems of several ops (gemm, moe): name one with --op" in capsys.readouterr().err


def test_imported_trials_are_never_winners_of_measured(measured: Store, tmp_path: Path) -> None:
    before = [(w.gpu.id, w.problem, w.best.config) for w in measured.winners()]
    path = write(tmp_path, MIXTRAL_H100, {"16": vllm_entry(stages=3)})
    import_files(measured, [path], source_hash="imported")
    assert [(w.gpu.id, w.problem, w.best.config) for w in measured.winners()] == before
    assert all(math.isfinite(w.time_us) for w in measured.winners())
    assert "cu_num" in AITER_COLUMNS
