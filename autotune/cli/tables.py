"""Tables on the terminal: aligned columns under a ruled header, and the cells several verbs print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from autotune.core.problem import Problem


def print_table(rows: Sequence[Sequence[str]], indent: str = "") -> None:
    """`rows` in left-aligned columns, the first row the header, ruled below it."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, row in enumerate(rows):
        print(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if j == 0:
            print(indent + "  ".join("-" * w for w in widths))


def fmt_us(t: float | None) -> str:
    """Microseconds with two decimals; "-" for none."""
    return "-" if t is None else f"{t:.2f}"


def problem_label(p: Problem) -> str:
    """A problem in one table cell, as its op labels it (`ProblemRules.label`)."""
    from autotune.core.registry import rules_of

    return rules_of(p.op).label(p)


def with_layers(
    rows: list[tuple[str, ...]], problems: list[Problem], layers: dict[Problem, str]
) -> list[tuple[str, ...]]:
    """`rows` (a header, then one row per problem of `problems`) with a "layer" column first, where any
    problem is a model's layer (`SweepSpec.layers`); else `rows` as they are."""
    if not any(p in layers for p in problems):
        return rows
    return [
        ("layer", *rows[0]),
        *((layers.get(p, "-"), *row) for p, row in zip(problems, rows[1:], strict=True)),
    ]
