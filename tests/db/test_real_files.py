"""The fused-MoE config files vLLM and SGLang really ship: every name and content variant, folders, and
byte-for-byte round trips (fixtures written here, following the real formats)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.core.result import Source, TrialStatus
from autotune.db import Store, export_vllm, import_files
from autotune.db.triton_compat import NUM_STAGES_0_REJECTED, num_stages_0_rejected, parse_version
from autotune.kernels.moe.formats.vllm_export import sglang_dir
from autotune.kernels.moe.params import experts

H100 = "NVIDIA_H100_80GB_HBM3"
MI300X = "AMD_Instinct_MI300X"
NV_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def nv(
    bm: int, bn: int = 64, bk: int = 128, group: int = 1, warps: int = 4, stages: int = 3
) -> dict[str, int]:
    return dict(zip(NV_KEYS, (bm, bn, bk, group, warps, stages), strict=True))


def amd(bm: int, stages: int = 2, **more: Any) -> dict[str, Any]:
    """An entry as vLLM's ROCm writer orders it: waves_per_eu, matrix_instr_nonkdim, kpack."""
    return {**nv(bm, stages=stages), "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2, **more}


def vllm_text(entries: dict[int, dict[str, Any]], triton: str | None = "3.5.0") -> str:
    """A file as vLLM's writer writes it: triton_version first, M ascending, indent 4, a newline."""
    doc: dict[str, Any] = {"triton_version": triton} if triton else {}
    doc.update({str(m): entries[m] for m in sorted(entries)})
    return json.dumps(doc, indent=4) + "\n"


def sglang_text(entries: dict[int, dict[str, Any]]) -> str:
    """A file as SGLang's writer writes it: M ascending, indent 4, a newline, no top-level key."""
    return json.dumps({str(m): entries[m] for m in sorted(entries)}, indent=4) + "\n"


def put(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def no_installed_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm.installed_triton", lambda: None)
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm_export.installed_triton", lambda: None)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with Store(str(tmp_path / "autotune.db")) as s:
        yield s


#: (file name, text, how it imports: "ok", "flagged" or a kernel variant) of each real variant.
VLLM_FILES = {
    f"E=128,N=384,device_name={H100}.json": vllm_text({1: nv(16), 64: nv(32), 4096: nv(128, 128, 64, 16, 8)}),
    f"E=128,N=192,device_name={H100},dtype=fp8_w8a8,block_shape=[128,128].json": vllm_text(
        {1: nv(16), 256: nv(64, 128, 128, 32, 4, 3)}
    ),
    f"E=128,N=384,device_name={MI300X}.json": vllm_text(
        {1: amd(16, SPLIT_K=1), 8: amd(32, SPLIT_K=1)}, triton=None
    ),
    f"E=8,N=14336,device_name={MI300X}.json": vllm_text({1: amd(16, stages=0), 2: amd(32, stages=0)}, None),
    f"E=8,N=7168,device_name={H100},dtype=fp8_w8a8.json": vllm_text({1: nv(16), 2: nv(32)}),
    f"E=128,N=176,device_name={H100},dtype=int8_w8a8.json": vllm_text({1: nv(16)}),
    f"E=257,N=128,device_name={H100},dtype=int4_w4a16.json": vllm_text({1: nv(16)}),
    f"E=8,N=4096,device_name={H100},dtype=int8_w8a16.json": vllm_text({1: nv(16)}),
}
SGLANG_FILES = {
    f"E=128,N=352,device_name={H100},dtype=fp8_w8a8,per_channel_quant=True.json": sglang_text({1: nv(16)}),
    f"E=8,N=14336,device_name={H100}_down.json": sglang_text({1: {**nv(16), "USE_TMA": False}}),
    f"E=256,N=128,device_name={H100},dtype=fp8_w8a8,block_shape=[128, 128]_down.json": sglang_text(
        {1: {**nv(16), "USE_TMA": True}, 8: nv(32)}
    ),
    f"E=8,N=14336,device_name={H100}.json": sglang_text({1: nv(16), 16: nv(64)}),
}


def write_all(root: Path) -> tuple[Path, Path]:
    vllm_dir, sglang_dir_ = root / "vllm" / "configs", root / "sglang" / "configs" / "triton_3_4_0"
    for name, text in VLLM_FILES.items():
        put(vllm_dir, name, text)
    for name, text in SGLANG_FILES.items():
        put(sglang_dir_, name, text)
    return vllm_dir, sglang_dir_


def test_every_real_variant_imports(store: Store, tmp_path: Path) -> None:
    write_all(tmp_path)
    files = {f.path.name: f for f in import_files(store, [tmp_path], source_hash="imported")}
    assert len(files) == len(VLLM_FILES) + len(SGLANG_FILES) and all(not f.error for f in files.values())
    assert all(f.written == f.n_trials for f in files.values())
    assert {name: f.project for name, f in files.items()} == {
        **dict.fromkeys(VLLM_FILES, "vllm"),
        **dict.fromkeys(SGLANG_FILES, "sglang"),
    }
    runnable = [
        f"E=128,N=384,device_name={H100}.json",
        f"E=128,N=192,device_name={H100},dtype=fp8_w8a8,block_shape=[128,128].json",
        f"E=128,N=384,device_name={MI300X}.json",
        f"E=8,N=14336,device_name={MI300X}.json",  # num_stages 0 is fine: no Triton 3.0-3.2 named
        f"E=8,N=14336,device_name={H100}.json",
    ]
    for name, f in files.items():
        assert (f.n_flagged == 0) == (name in runnable), name
    records = {(r.extra["file"], r.problem.M): r for r in store.trials(source=Source.IMPORTED)}
    h100 = records[(f"E=128,N=384,device_name={H100}.json", 64)]
    assert h100.ok and h100.extra["top"] == {"triton_version": "3.5.0"} and h100.extra["shape"] == "unknown"
    assert (h100.problem.K, experts(h100.problem)[1]) == (1, 1)  # ambiguous: K and topk unknown
    split = records[(f"E=128,N=384,device_name={MI300X}.json", 8)]
    assert split.ok and split.extra["other"] == {"SPLIT_K": 1} and split.config["SPLIT_K"] == 1
    per_tensor = records[(f"E=8,N=7168,device_name={H100},dtype=fp8_w8a8.json", 1)]
    assert per_tensor.status is TrialStatus.PRUNED and per_tensor.kernel == "moe.triton:dtype=fp8_w8a8"
    assert per_tensor.problem.dtype_b == "fp8e4m3" and "per-tensor scales" in per_tensor.error
    assert (per_tensor.problem.K, experts(per_tensor.problem)[1]) == (4096, 2)  # Mixtral TP2
    int4 = records[(f"E=257,N=128,device_name={H100},dtype=int4_w4a16.json", 1)]
    assert int4.kernel == "moe.triton:dtype=int4_w4a16" and int4.problem.dtype_b == "bf16"
    down = records[(f"E=256,N=128,device_name={H100},dtype=fp8_w8a8,block_shape=[128, 128]_down.json", 1)]
    assert down.kernel == "moe.triton:dtype=fp8_w8a8,block_shape=[128,128],down@sglang"  # SGLang's file
    assert down.extra["other"] == {"USE_TMA": True} and down.extra["triton_dir"] == "3_4_0"
    assert down.extra["imported_from"] == "sglang" and "second GEMM" in down.error
    pcq = records[(f"E=128,N=352,device_name={H100},dtype=fp8_w8a8,per_channel_quant=True.json", 1)]
    assert pcq.kernel == "moe.triton:dtype=fp8_w8a8,per_channel_quant=True@sglang"


def test_vllm_round_trip_is_byte_identical(store: Store, tmp_path: Path) -> None:
    vllm_dir, _ = write_all(tmp_path)
    import_files(store, [vllm_dir], source_hash="imported")
    written = export_vllm(store, tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(VLLM_FILES)
    for path in written:
        assert path.read_text() == VLLM_FILES[path.name], path.name


def test_sglang_round_trip_keeps_the_folder_and_bytes(store: Store, tmp_path: Path) -> None:
    _, folder = write_all(tmp_path)
    import_files(store, [folder], source_hash="imported")
    written = export_vllm(store, tmp_path / "out", flavor="sglang")
    assert {p.parent.name for p in written} == {"triton_3_4_0"}
    assert sorted(p.name for p in written) == sorted(SGLANG_FILES)
    for path in written:
        assert path.read_text() == SGLANG_FILES[path.name], path.name


def test_sglang_export_of_vllm_files_uses_the_chosen_triton(store: Store, tmp_path: Path) -> None:
    vllm_dir, _ = write_all(tmp_path)
    import_files(store, [vllm_dir], source_hash="imported")
    chosen = export_vllm(store, tmp_path / "a", flavor="sglang", triton_version="3.9.0")
    assert {p.parent.name for p in chosen} == {"triton_3_9_0"}
    assert all("triton_version" not in json.loads(p.read_text()) for p in chosen)  # SGLang reads every key
    assert sglang_dir("3.4.0") == sglang_dir("3_4_0") == "triton_3_4_0"


def test_sglang_export_without_any_triton_version_is_an_error(store: Store, tmp_path: Path) -> None:
    put(tmp_path / "in", f"E=8,N=14336,device_name={MI300X}.json", vllm_text({1: amd(16)}, triton=None))
    import_files(store, [tmp_path / "in"], source_hash="imported")
    with pytest.raises(ValueError, match="--triton-version"):
        export_vllm(store, tmp_path / "out", flavor="sglang")


def load_like_vllm(folder: Path, E: int, N: int, device: str, suffix: str = "") -> dict[int, Any] | None:
    """vLLM's lookup: the file named by E, N, device and dtype in one folder; triton_version dropped."""
    path = folder / f"E={E},N={N},device_name={device}{suffix}.json"
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    doc.pop("triton_version", None)
    return {int(m): config for m, config in doc.items()}


def load_like_sglang(root: Path, triton: str, E: int, N: int, device: str, suffix: str = "") -> Any:
    """SGLang's lookup: configs/triton_X_Y_Z/ of the running Triton; every key is an M."""
    path = (
        root
        / "configs"
        / f"triton_{triton.replace('.', '_')}"
        / f"E={E},N={N},device_name={device}{suffix}.json"
    )
    if not path.exists():
        return None
    return {int(m): config for m, config in json.loads(path.read_text()).items()}


def test_loaders_written_like_vllm_and_sglang_find_the_exported_files(store: Store, tmp_path: Path) -> None:
    vllm_dir, folder = write_all(tmp_path)
    import_files(store, [vllm_dir, folder], source_hash="imported")
    export_vllm(store, tmp_path / "v")
    export_vllm(store, tmp_path / "s" / "configs", flavor="sglang", triton_version="3.4.0")
    found = load_like_vllm(tmp_path / "v", 128, 192, H100, ",dtype=fp8_w8a8,block_shape=[128,128]")
    assert found == {1: nv(16), 256: nv(64, 128, 128, 32, 4, 3)}
    down = load_like_sglang(tmp_path / "s", "3.4.0", 8, 14336, H100, "_down")
    assert down == {1: {**nv(16), "USE_TMA": False}}
    assert load_like_sglang(tmp_path / "s", "3.4.0", 128, 384, MI300X)[8]["SPLIT_K"] == 1


def test_flagged_entries_export_with_a_warning_unless_dropped(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"E=8,N=14336,device_name={MI300X}.json"
    text = vllm_text({1: amd(16, stages=0), 2: amd(32)}, triton="3.2.0")
    (f,) = import_files(store, [put(tmp_path / "in", name, text)], source_hash="imported")
    assert f.flagged[0][0] == "M=1" and "Triton 3.2.0" in f.flagged[0][1]
    (kept,) = export_vllm(store, tmp_path / "a")
    assert kept.read_text() == text and "flagged entries (M=1)" in caplog.text
    (dropped,) = export_vllm(store, tmp_path / "b", drop_flagged=True)
    assert list(json.loads(dropped.read_text())) == ["triton_version", "2"]


def test_the_installed_triton_decides_num_stages_0(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = vllm_text({1: amd(16, stages=0)}, triton="3.5.0")
    path = put(tmp_path, f"E=8,N=14336,device_name={MI300X}.json", text)
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm.installed_triton", lambda: "3.1.0")
    (f,) = import_files(store, [path], source_hash="imported")
    assert f.n_flagged == 1 and "Triton 3.1.0" in f.flagged[0][1]
    assert num_stages_0_rejected(parse_version("3.2.0")) and not num_stages_0_rejected(parse_version("3.9.0"))
    assert parse_version("triton_3_4_0") == (3, 4) and parse_version("3.5.x") == (3, 5)


COMPILE_NUM_STAGES_0 = """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def copy(x, y, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(y + offs, tl.load(x + offs))


signature = {"x": "*fp32", "y": "*fp32", "n": "constexpr"}
src = triton.compiler.ASTSource(copy, signature=signature, constexprs={"n": 64})
triton.compile(src, target=GPUTarget("hip", "gfx942", 64), options={"num_stages": 0})
"""


def test_num_stages_table_matches_the_installed_triton(tmp_path: Path) -> None:
    """Compiles num_stages=0 for gfx942 with the installed Triton (in a process of its own, compiled,
    not interpreted) and checks the table agrees."""
    triton = pytest.importorskip("triton")
    script = put(tmp_path, "compile_stages_0.py", COMPILE_NUM_STAGES_0)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    rejected = num_stages_0_rejected(parse_version(triton.__version__))
    assert (run.returncode != 0) == rejected, (NUM_STAGES_0_REJECTED, run.stderr[-2000:])


def test_cli_folder_import_reports_each_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_all(tmp_path)
    put(tmp_path / "vllm" / "configs", "README", "not a config")
    put(
        tmp_path / "vllm" / "configs",
        "E=8,N=1,device_name=NVIDIA_A100-SXM4-80GB.json",
        vllm_text({1: nv(16)}),
    )
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "vllm"), str(tmp_path / "sglang"), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "skipped: E=8,N=1,device_name=NVIDIA_A100-SXM4-80GB.json: unknown device" in out
    assert out.count("imported ") >= len(VLLM_FILES) + len(SGLANG_FILES)
    assert "reference only: dtype=int8_w8a8" in out and "; 1 files skipped" in out
    out_dir = tmp_path / "o"
    assert (
        main(["export", "--format", "sglang", "--out", str(out_dir), "--triton-version", "3.4.0", "--db", db])
        == 0
    )
    assert (out_dir / "triton_3_4_0" / f"E=8,N=14336,device_name={H100}_down.json").exists()


def test_configs_of_an_unknown_models_file_seed_any_k_and_topk_of_its_e_and_n(
    store: Store, tmp_path: Path
) -> None:
    """E=128, N=384 fits two models (K 2048 and 4096): imported with K and top-k unknown, its configs
    still warm-start a sweep of either model's layer (the nearest M's), and of no other E or N."""
    from autotune.core.problem import Problem
    from autotune.core.target import Target

    path = put(
        tmp_path, "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json", vllm_text({8: nv(16), 1024: nv(128)})
    )
    import_files(store, [path])
    h100 = Target.for_arch("sm_90").fingerprint()
    for K, topk in ((2048, 8), (4096, 8)):
        [seed] = store.known_configs(Problem.of("moe", 16, 384, K, E=128, topk=topk), fingerprint=h100)
        assert seed["BLOCK_SIZE_M"] == 16  # M = 8's entry, the nearest to 16
        [seed] = store.known_configs(Problem.of("moe", 2048, 384, K, E=128, topk=topk), fingerprint=h100)
        assert seed["BLOCK_SIZE_M"] == 128
    assert store.known_configs(Problem.of("moe", 16, 512, 2048, E=128, topk=8), fingerprint=h100) == []
    assert store.known_configs(Problem.of("moe", 16, 384, 2048, E=64, topk=8), fingerprint=h100) == []
