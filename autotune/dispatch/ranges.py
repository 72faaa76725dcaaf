"""M ranges: which config serves each M of a shape family, built from a profile measured at a ladder of M.

A profile holds, for each profiled M, the measured time of the candidate configs timed there (the vendor
library always; the heuristic default and the tuned buckets' finalists unless the profile left one out
there as far behind the fastest): a config not measured at an M is not served there, and a ladder M the
profile left out is not a profiled M. `ranges_from_profile` turns it into contiguous, non-overlapping M
ranges that cover every M from 1 up, with these rules:

- **At a profiled M** the fastest candidate is served if it beats the vendor library by more than the
  margin and the slack there (time × (1 + margin) + slack < vendor time); else the vendor library. The
  slack (µs) covers the vendor library's own spread between processes, which on short calls is larger
  than any fraction of its time. Where the previous M's
  pick is among those that beat the vendor and within the margin of the fastest, it is kept (fewer
  ranges, no switching on noise).
- **Between two profiled M** (the M nobody measured) the pick of one end is served only if it beats the
  vendor by the margin and the slack at both ends (of two such, the one whose worse end is better); else
  the vendor library. A config that won at one isolated M is thus served at that M alone.
- **The vendor's time at a profiled M** is capped at the larger of its times at the two neighbouring
  profiled M (time grows with M: a vendor time above both is noise, or a slow kernel the vendor need not
  pick again). Where the vendor was timed and failed, that cap stands for its time, else no other config
  may serve there. Both only ever favour the vendor.
- **Above the largest profiled M** the vendor library, as a range of its own (its `lo` - 1 is the largest
  profiled M).
- Where the op has no vendor library (no vendor config measured at an M), a `baseline` config of that M
  (the config the file a table replaces serves there, such as vLLM's) plays the vendor's part at that M
  where it was measured: another config serves only where it beats it by the margin and the slack. In a
  gap neither end's pick clears at both ends (and below the first profiled M where the baseline serves
  there), the file's own config of each M serves (`imported`: the file's configs by M key, picked as
  `imported_pick` does, so the table serves what the file serves); without `imported`, the baseline of
  the lower end, where it was measured at both ends.
- Where there is neither, the fastest candidate competes with no margin, and the ends of a gap are
  compared with the fastest time at each end.

Pure logic, standard library only: the dispatch side reads the resulting ranges from table files.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autotune.core.config import Config
from autotune.dispatch.table import Range, check_ranges

__all__ = ["Profile", "imported_pick", "ranges_from_profile"]

#: M → {config: measured time in µs}; a config missing at an M was not measured there or failed.
Profile = Mapping[int, Mapping[Config, float]]


def ranges_from_profile(
    profile: Profile,
    *,
    is_vendor: Callable[[Config], bool],
    margin: float = 0.01,
    slack_us: float = 0.0,
    baseline: Mapping[int, Config] | None = None,
    imported: Mapping[int, Config] | None = None,
) -> tuple[Range, ...]:
    """The served ranges of one shape family from its profile (rules in the module docstring).

    `is_vendor` tells the vendor library's configs; `baseline` (M → config) the config that stands in for
    the vendor at an M where no vendor config was measured (by default the picks of `imported`);
    `imported` (M key → config) the file whose picks those are, to serve between profiled M (and below the
    first). Profiled M values where nothing was measured are ignored.

    Raises:
        ValueError: a negative margin or slack, or a profile where nothing was measured at all.
    """
    if margin < 0 or slack_us < 0:
        raise ValueError(f"the vendor margin and slack must be >= 0, got {margin} and {slack_us} µs")
    times, failed = _finite_times(profile, is_vendor)
    if baseline is None and imported:
        baseline = {m: imported_pick(imported, m) for m in profile}
    points = sorted(m for m, row in times.items() if row or m in failed)
    if not points:
        raise ValueError("the profile holds no measured time")
    uncapped, stand_in = _vendor_times(points, times, is_vendor, baseline)
    vendors = _capped_vendors(points, times, uncapped, failed)
    measured = _Measured(times, vendors, stand_in, is_vendor, margin, slack_us)
    picks = _point_picks(points, measured)
    vendor_config = next(
        (v[0] for m in reversed(points) if (v := measured.vendors[m]) is not None and m not in stand_in), None
    )
    segments = _segments(points, picks, measured, vendor_config, imported)
    ranges = _served_ranges(segments, points, measured)
    check_ranges(ranges)
    return ranges


#: A served M range before ranges are merged: lo, hi (None: no upper end), config.
_Segment = tuple[int, int | None, Config]


def _finite_times(
    profile: Profile, is_vendor: Callable[[Config], bool]
) -> tuple[dict[int, dict[Config, float]], dict[int, Config]]:
    """Per M the finite, positive times of `profile`; and the M where a vendor config was timed and failed
    (a crashed worker, say), with that vendor config (the least canonical of those that failed)."""
    times = {
        m: {c: float(t) for c, t in row.items() if math.isfinite(t) and t > 0} for m, row in profile.items()
    }
    failed = {
        m: min((c for c in row if is_vendor(c)), key=Config.canonical)
        for m, row in profile.items()
        if any(is_vendor(c) and not (math.isfinite(t) and t > 0) for c, t in row.items())
    }
    return times, failed


def _vendor_times(
    points: list[int],
    times: Mapping[int, Mapping[Config, float]],
    is_vendor: Callable[[Config], bool],
    baseline: Mapping[int, Config] | None,
) -> tuple[dict[int, tuple[Config, float]], dict[int, Config]]:
    """Per profiled M, the vendor's fastest (config, time), else the baseline's where it was measured; and
    the M where the baseline plays the vendor's part, with its config."""
    measured: dict[int, tuple[Config, float]] = {}
    stand_in: dict[int, Config] = {}
    for m in points:
        found = [(t, c) for c, t in times[m].items() if is_vendor(c)]
        if found:
            t, c = min(found, key=lambda x: (x[0], x[1].canonical()))
            measured[m] = (c, t)
        elif baseline is not None and baseline.get(m) in times[m]:
            stand_in[m] = baseline[m]
            measured[m] = (baseline[m], times[m][baseline[m]])
    return measured, stand_in


