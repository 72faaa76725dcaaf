"""Tables written before the MoE's expert counts were its own parameters (file versions 1 and 2, whose
entries have "e" and "topk") still load, converted: `data/table_v1.json` and `data/table_v2.json` were
written by that code (a dense GEMM, an MLA decode with parameters, MoE families with bf16 and FP8
weights, one of them served by M ranges in version 2)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.dispatch import Dispatcher, Entry, Table, TableError, UntunedShapeWarning, install_dispatcher
from autotune.dispatch.table import VERSION

DATA = Path(__file__).resolve().parent / "data"
MLA = dict(heads=16, context=256, kv_dtype="bf16", page_size=16)
#: What each file's families serve, as that code served them: (problem, its config).
SERVED = [
    (Problem.of("gemm", 16, 4096, 4096), Config(backend="triton", BLOCK_M=16, BLOCK_N=64)),
    (Problem.of("gemm", 64, 4096, 4096), Config(backend="triton", BLOCK_M=64, BLOCK_N=128)),
    (Problem.of("mla_decode", 4, 512, 576, **MLA), Config(backend="triton", BLOCK_H=16, BLOCK_N=32)),  # type: ignore[arg-type]
    (
        Problem.of("moe", 16, 1536, 4096, E=128, topk=8),
        Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64),
    ),
    (
        Problem.of("moe", 256, 1536, 4096, E=128, topk=8),
        Config(backend="triton", BLOCK_SIZE_M=64, BLOCK_SIZE_N=128),
    ),
    (
        Problem.of("moe", 16, 1536, 4096, variant="fp8e4m3", E=128, topk=8),
        Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=128),
    ),
    (Problem.of("moe", 16, 512, 2048, E=64, topk=6), Config(backend="triton", BLOCK_SIZE_M=16)),
]
KEYS = [
    ("gemm", "bf16", "nk", 4096, 4096, ""),
    ("mla_decode", "bf16", "nk", 512, 576, "context=256,heads=16,kv_dtype=bf16,page_size=16"),
    ("moe", "bf16", "nk", 512, 2048, "E=64,topk=6"),
    ("moe", "bf16", "nk", 1536, 4096, "E=128,topk=8"),
    ("moe", "bf16", "nk", 1536, 4096, "E=128,topk=8,b=fp8e4m3"),
]


def _lookup(table: Table, problem: Problem) -> Config | None:
    return table.lookup(
        problem.op, problem.M, problem.N, problem.K, dtype=problem.dtype, layout=problem.layout,
        params=problem.table_params,
    )  # fmt: skip


@pytest.mark.parametrize("name, version", [("table_v1.json", 1), ("table_v2.json", 2)])
def test_an_old_table_loads_with_its_expert_counts_as_params(tmp_path: Path, name: str, version: int) -> None:
    raw = json.loads((DATA / name).read_text())
    assert raw["version"] == version and all("e" in e and "topk" in e for e in raw["entries"])
    table = Table.load(DATA / name)
    assert list(table.keys()) == KEYS
    for problem, config in SERVED:
        assert _lookup(table, problem) == config, problem
    assert table.ranged == (version == 2)
    if version == 2:  # the family with M ranges keeps them
        assert _lookup(table, Problem.of("moe", 100, 512, 2048, E=64, topk=6)) == Config(backend="torch")
    # written again, it is version 3: the expert counts in params, no "e" or "topk" left
    table.save(tmp_path / "new.json")
    data = json.loads((tmp_path / "new.json").read_text())
    assert data["version"] == VERSION == 3
    assert not any("e" in e or "topk" in e for e in data["entries"])
    assert [e.get("params", "") for e in data["entries"]] == [key[5] for key in KEYS]
    again = Table.load(tmp_path / "new.json")
    assert again.entries == table.entries and again.fingerprint == table.fingerprint


def test_an_old_table_serves_the_moe_entry_point(interp: Target) -> None:
    """A version-1 file's MoE families serve `served_config` (what `fused_moe` runs) once loaded, with
    the file's target replaced by the running one (the configs are the file's)."""
    from autotune.kernels import MOE
    from autotune.kernels.serve import served_config

    old = Table.load(DATA / "table_v1.json")
    table = Table(target=interp, entries=old.entries)
    previous = install_dispatcher(Dispatcher([table], device_key=interp, untuned_log=os.devnull))
    try:
        for problem, config in SERVED:
            if problem.op == "moe":
                assert served_config(MOE, problem, interp) == config
        other = Problem.of("moe", 16, 1536, 4096, E=64, topk=8)  # another E: untuned, the fallback runs
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedShapeWarning)
            assert served_config(MOE, other, interp) == MOE.fallback_config(other, interp)
    finally:
        install_dispatcher(previous)


def test_a_table_older_readers_read_the_same_keeps_its_old_version(tmp_path: Path, interp: Target) -> None:
    """Without an entry whose params hold what "e" and "topk" held, a table is written as before (1
    without M ranges, 2 with): dense and MLA tables stay readable by older autotune."""
    dense = [(p, c, 1.0) for p, c in SERVED if p.op != "moe"]
    Table.from_winners(interp, dense).save(tmp_path / "dense.json")
    data = json.loads((tmp_path / "dense.json").read_text())
    assert data["version"] == 1 and data["entries"][1]["params"] == KEYS[1][5]
    moe = [(p, c, 1.0) for p, c in SERVED if p.op == "moe"]
    assert Table.from_winners(interp, moe).version == 3


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(e=-1), r"entries\[2\] .*e must be a non-negative integer, got -1"),
        (dict(topk="8"), r"entries\[2\] .*topk must be a non-negative integer, got '8'"),
        (dict(params=7), r"entries\[2\] .*params must be a string, got 7"),
    ],
)
def test_a_bad_old_entry_is_refused_naming_it(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    data = json.loads((DATA / "table_v1.json").read_text())
    data["entries"][2].update(change)
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(TableError, match=message):
        Table.load(tmp_path / "t.json")


def test_version3_entries_are_keyed_by_their_params_alone(interp: Target) -> None:
    """A version-3 file's "e" or "topk" (no field of that version) is not read as expert counts."""
    entry = Entry(
        "moe",
        "bf16",
        "nk",
        512,
        2048,
        ranges=(),
        buckets=Table.load(DATA / "table_v1.json").entries[2].buckets,
        params="E=64,topk=6",
    )
    data = Table(target=interp, entries=[entry]).to_dict()
    data["entries"][0].update(e=8, topk=2)
    table = Table.from_json(json.dumps(data))
    assert table.keys() == (("moe", "bf16", "nk", 512, 2048, "E=64,topk=6"),)


@pytest.fixture
def interp() -> Target:
    return Target.interpreter_target()
