"""Arch-aware search space and heuristic default config of the dense GEMM."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from autotune.core.config import Config, Value
from autotune.core.problem import Problem, cdiv, next_pow2
from autotune.core.registry import get_op
from autotune.core.space import SubSpace
from autotune.core.target import Target
from autotune.engine.verdicts import first_passing
from autotune.kernels.candidates import Core, space_ladder, unique
from autotune.kernels.common.constraints import gemv_constraints, tile_constraints, tma_constraints
from autotune.kernels.common.defaults import fit_to_space, pick_split_k
from autotune.kernels.common.geometry import MIN_TILE, tail_split_schedule, tile_parts
from autotune.kernels.common.knobs import gemv_params, knob_values
from autotune.kernels.common.target import has_tma

__all__ = [
    "gemm_default_candidates",
    "gemm_default_config",
    "gemv_subspace",
    "tma_default",
    "tma_params",
    "tma_subspace",
    "triton_params",
    "triton_subspace",
]


def triton_params(target: Target) -> dict[str, Sequence[Value]]:
    """The Triton knobs and their values on `target` (AMD knobs exist only on AMD)."""
    return knob_values(
        target,
        k_tiles=(32, 64, 128, 256),
        nvidia_stages=(2, 3, 4, 5),
        interpreter_k_tiles=(16, 32),
        in_launch=True,
    )


#: Columns of C per store with EPILOGUE_N > 0: the TMA kernel stores each tile part in slices this wide
#: through one shared-memory buffer, instead of one buffer the size of the tile that Triton does not share
#: with the K loop's ring (a 128 x 256 bf16 tile: 16 KB instead of 64 KB).
EPILOGUE_SLICE = 64


def tma_params(target: Target) -> dict[str, Sequence[Value]]:
    """Knobs of the tensor-descriptor (TMA) kernel: NVIDIA sm_90+ and the interpreter."""
    if target.interpreter:
        return dict(
            BLOCK_M=(16, 32),
            BLOCK_N=(16, 32),
            BLOCK_K=(16, 32),
            GROUP_M=(1, 4),
            SPLIT_K=(1, 2),
            PERSISTENT=(0, 1),
            TAIL_SPLIT=(0, 1),
            EPILOGUE_N=(0, 16),
            num_warps=(4,),
            num_stages=(1,),
        )
    return dict(
        BLOCK_M=(64, 128, 256),
        # 96, 160, 192, 320, 384: tiles of two column parts (`tile_parts`), for grids that fill the SMs where
        # powers of two cannot (docs/notes/2026-11-22-dense-tma-tiles.md, 2026-11-26-epilogue-slices.md)
        BLOCK_N=(64, 96, 128, 160, 192, 256, 320, 384),
        BLOCK_K=(32, 64, 128),
        GROUP_M=(1, 8),
        # 3: for grids that 2 slices underfill and 4 overfill (docs/notes/2026-11-22-dense-tma-tiles.md)
        SPLIT_K=(1, 2, 3, 4),
        PERSISTENT=(0, 1),
        TAIL_SPLIT=(0, 1),
        EPILOGUE_N=(0, EPILOGUE_SLICE),
        num_warps=(4, 8),
        # 6 and 7: deeper rings of loads for memory-bound M (DEEP_RING_MAX_M;
        # docs/notes/2026-11-26-epilogue-slices.md)
        num_stages=(2, 3, 4, 5, 6, 7),
    )


def _gemv_default(problem: Problem, target: Target) -> Config:
    """4 columns of C per program, K steps of 1024, 3 stages; 8 warps at M = 1, 4 at M = 2. At M = 1,
    8 warps stay close to each problem's fastest GEMV config where 4 can fall well behind; at M = 2,
    8 warps lose to cuBLAS where 4 beat it. Fitted on four (N, K) (docs/notes/2026-11-22-gemv.md)."""
    warps = 8 if problem.M == 1 else 4
    config = Config(backend="triton_gemv", BLOCK_N=4, BLOCK_K=1024, num_warps=warps, num_stages=3)
    return fit_to_space(
        config,
        SubSpace("triton_gemv", gemv_params(target), gemv_constraints(problem, target)),
        ("BLOCK_K", "BLOCK_N", "num_stages"),
    )


def _gemv_candidates(problem: Problem, target: Target) -> list[Config]:
    """The GEMV default, then the same with each shorter K step of the space."""
    pick = _gemv_default(problem, target)
    sub = SubSpace("triton_gemv", gemv_params(target), gemv_constraints(problem, target))
    shorter = (pick.replace(BLOCK_K=int(k)) for k in sorted(sub.params["BLOCK_K"], reverse=True))
    return [pick, *(c for c in shorter if int(c["BLOCK_K"]) < int(pick["BLOCK_K"]) and sub.check(c) is None)]


def gemm_default_candidates(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The heuristic's candidates for the default, in order, each a member of the GEMM's space.

    First the rule's pick: on Hopper and newer, from M = 128 up, the TMA kernel with the tiles that won
    most often in the dense benchmark's sweeps, then the same with shallower rings; on NVIDIA GPUs at
    M <= 2 the GEMV kernel, then with shorter K steps; then (first where neither applies, or the rows are
    not 16-byte aligned) the pointer kernel with a tile for the regime and split-K when the tile grid
    underfills the GPU, followed by its safer cores (`autotune.kernels.candidates`).
    """
    return tuple(_candidates(problem, target))


