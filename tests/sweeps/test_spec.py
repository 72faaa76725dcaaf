"""The sweep-spec format: good specs expand to the right problems, every mistake is one clear SpecError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune import Problem
from autotune.engine.strategies import Budget
from autotune.sweeps import SpecError, SweepEntry, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]

ENTRY = 'op = "gemm"\nm = [1, 16]\nnk = [[64, 64]]\n'


def spec(entry: str = ENTRY, top: str = 'name = "t"\n') -> str:
    """A spec text: `top` fields, then one [[sweep]] table holding `entry`."""
    return f"{top}\n[[sweep]]\n{entry}"


def test_good_spec_expands_to_problems() -> None:
    text = """
name = " nightly "
description = "two entries"

[[sweep]]
op = "gemm"
dtype = "float16"
m = [1, 8]
nk = [[4096, 4096], [6144, 4096]]
layout = ["nk", "kn"]
strategy = "random"
trials = 12
seconds = 30
seed = 3
backends = ["triton"]

[[sweep]]
op = "gemm"
m = [8, 32]
nk = [[4096, 4096]]
"""
    s = parse_spec(text, source="nightly.toml")
    assert (
        s.name == "nightly" and s.description == "two entries" and s.text == text and s.path == "nightly.toml"
    )
    first, second = s.entries
    assert first == SweepEntry(
        op="gemm",
        dtype="fp16",
        ms=(1, 8),
        nks=((4096, 4096), (6144, 4096)),
        layouts=("nk", "kn"),
        strategy="random",
        budget=Budget(trials=12, seconds=30.0),
        seed=3,
        backends=("triton",),
    )
    assert second.dtype == "bf16" and second.layouts == ("nk",) and second.strategy == "optuna"
    assert second.budget == Budget() and second.seed == 0 and second.backends is None
    expected_first = [
        Problem.of("gemm", m, n, k, "fp16", layout=layout)
        for layout in ("nk", "kn")
        for n, k in ((4096, 4096), (6144, 4096))
        for m in (1, 8)
    ]
    assert first.problems() == expected_first
    pairs = s.problems()
    assert [p for _, p in pairs] == [
        *expected_first,
        Problem.of("gemm", 8, 4096, 4096, "bf16"),
        Problem.of("gemm", 32, 4096, 4096, "bf16"),
    ]
    assert all(e is first for e, _ in pairs[:8]) and all(e is second for e, _ in pairs[8:])


def test_duplicate_problems_across_entries_are_tuned_once() -> None:
    """A problem in two entries belongs to the first; duplicated M values count once."""
    text = (
        spec(ENTRY, 'name = "t"') + '\n[[sweep]]\nop = "gemm"\nm = [16, 16, 2]\nnk = [[64, 64]]\ntrials = 3\n'
    )
    s = parse_spec(text)
    pairs = s.problems()
    assert [p.M for _, p in pairs] == [1, 16, 2]
    assert pairs[1][0] is s.entries[0] and pairs[2][0] is s.entries[1]


def test_shipped_specs_parse() -> None:
    smoke = load_spec(REPO / "autotune" / "sweeps" / "smoke.toml")
    assert smoke.name == "smoke" and smoke.path.endswith("smoke.toml")
    assert [p for _, p in smoke.problems()] == [
        Problem.of("gemm", 1, 4096, 4096),
        Problem.of("gemm", 16, 4096, 4096),
    ]
    assert smoke.entries[0].strategy == "exhaustive" and smoke.entries[0].budget.trials == 6
    llama = load_spec(REPO / "autotune" / "sweeps" / "llama3-8b.toml")
    assert len(llama.problems()) == 9 * 4


@pytest.mark.parametrize(
    "text, message",
    [
        (spec('op = "conv"\nm = [1]\nnk = [[64, 64]]\n'), "unknown op 'conv'"),
        (spec(ENTRY, 'name = "t"\nowner = "me"'), "unknown top-level field(s) owner"),
        (spec(ENTRY + "tile = 64\n"), "#1: unknown field(s) tile"),
        (spec(ENTRY, 'description = "no name"'), "missing or empty `name`"),
        (spec(ENTRY, 'name = "  "'), "missing or empty `name`"),
        ('name = "t"\n', "no [[sweep]] tables"),
        (spec('op = "gemm"\nnk = [[64, 64]]\n'), "missing field `m`"),
        (spec('op = "gemm"\nm = [1]\n'), "missing field `nk`"),
        (spec("m = [1]\nnk = [[64, 64]]\n"), "missing field `op`"),
        (spec('op = "gemm"\nm = [0]\nnk = [[64, 64]]\n'), "`m` must be positive, got 0"),
        (spec('op = "gemm"\nm = [4, -2]\nnk = [[64, 64]]\n'), "`m` must be positive, got -2"),
        (spec('op = "gemm"\nm = [1]\nnk = [[0, 64]]\n'), "`N` must be positive, got 0"),
        (spec('op = "gemm"\nm = [1]\nnk = [[64, -64]]\n'), "`K` must be positive, got -64"),
        (spec('op = "gemm"\nm = 16\nnk = [[64, 64]]\n'), "`m` must be a non-empty list"),
        (spec('op = "gemm"\nm = []\nnk = [[64, 64]]\n'), "`m` must be a non-empty list"),
        (spec('op = "gemm"\nm = ["a"]\nnk = [[64, 64]]\n'), "`m` values must be integers, got 'a'"),
        (spec('op = "gemm"\nm = [1.5]\nnk = [[64, 64]]\n'), "`m` values must be integers, got 1.5"),
        (spec('op = "gemm"\nm = [true]\nnk = [[64, 64]]\n'), "`m` values must be integers, got True"),
        (spec(ENTRY + 'trials = "6"\n'), "`trials` values must be integers, got '6'"),
        (spec(ENTRY + "trials = true\n"), "`trials` values must be integers, got True"),
        (spec(ENTRY + "trials = 0\n"), "`trials` must be positive, got 0"),
        (spec(ENTRY + 'seconds = "60"\n'), "`seconds` must be a positive number, got '60'"),
        (spec(ENTRY + "seconds = -1.5\n"), "`seconds` must be a positive number, got -1.5"),
        (spec(ENTRY + "seed = true\n"), "`seed` must be a int, got True"),
        (spec(ENTRY + "final_rounds = -1\n"), "`final_rounds` must be 0 (off) or more, got -1"),
        (spec(ENTRY + "final_rounds = 2.5\n"), "`final_rounds` must be a int, got 2.5"),
        (spec(ENTRY + "final_rounds = true\n"), "`final_rounds` must be a int, got True"),
        (spec('op = "gemm"\nm = [1]\nnk = [[64, 64, 64]]\n'), "each `nk` item must be an [N, K] pair"),
        (spec('op = "gemm"\nm = [1]\nnk = [64, 64]\n'), "each `nk` item must be an [N, K] pair, got 64"),
        (spec('op = "gemm"\nm = [1]\nnk = []\n'), "`nk` must be a non-empty list"),
        (spec(ENTRY + 'strategy = "grid"\n'), "unknown strategy 'grid'"),
        (spec(ENTRY + "strategy = 1\n"), "`strategy` must be a str"),
        (spec(ENTRY + 'layout = "tn"\n'), "unknown layout 'tn'"),
        (spec(ENTRY + 'layout = ["nk", "nt"]\n'), "unknown layout 'nt'"),
        (spec(ENTRY + 'dtype = "fp8"\n'), "unknown dtype 'fp8'"),
        (spec(ENTRY + 'dtype = "fp8e4m3"\n'), "op gemm supports dtype bf16 or fp16, not fp8e4m3"),
        (spec(ENTRY + 'dtype = "fp32"\n'), "op gemm supports dtype bf16 or fp16, not fp32"),
        (spec(ENTRY + "backends = []\n"), "`backends` must be a non-empty list of names"),
        (spec(ENTRY + 'backends = "triton"\n'), "`backends` must be a non-empty list of names"),
        (spec(ENTRY, 'name = "t"\ndescription = 5'), "`description` must be a string"),
        ("this is not toml at all", "not valid TOML"),
        ('name = "t"\n[[sweep]\nop = "gemm"', "not valid TOML"),
        ('name = "t"\nsweep = [1]\n', "[[sweep]] #1: must be a table"),
    ],
)
def test_bad_spec_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.toml")
    assert str(info.value).startswith("bad.toml: ")
    assert message in str(info.value)


def test_error_names_the_entry() -> None:
    text = spec(ENTRY) + '\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[64, 64]]\nstrategy = "nope"\n'
    with pytest.raises(SpecError, match=r"^s\.toml: \[\[sweep\]\] #2: unknown strategy 'nope'"):
        parse_spec(text, source="s.toml")


def test_wrong_dtype_type_names_the_location_once() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec(ENTRY + "dtype = 16\n"), source="bad.toml")
    assert "`dtype` must be a str, got 16" in str(info.value)
    assert str(info.value).count("bad.toml") == 1


def test_empty_layout_list_is_an_error() -> None:
    with pytest.raises(SpecError, match="layout"):
        parse_spec(spec(ENTRY + "layout = []\n"))


def test_load_spec_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(spec(ENTRY))
    s = load_spec(path)
    assert s.path == str(path) and len(s.problems()) == 2


def test_load_spec_missing_file_and_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(SpecError, match=re.escape(f"{missing}: no such spec file")):
        load_spec(missing)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path)


def test_load_spec_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "notes.toml"
    path.write_text("Remember to tune the QKV projection!\n")
    with pytest.raises(SpecError, match="^" + re.escape(f"{path}: not valid TOML")):
        load_spec(path)


def test_load_spec_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00\x80 binary")
    with pytest.raises(SpecError, match=re.escape(str(path))):
        load_spec(path)


def test_spec_from_untuned_log_groups_shapes_and_skips_other_gpus() -> None:
    from autotune.sweeps import spec_from_untuned

    records = [
        {"op": "gemm", "m": 3, "n": 64, "k": 32, "dtype": "bf16", "layout": "nk", "device_key": "me"},
        {"op": "gemm", "m": 5, "n": 64, "k": 32, "dtype": "bf16", "layout": "nk", "device_key": "me"},
        {"op": "gemm", "m": 7, "n": 64, "k": 32, "dtype": "bf16", "layout": "nk", "device_key": "other"},
        {"op": "gemm", "m": 9, "n": 64, "k": 32, "dtype": "bf16", "layout": "nk", "device_key": None},
        {"op": "gemm", "m": 2, "n": 16, "k": 48, "dtype": "fp16", "layout": "kn", "device_key": "me"},
        {"op": "moe", "m": 2, "n": 16, "k": 48, "e": 8, "device_key": "me"},
        {"op": "gemm", "m": "x", "n": 16, "k": 48, "device_key": "me"},
    ]
    spec = spec_from_untuned(records, device_key="me", strategy="random", trials=5)
    problems = sorted((p.M, p.N, p.K, p.dtype, p.layout) for _, p in spec.problems())
    assert problems == [(2, 16, 48, "fp16", "kn"), (3, 64, 32, "bf16", "nk"), (5, 64, 32, "bf16", "nk")]
    assert all(e.strategy == "random" and e.budget.trials == 5 for e in spec.entries)
    with pytest.raises(SpecError, match="no untuned shapes"):
        spec_from_untuned(records, device_key="nobody-else")


def test_final_rounds_default_to_three_on_a_gpu_and_none_in_the_interpreter() -> None:
    from autotune import Target

    gpu, interpreter = Target.for_arch("sm_90"), Target.interpreter_target()
    extras = ("", "final_rounds = 0\n", "final_rounds = 2\n")
    default, off, two = (parse_spec(spec(ENTRY + extra)).entries[0] for extra in extras)
    assert default.final_rounds is None
    assert (default.final_rounds_on(gpu), default.final_rounds_on(interpreter)) == (3, 0)
    assert (off.final_rounds_on(gpu), two.final_rounds_on(interpreter)) == (0, 2)


def test_a_shipped_spec_loads_by_name_where_no_such_file_exists(tmp_path: Path, monkeypatch) -> None:
    from autotune.sweeps.spec import EMBEDDED, embedded_specs

    monkeypatch.chdir(tmp_path)
    assert {"smoke", "llama3-8b"} <= set(embedded_specs())
    smoke = load_spec("smoke")
    assert smoke.path == str(EMBEDDED / "smoke.toml") and smoke.problems()
    assert load_spec("smoke.toml").problems() == smoke.problems()
    (tmp_path / "smoke").write_text('name = "mine"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[64, 64]]\n')
    assert load_spec("smoke").name == "mine"  # a file of that name here wins
    with pytest.raises(SpecError, match=r"the specs that ship by name: .*smoke"):
        load_spec("no-such-spec")
