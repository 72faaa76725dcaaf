"""Each imported config file keeps the project it came from: SGLang's and vLLM's files of one name are two
records, each exported whole to its own project's layout, and where their configs differ at an M both the
import and the export say so. Nothing is merged and nothing is lost, whichever is imported first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.core.result import Source
from autotune.db import Store
from autotune.db.interop import import_files
from autotune.kernels.moe.formats.vllm import file_project
from autotune.kernels.moe.formats.vllm_export import export_vllm_files
from autotune.kernels.moe.formats.vllm_names import VllmFileName

#: The name SGLang and vLLM both ship (as the issue's user found them), SGLang's spelling of the shape.
NAME = "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128, 128].json"
VLLM_NAME = NAME.replace("[128, 128]", "[128,128]")


def entry(bm: int, warps: int = 4, **more: Any) -> dict[str, Any]:
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
            "num_warps": warps, "num_stages": 2, "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2,
            **more}  # fmt: skip


#: vLLM's and SGLang's configs of one file name: the same at M=1, different at 16 and 64; M=4096 only
#: vLLM's, M=256 only SGLang's.
VLLM = {"triton_version": "3.4.0", "1": entry(16), "16": entry(32), "64": entry(64, 8), "4096": entry(128, 8)}
SGLANG = {"1": entry(16), "16": entry(64), "64": entry(64, 4), "256": entry(128, 8, USE_TMA=False)}


def put(folder: Path, name: str, doc: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(doc, indent=4) + "\n")
    return path


@pytest.fixture(autouse=True)
def no_installed_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm.installed_triton", lambda: "3.9.0")
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm_export.installed_triton", lambda: "3.9.0")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "x.db")) as s:
        yield s


def two_projects(root: Path) -> tuple[Path, Path]:
    """vLLM's file where vLLM keeps it, SGLang's in its triton_3_2_0 folder: both of one name."""
    vllm = put(root / "vllm" / "model_executor" / "layers" / "fused_moe" / "configs", NAME, VLLM)
    sglang = put(root / "sglang" / "srt" / "layers" / "moe" / "fused_moe_triton" / "configs" / "triton_3_2_0",
                 NAME, SGLANG)  # fmt: skip
    return vllm, sglang


def exported(paths: list[Path]) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(p.parents[1] if p.parent.name.startswith("triton_") else p.parent)):
            json.loads(p.read_text()) for p in paths}  # fmt: skip


@pytest.mark.parametrize("order", ["vllm first", "sglang first"])
def test_same_named_files_of_two_projects_are_two_records_exported_whole(
    order: str, store: Store, tmp_path: Path
) -> None:
    vllm, sglang = two_projects(tmp_path / "in")
    files = import_files(store, [vllm, sglang] if order == "vllm first" else [sglang, vllm])
    by_project = {f.project: f for f in files}
    assert set(by_project) == {"vllm", "sglang"} and all(f.written == 4 for f in files)
    second = files[1]
    other = "sglang" if second.project == "vllm" else "vllm"
    [note] = second.warnings  # the second import says where it conflicts with the first
    assert note.startswith(f"conflict: {other}'s file of this name holds other configs at 2 M (16, 64)")
    assert not files[0].warnings
    records = store.trials(source=Source.IMPORTED)
    assert len(records) == 8  # M=1 is the same config in both: two records all the same
    assert {(r.extra["imported_from"], r.kernel) for r in records} == {
        ("vllm", "moe.triton"),
        ("sglang", "moe.triton@sglang"),
    }
    as_vllm = export_vllm_files(store, tmp_path / "v", flavor="vllm")
    as_sglang = export_vllm_files(store, tmp_path / "s", flavor="sglang")
    assert exported(as_vllm.paths) == {VLLM_NAME: VLLM}  # vLLM's file, byte for byte its configs
    # SGLang's file in its own folder (its Triton 3.2.0, not the installed 3.9.0), with no top-level key
    assert exported(as_sglang.paths) == {f"triton_3_2_0/{NAME}": SGLANG}
    assert (tmp_path / "s" / "triton_3_2_0" / NAME).read_text() == sglang.read_text()
    [v_note] = as_vllm.notes
    assert v_note.startswith(f"conflict: {VLLM_NAME}: vllm's file written; sglang's file of this name holds "
                             "other configs at 2 M (16, 64)") and "--format sglang" in v_note  # fmt: skip
    [s_note] = as_sglang.notes
    assert (
        s_note.startswith(f"conflict: {NAME}: sglang's file written; vllm's file")
        and "--format vllm" in s_note
    )


def test_the_cli_reports_the_conflict_on_import_and_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_projects(tmp_path / "in")
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "warning: conflict: " in out and "holds other configs at 2 M (16, 64)" in out
    assert main(["export", "--format", "sglang", "--out", str(tmp_path / "s"), "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 's' / 'triton_3_2_0' / NAME} (sglang's file imported" in out
    assert "note: conflict: " in out and "--format vllm" in out


def test_a_file_of_one_project_only_exports_in_either_layout(store: Store, tmp_path: Path) -> None:
    """Where only one project ships a name, its file is written in either layout (the same kernel's
    configs), said so; where both ship one, each layout takes its own project's."""
    _, sglang = two_projects(tmp_path / "in")
    other = put(sglang.parent, "E=64,N=1280,device_name=AMD_Instinct_MI300X.json", {"8": entry(16)})
    import_files(store, [sglang, other])
    done = export_vllm_files(store, tmp_path / "v", flavor="vllm")
    assert sorted(p.name for p in done.paths) == sorted([VLLM_NAME, other.name])
    assert all("sglang's file imported" in holds for _, holds in done.files)


