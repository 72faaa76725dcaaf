"""Layout choices: an op's own parameters that the caller picks (`ProblemRules.layout_params`, the MLA
decode's page size). Where a sweep tuned several values of one for a shape otherwise equal, the fastest
is the layout to use, and `fastest_layouts` says which."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autotune.core.problem import ParamValue, Problem, rules_of

__all__ = ["LayoutPick", "fastest_layouts"]


@dataclass(frozen=True)
class LayoutPick:
    """The fastest value of layout parameter `param` for a shape (`problem`: the shape at that value),
    with every value's best time in µs, in the values' order."""

    problem: Problem
    param: str
    fastest: ParamValue
    times_us: tuple[tuple[ParamValue, float], ...]


def _shape(problem: Problem, left_out: str) -> tuple[Any, ...]:
    p = problem
    others = tuple(item for item in p.extra if item[0] != left_out)
    return (p.op, p.M, p.N, p.K, p.dtype_a, p.dtype_b, p.dtype_out, p.layout, others)


def fastest_layouts(results: Iterable[tuple[Problem, float | None]]) -> list[LayoutPick]:
    """Per layout parameter of each problem's op and per shape (the problem but that parameter), where
    more than one value has a time: the value of the lowest best time. In the order shapes first appear;
    problems without a time are left out."""
    groups: dict[tuple[str, tuple[Any, ...]], dict[ParamValue, tuple[float, Problem]]] = {}
    for problem, us in results:
        if us is None:
            continue
        for name in rules_of(problem.op).layout_params:
            times = groups.setdefault((name, _shape(problem, name)), {})
            value = dict(problem.extra)[name]
            if value not in times or us < times[value][0]:
                times[value] = (us, problem)
    picks = []
    for (name, _), times in groups.items():
        if len(times) > 1:
            value, (_, problem) = min(times.items(), key=lambda item: item[1][0])
            ordered = tuple(sorted((v, t) for v, (t, _) in times.items()))
            picks.append(LayoutPick(problem, name, value, ordered))
    return picks
