"""Imports bound what they accept and stream what they read: out-of-range values are skipped with the
reason (never stored, so never exported), a large CSV takes flat memory, and a bad row at the end of a
streamed file rolls the whole file back."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from autotune.db import Store, export_vllm, import_files
from autotune.db.bounds import MAX_M, MAX_TILE, MAX_US
from autotune.db.engine import resolve_url

HEADER = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName"
VLLM = "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"


def _row(m: int, n: int, k: int, us: str, solidx: int) -> str:
    return (f"gfx942,304,{m},{n},{k},False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,{solidx},0,"
            f"{us},Cijk_Alik_Bljk_MT{solidx % 7}")  # fmt: skip


def _entry(rng: random.Random, **over: int) -> dict[str, int]:
    entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
             "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": rng.choice([1, 8]),
             "num_warps": rng.choice([4, 8]), "num_stages": 2}  # fmt: skip
    entry.update(over)
    return entry


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_out_of_range_vllm_entries_are_skipped_and_never_exported(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    good = {str(m): _entry(rng) for m in sorted(rng.sample(range(1, 4097), 6))}
    bad = {
        str(rng.randrange(MAX_M + 1, 2**63)): _entry(rng),  # M past any sane token count
        "7777": _entry(rng, BLOCK_SIZE_M=2 ** rng.randrange(11, 80)),  # no tile size
        "8888": _entry(rng, num_warps=rng.randrange(2**40, 2**70)),  # no integer of ours
    }
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / VLLM).write_text(json.dumps({**good, **bad}))
    with Store(str(tmp_path / "v.db")) as store:
        (f,) = import_files(store, [tmp_path / "in" / VLLM], k=4096, topk=2)
        assert not f.error and f.written == len(good)
        reasons = dict(f.skipped)
        assert set(reasons) == {f"M={m}" for m in bad}
        assert all(r.startswith("out of range: ") for r in reasons.values())
        assert f"is no tile size (1 to {MAX_TILE})" in reasons["M=7777"]
        assert sorted(t.problem.M for t in store.trials()) == sorted(int(m) for m in good)
        export_vllm(store, tmp_path / "out")
    [written] = (tmp_path / "out").rglob("*.json")
    assert set(json.loads(written.read_text())) == set(good)


def test_times_and_sizes_out_of_range_in_a_streamed_csv(db_url: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    rows, ok = [], 0
    for i in range(40):
        what = rng.choice(["ok", "ok", "inf_us", "huge_us", "huge_m", "neg_k"])
        m, k, us = rng.randrange(1, 8192), 4096, f"{rng.uniform(1, 500):.3f}"
        if what == "huge_us":
            us = f"{rng.uniform(MAX_US * 10, 1e308):.6g}"
        elif what == "huge_m":
            m = rng.randrange(MAX_M + 1, 10**20)
        elif what == "neg_k":
            k = -rng.randrange(1, 100)
        elif what == "inf_us":
            us = "inf"  # no usable time: flagged, as before
        ok += what in ("ok", "inf_us")
        rows.append(_row(m, 4096, k, us, i))
    path = tmp_path / "bf16_tuned_gemm.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    with Store(db_url) as store:
        (f,) = import_files(store, [path])
        stored = store.trials()
        (again,) = import_files(store, [path])
        assert again.written == 0 and len(store.trials()) == len(stored)  # nothing new the second time
    assert not f.error and f.written == len(stored) == ok == f.n_ok + f.n_flagged
    assert all(0 < t.problem.M <= MAX_M and t.problem.K > 0 for t in stored)
    assert all(t.time_us is None or t.time_us <= MAX_US for t in stored)
    assert len(f.skipped) == 40 - ok


def test_a_bad_last_row_rolls_the_streamed_file_back(db_url: str, tmp_path: Path) -> None:
    rows = [_row(m, 4096, 4096, "5.0", m) for m in range(1, 12001)] + [_row(5, 4096, 4096, "five", 0)]
    path = tmp_path / "bf16_tuned_gemm.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    with Store(db_url) as store:
        (f,) = import_files(store, [path])
        assert "us is 'five', not a number" in f.error and f.written is None
        assert store.summary().n_trials == 0 and store.summary().n_problems == 0
    engine = create_engine(resolve_url(db_url))  # the index a first import defers is there still
    try:
        assert "ix_problems_shape" in {i["name"] for i in inspect(engine).get_indexes("problems")}
    finally:
        engine.dispose()


def test_a_large_csv_streams_in_flat_memory(tmp_path: Path) -> None:
    """Memory of an import does not grow with its file: the peak of a file 4x larger stays within a
    few MB of the smaller's (all rows read whole took ~4 KB each)."""
    peaks = []
    for n in (4000, 16000):
        path = tmp_path / f"{n}" / "bf16_tuned_gemm.csv"
        path.parent.mkdir()
        path.write_text(
            HEADER + "\n" + "\n".join(_row(m, 4096, 4096, "5.0", m) for m in range(1, n + 1)) + "\n"
        )
        with Store(str(tmp_path / f"{n}.db")) as store:
            tracemalloc.start()
            (f,) = import_files(store, [path])
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert f.written == n == store.summary().n_trials
    assert peaks[1] < peaks[0] + 8 * 2**20, [p >> 20 for p in peaks]
