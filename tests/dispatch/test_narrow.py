"""`autotune.dispatch.narrow`: an entry's buckets as the ranges that serve the same M, and a table served
otherwise over [lo, hi] of one family and as before everywhere else."""

from __future__ import annotations

import random

import pytest

from autotune import Config, Problem
from autotune.core.target import Target
from autotune.dispatch import Table
from autotune.dispatch.narrow import entry_ranges, override, served_config
from autotune.dispatch.table import M_POLICIES, check_ranges

VENDOR = Config(backend="torch")


def _config(i: int) -> Config:
    return Config(backend="triton", BLOCK_M=16 * (i + 1), BLOCK_N=32, BLOCK_K=32)


def _table(ms: list[int], policy: str, shapes: tuple[tuple[int, int], ...] = ((64, 32),)) -> Table:
    winners = [
        (Problem.of("gemm", m, n, k), _config(i), 1.0 + i) for n, k in shapes for i, m in enumerate(ms)
    ]
    return Table.from_winners(Target.interpreter_target(), winners, m_policy=policy)


@pytest.mark.parametrize("policy", M_POLICIES)
def test_entry_ranges_serve_what_the_buckets_serve(policy: str) -> None:
    rng = random.Random(policy)
    for _ in range(20):
        ms = sorted(rng.sample(range(1, 300), rng.randint(1, 6)))
        table = _table(ms, policy)
        (entry,) = table.entries
        ranges = entry_ranges(entry, policy)
        check_ranges(ranges)
        for M in range(1, 400):
            (served,) = [r.config for r in ranges if M in r]
            assert served == table.lookup("gemm", M, 64, 32), (ms, M)


@pytest.mark.parametrize("policy", ["round_up", "nearest_log"])
@pytest.mark.parametrize("lo, hi", [(1, 1), (1, 40), (5, 9), (17, 17), (30, None), (200, None), (3, 250)])
def test_override_serves_its_config_inside_and_the_table_outside(
    policy: str, lo: int, hi: int | None
) -> None:
    table = _table([1, 8, 32, 128], policy, shapes=((64, 32), (48, 32)))
    families = table.keys()
    key = next(k for k in families if k[3] == 64)
    other = next(k for k in families if k != key)
    new = override(table, key, lo, hi, VENDOR)
    assert new is not table and new.target == table.target and new.m_policy == table.m_policy
    for M in range(1, 300):
        inside = lo <= M and (hi is None or hi >= M)
        assert served_config(new, key, M) == (VENDOR if inside else served_config(table, key, M)), M
        assert served_config(new, other, M) == served_config(table, other, M)
    (entry,) = [e for e in new.entries if e.key == key]
    assert entry.ranges and not entry.buckets  # written as ranges: a version 2 file
    assert Table.from_json(new.to_json()).lookup("gemm", lo, 64, 32) == VENDOR


def test_override_merges_neighbours_of_one_config() -> None:
    table = _table([1, 8], "round_up")
    (key,) = table.keys()
    once = override(table, key, 2, 8, _config(0))  # [1, 1] and [2, 8] serve bucket 1's config: one range
    assert [(r.lo, r.hi) for r in once.entries[0].ranges] == [(1, 8), (9, None)]


def test_override_refuses_bad_bounds_and_unknown_families() -> None:
    table = _table([1, 8], "round_up")
    (key,) = table.keys()
    for lo, hi in ((0, 4), (5, 4)):
        with pytest.raises(ValueError, match="1 <= lo <= hi"):
            override(table, key, lo, hi, VENDOR)
    with pytest.raises(ValueError, match="no family"):
        override(table, ("gemm", "bf16", "nk", 1, 1, ""), 1, 2, VENDOR)
