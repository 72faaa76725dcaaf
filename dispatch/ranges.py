"""M ranges: which config serves each M of a shape family, built from a profile measured at a ladder of M.

A profile holds, for each profiled M, the measured time of every candidate config there (the vendor
library, the heuristic default, the tuned buckets' finalists). `ranges_from_profile` turns it into
contiguous, non-overlapping M ranges that cover every M from 1 up, with these rules:

- **At a profiled M** the fastest candidate is served if it beats the vendor library by more than the
  margin there (time × (1 + margin) < vendor time); else the vendor library. Where the previous M's
  pick is among those that beat the vendor and within the margin of the fastest, it is kept (fewer
  ranges, no switching on noise).
- **Between two profiled M** (the M nobody measured) the pick of one end is served only if it beats the
  vendor by the margin at both ends (of two such, the one whose worse end is better); else the vendor
  library. A config that won at one isolated M is thus served at that M alone.
- **The vendor's time at a profiled M** is capped at the larger of its times at the two neighbouring
  profiled M (time grows with M: a vendor time above both is noise, or a slow kernel the vendor need not
  pick again). Where the vendor was timed and failed, that cap stands for its time, else no other config
  may serve there. Both only ever favour the vendor.
- **Above the largest profiled M** the vendor library, as a range of its own (its `lo` - 1 is the largest
  profiled M).
- Where the op has no vendor library (no vendor config measured at an M), the fastest candidate there
  competes with no margin, and the ends of a gap are compared with the fastest time at each end.

Pure logic, standard library only: the dispatch side reads the resulting ranges from table files.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.config import Config

__all__ = ["Profile", "Range", "check_ranges", "ranges_from_profile"]

#: M → {config: measured time in µs}; a config missing at an M was not measured there or failed.
Profile = Mapping[int, Mapping[Config, float]]


@dataclass(frozen=True)
class Range:
    """The config that serves every M in [lo, hi] (hi None: no upper end).

    `speedup` is the geometric mean, over the profiled M inside the range, of the vendor library's time
    over the served config's (1.0 for the vendor itself; None where nothing inside was profiled against
    the vendor). `points` counts the profiled M inside. Immutable; ValueError on bad bounds.
    """

    lo: int
    hi: int | None
    config: Config
    speedup: float | None = None
    points: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.lo, bool) or not isinstance(self.lo, int) or self.lo < 1:
            raise ValueError(f"a range's lo must be a positive integer, got {self.lo!r}")
        if self.hi is not None and (
            isinstance(self.hi, bool) or not isinstance(self.hi, int) or self.hi < self.lo
        ):
            raise ValueError(f"a range's hi must be an integer >= lo ({self.lo}) or null, got {self.hi!r}")
        if not isinstance(self.config, Config):
            if not isinstance(self.config, Mapping):
                raise ValueError(f"config must be a Config or a mapping, got {self.config!r}")
            object.__setattr__(self, "config", Config(self.config))
        if self.speedup is not None:
            if isinstance(self.speedup, bool) or not isinstance(self.speedup, (int, float)):
                raise ValueError(f"speedup must be a number or null, got {self.speedup!r}")
            if not math.isfinite(self.speedup) or self.speedup <= 0:
                raise ValueError(f"speedup must be finite and positive, got {self.speedup!r}")
            object.__setattr__(self, "speedup", float(self.speedup))
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 0:
            raise ValueError(f"points must be a non-negative integer, got {self.points!r}")

    def __contains__(self, M: object) -> bool:
        return isinstance(M, int) and self.lo <= M and (self.hi is None or self.hi >= M)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "config": self.config.to_dict(),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "points": self.points,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Range:
        """Inverse of `to_dict`. Raises ValueError (or TypeError) on a malformed mapping."""
        if not isinstance(raw.get("config"), dict):
            raise ValueError("a range needs a 'config' object")
        return cls(raw["lo"], raw.get("hi"), Config(raw["config"]), raw.get("speedup"), raw.get("points", 0))


def check_ranges(ranges: tuple[Range, ...]) -> None:
    """ValueError unless `ranges` are contiguous from M = 1 and the last has no upper end."""
    if not ranges:
        raise ValueError("no ranges")
    if ranges[0].lo != 1:
        raise ValueError(f"the first range must start at M = 1, got {ranges[0].lo}")
    for a, b in itertools.pairwise(ranges):
        if a.hi is None or b.lo != a.hi + 1:
            raise ValueError(f"ranges must be contiguous: [{a.lo}, {a.hi}] is followed by [{b.lo}, {b.hi}]")
    if ranges[-1].hi is not None:
        raise ValueError(f"the last range must have no upper end (hi null), got {ranges[-1].hi}")


def ranges_from_profile(
    profile: Profile, *, is_vendor: Callable[[Config], bool], margin: float = 0.01
) -> tuple[Range, ...]:
    """The served ranges of one shape family from its profile (rules in the module docstring).

    `is_vendor` tells the vendor library's configs. Profiled M values where nothing was measured are
    ignored.

    Raises:
        ValueError: a negative margin, or a profile where nothing was measured at all.
    """
    if margin < 0:
        raise ValueError(f"the vendor margin must be >= 0, got {margin}")
    times = {
        m: {c: float(t) for c, t in row.items() if math.isfinite(t) and t > 0} for m, row in profile.items()
    }
    failed = {  # M where a vendor config was timed and failed (a crashed worker, say): the vendor, untimed
        m: min((c for c in row if is_vendor(c)), key=Config.canonical)
        for m, row in profile.items()
        if any(is_vendor(c) and not (math.isfinite(t) and t > 0) for c, t in row.items())
    }
    points = sorted(m for m, row in times.items() if row or m in failed)
    if not points:
        raise ValueError("the profile holds no measured time")
    measured: dict[int, tuple[Config, float]] = {}
    for m in points:
        found = [(t, c) for c, t in times[m].items() if is_vendor(c)]
        if found:
            t, c = min(found, key=lambda x: (x[0], x[1].canonical()))
            measured[m] = (c, t)
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

    def vendor_at(m: int) -> tuple[Config, float] | None:
        return vendors[m]

    def reference(m: int) -> float:
        v = vendor_at(m)
        return v[1] if v is not None else min(times[m].values())

    picks: dict[int, Config] = {}
    previous: Config | None = None
    for m in points:
        row, vendor = times[m], vendor_at(m)
        if vendor is None:
            beats = dict(row)
        else:
            beats = {c: t for c, t in row.items() if not is_vendor(c) and t * (1 + margin) < vendor[1]}
        if not beats:
            assert vendor is not None
            pick = vendor[0]
        else:
            fastest = min(beats, key=lambda c: (beats[c], c.canonical()))
            keep = (
                previous is not None
                and previous in beats
                and beats[previous] <= beats[fastest] * (1 + margin)
            )
            pick = previous if keep and previous is not None else fastest
        picks[m] = pick
        previous = pick
    vendor_config = next((v[0] for m in reversed(points) if (v := vendor_at(m)) is not None), None)

    def worst(c: Config, a: int, b: int) -> float:
        """The larger of `c`'s time over the reference at the two ends (inf where it is not measured)."""
        ends = [times[x].get(c) for x in (a, b)]
        if any(t is None for t in ends):
            return math.inf
        return max(t / reference(x) for t, x in zip(ends, (a, b), strict=True) if t is not None)

    def gap_pick(a: int, b: int) -> Config:
        if picks[a] == picks[b]:
            return picks[a]
        options = [c for c in (picks[a], picks[b]) if not is_vendor(c)]
        scored = sorted((worst(c, a, b), i, c) for i, c in enumerate(options))
        if vendor_config is not None:
            if scored and scored[0][0] * (1 + margin) < 1.0:  # beats the vendor by the margin at both ends
                return scored[0][2]
            return vendor_config
        if scored and math.isfinite(scored[0][0]):
            return scored[0][2]
        return picks[
            b
        ]  # no vendor, neither measured at both ends: the upper end's (valid at fewer M more often)

    segments: list[tuple[int, int | None, Config]] = []
    if points[0] > 1:
        segments.append((1, points[0] - 1, vendor_config or picks[points[0]]))
    for a, b in itertools.pairwise(points):
        segments.append((a, a, picks[a]))
        if b > a + 1:
            segments.append((a + 1, b - 1, gap_pick(a, b)))
    last = points[-1]
    segments.append((last, last, picks[last]))
    segments.append((last + 1, None, vendor_config or picks[last]))

    merged: list[tuple[int, int | None, Config]] = []
    for lo, hi, config in segments:
        if merged and merged[-1][2] == config and hi is not None:  # the range above the profile stays apart
            merged[-1] = (merged[-1][0], hi, config)
        else:
            merged.append((lo, hi, config))
    out = []
    for lo, hi, config in merged:
        inside = [m for m in points if m >= lo and (hi is None or m <= hi)]
        ratios = [
            reference(m) / times[m][config] for m in inside if vendor_at(m) is not None and config in times[m]
        ]
        speedup = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        out.append(Range(lo, hi, config, speedup, len(inside)))
    ranges = tuple(out)
    check_ranges(ranges)
    return ranges
