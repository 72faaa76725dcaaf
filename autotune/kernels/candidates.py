"""The safer configs an op's heuristic default falls back on (`TunableOp.default_candidates`).

A tiled kernel's registers and LDS grow with five knobs, its core: the tile's rows and columns, the K
step, and the pipeline's stages; per lane, they shrink with more warps. `safer_cores` lists cores after
the rule's pick, each needing no more of either than the one before it at the same tile: more warps, then
shorter K steps, then fewer stages; then the same from the pick's K step, stages and warps on a tile half
as large (the wider side halved, the columns on a tie), down to the smallest tile. The op builds each
core into a config with its own rule (GROUP_M, split-K, AMD knobs, ...) and keeps those of its space;
`autotune.engine.verdicts` takes the first that compiles without spills within the target's LDS.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from autotune.core.config import Config, Value
from autotune.core.space import SubSpace

__all__ = ["Core", "built", "candidates", "safer_cores", "space_ladder", "unique"]


class Core(NamedTuple):
    """The knobs of a tiled kernel that decide its registers and LDS."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


def _ints(values: Iterable[Value]) -> list[int]:
    return sorted({int(v) for v in values})


def _below(values: Sequence[int], value: int) -> int | None:
    """The largest of `values` under `value` (None: none is)."""
    smaller = [v for v in values if v < value]
    return smaller[-1] if smaller else None


def safer_cores(
    pick: Core,
    *,
    rows: Iterable[Value],
    cols: Iterable[Value],
    k_tiles: Iterable[Value],
    warps: Iterable[Value],
    stages: Iterable[Value],
) -> tuple[Core, ...]:
    """`pick`, then the cores that need fewer registers and less LDS (see the module), in order; each
    knob takes the values given (the kernel's space), tiles down to the smallest of `rows` and `cols`."""
    row_v, col_v, k_v = _ints(rows), _ints(cols), _ints(k_tiles)
    warp_v, stage_v = _ints(warps), _ints(stages)
    out: list[Core] = []
    bm, bn = pick.bm, pick.bn
    while True:
        core = Core(bm, bn, pick.bk, pick.warps, pick.stages)
        out.append(core)
        for w in (v for v in warp_v if v > core.warps):
            core = core._replace(warps=w)
            out.append(core)
        for k in sorted((v for v in k_v if v < core.bk), reverse=True):
            core = core._replace(bk=k)
            out.append(core)
        for s in sorted((v for v in stage_v if v < core.stages), reverse=True):
            core = core._replace(stages=s)
            out.append(core)
        narrower, shorter = _below(col_v, bn), _below(row_v, bm)
        if narrower is not None and (bn >= bm or shorter is None):
            bn = narrower
        elif shorter is not None:
            bm = shorter
        else:
            break
    return tuple(dict.fromkeys(out))


def built(
    cores: Iterable[Core], build: Callable[[Core], Config | None], warps: Iterable[Value]
) -> Iterator[Config]:
    """Each core of `cores` built by `build` (None: not a config of the kernel's space), with fewer warps
    where its own are not (a small tile idles 8 warps); lazily, in order."""
    warp_v = sorted(_ints(warps), reverse=True)
    for core in cores:
        for w in [core.warps, *(v for v in warp_v if v < core.warps)]:
            config = build(core._replace(warps=w))
            if config is not None:
                yield config
                break


def unique(configs: Iterable[Config]) -> Iterator[Config]:
    """`configs` without repeats, lazily, in order."""
    seen: set[Config] = set()
    for config in configs:
        if config not in seen:
            seen.add(config)
            yield config


def candidates(
    first: Sequence[Config],
    cores: Iterable[Core],
    build: Callable[[Core], Config | None],
    warps: Iterable[Value],
) -> tuple[Config, ...]:
    """`first`, then the configs `built` from `cores`, without repeats."""
    return tuple(unique(itertools.chain(first, built(cores, build, warps))))


def space_ladder(
    core: Core, params: Mapping[str, Sequence[Value]], sub: SubSpace, make: Callable[[Core], Config]
) -> Iterator[Config]:
    """The configs `make` builds from `core`'s safer cores (`safer_cores` over the BLOCK_M, BLOCK_N,
    BLOCK_K, num_warps and num_stages values of `params`) that are configs of `sub`; lazily, in order."""

    def build(c: Core) -> Config | None:
        config = make(c)
        return config if sub.check(config) is None else None

    cores = safer_cores(
        core, rows=params["BLOCK_M"], cols=params["BLOCK_N"], k_tiles=params["BLOCK_K"],
        warps=params["num_warps"], stages=params["num_stages"],
    )  # fmt: skip
    return built(cores, build, params["num_warps"])
