"""The lookup is written once (`autotune.dispatch.table.find`): a Table, a Dispatcher and the module's
`lookup` answer alike, for every M policy, M ranges, a dtype alias and an M below the first row."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.dispatch import M_POLICIES, Dispatcher, Table, install_dispatcher, lookup
from autotune.dispatch.table import Range, pick

MS = (1, 16, 64, 256, 1024)


def cfg(i: int) -> Config:
    return Config(backend="triton", BLOCK_M=16 * (i + 1))


def tables(target: Target, policy: str) -> Table:
    winners = [
        (Problem.of("gemm", m, 4096, 4096, "bf16", layout="nk"), cfg(i), 1.0) for i, m in enumerate(MS)
    ]
    buckets = Table.from_winners(target, winners, m_policy=policy)
    ranges = (Range(1, 15, cfg(0)), Range(16, 255, cfg(1)), Range(256, None, cfg(2)))
    ranged = dataclasses.replace(buckets.entries[0], n=8192, buckets=(), ranges=ranges)
    return Table(target=target, entries=[*buckets.entries, ranged], m_policy=policy)


@pytest.mark.parametrize("policy", M_POLICIES)
def test_table_dispatcher_and_lookup_agree(policy: str) -> None:
    target = Target.for_arch("gfx942")
    table = tables(target, policy)
    previous = install_dispatcher(Dispatcher([table], device_key=target))
    try:
        for M in (0, 1, 2, 15, 16, 17, 63, 64, 100, 1024, 5000):
            expected = cfg(pick(MS, max(M, 1), policy))
            ranged = cfg(0 if M < 16 else 1 if M < 256 else 2)
            for dtype in ("bf16", "bfloat16"):
                for n, want in ((4096, expected), (8192, ranged)):
                    got = {
                        table.lookup("gemm", M, n, 4096, dtype=dtype),
                        Dispatcher([table], device_key=target).lookup("gemm", M, n, 4096, dtype=dtype),
                        lookup("gemm", M, n, 4096, dtype=dtype),
                    }
                    assert got == {want}, (M, n, dtype)
            row = table.lookup_row("gemm", M, 4096, 4096)
            assert row is not None and row.config == expected
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert table.lookup("gemm", 8, 2048, 4096) is None
    finally:
        install_dispatcher(previous)


def test_a_call_may_serve_buckets_by_another_policy_but_never_ranges() -> None:
    table = tables(Target.for_arch("gfx942"), "round_up")
    assert table.lookup("gemm", 20, 4096, 4096) == cfg(2)
    assert table.lookup("gemm", 20, 4096, 4096, m_policy="round_down") == cfg(1)
    assert table.lookup("gemm", 20, 8192, 4096, m_policy="round_up") == cfg(1)
    with pytest.raises(ValueError, match="unknown m_policy"):
        table.lookup("gemm", 20, 4096, 4096, m_policy="sideways")
