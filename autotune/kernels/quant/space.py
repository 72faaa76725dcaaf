"""Search spaces and heuristic defaults of the quantized GEMMs (FP8 row-wise/blockwise, MXFP8, MXFP4).

The Triton knobs are the dense GEMM's (tiles, GROUP_M, SPLIT_K, num_warps, num_stages and on AMD
matrix_instr_nonkdim, waves_per_eu, NUM_XCDS, kpack on gfx942) with K tiles for one-byte and half-byte
elements: decode shapes (M up to 64) are memory-bound, so narrow BLOCK_M, K tiles up to 512 and split-K
up to 16 are all in the space; prefill gets the full tile range. Vendor backends ("torch":
torch._scaled_mm, "aiter" on ROCm) are a single config each, present only where they can run the problem;
elsewhere their config is pruned with the reason.

"gluon" (`quant.gluon`, gemm_fp8_blockwise on Hopper only) has tiles of 64 or 128 by 64 or 128 (K steps
of one 128-wide scale group), 4 or 8 warps, 3 to 6 stages, PERSISTENT, GROUP_M, WARP_SPEC (a loader
warp and one partition per consumer warpgroup), SPLIT_K (K slices summed in the launch, for grids of
fewer tiles than SMs; a config stored without it has 1) and at decode (M <= GLUON_SWAP_MAX_M) SWAP_AB
(the weight's 64 or 128 rows on wgmma's M side, the activations' 16 or 32 on its N side; 0 for a config
stored without it); where the installed
Triton has no Gluon for Hopper its one config is pruned with the reason. It is the op's default for
prefill (M >= GLUON_MIN_M) and at M = 33 to 64 where it can run; at M = 2 to 32 (SWAPPED_MAX_M) the Triton
kernel, swapped, with SCALES_AHEAD (the blockwise scales of the next K tile loaded while this one runs).

"triton_tma" (`quant.tma`, the FP8 ops where tensor descriptors exist: Hopper and newer, and the
interpreter) loads its tiles through TMA; knobs BLOCK_M/N/K, GROUP_M, SPLIT_K, PERSISTENT, SWAP_AB,
num_warps, num_stages (blockwise: BLOCK_N, the weight's rows, inside one 128-row scale block). It is the
row-wise default at M = 33 to 64 where the tiles alone fill the GPU (no split-K); blockwise it is only
searched, and where the gluon kernel runs only at decode (M <= TMA_BLOCKWISE_MAX_M).

"triton_gemv" (`quant.gemv`, the FP8 ops on every target) has the dense GEMV's knobs and constraints
(A of at most GEMV_ROWS rows; pruned with the reason otherwise) plus `gemv_scale_groups` (blockwise) or
STEP_SUM (row-wise: K steps summed as they come); it is the FP8 ops' default at M = 1 on NVIDIA.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from functools import cache, lru_cache

from autotune.core.backend import Backend, Backends
from autotune.core.config import Config, Value
from autotune.core.problem import DTYPE_BYTES, Problem, cdiv, next_pow2
from autotune.core.registry import get_op
from autotune.core.space import Constraint, SearchSpace, SubSpace
from autotune.core.target import Target
from autotune.engine.verdicts import first_passing
from autotune.kernels.candidates import Core, space_ladder, unique
from autotune.kernels.common.constraints import gemv_constraints, tile_constraints, tma_constraints
from autotune.kernels.common.defaults import fit_to_space, pick_split_k
from autotune.kernels.common.knobs import gemv_params, knob_values
from autotune.kernels.common.target import has_tma, mx_native
from autotune.kernels.quant.gluon_split import split_slices
from autotune.kernels.quant.problem import QUANT_OPS

__all__ = [
    "GEMV_OPS",
    "GLUON_DECODE_M",
    "GLUON_MIN_M",
    "GLUON_OPS",
    "GLUON_PARAMS",
    "GLUON_SWAP_MAX_M",
    "SWAPPED_MAX_M",
    "gemv_subspace",
    "gluon_default_config",
    "gluon_missing",
    "gluon_runs",
    "gluon_subspace",
    "gluon_target",
    "hw_fp4_cvt_target",
    "quant_default_candidates",
    "quant_default_config",
    "quant_space",
    "quant_tma_params",
    "quant_triton_params",
    "split_slices",
    "swap_ab_target",
    "tma_runs",
    "tma_subspace",
    "triton_default",
    "triton_subspace",
]

_MIN_TILE = 16


def _k_tiles(op: str, target: Target) -> tuple[int, ...]:
    if op.startswith("gemm_fp8"):
        return (64, 128, 256, 512)
    if mx_native(target):
        return (128, 256, 512)  # a 16x16x128 scaled MFMA needs 128 K per tile
    return (64, 128, 256)  # emulated: every K element is dequantized in registers


def swap_ab_target(target: Target) -> bool:
    """Whether the FP8 kernel's SWAP_AB is in the space of `target`: NVIDIA from sm_90 on, whose
    wgmma (and Blackwell's MMA) needs at least 64 rows on its M side, so that a decode tile of fewer rows
    falls back to the older `mma` instructions unless it is swapped. AMD's MFMA takes 16 rows (not offered
    there: not measured)."""
    return has_tma(target) and not target.interpreter  # the same archs: NVIDIA sm_90 and newer


def quant_triton_params(op: str, target: Target) -> dict[str, Sequence[Value]]:
    """The Triton knobs of quantized op `op` and their values on `target` (FUSED_SPLIT and STREAM_K: the
    FP8 ops only; SWAP_AB: the FP8 ops where `swap_ab_target`; SCALES_AHEAD: blockwise, the next K tile's
    scales loaded while this one runs; HW_FP4_CVT: gemm_mxfp4_bf16a on gfx950, `hw_fp4_cvt_target`)."""
    params = knob_values(
        target,
        k_tiles=_k_tiles(op, target),
        # 5 and 6: more of B in flight at decode (docs/notes/2026-11-22-fp8-rowwise-decode.md)
        nvidia_stages=(2, 3, 4, 5, 6),
        interpreter_k_tiles=(32, 64),
        in_launch=op.startswith("gemm_fp8"),
    )
    if op.startswith("gemm_fp8") and swap_ab_target(target):
        params["SWAP_AB"] = (0, 1)
    if op == "gemm_fp8_blockwise":
        params["SCALES_AHEAD"] = (0, 1)
    if op == "gemm_mxfp4_bf16a" and hw_fp4_cvt_target(target):
        params["HW_FP4_CVT"] = (0, 1)
    return params


def hw_fp4_cvt_target(target: Target) -> bool:
    """Whether gemm_mxfp4_bf16a's HW_FP4_CVT (A quantized by v_cvt_scalef32_pk_fp4_bf16) is in the space of
    `target`: gfx950, the one arch with the instruction. Both values are searched there, so that a sweep's
    correctness gate on the GPU decides; elsewhere A is quantized in software."""
    return target.arch == "gfx950" and not target.interpreter


def _swap_constraints() -> list[Constraint]:
    """Where SWAP_AB (the kernel run on C^T = B . A^T, the config's tiles still along M and N) is pruned."""
    return [
        Constraint(
            "swap_ab_wide_m",
            "SWAP_AB with BLOCK_M {BLOCK_M}: a tile of 64 rows already fills wgmma's M side (H100, M = 64: "
            "0.996-1.006x swapped on the large layers)",
            lambda c: not int(c.get("SWAP_AB", 0)) or int(c["BLOCK_M"]) < 64,
            knobs=("SWAP_AB", "BLOCK_M"),
        ),
        Constraint(
            "swap_ab_narrow_n",
            "SWAP_AB with BLOCK_N {BLOCK_N}: swapped, the N tile is wgmma's M side, which needs 64 rows",
            lambda c: not int(c.get("SWAP_AB", 0)) or int(c["BLOCK_N"]) >= 64,
            knobs=("SWAP_AB", "BLOCK_N"),
        ),
        Constraint(
            "swap_ab_reduce",
            "SWAP_AB with SPLIT_K {SPLIT_K} needs FUSED_SPLIT: the reduce kernel writes C row by row",
            lambda c: (
                not int(c.get("SWAP_AB", 0)) or int(c.get("SPLIT_K", 1)) == 1 or c.get("FUSED_SPLIT") == 1
            ),
            knobs=("SWAP_AB", "SPLIT_K", "FUSED_SPLIT"),
        ),
    ]


def _constraints(problem: Problem, target: Target) -> list[Constraint]:
    out = list(tile_constraints(problem, target))
    if "SWAP_AB" in quant_triton_params(problem.op, target):
        out += _swap_constraints()
    if problem.op == "gemm_mxfp4_bf16a":
        out.append(
            Constraint(
                "hw_fp4_cvt_target",
                f"HW_FP4_CVT {{HW_FP4_CVT}} on {target.arch}: A is quantized by v_cvt_scalef32_pk_fp4_bf16, "
                "which only gfx950 (MI355X) has; elsewhere in software (HW_FP4_CVT 0)",
                lambda c: not int(c.get("HW_FP4_CVT", 0)) or hw_fp4_cvt_target(target),
                knobs=("HW_FP4_CVT",),
            )
        )
    if problem.op == "gemm_mxfp4_bf16a" and not target.interpreter:
        out.append(
            Constraint(
                "quantize_registers",
                "quantizing a {BLOCK_M}x{BLOCK_K} bf16 tile in registers over {num_warps} warps needs "
                "more than 64 values a lane",
                lambda c: (
                    int(c["BLOCK_M"]) * int(c["BLOCK_K"]) <= 64 * int(c["num_warps"]) * target.wave_size
                ),
                knobs=("BLOCK_M", "BLOCK_K", "num_warps"),
            )
        )
    return out


def quant_default_candidates(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The heuristic's candidates for the default of a quantized GEMM, in order, each a member of its
    space: the rule's pick (`_rule_picks`) and its shallower or shorter variants, then the Triton kernel's
    default and its safer cores (`autotune.kernels.candidates`).

    The rule: gemm_fp8_blockwise on Hopper from M = GLUON_MIN_M on and for M in GLUON_DECODE_M above
    SWAPPED_MAX_M, where Gluon imports: the gluon kernel's (`gluon_default_config`); below, the Triton
    kernel's, swapped, with SCALES_AHEAD. The FP8 ops at M = 1 on NVIDIA: the GEMV kernel's
    (`_gemv_default`), but row-wise where the weight's tiles fill half the SMs the TMA kernel's, swapped
    (`_tma_fills_at_one_row`). Otherwise the Triton kernel's: decode (M <= 64) the narrowest M tile that
    covers M, a wide K tile and split-K while the tile grid underfills the GPU; prefill large tiles, as the
    dense GEMM.
    """
    return tuple(_candidates(problem, target))


def _candidates(problem: Problem, target: Target) -> Iterator[Config]:
    """`quant_default_candidates`, lazily: drawing the first computes the rule's pick alone."""

    def draw() -> Iterator[Config]:
        yield from _rule_picks(problem, target)
        yield from _triton_candidates(problem, target)

    return unique(draw())


def quant_default_config(problem: Problem, target: Target) -> Config:
    """The heuristic config of a quantized GEMM: the first of `quant_default_candidates` whose binary
    passes the static checks on `target` (`autotune.engine.verdicts.first_passing`). Always a member of
    its space."""
    return first_passing(get_op(problem.op), problem, target, _candidates(problem, target))


def _rule_picks(problem: Problem, target: Target) -> list[Config]:
    """The rule's pick where it is not the Triton kernel's default, each followed by its variants with
    shallower rings or shorter K steps; empty where the pick is `triton_default`."""
    lo, hi = GLUON_DECODE_M
    if swap_ab_target(target):
        lo = SWAPPED_MAX_M + 1  # the Triton kernel, swapped, below
        if lo <= problem.M <= hi and _ahead_wide(problem, target):
            return [_ahead_unswapped(problem, target)]
    gluon_m = problem.M >= GLUON_MIN_M or lo <= problem.M <= hi
    if gluon_m and gluon_runs(problem.op, target) and not gluon_missing():
        gluon = gluon_default_config(problem, target)
        if gluon is not None:
            return _shallower(gluon, _gluon_sub(problem, target))
    if problem.M == 1 and problem.op in GEMV_OPS and target.is_nvidia and not target.interpreter:
        picks: list[Config] = []
        if _tma_fills_at_one_row(problem, target):
            tma = _tma_default(problem, target, swapped=True)
            if tma is not None:
                picks += _shallower(tma, _tma_sub(problem, target))
        gemv = _gemv_default(problem, target)
        sub = _gemv_sub(problem, target)
        ks = sorted((int(k) for k in sub.params["BLOCK_K"] if int(k) < int(gemv["BLOCK_K"])), reverse=True)
        shorter = (gemv.replace(BLOCK_K=k) for k in ks)
        return [*picks, gemv, *(c for c in shorter if sub.check(c) is None)]
    if (
        problem.op == "gemm_fp8_rowwise"
        and tma_runs(problem.op, target)
        and not target.interpreter
        and 32 < problem.M <= 64
        and int(triton_default(problem, target)["SPLIT_K"]) == 1
    ):
        tma = _tma_default(problem, target)
        if tma is not None:
            return _shallower(tma, _tma_sub(problem, target))
    return []


def _shallower(pick: Config, sub: SubSpace) -> list[Config]:
    """`pick`, then the same with each shallower ring of `sub` that holds it."""
    stages = sorted(
        (int(s) for s in sub.params["num_stages"] if int(s) < int(pick["num_stages"])), reverse=True
    )
    return [pick, *(c for c in (pick.replace(num_stages=s) for s in stages) if sub.check(c) is None)]


#: Where the blockwise default at M = 33 to 64 is the Triton kernel unswapped with its scales ahead: at
#: least this many 64-wide column tiles (so that the unsplit grid fills most of the SMs) ...
_AHEAD_MIN_TILES = 64
#: ... and K of at least this (7 K tiles of 512).
_AHEAD_MIN_K = 3584


def _ahead_wide(problem: Problem, target: Target) -> bool:
    """Whether blockwise FP8 at M = 33 to 64 takes `_ahead_unswapped` rather than the gluon kernel: N of
    at least _AHEAD_MIN_TILES 64-wide tiles and K of at least _AHEAD_MIN_K. Narrower, the unsplit grid
    underfills the GPU and the gluon kernel's split wins; on shorter K the gluon kernel wins too
    (docs/notes/2026-11-23-fp8-blockwise-decode.md)."""
    return (
        problem.op == "gemm_fp8_blockwise"
        and not target.interpreter
        and cdiv(problem.N, 64) >= _AHEAD_MIN_TILES
        and problem.K >= _AHEAD_MIN_K
    )


def _ahead_unswapped(problem: Problem, target: Target) -> Config:
    """The Triton kernel unswapped on 64 x 64 tiles, K tiles of 512, 3 stages, the next K tile's scales
    loaded ahead (the fastest of the unswapped configs timed on these layers:
    docs/notes/2026-11-23-fp8-blockwise-decode.md)."""
    values: dict[str, Value] = dict(
        BLOCK_M=64, BLOCK_N=64, BLOCK_K=512, GROUP_M=1, SPLIT_K=1, FUSED_SPLIT=0, STREAM_K=0, SWAP_AB=0,
        SCALES_AHEAD=1, num_warps=4, num_stages=3,
    )  # fmt: skip
    sub = SubSpace("triton", quant_triton_params(problem.op, target), _constraints(problem, target))
    return fit_to_space(Config(values, backend="triton"), sub, ("num_stages", "BLOCK_K"))


def _tma_fills_at_one_row(problem: Problem, target: Target) -> bool:
    """Whether row-wise FP8 at M = 1 takes the TMA kernel swapped rather than the GEMV: where the weight's
    64-row tiles number at least half the SMs. On narrower layers the GEMV's many programs fill the GPU
    better (docs/notes/2026-11-26-fp8-decode-gap.md)."""
    return (
        problem.op == "gemm_fp8_rowwise"
        and tma_runs(problem.op, target)
        and 2 * cdiv(problem.N, 64) >= target.cu_count
    )


def _tma_default(problem: Problem, target: Target, swapped: bool = False) -> Config | None:
    """The TMA kernel at M = 33 to 64: 64 x 64 tiles, K tiles of 256, 5 stages. It beats the pointer
    kernel's default there where the tiles fill the GPU unsplit, but not at M = 2 to 32, which the pointer
    kernel, swapped, keeps (docs/notes/2026-11-22-fp8-rowwise-decode.md). `swapped` (row-wise at M = 1,
    `_tma_fills_at_one_row`): the same with the weight's 64 rows on wgmma's M side and 16-row activation
    tiles. None where no TMA config fits (rows not 16-byte aligned)."""
    values: dict[str, Value] = dict(
        BLOCK_M=16 if swapped else 64, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, PERSISTENT=0,
        SWAP_AB=int(swapped), num_warps=4, num_stages=5,
    )  # fmt: skip
    try:
        config = Config(values, backend="triton_tma")
        return fit_to_space(config, _tma_sub(problem, target), ("num_stages", "BLOCK_K"))
    except ValueError:
        return None


def _gemv_default(problem: Problem, target: Target) -> Config:
    """The FP8 GEMV kernel at M = 1 on NVIDIA: 4 columns of C per program, K steps of 1024, 4 warps,
    3 stages: close to the fastest GEMV config of each layer, and faster than the tiled kernel's default
    at M = 1. From M = 2 the tiled kernel wins, so it keeps M >= 2
    (docs/notes/2026-11-22-fp8-decode-ceiling.md); on AMD it keeps M = 1 too (not measured)."""
    sub = _gemv_sub(problem, target)
    config = Config(backend="triton_gemv", BLOCK_N=4, BLOCK_K=1024, num_warps=4, num_stages=3)
    if "STEP_SUM" in sub.params:  # row-wise: K steps summed at the end
        config = config.replace(STEP_SUM=0)
    return fit_to_space(config, sub, ("BLOCK_K", "BLOCK_N", "num_stages"))


#: The K tile of the swapped blockwise default with its scales ahead where `_long_single_wave` holds.
_AHEAD_LONG_K = 512


def _long_single_wave(
    problem: Problem, target: Target, bm: int, bn: int, split_k: int, ks: list[int]
) -> bool:
    """Whether the swapped blockwise decode default takes K tiles of 512 with 3 stages instead of 256 with 4:
    its tiles, unsplit, fit in one wave and K holds at least 4 such tiles. Elsewhere (a split K, K of 512
    or 1024, more than one wave of tiles) the longer K tile loses
    (docs/notes/2026-11-23-fp8-blockwise-decode.md)."""
    tiles = cdiv(problem.M, bm) * cdiv(problem.N, bn)
    long_k = problem.K >= 4 * _AHEAD_LONG_K and _AHEAD_LONG_K in ks
    return split_k == 1 and tiles <= target.cu_count and long_k


def _triton_core(problem: Problem, target: Target) -> Core:
    """The Triton kernel's tile, K step, warps and stages for the regime, clamped to the problem (with
    the blockwise kernel's scales ahead where it is swapped: 4 stages, or K steps of 512 on 3 stages where
    `_long_single_wave`)."""
    params = quant_triton_params(problem.op, target)
    ks = [int(v) for v in params["BLOCK_K"]]
    M, N = problem.M, problem.N
    if target.interpreter:
        bm, bn, bk, warps, stages = 16, 32, 32, 4, 1
    elif M <= 64:
        bm, bn, bk = max(_MIN_TILE, next_pow2(M)), 64, ks[-2] if len(ks) > 1 else ks[-1]
        # FP8 on NVIDIA: 5 stages keep more of B in flight; large layers gain, small ones and the lm_heads
        # lose a little (docs/notes/2026-11-22-fp8-rowwise-decode.md)
        warps, stages = 4, 2 if target.is_amd else 5 if problem.op.startswith("gemm_fp8") else 3
    elif target.is_amd:
        bm, bn, bk, warps, stages = 256, 256, ks[1], 8, 2
    elif problem.op == "gemm_fp8_blockwise":
        # each K group's product is scaled before it is added: 128x128 tiles need 8 warps for that, 4 run
        # them at about half the speed
        bm, bn, bk, warps, stages = 128, 128, ks[1], 8, 4
    else:
        bm, bn, bk, warps, stages = 128, 128, ks[1], 4, 3
    bm = min(bm, max(_MIN_TILE, next_pow2(M)))
    bn = min(bn, max(32 if not target.interpreter else 16, next_pow2(N)))
    bk = max(ks[0], min(bk, next_pow2(problem.K)))
    if "SCALES_AHEAD" in params and _swapped(params, bm, bn):  # with the scales ahead, 4 stages beat 5
        stages = 4
        split_k = pick_split_k(problem, target, bm, bn, bk, params["SPLIT_K"])
        if _long_single_wave(problem, target, bm, bn, split_k, ks):
            bk, stages = _AHEAD_LONG_K, 3
    return Core(bm, bn, bk, warps, stages)


def _swapped(params: Mapping[str, Sequence[Value]], bm: int, bn: int) -> bool:
    """SWAP_AB where it is a knob, the M tile is narrower than wgmma's 64 rows and the N tile fills them:
    faster than unswapped (row-wise) and than the gluon kernel's default (blockwise, with SCALES_AHEAD) at
    M = 2 to 32 (docs/notes/2026-11-22-fp8-rowwise-decode.md, 2026-11-23-fp8-blockwise-decode.md)."""
    return "SWAP_AB" in params and bm < 64 and bn >= 64


def _triton_config(problem: Problem, target: Target, core: Core) -> Config:
    """`core` with the knobs the rule derives from it: GROUP_M over several rows of tiles, split-K (fused,
    FP8) where the tile grid underfills the GPU, SWAP_AB (`_swapped`) with the blockwise scales ahead, and
    on AMD 16x16 MFMAs, XCD remapping, kpack on gfx942 (2 for FP8)."""
    params = quant_triton_params(problem.op, target)
    M, N = problem.M, problem.N
    bm, bn, bk, warps, stages = core
    values: dict[str, Value] = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
    values["GROUP_M"] = 8 if cdiv(M, bm) > 1 and 8 in params["GROUP_M"] else 1
    values["SPLIT_K"] = pick_split_k(problem, target, bm, bn, bk, params["SPLIT_K"])
    if "STREAM_K" in params:
        values["FUSED_SPLIT"] = 1 if int(values["SPLIT_K"]) > 1 else 0  # one launch beats a reduce kernel
        values["STREAM_K"] = 0
    if "SWAP_AB" in params:
        values["SWAP_AB"] = int(_swapped(params, bm, bn))
    if "SCALES_AHEAD" in params:
        values["SCALES_AHEAD"] = int(values.get("SWAP_AB", 0))
    if "HW_FP4_CVT" in params:
        values["HW_FP4_CVT"] = 0  # the software quantizer until the conversion is timed on an MI355X
    if target.is_amd:
        values["matrix_instr_nonkdim"] = 16
        values["waves_per_eu"] = 0
        tiles = cdiv(M, bm) * cdiv(N, bn)
        values["NUM_XCDS"] = target.xcds if tiles >= 2 * target.xcds else 1
        if "kpack" in params:
            values["kpack"] = 2 if problem.op.startswith("gemm_fp8") else 1
    return Config(values, backend="triton")


def triton_default(problem: Problem, target: Target) -> Config:
    """The heuristic config of the Triton kernel (see `quant_default_candidates`)."""
    sub = SubSpace("triton", quant_triton_params(problem.op, target), _constraints(problem, target))
    return fit_to_space(
        _triton_config(problem, target, _triton_core(problem, target)),
        sub,
        ("num_stages", "BLOCK_K", "BLOCK_N", "BLOCK_M", "num_warps"),
    )


def _triton_candidates(problem: Problem, target: Target) -> Iterator[Config]:
    """The Triton kernel's default, then its safer cores (`autotune.kernels.candidates`), lazily."""
    yield triton_default(problem, target)
    if target.interpreter:
        return
    params = quant_triton_params(problem.op, target)
    sub = SubSpace("triton", params, _constraints(problem, target))
    core = _triton_core(problem, target)
    yield from space_ladder(core, params, sub, lambda c: _triton_config(problem, target, c))


def tma_runs(op: str, target: Target) -> bool:
    """Whether op `op` has the TMA kernel on `target`: the FP8 ops where tensor descriptors exist."""
    return op.startswith("gemm_fp8") and has_tma(target)


#: The quantized GEMMs with a Gluon kernel (`quant.gluon`).
GLUON_OPS = ("gemm_fp8_blockwise",)


def gluon_runs(op: str, target: Target) -> bool:
    """Whether op `op` has the Gluon kernel on `target`: gemm_fp8_blockwise on Hopper."""
    return op in GLUON_OPS and gluon_target(target)


def triton_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The Triton kernel's configs, the heuristic default first (the op's, or this kernel's own)."""
    first = default or triton_default(problem, target)
    params = quant_triton_params(problem.op, target)
    return SubSpace("triton", params, _constraints(problem, target), first=(first,))


def tma_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The TMA kernel's configs, the op's default first where it is one of them."""
    return _tma_sub(problem, target, () if default is None else (default,))


def gemv_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The FP8 GEMV kernel's configs, the op's default first where it is one of them."""
    return _gemv_sub(problem, target, () if default is None else (default,))


def gluon_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The gluon kernel's configs, the heuristic default first (the op's, or this kernel's own)."""
    first = default or gluon_default_config(problem, target)
    return _gluon_sub(problem, target, () if first is None else (first,))


# -- triton_tma ---------------------------------------------------------------------------------------


def quant_tma_params(target: Target) -> dict[str, Sequence[Value]]:
    """The knobs of the row-wise TMA kernel: M tiles from 16 (decode, swapped) to 256, N tiles of at least
    64 rows (wgmma's M side when swapped)."""
    if target.interpreter:
        return dict(BLOCK_M=(16, 32), BLOCK_N=(16, 32), BLOCK_K=(32, 64), GROUP_M=(1, 4), SPLIT_K=(1, 2),
                    PERSISTENT=(0, 1), SWAP_AB=(0, 1), num_warps=(4,), num_stages=(1,))  # fmt: skip
    return dict(
        BLOCK_M=(16, 32, 64, 128, 256),
        BLOCK_N=(64, 128, 256),
        BLOCK_K=(64, 128, 256, 512),
        GROUP_M=(1, 8),
        SPLIT_K=(1, 2, 3, 4),
        PERSISTENT=(0, 1),
        SWAP_AB=(0, 1),
        num_warps=(4, 8),
        num_stages=(2, 3, 4, 5, 6),
    )


#: The largest M at which the blockwise TMA kernel is searched where the gluon kernel runs (decode).
TMA_BLOCKWISE_MAX_M = 64


def _tma_quant_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The dense TMA kernel's constraints (alignment, shared memory, tile waste, PERSISTENT ...; those of
    its split tail hold trivially, as this kernel has no TAIL_SPLIT) and the row-wise kernel's own."""
    out = [*tma_constraints(problem, target), _swap_constraints()[0]]
    if problem.op == "gemm_fp8_blockwise":
        out.append(
            Constraint(
                "tma_weight_scale_block",
                "BLOCK_N {BLOCK_N}: the weight's tile must lie in one 128-row scale block",
                lambda c: 128 % int(c["BLOCK_N"]) == 0,
                knobs=("BLOCK_N",),
            )
        )
        if gluon_target(target) and problem.M > TMA_BLOCKWISE_MAX_M:  # first: the reason for every config
            out.insert(
                0,
                Constraint(
                    "tma_blockwise_prefill",
                    f"M {problem.M} > {TMA_BLOCKWISE_MAX_M}: like the pointer kernel, the blockwise TMA "
                    "kernel waits for every scale group's product before the next multiply, where the "
                    "gluon kernel's stay in flight (H100, a TMA prototype of it at M = 2048: 0.64-0.66x "
                    "the gluon kernel)",
                    lambda c: False,
                    knobs=(),
                ),
            )
    if not target.interpreter:
        out.append(
            Constraint(
                "tma_wgmma_rows",
                "BLOCK_M {BLOCK_M} unswapped: wgmma needs 64 rows on its M side (SWAP_AB puts N there)",
                lambda c: bool(int(c["SWAP_AB"])) or int(c["BLOCK_M"]) >= 64,
                knobs=("SWAP_AB", "BLOCK_M"),
            )
        )
    return out


def _tma_sub(problem: Problem, target: Target, first: Sequence[Config] = ()) -> SubSpace:
    constraints = _tma_quant_constraints(problem, target)
    return SubSpace("triton_tma", quant_tma_params(target), constraints, first=first)


#: The quantized GEMMs with a GEMV kernel (`quant.gemv`).
GEMV_OPS = ("gemm_fp8_rowwise", "gemm_fp8_blockwise")


def _gemv_sub(problem: Problem, target: Target, first: Sequence[Config] = ()) -> SubSpace:
    """The FP8 GEMV kernel's knobs (the dense GEMV's; row-wise also STEP_SUM, `quant.gemv`) and
    constraints; blockwise K steps lie in one scale group or cover whole groups."""
    constraints = list(gemv_constraints(problem, target))
    params = gemv_params(target)
    if problem.op == "gemm_fp8_rowwise":
        params["STEP_SUM"] = (0, 1)
    if problem.op == "gemm_fp8_blockwise":
        constraints.append(
            Constraint(
                "gemv_scale_groups",
                "a blockwise K step must divide the 128-wide scale group or cover whole groups",
                lambda c: (int(c["BLOCK_K"]) % 128 == 0) or (128 % int(c["BLOCK_K"]) == 0),
                knobs=("BLOCK_K",),
            )
        )
    return SubSpace("triton_gemv", params, constraints, first=first)


# -- gluon --------------------------------------------------------------------------------------------

#: The least M whose default is the gluon kernel: at prefill it keeps the next K group's multiply in flight
#: while scaling this one, where the Triton kernel waits for each
#: (docs/notes/2026-11-22-fp8-blockwise-prefill.md).
GLUON_MIN_M = 256
#: The decode M whose default is the gluon kernel too, faster there than the Triton kernel's unswapped
#: default (docs/notes/2026-11-23-fp8-blockwise-decode.md). M = 1 keeps the GEMV; M of 65 to 255 (not
#: measured) the Triton kernel. Where SWAP_AB exists, the swapped Triton kernel takes M up to SWAPPED_MAX_M.
GLUON_DECODE_M = (2, 64)
#: Where the Triton kernel swapped (SWAP_AB, `swap_ab_target`) takes over the blockwise decode default from
#: the gluon kernel: M = 2 to 32, whose 16- or 32-row tiles leave wgmma's 64-row side to the weight
#: (docs/notes/2026-11-23-fp8-blockwise-decode.md).
SWAPPED_MAX_M = 32
#: The gluon kernel's knobs; each K step is one 128-wide scale group (BLOCK_K is fixed).
GLUON_PARAMS: Mapping[str, Sequence[Value]] = {
    "BLOCK_M": (16, 32, 64, 128),
    "BLOCK_N": (64, 128),
    "num_warps": (4, 8),
    "num_stages": (3, 4, 5, 6),
    "PERSISTENT": (0, 1),
    "GROUP_M": (1, 8),
    "WARP_SPEC": (0, 1),
    "SPLIT_K": (1, 2, 3, 4),
    "SWAP_AB": (0, 1),
}
_GLUON_BLOCK_K = 128
#: The largest M the gluon kernel runs swapped (SWAP_AB: the activations' rows on wgmma's N side): a
#: decode tile of 16 or 32 rows. At M = 64 the swapped kernel lost to the op's default on every layer
#: measured (docs/notes/2026-11-26-gluon-swapped-decode.md).
GLUON_SWAP_MAX_M = 32
#: fp32 values a lane holds of the three tiles in its K loop (the accumulator, the product being scaled,
#: the product in flight). 192 compiles for sm_90 without spills; 384 (128x128 on 4 warps) spills and
#: serializes the wgmmas.
_GLUON_TILE_VALUES = 192


def gluon_target(target: Target) -> bool:
    """Hopper (sm_90, sm_90a): the one arch the gluon kernel's wgmma exists on (not Blackwell, not AMD,
    not the interpreter: Gluon has none)."""
    return target.is_nvidia and target.arch.rstrip("a") == "sm_90"


@cache
def gluon_missing() -> str:
    """Why the gluon kernel cannot be imported here ("" when it can): it needs a Triton with Gluon for
    Hopper (triton.experimental.gluon). Imports it, once per process."""
    try:
        importlib.import_module("autotune.kernels.quant.gluon")
    except Exception as exc:  # no Triton, or one without Gluon or with other names for its calls
        return (
            "the gluon kernel needs a Triton with Gluon for Hopper (triton.experimental.gluon), and it "
            f"does not import here: {type(exc).__name__}: {exc}"
        )
    return ""


def _gluon_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The gluon kernel's rules: what its wgmma layout takes (`_gluon_layout_rules`), no tile, group,
    persistent grid or K split that does nothing (`_gluon_grid_rules`), and shared memory for the ring, the
    C tile and the mbarriers."""
    return [
        *_gluon_layout_rules(problem, target),
        *_gluon_grid_rules(problem, target),
        _gluon_smem(problem, target),
    ]


def _gluon_swapped(c: Mapping[str, Value]) -> bool:
    """Whether a gluon config runs swapped: SWAP_AB 1 (a config stored without the knob runs unswapped)."""
    return bool(int(c.get("SWAP_AB", 0)))


def _gluon_layout_rules(problem: Problem, target: Target) -> list[Constraint]:
    """C rows aligned for its TMA store; SWAP_AB only at decode and on the tiles and warps the swapped
    kernel takes; unswapped, whole 64-row warpgroups; three fp32 tiles a lane without spills."""
    M, N = problem.M, problem.N
    aligned = N * int(DTYPE_BYTES[problem.dtype_out]) % 16 == 0  # A and B rows are K bytes, a multiple of 128
    return [
        Constraint(
            "gluon_tma_alignment",
            f"C is stored by TMA: its rows need 16-byte alignment (N={N} in {problem.dtype_out})",
            lambda c: aligned,
            knobs=(),
        ),
        Constraint(
            "gluon_swap_decode",
            f"SWAP_AB at M={M} > {GLUON_SWAP_MAX_M}: swapped, the activations' rows are wgmma's N side, a "
            "decode tile of 16 or 32 rows (at M = 64 the swapped kernel lost to the default on every layer "
            "measured, H100 and H200)",
            lambda c: not _gluon_swapped(c) or M <= GLUON_SWAP_MAX_M,
            knobs=("SWAP_AB",),
        ),
        Constraint(
            "gluon_swap_tiles",
            "SWAP_AB with BLOCK_M {BLOCK_M}, BLOCK_N {BLOCK_N}, {num_warps} warps: swapped, the weight's "
            "BLOCK_N rows (64 or 128, one scale a tile) are wgmma's M side over one warpgroup, the "
            "activations' BLOCK_M (16, 32 or 64) its N side (the kernel refuses others)",
            lambda c: (
                not _gluon_swapped(c)
                or (int(c["BLOCK_M"]) <= 64 and int(c["BLOCK_N"]) >= 64 and int(c["num_warps"]) == 4)
            ),
            knobs=("SWAP_AB", "BLOCK_M", "BLOCK_N", "num_warps"),
        ),
        Constraint(
            "gluon_warp_rows",
            "the kernel's wgmma layout stacks warps along M in 64-row warpgroups, 16 rows a warp: "
            "{num_warps} warps need a multiple of 64 rows, at least 16 x {num_warps}, not BLOCK_M {BLOCK_M} "
            "(unswapped; the kernel refuses it)",
            lambda c: (
                _gluon_swapped(c)
                or (int(c["BLOCK_M"]) % 64 == 0 and int(c["BLOCK_M"]) >= 16 * int(c["num_warps"]))
            ),
            knobs=("SWAP_AB", "BLOCK_M", "num_warps"),
        ),
        Constraint(
            "gluon_register_spill",
            "three fp32 {BLOCK_M}x{BLOCK_N} tiles (accumulator, product being scaled, product in flight) "
            f"over {{num_warps}} warps exceed {_GLUON_TILE_VALUES} values a lane: ptxas spills",
            lambda c: (
                3 * int(c["BLOCK_M"]) * int(c["BLOCK_N"])
                <= _GLUON_TILE_VALUES * int(c["num_warps"]) * target.wave_size
            ),
            knobs=("BLOCK_M", "BLOCK_N", "num_warps"),
        ),
    ]


def _gluon_grid_rules(problem: Problem, target: Target) -> list[Constraint]:
    """No tile wider than the problem needs (wgmma's least rows stay), GROUP_M only over several rows of
    tiles, PERSISTENT only over more tiles than SMs, SPLIT_K only where the tiles underfill the SMs and
    every slice has a K group."""
    M, N, cus = problem.M, problem.N, target.cu_count
    groups = cdiv(problem.K, _GLUON_BLOCK_K)

    def tiles(c: Mapping[str, Value]) -> int:
        return cdiv(M, int(c["BLOCK_M"])) * cdiv(N, int(c["BLOCK_N"]))

    return [
        Constraint(
            "block_m_waste",
            f"BLOCK_M {{BLOCK_M}} > next_pow2(M={M}): rows computed for nothing (wgmma's least: 64 rows "
            "unswapped, 16 swapped)",
            lambda c: int(c["BLOCK_M"]) <= max(16 if _gluon_swapped(c) else 64, next_pow2(M)),
            knobs=("BLOCK_M", "SWAP_AB"),
        ),
        Constraint(
            "block_n_waste",
            f"BLOCK_N {{BLOCK_N}} > next_pow2(N={N}): columns computed for nothing",
            lambda c: int(c["BLOCK_N"]) <= max(64, next_pow2(N)),
            knobs=("BLOCK_N",),
        ),
        Constraint(
            "group_m_redundant",
            f"GROUP_M {{GROUP_M}} with one row of tiles (M={M}) equals GROUP_M 1",
            lambda c: int(c["GROUP_M"]) == 1 or cdiv(M, int(c["BLOCK_M"])) > 1,
            knobs=("GROUP_M", "BLOCK_M"),
        ),
        Constraint(
            "persistent_needless",
            f"PERSISTENT with no more tiles than the {cus} SMs: every program does one",
            lambda c: not int(c["PERSISTENT"]) or tiles(c) > cus,
            knobs=("PERSISTENT", "BLOCK_M", "BLOCK_N"),
        ),
        Constraint(  # (and so never with PERSISTENT, which the kernel refuses with SPLIT_K)
            "gluon_split_needless",
            f"SPLIT_K {{SPLIT_K}} where the tiles alone (M={M}, N={N}) fill the {cus} SMs",
            lambda c: int(c.get("SPLIT_K", 1)) == 1 or tiles(c) < cus,
            knobs=("SPLIT_K", "BLOCK_M", "BLOCK_N"),
        ),
        Constraint(
            "gluon_split_empty",
            f"SPLIT_K {{SPLIT_K}} over {groups} K groups of {_GLUON_BLOCK_K} leaves a slice empty",
            lambda c: split_slices(groups, int(c.get("SPLIT_K", 1))) == int(c.get("SPLIT_K", 1)),
            knobs=("SPLIT_K",),
        ),
    ]


def _gluon_smem(problem: Problem, target: Target) -> Constraint:
    """The ring of A and B tiles, the C tile and the mbarriers in shared memory."""
    out_bytes = int(DTYPE_BYTES[problem.dtype_out])

    def smem(c: Mapping[str, Value]) -> int:
        bm, bn, stages = int(c["BLOCK_M"]), int(c["BLOCK_N"]), int(c["num_stages"])
        barriers = 2 if int(c.get("WARP_SPEC", 0)) else 1  # WARP_SPEC: "ready" and "empty" per slot
        return stages * (bm + bn) * _GLUON_BLOCK_K + bm * bn * out_bytes + 8 * stages * barriers

    return Constraint(
        "lds_overflow",
        f"A and B tiles x stages + the C tile need more than the {target.lds_bytes} bytes of shared memory",
        lambda c: smem(c) <= target.lds_bytes,
        knobs=("BLOCK_M", "BLOCK_N", "num_stages", "WARP_SPEC"),
    )


def _gluon_sub(problem: Problem, target: Target, first: Sequence[Config] = ()) -> SubSpace:
    return SubSpace("gluon", GLUON_PARAMS, _gluon_constraints(problem, target), first=first)


def gluon_default_config(problem: Problem, target: Target) -> Config | None:
    """The heuristic gluon config: 128x128 tiles on 8 warps (two warpgroups) with WARP_SPEC and 5 stages
    (the fastest prefill config: docs/notes/2026-11-22-fp8-blockwise-prefill.md), PERSISTENT where the
    tiles outnumber the SMs, GROUP_M 8 over several rows of tiles. Decode (M <= 64): 64x64 tiles on 4
    warps, 6 stages, no WARP_SPEC, and the largest SPLIT_K up to 4 whose programs still fit the SMs in one
    wave (close to the fastest gluon config at decode: docs/notes/2026-11-23-fp8-blockwise-decode.md).
    Fitted to the space; None where no gluon config fits the problem."""
    M, N = problem.M, problem.N
    small = M <= 64
    bm, bn, warps = (64, 64, 4) if small else (128, 128, 8)
    tiles = cdiv(M, bm) * cdiv(N, bn)
    groups = cdiv(problem.K, _GLUON_BLOCK_K)
    split = 1
    if small:  # whole waves only: a split whose programs overflow the SMs waits for a second wave
        fits = [s for s in (4, 3, 2) if tiles * s <= target.cu_count and split_slices(groups, s) == s]
        split = fits[0] if fits else 1
    values: dict[str, Value] = dict(
        BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=6 if small else 5,
        PERSISTENT=int(tiles > target.cu_count), GROUP_M=8 if cdiv(M, bm) > 1 else 1,
        WARP_SPEC=int(not small), SPLIT_K=split, SWAP_AB=0,
    )  # fmt: skip
    try:
        return fit_to_space(
            Config(values, backend="gluon"), _gluon_sub(problem, target), ("num_stages", "BLOCK_N", "BLOCK_M")
        )
    except ValueError:  # every config breaks a constraint (C rows not 16-byte aligned)
        return None


@lru_cache(maxsize=256)
def _cached_space(
    problem: Problem, target: Target, backends: tuple[Backend, ...], reasons: tuple[str, ...]
) -> SearchSpace:
    default = quant_default_config(problem, target)
    # vendor libraries, then the default's backend, then the rest
    ranked = sorted(backends, key=lambda b: 0 if b.library else 1 if b.name == default.backend else 2)
    return SearchSpace([b.space(problem, target, default) for b in ranked])


def quant_space(
    problem: Problem, target: Target, backends: Backends, names: Sequence[str] | None
) -> SearchSpace:
    """The backends named (all of `target`'s for None; ValueError for another) in the op's order, vendor
    libraries first (each one config), then the backend of the heuristic default with the default first,
    then the other kernels (each with its heuristic default first). A backend that cannot run the problem
    here (`Backend.absent`: torch._scaled_mm without the op's scaling mode, gluon where it does not import)
    is its one config, pruned with the reason. Cached per (problem, target, backends, reasons)."""
    if problem.op not in QUANT_OPS:
        raise ValueError(f"not a quantized GEMM: {problem.op}")
    chosen = backends.chosen(target, names)
    order = list(backends)
    chosen.sort(key=order.index)
    reasons = tuple(b.absent(problem, target) for b in chosen if b.absent is not None)
    return _cached_space(problem, target, tuple(chosen), reasons)