def test_vllm_never_gets_sglangs_down_and_per_channel_files(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "sglang" / "triton_3_4_0"
    down = put(folder, "E=8,N=14336,device_name=AMD_Instinct_MI300X_down.json", {"1": entry(16)})
    pcq_name = "E=128,N=352,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,per_channel_quant=True.json"
    pcq = put(folder, pcq_name, {"1": entry(16)})
    up = put(folder, "E=8,N=14336,device_name=AMD_Instinct_MI300X.json", {"1": entry(32)})
    import_files(store, [folder])
    done = export_vllm_files(store, tmp_path / "v", flavor="vllm")
    assert [p.name for p in done.paths] == [up.name]
    assert any(n.startswith(f"{down.name}: sglang's file not written: vLLM never reads") for n in done.notes)
    assert any(n.startswith(f"{pcq.name}: sglang's file not written") for n in done.notes)
    kept = export_vllm_files(store, tmp_path / "s", flavor="sglang")
    assert sorted(p.name for p in kept.paths) == sorted([down.name, pcq.name, up.name])


@pytest.mark.parametrize(
    ("folder", "name", "project"),
    [
        ("configs/triton_3_4_0", NAME, "sglang"),
        ("python/sglang/srt/layers/moe/fused_moe_triton/configs", VLLM_NAME, "sglang"),
        ("vllm/model_executor/layers/fused_moe/configs", NAME, "vllm"),  # its folder beats the spelling
        ("downloads/vllm-0.9.2", VLLM_NAME, "vllm"),
        ("downloads/sglang_configs", VLLM_NAME, "sglang"),
        ("downloads", NAME, "sglang"),  # only SGLang spells the block shape with a space
        ("downloads", VLLM_NAME, "vllm"),
        ("my_vllm_notes", VLLM_NAME, "vllm"),
        ("test_sglang_configs0", VLLM_NAME, "vllm"),  # a folder that only mentions a project tells nothing
    ],
)
def test_a_files_project_is_told_by_its_folders_then_its_name(folder: str, name: str, project: str) -> None:
    path = Path("/data") / folder / name
    assert file_project(path, VllmFileName.parse(name)) == project


def test_project_given_wins_and_a_bad_one_is_refused(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = put(tmp_path / "downloads", NAME, SGLANG)
    (f,) = import_files(store, [path], project="vllm")
    assert f.project == "vllm" and {r.kernel for r in store.trials()} == {"moe.triton"}
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(path), "--project", "lmdeploy", "--db", str(tmp_path / "y.db")])
    assert exit_.value.code == 2 and "invalid choice: 'lmdeploy'" in capsys.readouterr().err
    assert not (tmp_path / "y.db").exists()