def _candidates(problem: Problem, target: Target) -> Iterator[Config]:
    """`gemm_default_candidates`, lazily: drawing the first computes the rule's pick alone."""

    def draw() -> Iterator[Config]:
        if has_tma(target) and not target.interpreter and problem.M >= 128:
            yield from _tma_candidates(problem, target)
        if target.is_nvidia and not target.interpreter and problem.M <= GEMV_DEFAULT_ROWS:
            yield from _gemv_candidates(problem, target)
        yield from _pointer_candidates(problem, target)

    return unique(draw())


def gemm_default_config(problem: Problem, target: Target) -> Config:
    """The heuristic config for shapes nobody tuned: the first of `gemm_default_candidates` whose binary
    passes the static checks on `target` (`autotune.engine.verdicts.first_passing`). Always a member of
    the GEMM's space."""
    return first_passing(get_op(problem.op), problem, target, _candidates(problem, target))


#: Up to this M the NVIDIA default is the GEMV kernel: it beats cuBLAS and the pointer kernel's default at
#: M = 1 and 2 and loses at M = 4 (docs/notes/2026-11-22-gemv.md). (AMD: not measured, pointer kernel.)
GEMV_DEFAULT_ROWS = 2


#: The time of a 128 x 256 tile of the TMA kernel over that of a 128 x 128 tile (twice the work), as the
#: default's tile rule assumes: fitted to which tile won on 24 problems (any value from 5/3 to 9/5 fits
#: all 24; docs/notes/2026-11-22-dense-tma-tiles.md).
WIDE_TILE_COST = 1.75
#: What a tile of two column parts (128 x 320: 256 + 64; 128 x 384: 256 + 128) costs beyond its width's
#: share of WIDE_TILE_COST: its second part's wgmma reads the A tile again
#: (docs/notes/2026-11-26-epilogue-slices.md).
PARTS_TILE_COST = 1.07
#: The widths of two parts the default may take, on 8 warps with C stored in EPILOGUE_SLICE slices, and
#: only where the problem is compute-bound (M >= PARTS_MIN_M), the grid's last wave at least PARTS_FILL full
#: and at least PARTS_FILL_N of the tiles' columns inside N: on a weight-bound problem, or with tiles
#: running well past N, they lose (docs/notes/2026-11-26-epilogue-slices.md).
_PARTS_WIDTHS = (320, 384)
PARTS_MIN_M = 1024
PARTS_FILL = 0.9
PARTS_FILL_N = 0.95


