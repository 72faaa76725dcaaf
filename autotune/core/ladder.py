"""The M ladder: the token counts at which a shape family is profiled after tuning and verified.

A serving engine calls each layer at every M from 1 to its token budget. vLLM and SGLang capture CUDA
graphs at M = 1, 2, 4 and then every 8 up to 512, and prefill runs any M. The default ladder follows
that: 1, 2, 3, 4, 6, 8, every 8 up to 512, then a log-spaced ladder (powers of two and their 1.5x) with
the tuned M values and the geometric midpoints between neighbouring tuned M values, up to the largest
M asked for. From 1024 up each log-spaced point p also brings p - p/16 (960 beside 1024, 1920 beside
2048): the points p are multiples of 512, where an M tile (or, for a MoE under uniform routing, each
expert's share of the tokens) ends on a block boundary for every power-of-two tile up to 128 rows, and
p - p/16 ends elsewhere between boundaries, where a config with larger tiles pads no more than one with
smaller ones. Between two ladder points the table serves what was measured at both ends (see
`autotune.dispatch.ranges`), so a config serves a range only where it wins at both kinds of points.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence

__all__ = ["SERVING", "parse_ladder", "serving_ladder"]

#: The name of the default ladder in specs and on the command line.
SERVING = "serving"

_SMALL = (1, 2, 3, 4, 6, 8)
_STEP = 8
_STEP_TOP = 512
#: From this M up, each log-spaced point p brings p - p/16 too (the module docstring says why).
_OFF_PHASE_FROM = 1024


def serving_ladder(max_m: int, tuned: Iterable[int] = ()) -> tuple[int, ...]:
    """The default ladder up to `max_m` (inclusive), holding every value of `tuned` at most `max_m`.

    Raises:
        ValueError: `max_m` is not a positive integer.
    """
    if isinstance(max_m, bool) or not isinstance(max_m, int) or max_m < 1:
        raise ValueError(f"the ladder's largest M must be a positive integer, got {max_m!r}")
    tuned_ms = sorted({m for m in tuned if 1 <= m <= max_m})
    points = set(_SMALL) | set(range(_STEP, _STEP_TOP + 1, _STEP)) | set(tuned_ms)
    # Log-spaced above the every-8 part: 2^k and 1.5 * 2^k.
    p = _STEP_TOP
    while p <= max_m:
        for q in (p, p + p // 2):
            points.add(q)
            if q >= _OFF_PHASE_FROM:
                points.add(q - q // 16)
        p *= 2
    for lo, hi in itertools.pairwise(tuned_ms):
        if hi > 2 * lo and hi > _STEP_TOP:  # a wide gap between tuned M values: its geometric midpoint
            points.add(max(lo + 1, _STEP * round(math.sqrt(lo * hi) / _STEP)))
    points.add(max_m)
    return tuple(sorted(m for m in points if m <= max_m))


_RANGE = re.compile(r"^(\d+)-(\d+)(?::(\d+))?$")


def parse_ladder(
    text: str | Sequence[int] | bool | None, max_m: int, tuned: Iterable[int] = ()
) -> tuple[int, ...]:
    """A ladder from a spec's or the command line's value.

    `text` is "serving" or None (the default ladder up to `max_m`), "none", "off" or False (no profile:
    empty), or explicit M values: a sequence of ints, or a comma-separated string of ints and ranges
    ``LO-HI:STEP`` (``8-512:8``; step 1 without ``:STEP``). Explicit values are used as given (sorted,
    duplicates dropped), whatever `max_m` is.

    Raises:
        ValueError: a value that is not one of those, or an M that is not a positive integer.
    """
    if text is None or text is True or (isinstance(text, str) and text.strip().lower() == SERVING):
        return serving_ladder(max_m, tuned)
    if text is False or (isinstance(text, str) and text.strip().lower() in ("none", "off")):
        return ()
    values: list[int] = []
    if isinstance(text, str):
        for part in text.split(","):
            part = part.strip()
            if part.isdigit():
                values.append(int(part))
                continue
            match = _RANGE.match(part)
            if match is None:
                raise ValueError(
                    f"bad M ladder item {part!r}: use integers and ranges LO-HI:STEP (e.g. 1,2,4,8-512:8), "
                    f"{SERVING!r} or 'none'"
                )
            lo, hi, step = int(match[1]), int(match[2]), int(match[3] or 1)
            if lo > hi or step < 1:
                raise ValueError(f"bad M ladder range {part!r}: needs LO <= HI and STEP >= 1")
            values.extend(range(lo, hi + 1, step))
    else:
        values = list(text)
    for m in values:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"M ladder values must be positive integers, got {m!r}")
    return tuple(sorted(set(values)))
