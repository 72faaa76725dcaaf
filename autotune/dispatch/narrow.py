"""A table served differently over some M of one family: what `autotune.nn.confirm` writes when a model's
own step finds a tuned config slower there than the op's fallback.

`entry_ranges` gives the M ranges that serve exactly what an entry serves (its own ranges, or its buckets
under the table's M policy); `override` returns a new table in which one family serves a given config
over [lo, hi] and everything else as before. Tables stay immutable: each call builds a new one.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.core.config import Config
from autotune.dispatch.table import Entry, Key, Range, Table, find, pick

__all__ = ["entry_ranges", "override", "served_config"]


def entry_ranges(entry: Entry, m_policy: str) -> tuple[Range, ...]:
    """The M ranges that serve every M as `entry` does: its own ranges, or, for an entry of buckets, one
    range per bucket over the M that `m_policy` sends to it (a bucket's range holds its own m, so its
    `points` is 1; `speedup` is unknown)."""
    if entry.ranges:
        return entry.ranges
    ms = tuple(b.m for b in entry.buckets)
    starts = [1]
    for i in range(1, len(ms)):  # the first M that the policy sends to bucket i (it never goes back)
        lo, hi = ms[i - 1], ms[i]
        while lo < hi:
            mid = (lo + hi) // 2
            if pick(ms, mid, m_policy) >= i:
                hi = mid
            else:
                lo = mid + 1
        starts.append(lo)
    ends: list[int | None] = [s - 1 for s in starts[1:]]
    ends.append(None)
    return tuple(
        Range(lo, hi, b.config, None, 1) for lo, hi, b in zip(starts, ends, entry.buckets, strict=True)
    )


def served_config(table: Table, key: Key, M: int) -> Config | None:
    """The config `table` serves family `key` at `M` (the lookup's own rule); None where it holds none."""
    config: Config | None = find(table._index, key, M)
    return config


def override(table: Table, key: Key, lo: int, hi: int | None, config: Config) -> Table:
    """`table` with family `key` serving `config` at every M in [lo, hi] (hi None: no upper end), as M
    ranges; every other M and family as before. ValueError where the table holds no such family or the
    bounds are not 1 <= lo <= hi."""
    if lo < 1 or (hi is not None and hi < lo):
        raise ValueError(f"an override needs 1 <= lo <= hi, got [{lo}, {hi}]")
    entries = {entry.key: entry for entry in table.entries}
    if key not in entries:
        raise ValueError(f"the table holds no family {key}")
    entry = entries[key]
    ranges: list[Range] = []
    for r in entry_ranges(entry, table.m_policy):
        if r.lo < lo:  # the part below the override
            ranges.append(replace(r, hi=lo - 1 if r.hi is None else min(r.hi, lo - 1)))
        if hi is not None and (r.hi is None or r.hi > hi):  # the part above it
            ranges.append(replace(r, lo=max(r.lo, hi + 1)))
    ranges.append(Range(lo, hi, config))
    merged: list[Range] = []
    for r in sorted(ranges, key=lambda r: r.lo):  # neighbours serving one config become one range
        if merged and merged[-1].config == r.config and merged[-1].hi is not None:
            last = merged.pop()
            r = Range(last.lo, r.hi, r.config, None, last.points + r.points)
        merged.append(r)
    entries[key] = replace(entry, buckets=(), ranges=tuple(merged))
    return Table(
        target=table.target,
        entries=entries.values(),
        m_policy=table.m_policy,
        predicted=table.predicted,
        pins=table.pins,
    )
