"""Two sets of winners side by side, per problem: what `autotune diff` shows.

Side A is the reference and side B the candidate (the database after an upgrade, the other GPU). A row's
`ratio` is B's best time over A's: above 1 B is slower on that problem (a regression), below 1 faster.
Rows held by both sides come first, worst regression first; then the problems only A holds, then those
only B holds, each in problem order. A problem is the same on both sides when its key is (op, shape,
dtypes, layout and the op's own parameters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.problem import Problem

from .records import Winner

__all__ = ["DiffRow", "DiffSummary", "diff_winners", "summarize"]


@dataclass(frozen=True)
class DiffRow:
    """One problem: the winner of each side (None where that side does not hold the problem)."""

    problem: Problem
    a: Winner | None
    b: Winner | None

    @property
    def ratio(self) -> float | None:
        """B's best time / A's best time; None unless both sides hold the problem."""
        if self.a is None or self.b is None or self.a.time_us <= 0:
            return None
        return self.b.time_us / self.a.time_us

    @property
    def same_config(self) -> bool:
        """Whether both sides won with the same config."""
        return self.a is not None and self.b is not None and self.a.config == self.b.config

    @property
    def side(self) -> str:
        """ "both", "a" (only A holds the problem) or "b"."""
        return "both" if self.a is not None and self.b is not None else "a" if self.a is not None else "b"

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values: the problem's fields, then each side's time, speed-up over its
        vendor library, backend and config (None where the side lacks the problem)."""
        out: dict[str, Any] = {
            "problem": self.problem.key(),
            "op": self.problem.op,
            "M": self.problem.M,
            "N": self.problem.N,
            "K": self.problem.K,
            "side": self.side,
        }
        for name, w in (("a", self.a), ("b", self.b)):
            out[name] = (
                None
                if w is None
                else {
                    "time_us": w.time_us,
                    "speedup_vs_vendor": w.speedup_vs_vendor,
                    "backend": w.config.backend,
                    "config": w.config.to_dict(),
                }
            )
        out["ratio"] = self.ratio
        out["same_config"] = self.same_config
        return out


def diff_winners(a: Sequence[Winner], b: Sequence[Winner]) -> list[DiffRow]:
    """The rows of winners `a` against winners `b` (each holding at most one winner a problem), ordered
    as the module says: both sides' rows by ratio, highest first, then A's alone, then B's alone."""
    by_a = _by_problem(a, "A")
    by_b = _by_problem(b, "B")
    both = [DiffRow(p, w, by_b[p]) for p, w in by_a.items() if p in by_b]
    both.sort(key=lambda r: (-(r.ratio or 0.0), r.problem.key()))
    only_a = sorted((DiffRow(p, w, None) for p, w in by_a.items() if p not in by_b), key=_problem_order)
    only_b = sorted((DiffRow(p, None, w) for p, w in by_b.items() if p not in by_a), key=_problem_order)
    return both + only_a + only_b


@dataclass(frozen=True)
class DiffSummary:
    """Counts over the rows: problems on both sides, B slower or faster than `tolerance` allows (a ratio
    above 1 + tolerance, or under 1 / (1 + tolerance)), the geometric mean of the ratios, problems won with
    the same config, and problems only one side holds."""

    both: int
    slower: int
    faster: int
    same_config: int
    only_a: int
    only_b: int
    geomean: float | None
    tolerance: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summarize(rows: Sequence[DiffRow], tolerance: float = 0.03) -> DiffSummary:
    """The summary of `rows`; `tolerance` (>= 0) is the change taken for noise."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    ratios = [r.ratio for r in rows if r.ratio is not None and r.ratio > 0]
    return DiffSummary(
        both=sum(1 for r in rows if r.side == "both"),
        slower=sum(1 for x in ratios if x > 1.0 + tolerance),
        faster=sum(1 for x in ratios if x < 1.0 / (1.0 + tolerance)),
        same_config=sum(1 for r in rows if r.same_config),
        only_a=sum(1 for r in rows if r.side == "a"),
        only_b=sum(1 for r in rows if r.side == "b"),
        geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
        tolerance=tolerance,
    )


def _by_problem(winners: Sequence[Winner], side: str) -> dict[Problem, Winner]:
    out: dict[Problem, Winner] = {}
    for w in winners:
        if w.problem in out:
            raise ValueError(f"side {side} holds two winners of {w.problem}: give it one GPU")
        out[w.problem] = w
    return out


def _problem_order(row: DiffRow) -> tuple[str, int, int, int, str]:
    p = row.problem
    return (p.op, p.N, p.K, p.M, p.key())
