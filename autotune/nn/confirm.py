"""`confirm`: a table checked against a model's own step, so that the patched model is never slower than
with each op's fallback at the token counts it runs.

A sweep times each GEMM alone; inside a compiled model the same config can lose what it won (other
kernels around it, the graph's own buffers, the clock under a sustained load). `confirm(step, tokens,
table)` runs the model's step at each token count T with the table, records which families the step
looks up and which of them the table serves with something other than the op's fallback at T. Where
there are none, T is kept as it is. Otherwise the step is timed with the table and with those families
served by their fallbacks at T (each captured in CUDA graphs, replayed in interleaved rounds, medians);
where the table is slower, the confirmed table serves those families by the fallback (its config at T)
over every M closer to T than to the neighbouring token counts (geometric midpoints; from M = 1 below the
first and with no end above the last). Every other M and family is served as before.

The result is a new table (`Confirmation.table`, saved like any other) and a point per token count: the
step's µs both ways, what was served, and whether the table was kept there.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.core.config import Config
from autotune.core.registry import get_op, rules_of
from autotune.dispatch import Dispatcher, install_dispatcher
from autotune.dispatch.narrow import override, served_config
from autotune.dispatch.table import Key, Table

__all__ = ["Confirmation", "Point", "Timer", "confirm", "graph_medians"]

#: Times runs side by side: given zero-argument calls (each one step, with its own tables installed),
#: returns each one's time in µs, in the same order.
Timer = Callable[[Sequence[Callable[[], Any]]], Sequence[float]]


@dataclass(frozen=True)
class Point:
    """One token count of a confirmation: the families the table serves there with a config other than
    the op's fallback (described), the step's µs with the table and with those fallbacks (None where
    nothing was timed because the table serves only fallbacks there), and whether the table is kept."""

    tokens: int
    served: tuple[str, ...]
    table_us: float | None
    fallback_us: float | None
    kept: bool

    @property
    def ratio(self) -> float | None:
        """The fallback's µs over the table's (> 1: the table is faster); None where nothing was timed."""
        if self.table_us is None or self.fallback_us is None:
            return None
        return self.fallback_us / self.table_us


@dataclass(frozen=True)
class Confirmation:
    """What `confirm` found: the confirmed table and one `Point` per token count, in order."""

    table: Table
    points: tuple[Point, ...]

    @property
    def reverted(self) -> tuple[int, ...]:
        """The token counts where the table lost to the fallbacks and no longer serves its configs."""
        return tuple(p.tokens for p in self.points if not p.kept)

    def __str__(self) -> str:
        lines = []
        for p in self.points:
            if p.ratio is None:
                lines.append(f"{p.tokens:>7}  fallbacks only, kept")
                continue
            verdict = "kept" if p.kept else "served by the fallbacks"
            lines.append(
                f"{p.tokens:>7}  table {p.table_us:.1f} µs, fallbacks {p.fallback_us:.1f} µs "
                f"({p.ratio:.3f}x): {verdict}; {len(p.served)} families"
            )
        return "\n".join(lines)


def confirm(
    step: Callable[[int], Callable[[], Any]],
    tokens: Iterable[int],
    table: Table,
    *,
    timer: Timer | None = None,
    dispatcher: Callable[[Iterable[Table]], Dispatcher] = Dispatcher,
    progress: Callable[[Point], None] | None = None,
) -> Confirmation:
    """`table` checked against the model step `step(T)` (a zero-argument call that runs one step at T
    tokens: a compiled model and its input, built once per T) at each token count in `tokens`.

    `timer` times the two sides (default `graph_medians`: CUDA graphs, which need a GPU); `dispatcher`
    builds the dispatcher each side runs with (default: one that accepts only tables of the running GPU);
    `progress` is called with each point as it is found.

    Raises:
        ValueError: no token counts, or one that is not a positive integer.
        RuntimeError: the running GPU refuses `table` (measured on another device).
    """
    counts = sorted(set(tokens))
    if not counts or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in counts):
        raise ValueError(f"token counts must be positive integers, got {list(tokens)!r}")
    timer = timer or graph_medians
    with_table = dispatcher([table])
    if not with_table.tables:
        raise RuntimeError(
            f"this device refuses the table (measured on {table.target.name}); confirm it where it was tuned"
        )
    target = with_table.running_target or table.target
    entries = {entry.key: entry for entry in table.entries}
    points: list[Point] = []
    fallbacks: dict[int, dict[Key, Config]] = {}
    for T in counts:
        fn = step(T)
        with _installed(with_table), with_table.recording() as seen:
            fn()
        served = _served(table, seen, T, target)
        if not served:
            point = Point(T, (), None, None, True)
        else:
            alt = table
            for key, config in served.items():
                alt = override(alt, key, T, T, config)
            table_us, fallback_us = timer([_runner(with_table, fn), _runner(dispatcher([alt]), fn)])
            kept = table_us <= fallback_us
            names = tuple(entries[k].describe() for k in sorted(served))
            point = Point(T, names, table_us, fallback_us, kept)
            if not kept:
                fallbacks[T] = served
        points.append(point)
        if progress is not None:
            progress(point)
    confirmed = table
    for i, T in enumerate(counts):
        if T not in fallbacks:
            continue
        lo = 1 if i == 0 else math.isqrt(counts[i - 1] * T) + 1
        hi = None if i == len(counts) - 1 else math.isqrt(T * counts[i + 1])
        for key, config in fallbacks[T].items():
            confirmed = override(confirmed, key, lo, hi, config)
    return Confirmation(confirmed, tuple(points))


def _served(table: Table, seen: set[Key], T: int, target: Any) -> dict[Key, Config]:
    """Of the families `seen`, those `table` serves at T with a config other than the op's fallback there:
    family → that fallback."""
    out: dict[Key, Config] = {}
    keys = set(table.keys())
    for key in seen:
        if key not in keys:
            continue
        config = served_config(table, key, T)
        problem = replace(rules_of(key[0]).key_problem(key), M=T)
        fallback = get_op(key[0]).fallback_config(problem, target)
        if config is not None and config != fallback:
            out[key] = fallback
    return out


@contextlib.contextmanager
def _installed(dispatcher: Dispatcher) -> Iterator[Dispatcher]:
    """Installs `dispatcher` for the `with` block, then the one before it."""
    previous = install_dispatcher(dispatcher)
    try:
        yield dispatcher
    finally:
        install_dispatcher(previous)


def _runner(dispatcher: Dispatcher, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` run with `dispatcher` installed (its lookups, and so a graph captured from it, use its tables)."""

    def run() -> Any:
        with _installed(dispatcher):
            return fn()

    return run


def graph_medians(
    runs: Sequence[Callable[[], Any]], *, captures: int = 2, rounds: int = 5, reps: int = 20
) -> list[float]:
    """Each run captured `captures` times in a CUDA graph (after warm-up runs on a side stream), the graphs
    replayed in `rounds` interleaved rounds of `reps` replays, each replay timed by CUDA events; per run,
    the median µs over its graphs and rounds (a graph's buffers can move its time by a percent or two, so
    each run gets several)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("timing a step in CUDA graphs needs a GPU; pass timer= to time another way")
    graphs: list[tuple[int, torch.cuda.CUDAGraph]] = []
    for i, run in enumerate(runs):
        for _ in range(captures):
            graphs.append((i, capture(run)))
    times: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        shift = r % len(graphs)
        for i, g in graphs[shift:] + graphs[:shift]:
            times[i].append(replay_us(g, reps))
    return [statistics.median(t) for t in times]


def capture(fn: Callable[[], Any], warmup: int = 3) -> Any:
    """`fn` captured in a CUDA graph after `warmup` runs on a side stream; the graph."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def replay_us(graph: Any, reps: int) -> float:
    """The median µs of `reps` replays of `graph`, each timed by CUDA events."""
    import torch

    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)