def tma_default(
    problem: Problem,
    target: Target,
    parts_widths: Sequence[int] = _PARTS_WIDTHS,
    depths: Sequence[int] | None = None,
) -> Config | None:
    """The TMA default (None where no config of the rule fits); `parts_widths` and `depths` (the square
    tiles' pipeline depths, first that fits) replace the rule's, for comparing it with earlier rules."""
    # Fitted to the dense benchmark's tuned winners and to benchmarks/gemm_defaults.py's layers
    # (docs/notes/2026-11-22-dense-tma-tiles.md, 2026-11-26-epilogue-slices.md): 128 x 256 tiles on 8
    # warps where their waves, each taking WIDE_TILE_COST times a wave of 128 x 128 tiles, finish no later
    # than the 128 x 128 tiles' waves; else 128 x 128 on 4 warps with 5 stages, 6 up to DEEP_RING_MAX_M
    # (split along K where even those underfill the SMs); the last wave's tiles split along K where it is
    # at most half full. A 128 x 320 or 128 x 384 tile (8 warps, sliced C) where its waves, costed the
    # same way and PARTS_TILE_COST more, finish strictly earlier.
    cus = target.cu_count
    rows = cdiv(problem.M, 128)
    wide, square = rows * cdiv(problem.N, 256), rows * cdiv(problem.N, 128)
    big = problem.N >= 256 and WIDE_TILE_COST * cdiv(wide, cus) <= cdiv(square, cus)
    bm, bn, bk = 128, 256 if big else 128, 64
    cost = WIDE_TILE_COST * cdiv(wide, cus) if big else cdiv(square, cus)
    for width in parts_widths if problem.M >= PARTS_MIN_M else ():
        tiles = rows * cdiv(problem.N, width)
        waves = cdiv(tiles, cus)
        parts_cost = WIDE_TILE_COST * width / 256 * PARTS_TILE_COST * waves
        used = problem.N / (cdiv(problem.N, width) * width)  # of the tiles' columns, those inside N
        fills = tiles >= PARTS_FILL * waves * cus and used >= PARTS_FILL_N
        if fills and parts_cost < cost:
            bn, cost = width, parts_cost
    wide_tile = bn > 128
    split_k = 1 if wide_tile else pick_split_k(problem, target, bm, bn, bk, tma_params(target)["SPLIT_K"])
    items = rows * cdiv(problem.N, bn) * split_k
    tail_split = (
        split_k == 1
        and tile_parts(bn)[1] == 0
        and tail_split_schedule(items, cdiv(problem.K, bk), cus)[2] > 1
    )
    sub = SubSpace("triton_tma", tma_params(target), tma_constraints(problem, target))
    if depths is None:
        depths = _ring_depths(problem)[:-1]
    for stages in (3,) if wide_tile else depths:
        config = Config(
            backend="triton_tma",
            BLOCK_M=bm,
            BLOCK_N=bn,
            BLOCK_K=bk,
            GROUP_M=8 if rows > 1 else 1,
            SPLIT_K=split_k,
            PERSISTENT=1 if items > cus or tail_split else 0,
            TAIL_SPLIT=int(tail_split),
            EPILOGUE_N=EPILOGUE_SLICE if tile_parts(bn)[1] else 0,
            num_warps=8 if wide_tile else 4,
            num_stages=stages,
        )
        if sub.check(config) is None:
            return config
    return None


def _tma_candidates(problem: Problem, target: Target) -> list[Config]:
    """The TMA default (none where no config of its rule fits), then the same with each shallower ring of
    the space."""
    pick = tma_default(problem, target)
    if pick is None:
        return []
    sub = SubSpace("triton_tma", tma_params(target), tma_constraints(problem, target))
    stages = sorted(
        (int(s) for s in sub.params["num_stages"] if int(s) < int(pick["num_stages"])), reverse=True
    )
    return [pick, *(c for c in (pick.replace(num_stages=s) for s in stages) if sub.check(c) is None)]


#: Up to this M the TMA kernel's tiles are mostly waiting on memory, and a deeper ring of loads pays: the
#: default's 128 x 128 tiles take 6 stages (docs/notes/2026-11-26-epilogue-slices.md).
DEEP_RING_MAX_M = 256


def _ring_depths(problem: Problem) -> tuple[int, ...]:
    """The TMA kernel's pipeline depths for a default or wave-filling tile, deepest first: the first one
    that fits in shared memory is taken."""
    return (7, 6, 5, 4, 3) if problem.M <= DEEP_RING_MAX_M else (5, 4, 3)


def _pointer_core(problem: Problem, target: Target) -> Core:
    """The pointer kernel's tile, K step, warps and stages for the regime, clamped to the problem."""
    M, N = problem.M, problem.N
    if target.interpreter:
        bm, bn, bk, warps, stages = 16, 32, 32, 4, 1
    elif M <= 64:  # decode: memory-bound, narrow M tile, long K tile
        bm = max(MIN_TILE, min(64, next_pow2(M)))
        bn, bk = 64, 256 if target.is_amd else 128
        warps, stages = 4, 2 if target.is_amd else 4
    elif target.is_amd:
        bm, bn, bk, warps, stages = 256, 256, 64, 8, 2
    else:
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 4
    bm = min(bm, max(MIN_TILE, next_pow2(M)))
    bn = min(bn, max(32 if not target.interpreter else 16, next_pow2(N)))
    bk = min(bk, max(MIN_TILE, next_pow2(problem.K)))
    return Core(bm, bn, bk, warps, stages)


