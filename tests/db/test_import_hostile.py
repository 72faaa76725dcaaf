"""What an import of files no one here wrote does with the bad ones: one rule for a file whose every entry
is bad (skipped, named, exit status as for an unreadable file), FIFOs and looping links reported wherever
they are, a CSV that lacks a column said so, values beyond what the device holds skipped, aiter's error
ratio honoured, and a database named by mistake never made by export."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.core.result import TrialStatus
from autotune.core.target import Target
from autotune.db import Store
from autotune.db.aiter_gemm import MAX_ERROR_RATIO
from autotune.db.interop import import_files
from autotune.kernels.moe.formats.vllm import beyond_target

MI300X_FILE = "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"  # Mixtral-8x7B at TP1
H100_FILE = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"


def entry(bm: int = 16, **over: Any) -> dict[str, Any]:
    return {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 2, **over}  # fmt: skip


def put(folder: Path, name: str, content: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=4))
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "x.db")) as s:
        yield s


#: Files whose every entry is bad, and what the reason says: a wrong type, a wrong sign, values beyond
#: the device or out of bounds, a missing key, keys that are no M.
ALL_BAD: dict[str, tuple[dict[str, Any], str]] = {
    "wrong-type": (
        {"1": entry(num_warps="4"), "2": entry(BLOCK_SIZE_N=64.0)},
        "num_warps must be a non-negative",
    ),
    "wrong-sign": ({"1": entry(num_warps=-4), "2": entry(num_stages=-1)}, "num_warps must be a non-negative"),
    "warps-beyond-the-gpu": (
        {"1": entry(num_warps=1024)},
        "num_warps=1024: a block of gfx942 holds at most 16",
    ),
    "stages-beyond-the-gpu": ({"1": entry(num_stages=100000)}, "num_stages=100000: 99999 buffers"),
    "tile-out-of-bounds": ({"1": entry(bm=2**20)}, "BLOCK_SIZE_M=1048576 is no tile size"),
    "m-out-of-bounds": ({str(2**40): entry()}, "M=1099511627776 is out of range"),
    "missing-key": ({"1": {"BLOCK_SIZE_M": 16}}, "missing required parameter 'BLOCK_SIZE_N'"),
    "no-m-keys": ({"first": entry(), "0": entry()}, "not a positive integer M"),
}


@pytest.mark.parametrize("case", ALL_BAD)
def test_a_file_whose_every_entry_is_bad_fails_as_an_unreadable_one(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, why = ALL_BAD[case]
    bad = put(tmp_path / "in", MI300X_FILE, doc)
    good = put(tmp_path / "in" / "h100", H100_FILE, {"1": entry(), "2": entry(32)})
    with Store(str(tmp_path / "a.db")) as store:
        f, ok = import_files(store, [bad, good])
        assert f.all_bad and f.failed and f.readable and f.written is None
        assert f.error.startswith(f"{bad}: no entry could be imported: ") and why in f.error
        assert ok.written == 2 and store.summary().n_trials == 2  # the bad file wrote nothing
    # named alone: one line, exit 2, as for a file that cannot be read
    assert main(["import", str(bad), "--db", str(tmp_path / "b.db")]) == 2
    captured = capsys.readouterr()
    assert (
        captured.err.count("\n") == 1 and why in captured.err and "no entry could be imported" in captured.err
    )
    # in a folder: named, the others imported, exit 1, as for a file that cannot be read
    assert main(["import", str(tmp_path / "in"), "--db", str(tmp_path / "c.db")]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: skipped: {bad}: no entry could be imported" in out and "imported 2 new trials" in out
    assert "1 files skipped (1 of them unreadable or with no good entry)" in out


def test_a_file_with_a_good_entry_imports_it_and_names_the_bad_ones(store: Store, tmp_path: Path) -> None:
    doc = {"1": entry(), "2": entry(num_warps=1024), "4": entry(num_stages=100000), "8": entry(num_warps="8")}
    (f,) = import_files(store, [put(tmp_path, MI300X_FILE, doc)])
    assert not f.error and not f.all_bad and f.written == 1
    reasons = dict(f.skipped)
    assert reasons["M=2"].startswith("out of range: num_warps=1024: a block of gfx942 holds at most 16 warps")
    assert reasons["M=4"].startswith("out of range: num_stages=100000:") and "gfx942" not in reasons["M=4"]
    assert "64 KiB" in reasons["M=4"] and "num_warps must be a non-negative integer" in reasons["M=8"]


def test_a_file_of_many_flagged_and_bad_entries_lists_a_thousand_of_each(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """num_stages 0 on an MI300X under Triton 3.2 is flagged: 5,000 such entries are stored, a thousand
    listed with the reason and the rest counted (as are bad entries), so the notes take bounded memory."""
    monkeypatch.setattr("autotune.kernels.moe.formats.vllm.installed_triton", lambda: "3.2.0")
    doc = {str(m): entry(num_stages=0) for m in range(1, 5001)}
    doc.update({f"x{i}": entry() for i in range(1500)})
    path = put(tmp_path / "in", MI300X_FILE, doc)
    (f,) = import_files(store, [path])
    assert (f.written, f.n_flagged, len(f.flagged), f.more) == (5000, 5000, 1000, (500, 4000))
    assert len(f.skipped) == 1000 and f.n_entries == 6500 and not f.failed
    assert main(["import", str(path), "--db", str(tmp_path / "y.db")]) == 0
    out = capsys.readouterr().out
    assert "imported 6500 entries: 0 ok, 5000 flagged, 1500 skipped" in out
    assert "  ... and 4000 more flagged entries" in out and "  ... and 500 more skipped entries" in out


@pytest.mark.parametrize(
    ("arch", "values", "fits"),
    [
        ("gfx942", dict(num_warps=16), True),
        ("gfx942", dict(num_warps=32), False),  # wave 64: 1024 threads are 16 warps
        ("gfx950", dict(num_warps=32), False),
        ("sm_90", dict(num_warps=32), True),  # warp 32: 1024 threads are 32 warps
        ("sm_90", dict(num_warps=64), False),
        ("sm_90", dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, num_stages=4), True),
        ("sm_90", dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, num_stages=5), True),
        ("gfx942", dict(BLOCK_SIZE_M=256, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, num_stages=2), True),
        ("gfx942", dict(num_stages=0), True),
        ("gfx942", dict(num_stages=100000), False),
        ("sm_90", dict(num_stages=100000), False),
        ("gfx942", dict(BLOCK_SIZE_M=256, BLOCK_SIZE_N=256, BLOCK_SIZE_K=256, num_stages=2), False),
    ],
)
def test_num_warps_and_num_stages_are_bounded_by_the_device(
    arch: str, values: dict[str, int], fits: bool
) -> None:
    """Real configs (vLLM's H100 and MI300X files hold such) fit; what no block of the device can hold does
    not: more than 1024 threads, or more buffered tiles than its shared memory at one byte an element."""
    config = {**entry(), **values}
    assert (beyond_target(config, Target.for_arch(arch)) is None) == fits


# -- what a folder holds that is no regular file ----------------------------------------------------------


def odd_folder(root: Path) -> dict[str, str]:
    """A folder with a good file, a FIFO, two links that loop, and one that leads nowhere; what each odd
    one is reported as."""
    put(root, MI300X_FILE, {"1": entry()})
    os.mkfifo(root / "pipe.json")
    os.symlink("loop2.json", root / "loop1.json")
    os.symlink("loop1.json", root / "loop2.json")
    os.symlink("gone.json", root / "dangling.csv")
    return {
        "pipe.json": "it is a FIFO, not a regular file",
        "loop1.json": "Too many levels of symbolic links",
        "loop2.json": "Too many levels of symbolic links",
        "dangling.csv": "No such file or directory",
    }


def test_fifos_and_looping_links_in_a_folder_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = odd_folder(tmp_path / "in")
    db = str(tmp_path / "x.db")
    assert main(["import", str(tmp_path / "in"), "--db", db]) == 1
    out = capsys.readouterr().out
    for name, why in odd.items():
        line = next(line for line in out.splitlines() if line.startswith(f"{tmp_path / 'in' / name}: "))
        assert ": unreadable: " in line and why in line, line
    assert "imported 1 new trials from 1 files" in out and "4 files skipped" in out
    for name, why in odd.items():  # named directly: the same reason, one line, exit 2
        assert main(["import", str(tmp_path / "in" / name), "--db", db]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1


# -- CSVs that lack a column ---------------------------------------------------------------------------


GEMM = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName"
ROW = "gfx942,304,16,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,1,0,5.0,Cijk"


@pytest.mark.parametrize(
    ("column", "why"),
    [
        ("M", "not an aiter bf16 tuned GEMM table: it lacks the columns M"),
        ("N", "not an aiter bf16 tuned GEMM table: it lacks the columns N"),
        ("cu_num", "an aiter tuned-GEMM CSV, but it lacks the column cu_num"),
    ],
)
def test_a_gemm_csv_that_lacks_a_column_is_told_what_it_lacks(
    column: str, why: str, store: Store, tmp_path: Path
) -> None:
    keep = [i for i, c in enumerate(GEMM.split(",")) if c != column]
    header, row = (",".join(text.split(",")[i] for i in keep) for text in (GEMM, ROW))
    (f,) = import_files(store, [put(tmp_path, "bf16_tuned_gemm.csv", f"{header}\n{row}\n")])
    assert why in f.error and "fused-MoE" not in f.error


def test_a_fused_moe_csv_that_lacks_token_is_still_one(store: Store, tmp_path: Path) -> None:
    header = "cu_num,model_dim,inter_dim,expert,topk,dtype,q_dtype_w,q_type,block_m,ksplit,us,kernelName1"
    (f,) = import_files(store, [put(tmp_path, "tuned_fmoe.csv", header + "\n")])
    assert "not an aiter tuned fused-MoE CSV: it lacks the columns token" in f.error


# -- aiter's error ratio -----------------------------------------------------------------------------


def test_aiter_rows_above_the_error_ratio_are_wrong_results(store: Store, tmp_path: Path) -> None:
    """101 rows of FP8 blockscale GEMMs, 17 of them with an error ratio above aiter's 0.05: those 17 are
    stored as wrong_result with the ratio (never ok), the 84 others as ok."""
    rng = random.Random(7)
    wrong = set(rng.sample(range(101), 17))
    rows, ratios = [], {}
    for i in range(101):
        ratio = round(rng.uniform(0.051, 0.9), 4) if i in wrong else rng.choice([0.0, 0.01, MAX_ERROR_RATIO])
        ratios[16 * (i + 1)] = ratio
        us = rng.uniform(5, 50)
        rows.append(
            f"gfx942,304,{16 * (i + 1)},1536,7168,ck,8,0,{us:.4f},a8w8_blockscale_1x128x128,1.0,2.0,{ratio}"
        )
    header = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio"
    path = put(tmp_path, "a8w8_blockscale_tuned_gemm.csv", header + "\n" + "\n".join(rows) + "\n")
    (f,) = import_files(store, [path])
    assert (f.n_ok, f.n_flagged, f.written) == (84, 17, 101)
    records = {r.problem.M: r for r in store.trials()}
    for m, r in records.items():
        if ratios[m] > MAX_ERROR_RATIO:
            assert r.status is TrialStatus.WRONG_RESULT and r.rel_error == ratios[m] and r.time_us is None
            assert f"aiter's error ratio {ratios[m]:g} is above 0.05" in r.error
        else:
            assert r.ok and r.time_us is not None


# -- the database a verb opens ---------------------------------------------------------------------------


def test_export_never_makes_a_database_import_says_it_made_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "autotnue.db"
    for fmt in ("csv", "vllm", "sglang", "aiter"):
        assert main(["export", "--format", fmt, "--out", str(tmp_path / fmt), "--db", str(typo)]) == 2
        err = capsys.readouterr().err
        assert f"no database at {typo}" in err and err.count("\n") == 1
    assert not typo.exists() and not list(tmp_path.glob("*.db*"))
    path = put(tmp_path / "in", MI300X_FILE, {"1": entry()})
    assert main(["import", str(path), "--db", str(typo)]) == 0
    assert f"created a new database at {typo}" in capsys.readouterr().out
    assert main(["import", str(path), "--db", str(typo)]) == 0
    assert "created" not in capsys.readouterr().out
    other = tmp_path / "other.db"  # an import that fails leaves no empty database behind
    bad = put(tmp_path / "bad", MI300X_FILE, {"1": entry(num_warps=-4)})
    assert main(["import", str(bad), "--db", str(other)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert not list(tmp_path.glob("other.db*"))
