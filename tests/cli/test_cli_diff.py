"""`autotune diff A B`: two databases, or two GPUs of one, side by side per problem."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from synthetic_db import FAMILIES, MS, Filled, fill

from autotune import Problem
from autotune.cli import main
from autotune.db import Store

SKIPPED_A = Problem.of("gemm", MS[0], *FAMILIES[0])
SKIPPED_B = Problem.of("gemm", MS[-1], *FAMILIES[1])


def two_databases(tmp_path: Path, seed: int) -> tuple[Path, Path, Filled, Filled]:
    """a.db without `SKIPPED_A`, b.db without `SKIPPED_B`, both of random gfx942 measurements."""
    rng = random.Random(seed)
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Store(str(a)) as store:
        filled_a = fill(store, rng, skip=(SKIPPED_A,))
    with Store(str(b)) as store:
        filled_b = fill(store, rng, skip=(SKIPPED_B,))
    return a, b, filled_a, filled_b


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["diff", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("seed", [1, 2])
def test_two_databases_side_by_side_worst_regression_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    a, b, fa, fb = two_databases(tmp_path, seed)
    code, out = run_json(capsys, str(a), str(b))
    assert code == 0
    rows = out["rows"]
    both = [r for r in rows if r["side"] == "both"]
    assert len(both) == len(FAMILIES) * len(MS) - 2
    for r in both:
        p = next(p for (_, p) in fa.best if p.key() == r["problem"])
        best_a, config_a = fa.best[("gfx942", p)]
        best_b, config_b = fb.best[("gfx942", p)]
        assert r["a"]["time_us"] == pytest.approx(best_a)
        assert r["b"]["time_us"] == pytest.approx(best_b)
        assert r["ratio"] == pytest.approx(best_b / best_a)
        assert r["a"]["config"] == config_a.to_dict() and r["b"]["config"] == config_b.to_dict()
        assert r["same_config"] == (config_a == config_b)
        assert r["a"]["speedup_vs_vendor"] == pytest.approx(fa.vendor[("gfx942", p)] / best_a)
    ratios = [r["ratio"] for r in both]
    assert ratios == sorted(ratios, reverse=True)  # worst regression first
    assert rows[len(both)]["side"] == "a" and rows[len(both)]["problem"] == SKIPPED_B.key()
    assert rows[len(both) + 1]["side"] == "b" and rows[len(both) + 1]["problem"] == SKIPPED_A.key()
    summary = out["summary"]
    assert (summary["both"], summary["only_a"], summary["only_b"]) == (len(both), 1, 1)
    assert summary["slower"] == sum(1 for x in ratios if x > 1.03)
    assert summary["faster"] == sum(1 for x in ratios if x < 1 / 1.03)


def test_the_table_names_both_sides_and_the_one_sided_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _, _ = two_databases(tmp_path, 3)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A  ") and "\nB  " in out and "AMD Instinct MI300X" in out
    assert "only A" in out and "only B" in out
    assert f"{len(FAMILIES) * len(MS) - 2} problems on both sides" in out
    assert main(["diff", str(a), str(b), "--limit", "2"]) == 0
    assert "more rows; raise --limit" in capsys.readouterr().out


def test_two_gpus_of_one_database_by_arch_or_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "both.db"
    with Store(str(db)) as store:
        filled = fill(store, random.Random(4), ("gfx942", "gfx950"))
    code, out = run_json(capsys, "--db", str(db), "gfx942", "gfx950")
    assert code == 0
    assert (out["a"]["arch"], out["b"]["arch"]) == ("gfx942", "gfx950")
    for r in out["rows"]:
        p = next(p for (_, p) in filled.best if p.key() == r["problem"])
        expected = filled.best[("gfx950", p)][0] / filled.best[("gfx942", p)][0]
        assert r["ratio"] == pytest.approx(expected)
    fp = filled.targets["gfx950"].fingerprint()[:8]
    code, by_fp = run_json(capsys, "--db", str(db), "gfx942", fp)
    assert code == 0 and by_fp["rows"] == out["rows"]
    # a database of two GPUs as a side needs --gpu-a
    assert main(["diff", str(db), str(db), "--gpu-b", "gfx950"]) == 2
    err = capsys.readouterr().err
    assert "holds winners of 2 GPUs" in err and "--gpu-a" in err
    code, picked = run_json(capsys, str(db), str(db), "--gpu-a", "gfx942", "--gpu-b", "gfx950")
    assert code == 0 and picked["rows"] == out["rows"]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _, _ = two_databases(tmp_path, 5)
    empty = tmp_path / "empty.db"
    Store(str(empty)).close()
    cases = [
        ([str(a), str(tmp_path / "missing.db")], "no database at"),
        (["--db", str(a), "gfx942", "gfx950"], "no GPU 'gfx950'"),
        (["--db", str(a), "gfx942", "gfx942"], "the same GPU of the same database"),
        (["--db", str(a), "gfx942", str(b), "--gpu-a", "gfx942"], "--gpu-a names a GPU of a database"),
        ([str(a), str(b), "--tolerance", "-1"], "--tolerance"),
        (["--db", str(a), "gfx942", "abc"], "too short"),
        ([str(a), str(empty)], "holds no GPU"),
    ]
    for argv, message in cases:
        assert main(["diff", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "missing.db").exists()


def test_nothing_on_either_side_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _, _ = two_databases(tmp_path, 6)
    assert main(["diff", str(a), str(b), "--predicted"]) == 1
    assert "neither side holds predictions" in capsys.readouterr().out
    assert main(["diff", str(a), str(b), "--op", "moe"]) == 1


def test_one_gpu_before_and_after_a_toolchain_upgrade_in_one_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "fleet.db"
    rng = random.Random(7)
    with Store(str(db)) as store:
        before = fill(store, rng, toolchain={"triton": "3.4.0"})
        after = fill(store, rng, toolchain={"triton": "3.5.0"})
    old, new = before.targets["gfx942"].fingerprint(), after.targets["gfx942"].fingerprint()
    assert old != new
    assert main(["diff", "--db", str(db), "gfx942", new[:8]]) == 2  # the arch names both
    err = capsys.readouterr().err
    assert "several gfx942 GPUs" in err and old[:8] in err and new[:8] in err
    code, out = run_json(capsys, "--db", str(db), old[:8], new[:8])
    assert code == 0 and (out["a"]["fingerprint"], out["b"]["fingerprint"]) == (old, new)
    for r in out["rows"]:
        p = next(p for (_, p) in before.best if p.key() == r["problem"])
        assert r["ratio"] == pytest.approx(after.best[("gfx942", p)][0] / before.best[("gfx942", p)][0])