def _capped_vendors(
    points: list[int],
    times: Mapping[int, Mapping[Config, float]],
    measured: Mapping[int, tuple[Config, float]],
    failed: Mapping[int, Config],
) -> dict[int, tuple[Config, float] | None]:
    """Per profiled M, the vendor's (config, time) with its time capped at the larger of its times at the
    two neighbouring M; where it failed, that cap (else the fastest time there); None where it has none."""
    vendors: dict[int, tuple[Config, float] | None] = {}
    for i, m in enumerate(points):
        # A vendor time above its times at both neighbouring M is taken as noise (time grows with M) and
        # capped at the larger of them: that only makes the vendor look faster, never another config.
        below = measured.get(points[i - 1]) if i > 0 else None
        above = measured.get(points[i + 1]) if i + 1 < len(points) else None
        cap = max(below[1], above[1]) if below is not None and above is not None else None
        own = measured.get(m)
        if own is not None:
            vendors[m] = (own[0], own[1] if cap is None else min(own[1], cap))
        elif m in failed:  # no time of its own: its neighbours', else no other config may beat it there
            floor = min(times[m].values(), default=1.0)
            vendors[m] = (failed[m], cap if cap is not None else floor)
        else:
            vendors[m] = None
    return vendors


@dataclass(frozen=True)
class _Measured:
    """What the rules read of a profile: per profiled M the finite times, the vendor's (config, capped
    time) or None, and the M where a baseline plays the vendor's part; the margin and the slack."""

    times: Mapping[int, Mapping[Config, float]]
    vendors: Mapping[int, tuple[Config, float] | None]
    stand_in: Mapping[int, Config]
    is_vendor: Callable[[Config], bool]
    margin: float
    slack_us: float

    def clears(self, t: float, vendor_us: float) -> bool:
        """Whether a time `t` beats the vendor library's `vendor_us` by the margin and the slack."""
        return t * (1 + self.margin) + self.slack_us < vendor_us

    def reference(self, m: int) -> float:
        """The time to beat at `m`: the vendor's, else the fastest there."""
        v = self.vendors[m]
        return v[1] if v is not None else min(self.times[m].values())

    def worst(self, c: Config, a: int, b: int) -> float:
        """The larger of `c`'s time over the reference at the two ends (inf where it is not measured)."""
        ends = [self.times[x].get(c) for x in (a, b)]
        if any(t is None for t in ends):
            return math.inf
        return max(t / self.reference(x) for t, x in zip(ends, (a, b), strict=True) if t is not None)

    def clears_both(self, c: Config, a: int, b: int) -> bool:
        """Whether `c` beats the reference by the margin and the slack at both ends of a gap."""
        return all(c in self.times[x] and self.clears(self.times[x][c], self.reference(x)) for x in (a, b))


def _point_picks(points: list[int], measured: _Measured) -> dict[int, Config]:
    """Per profiled M, the fastest config that beats the vendor by the margin and the slack (with no vendor
    there, the fastest), or the previous M's pick where it beats it too within the margin of the fastest;
    else the vendor's."""
    picks: dict[int, Config] = {}
    previous: Config | None = None
    for m in points:
        row, vendor = measured.times[m], measured.vendors[m]
        if vendor is None:
            beats = dict(row)
        else:
            beats = {
                c: t
                for c, t in row.items()
                if not measured.is_vendor(c) and c != vendor[0] and measured.clears(t, vendor[1])
            }
        if not beats:
            assert vendor is not None
            pick = vendor[0]
        else:
            fastest = min(beats, key=lambda c: (beats[c], c.canonical()))
            keep = (
                previous is not None
                and previous in beats
                and beats[previous] <= beats[fastest] * (1 + measured.margin)
            )
            pick = previous if keep and previous is not None else fastest
        picks[m] = pick
        previous = pick
    return picks