def _pointer_config(problem: Problem, target: Target, core: Core) -> Config:
    """`core` with the knobs the rule derives from it: GROUP_M over several rows of tiles, split-K (fused)
    where the tile grid underfills the GPU, and on AMD 16x16 MFMAs, XCD remapping, kpack 2 on gfx942."""
    params = triton_params(target)
    M, N = problem.M, problem.N
    bm, bn, bk, warps, stages = core
    values: dict[str, Value] = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
    values["GROUP_M"] = 8 if cdiv(M, bm) > 1 and 8 in params["GROUP_M"] else 1
    values["SPLIT_K"] = pick_split_k(problem, target, bm, bn, bk, params["SPLIT_K"])
    values["FUSED_SPLIT"] = 1 if int(values["SPLIT_K"]) > 1 else 0  # one launch beats a reduce kernel
    values["STREAM_K"] = 0
    if target.is_amd:
        values["matrix_instr_nonkdim"] = 16
        values["waves_per_eu"] = 0
        tiles = cdiv(M, bm) * cdiv(N, bn)
        values["NUM_XCDS"] = target.xcds if tiles >= 2 * target.xcds else 1
        if "kpack" in params:
            values["kpack"] = 2
    return Config(values, backend="triton")


def _pointer_default(problem: Problem, target: Target) -> Config:
    sub = SubSpace("triton", triton_params(target), tile_constraints(problem, target))
    return fit_to_space(_pointer_config(problem, target, _pointer_core(problem, target)), sub)


def _pointer_candidates(problem: Problem, target: Target) -> Iterator[Config]:
    """The pointer kernel's default, then its safer cores (`autotune.kernels.candidates`), lazily."""
    yield _pointer_default(problem, target)
    if target.interpreter:
        return
    params = triton_params(target)
    sub = SubSpace("triton", params, tile_constraints(problem, target))
    core = _pointer_core(problem, target)
    yield from space_ladder(core, params, sub, lambda c: _pointer_config(problem, target, c))


def triton_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The tiled kernel's configs, the heuristic default first (the op's, or this kernel's own)."""
    first = default or _pointer_default(problem, target)
    return SubSpace("triton", triton_params(target), tile_constraints(problem, target), first=(first,))


def gemv_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The GEMV kernel's configs (A of at most GEMV_ROWS rows; pruned with the reason otherwise), the op's
    default first where it is one of them."""
    first = () if default is None else (default,)
    return SubSpace("triton_gemv", gemv_params(target), gemv_constraints(problem, target), first=first)


def tma_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The TMA kernel's configs: the op's default where it is one of them, then the wave-filling tiles."""
    sub = SubSpace("triton_tma", tma_params(target), tma_constraints(problem, target))
    first = () if default is None else (default,)
    return replace(sub, first=(*first, *wave_filling_tiles(problem, target, sub)))


#: A tile grid whose last wave is at least this full counts as filling the GPU (`wave_filling_tiles`).
WAVE_FILL = 0.8
#: At most this many wave-filling tiles go first in a TMA search.
MAX_FILLING_TILES = 6


def wave_filling_tiles(problem: Problem, target: Target, sub: SubSpace) -> tuple[Config, ...]:
    """TMA configs whose tile grids fill their last wave of SMs at least WAVE_FILL full, in at most 4
    waves: the tiles a search should see first, since a grid that leaves SMs idle loses whatever the tile,
    and a sampled search can miss the few tiles whose grids fill the SMs
    (docs/notes/2026-11-22-dense-tma-tiles.md). Fullest grids first, then larger tiles; each
    with K tiles of 64, the deepest ring of `_ring_depths` that shared memory allows with sliced C stores
    where a part is wider than the slice, and the fewest warps that hold the accumulator. Only members of
    `sub`."""
    if target.interpreter:
        return ()
    params = sub.params
    cus = target.cu_count
    found: list[tuple[float, int, Config]] = []
    for bm in params["BLOCK_M"]:
        for width in params["BLOCK_N"]:
            bm_, w = int(bm), int(width)
            tiles = cdiv(problem.M, bm_) * cdiv(problem.N, w)
            waves = cdiv(tiles, cus)
            fill = tiles / (waves * cus)
            if fill < WAVE_FILL or waves > 4:
                continue
            sliced = max(tile_parts(w)) > EPILOGUE_SLICE
            # the fewest warps that hold the accumulator, then the deepest ring: the first member of `sub`
            candidates = (
                Config(
                    backend="triton_tma",
                    BLOCK_M=bm_,
                    BLOCK_N=w,
                    BLOCK_K=64,
                    GROUP_M=8 if cdiv(problem.M, bm_) > 1 else 1,
                    SPLIT_K=1,
                    PERSISTENT=int(tiles > cus),
                    TAIL_SPLIT=0,
                    EPILOGUE_N=EPILOGUE_SLICE if sliced else 0,
                    num_warps=warps,
                    num_stages=stages,
                )
                for warps in (4, 8)
                for stages in _ring_depths(problem)
            )
            config = next((c for c in candidates if sub.check(c) is None), None)
            if config is not None:
                found.append((-fill, -bm_ * w, config))
    found.sort(key=lambda t: (t[0], t[1]))
    return tuple(c for _, _, c in found[:MAX_FILLING_TILES])