def _gap_pick(
    a: int, b: int, picks: Mapping[int, Config], measured: _Measured, vendor_config: Config | None
) -> Config:
    """The config served between profiled M `a` and `b`: of the ends' picks, the first (by its worse end)
    that beats the reference at both ends; else the vendor's, the baseline, or the pick of either end."""
    if picks[a] == picks[b]:
        return picks[a]
    options = [c for c in (picks[a], picks[b]) if not measured.is_vendor(c)]
    scored = sorted((measured.worst(c, a, b), i, c) for i, c in enumerate(options))
    clearing = next((c for _, _, c in scored if measured.clears_both(c, a, b)), None)
    if vendor_config is not None:  # the first that beats the vendor by the margin and slack at both ends
        return clearing or vendor_config
    stand_in = measured.stand_in
    if a in stand_in or b in stand_in:  # a baseline: the first that beats it at both ends, else its own
        if clearing is not None:
            return clearing
        if a in stand_in and stand_in[a] in measured.times[b]:
            return stand_in[a]
    if scored and math.isfinite(scored[0][0]):
        return scored[0][2]
    # no vendor, neither measured at both ends: the upper end's (valid at fewer M more often)
    return picks[b]


def _segments(
    points: list[int],
    picks: Mapping[int, Config],
    measured: _Measured,
    vendor_config: Config | None,
    imported: Mapping[int, Config] | None,
) -> list[_Segment]:
    """The M ranges from 1 up, in order and unmerged: below the first profiled M, each profiled M and the
    gap above it (the imported file's picks where a baseline stands in and no pick clears the gap), and
    above the last profiled M."""
    stand_in = measured.stand_in
    segments: list[_Segment] = []
    if points[0] > 1:
        first = points[0]
        if imported is not None and first in stand_in and picks[first] == stand_in[first]:  # the file's
            segments += _file_segments(imported, 1, first - 1)
        else:
            segments.append((1, points[0] - 1, vendor_config or picks[points[0]]))
    for a, b in itertools.pairwise(points):
        segments.append((a, a, picks[a]))
        if b > a + 1:
            pick = _gap_pick(a, b, picks, measured, vendor_config)
            if (
                imported is not None
                and (a in stand_in or b in stand_in)
                and not measured.clears_both(pick, a, b)
            ):
                segments += _file_segments(imported, a + 1, b - 1)
            else:
                segments.append((a + 1, b - 1, pick))
    last = points[-1]
    segments.append((last, last, picks[last]))
    segments.append((last + 1, None, vendor_config or picks[last]))
    return segments


def _served_ranges(segments: list[_Segment], points: list[int], measured: _Measured) -> tuple[Range, ...]:
    """`segments` with neighbours of one config merged (never into the range above the profile), each
    with its geometric-mean speedup over the vendor at the profiled M inside it and their count."""
    merged: list[_Segment] = []
    for lo, hi, config in segments:
        if merged and merged[-1][2] == config and hi is not None:  # the range above the profile stays apart
            merged[-1] = (merged[-1][0], hi, config)
        else:
            merged.append((lo, hi, config))
    out = []
    for lo, hi, config in merged:
        inside = [m for m in points if m >= lo and (hi is None or m <= hi)]
        ratios = [
            measured.reference(m) / measured.times[m][config]
            for m in inside
            if measured.vendors[m] is not None and config in measured.times[m]
        ]
        speedup = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        out.append(Range(lo, hi, config, speedup, len(inside)))
    return tuple(out)


def _file_segments(imported: Mapping[int, Config], lo: int, hi: int) -> list[_Segment]:
    """M ranges covering [lo, hi] with the config `imported_pick` gives at each M: each key's from the M
    after the previous key's last (the midpoint, ties to the smaller key) up to its own last."""
    keys = sorted(imported)
    lasts = [(k + above) // 2 for k, above in itertools.pairwise(keys)] + [hi]
    out: list[_Segment] = []
    start = lo
    for key, last in zip(keys, lasts, strict=True):
        end = min(last, hi)
        if end >= start:
            out.append((start, end, imported[key]))
            start = end + 1
    return out


def imported_pick(imported: Mapping[int, Config], M: int) -> Config:
    """The config an imported file serves at `M`, as vLLM and SGLang pick it: that of the nearest M key
    (the smaller on a tie). What a table replacing the file must not be slower than."""
    return imported[min(imported, key=lambda key: (abs(key - M), key))]
