"""Arch-aware search space and heuristic default config of the fused MoE (vLLM's parameter names)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from autotune.core.config import Config, Value
from autotune.core.problem import DTYPE_BYTES, Problem, next_pow2
from autotune.core.registry import get_op
from autotune.core.space import Constraint, SubSpace
from autotune.core.target import Target
from autotune.engine.verdicts import first_passing
from autotune.kernels.candidates import Core, candidates, safer_cores
from autotune.kernels.common.target import mx_native
from autotune.kernels.moe.params import experts

__all__ = [
    "FP8_BLOCK",
    "moe_constraints",
    "moe_default_candidates",
    "moe_default_config",
    "moe_params",
    "tokens_per_expert",
]

#: The block of the FP8 weight scales (rows of N x columns of K), and of the activation groups along K.
FP8_BLOCK = 128
_MIN_TILE = 16
#: MXFP4 weights: the problem's `dtype_b`, and the elements of K one e8m0 scale covers.
_MXFP4 = "fp4e2m1"
_MX_GROUP = 32
#: 32-bit registers a lane may give the accumulators and the weight tile being decoded on the emulated
#: MXFP4 path (of 512 VGPRs on CDNA3/4, 255 on Hopper).
_MX_LANE_REGISTERS = {True: 256, False: 160}


def _mxfp4(problem: Problem) -> bool:
    return problem.dtype_b == _MXFP4


def _fp8(problem: Problem) -> bool:
    return problem.dtype_b.startswith("fp8")


def _fewest_rows(problem: Problem, target: Target) -> int:
    """The row block no routing makes wasteful: 64 for FP8 weights on NVIDIA sm_90 and newer (a warp
    group's MMA; smaller blocks run FP8 through MMAs of another shape, and vLLM's 64-row FP8 tiles beat
    our 16-row ones from 16 tokens an expert: docs/notes/2026-11-28-moe-untuned.md), else the least tile."""
    if _fp8(problem) and target.sm >= 90:  # 0 off NVIDIA
        return 64
    return _MIN_TILE


def tokens_per_expert(problem: Problem) -> float:
    """Mean (token, expert) pairs per expert under uniform routing: the M of each expert's GEMM."""
    E, topk = experts(problem)
    return problem.M * topk / E


def moe_params(problem: Problem, target: Target) -> dict[str, Sequence[Value]]:
    """The knobs of the fused MoE kernel on `target`: vLLM's six, SPLIT_K (K slices of each GEMM, summed
    in its launch; vLLM's kernel has none, so exported files carry only SPLIT_K 1 configs), GATE_UP_FUSED
    (the first GEMM's structure: 1 ours, 0 vLLM's, the only one exported to vLLM files), B_TMA on NVIDIA
    sm_90 and newer (the weight tiles through tensor descriptors; vLLM's kernel loads them by pointer, so
    exported files carry only B_TMA 0 configs), PERSISTENT (1 or 2 programs an SM walking the tiles, one
    loop over tiles and K steps; vLLM's kernel runs a program a tile, so exported files carry only
    PERSISTENT 0; not in the interpreter's space) and AMD's three on AMD. MXFP4 weights add
    BLOCK_SIZE_N_DOWN (the down GEMM's column tile; the other weights' kernels use BLOCK_SIZE_N for both
    GEMMs) and take K tiles of whole 32-wide scale groups."""
    fp8 = _fp8(problem)
    mx = _mxfp4(problem)
    if target.interpreter:
        tiny: dict[str, Sequence[Value]] = dict(
            BLOCK_SIZE_M=(16, 32),
            BLOCK_SIZE_N=(32,),
            BLOCK_SIZE_K=(32, 64),
            GROUP_SIZE_M=(1, 4),
            SPLIT_K=(1, 2),
            GATE_UP_FUSED=(1, 0),
            num_warps=(4,),
            num_stages=(1,),
        )
        return {**tiny, "BLOCK_SIZE_N_DOWN": (32, 64)} if mx else tiny
    common: dict[str, Sequence[Value]] = dict(
        BLOCK_SIZE_M=(16, 32, 64, 128),
        BLOCK_SIZE_N=(32, 64, 128, 256),
        BLOCK_SIZE_K=(64, 128) if fp8 else (64, 128, 256) if mx else (32, 64, 128, 256),
        GROUP_SIZE_M=(1, 16, 32, 64),
        SPLIT_K=(1, 2, 4, 8),
        GATE_UP_FUSED=(1, 0),
        num_warps=(4, 8),
    )
    if mx:
        common["BLOCK_SIZE_N_DOWN"] = (32, 64, 128, 256)
    if target.tma and not mx:
        common["B_TMA"] = (0, 1)
    if not mx:
        common["PERSISTENT"] = (0, 1, 2)
    if target.is_amd:
        amd: dict[str, Sequence[Value]] = dict(
            num_stages=(1, 2), matrix_instr_nonkdim=(16, 32), waves_per_eu=(0, 1, 2)
        )
        if target.arch == "gfx942":
            amd["kpack"] = (1, 2)
        return {**common, **amd}
    return {**common, "num_stages": (2, 3, 4, 5)}


def _max_row_blocks(problem: Problem, bm: int) -> int:
    """The most row blocks of `bm` rows any routing can give: every busy expert's rows padded to bm."""
    E, topk = experts(problem)
    pairs = problem.M * topk
    return -(-(pairs + min(E, pairs) * (bm - 1)) // bm)


def _gate_up_tiles(problem: Problem, bm: int, bn: int) -> int:
    """The most tiles of the gate/up GEMM's grid (row blocks x column tiles of bn) over any routing."""
    return _max_row_blocks(problem, bm) * -(-problem.N // bn)


def moe_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The fused kernel's constraints on `problem` and `target`: the grid's (`_moe_grid_rules`), the tiles'
    shared memory and warps, MXFP4's (`_mx_rules`), PERSISTENT's, and those of the weights' format and the
    target (`_moe_format_rules`)."""
    tpe = tokens_per_expert(problem)

    # The kernel's grid walks the row blocks of ALL experts (each expert's rows padded to BLOCK_SIZE_M) in
    # GROUP_SIZE_M swizzle order, in both GEMMs; a group as large as the number of row blocks, or larger,
    # walks them in one order. At most min(E, M·topk) experts are busy.
    def max_row_blocks(bm: int) -> int:
        return _max_row_blocks(problem, bm)

    def gate_up_tiles(c: Mapping[str, Value]) -> int:
        return _gate_up_tiles(problem, int(c["BLOCK_SIZE_M"]), int(c["BLOCK_SIZE_N"]))

    mx = _mxfp4(problem)
    lds = _moe_lds(problem, target)
    out = [
        *_moe_grid_rules(problem, target, tpe, max_row_blocks, gate_up_tiles),
        *_moe_tile_rules(target, lds, mx),
    ]
    if mx:
        out += _mx_rules(problem, target)
    if not mx and not target.interpreter:
        out += _persistent_rules(target, lds)
    return out + _moe_format_rules(problem, target)


def _moe_lds(problem: Problem, target: Target) -> Callable[[Mapping[str, Value]], int]:
    """The shared memory/LDS bytes of a config's A and B tiles x the stages it buffers (one fewer on AMD):
    two B tiles with GATE_UP_FUSED; with MXFP4 weights, bf16 A and B staged upcast with its scales, the
    down GEMM's B tile where wider; activations in FP8 where the weights are."""
    fp8 = _fp8(problem)
    # with FP8 weights the activations are quantized to FP8 too before the kernel loads them
    elem = 1 if fp8 else max(DTYPE_BYTES[problem.dtype_a], DTYPE_BYTES[problem.dtype_b])
    mx = _mxfp4(problem)

    def lds(c: Mapping[str, Value]) -> int:
        stages = int(c["num_stages"])
        buffers = max(1, stages - 1) if target.is_amd else max(1, stages)
        # the fused gate/up GEMM loads two B tiles (gate rows and up rows) per step, vLLM's structure one
        b_rows = (1 + int(c["GATE_UP_FUSED"])) * int(c["BLOCK_SIZE_N"])
        bk = int(c["BLOCK_SIZE_K"])
        if mx:  # bf16 A; B is read packed but staged upcast: two bytes a weight, and its scale bytes
            b_row_bytes = bk * 2 + bk // _MX_GROUP
            a_bytes = int(c["BLOCK_SIZE_M"]) * bk * DTYPE_BYTES[problem.dtype_a]
            b_rows = max(b_rows, int(c["BLOCK_SIZE_N_DOWN"]))  # the down GEMM's B tile, one a step
            return int((a_bytes + b_rows * b_row_bytes) * buffers)
        rows = int(c["BLOCK_SIZE_M"]) + b_rows
        return int(rows * bk * elem * buffers)

    return lds


def _moe_grid_rules(
    problem: Problem,
    target: Target,
    tpe: float,
    max_row_blocks: Callable[[int], int],
    gate_up_tiles: Callable[[Mapping[str, Value]], int],
) -> list[Constraint]:
    """SPLIT_K only on grids that underfill the CUs and within the K steps; no row tile wider than twice
    the tokens per expert `tpe` need, no column tile wider than N; no GROUP_SIZE_M above a group that
    already walks every row block (`max_row_blocks`, the most any routing gives)."""
    groups = sorted(int(v) for v in moe_params(problem, target)["GROUP_SIZE_M"])
    return [
        Constraint(
            "split_k_needless",
            f"SPLIT_K {{SPLIT_K}} x the gate/up GEMM's tiles (at most, over any routing) exceeds 2 x the "
            f"{target.cu_count} CUs: the grid is full without slices",
            lambda c: int(c["SPLIT_K"]) == 1 or gate_up_tiles(c) * int(c["SPLIT_K"]) <= 2 * target.cu_count,
            knobs=("SPLIT_K", "BLOCK_SIZE_M", "BLOCK_SIZE_N"),
            search_only=True,
        ),
        Constraint(
            "split_k_steps",
            f"SPLIT_K {{SPLIT_K}} exceeds the K steps of the gate/up GEMM (K={problem.K} / BLOCK_SIZE_K "
            "{BLOCK_SIZE_K})",
            lambda c: int(c["SPLIT_K"]) <= -(-problem.K // int(c["BLOCK_SIZE_K"])),
            knobs=("SPLIT_K", "BLOCK_SIZE_K"),
        ),
        Constraint(
            "block_m_waste",
            f"BLOCK_SIZE_M {{BLOCK_SIZE_M}} > 2 x next_pow2({tpe:.1f} tokens per expert): padded rows",
            lambda c: (
                int(c["BLOCK_SIZE_M"])
                <= max(_fewest_rows(problem, target), 2 * next_pow2(max(1, round(tpe))))
            ),
            knobs=("BLOCK_SIZE_M",),
        ),
        Constraint(
            "block_n_waste",
            f"BLOCK_SIZE_N {{BLOCK_SIZE_N}} > next_pow2(N={problem.N})",
            lambda c: int(c["BLOCK_SIZE_N"]) <= max(32, next_pow2(problem.N)),
            knobs=("BLOCK_SIZE_N",),
        ),
        Constraint(
            "group_m_redundant",
            "GROUP_SIZE_M {GROUP_SIZE_M} exceeds the row blocks of the routed tokens: a smaller group "
            "walks them in the same order",
            lambda c: (
                not any(
                    h < int(c["GROUP_SIZE_M"]) and h >= max_row_blocks(int(c["BLOCK_SIZE_M"])) for h in groups
                )
            ),
            knobs=("GROUP_SIZE_M", "BLOCK_SIZE_M"),
        ),
    ]


def _moe_tile_rules(target: Target, lds: Callable[[Mapping[str, Value]], int], mx: bool) -> list[Constraint]:
    """The tiles x stages within shared memory/LDS (`lds`; `mx`: MXFP4 weights, whose down GEMM's tile
    counts too), no idle warps."""
    return [
        Constraint(
            "lds_overflow",
            f"the A and B tiles (two with GATE_UP_FUSED) x stages need more than the {target.lds_bytes} "
            "bytes of shared memory/LDS",
            lambda c: target.interpreter or lds(c) <= target.lds_bytes,
            knobs=(
                "num_stages",
                "BLOCK_SIZE_M",
                "BLOCK_SIZE_N",
                "BLOCK_SIZE_K",
                "GATE_UP_FUSED",
                *(("BLOCK_SIZE_N_DOWN",) if mx else ()),
            ),
        ),
        Constraint(
            "idle_warps",
            "{num_warps} warps on a {BLOCK_SIZE_M}x{BLOCK_SIZE_N} tile leave warps idle",
            lambda c: int(c["num_warps"]) <= 4 or int(c["BLOCK_SIZE_M"]) * int(c["BLOCK_SIZE_N"]) >= 8192,
            knobs=("num_warps", "BLOCK_SIZE_M", "BLOCK_SIZE_N"),
        ),
    ]


def _mx_rules(problem: Problem, target: Target) -> list[Constraint]:
    """MXFP4 weights: no down GEMM tile wider than K; where MXFP4 is emulated, the accumulators and the
    weight tile decoded in registers within `_MX_LANE_REGISTERS` a lane."""
    out = [
        Constraint(
            "block_n_down_waste",
            f"BLOCK_SIZE_N_DOWN {{BLOCK_SIZE_N_DOWN}} > next_pow2(K={problem.K}), the down GEMM's width",
            lambda c: int(c["BLOCK_SIZE_N_DOWN"]) <= max(32, next_pow2(problem.K)),
            knobs=("BLOCK_SIZE_N_DOWN",),
        )
    ]
    if mx_native(target):
        return out
    budget = _MX_LANE_REGISTERS[target.is_amd]
    lanes_per_warp = target.wave_size or (64 if target.is_amd else 32)

    def mx_lane_registers(c: Mapping[str, Value]) -> float:
        """Per lane, in 32-bit registers, of the emulated MXFP4 path's largest GEMM: the fp32
        accumulators (two with GATE_UP_FUSED) and one B tile as it is decoded (a 32-bit word a weight)."""
        bm, bk, fused = int(c["BLOCK_SIZE_M"]), int(c["BLOCK_SIZE_K"]), 1 + int(c["GATE_UP_FUSED"])
        gate_up = bm * int(c["BLOCK_SIZE_N"]) * fused + bk * int(c["BLOCK_SIZE_N"])
        down = bm * int(c["BLOCK_SIZE_N_DOWN"]) + bk * int(c["BLOCK_SIZE_N_DOWN"])
        return max(gate_up, down) / (int(c["num_warps"]) * lanes_per_warp)

    out.append(
        Constraint(
            "mx_dequant_registers",
            f"the accumulators and the dequantized MXFP4 weight tile need more than {budget} "
            "registers a lane (emulated: the tile is decoded in registers)",
            lambda c: target.interpreter or mx_lane_registers(c) <= budget,
            knobs=(
                "BLOCK_SIZE_M",
                "BLOCK_SIZE_N",
                "BLOCK_SIZE_N_DOWN",
                "BLOCK_SIZE_K",
                "GATE_UP_FUSED",
                "num_warps",
            ),
        )
    )
    return out


def _persistent_rules(target: Target, lds: Callable[[Mapping[str, Value]], int]) -> list[Constraint]:
    """PERSISTENT runs whole tiles (SPLIT_K 1); two programs an SM/CU only where both fit its shared
    memory/LDS (`lds`: one program's bytes)."""
    return [
        Constraint(
            "persistent_split",
            "PERSISTENT {PERSISTENT} runs whole tiles: it takes SPLIT_K 1, not {SPLIT_K}",
            lambda c: not int(c["PERSISTENT"]) or int(c["SPLIT_K"]) == 1,
            knobs=("PERSISTENT", "SPLIT_K"),
        ),
        Constraint(
            "persistent_pair_lds",
            f"PERSISTENT 2 puts two programs on an SM/CU: their tiles x stages need more than the "
            f"{target.lds_bytes} bytes of shared memory/LDS",
            lambda c: int(c["PERSISTENT"]) < 2 or 2 * lds(c) <= target.lds_bytes,
            knobs=(
                "PERSISTENT",
                "num_stages",
                "BLOCK_SIZE_M",
                "BLOCK_SIZE_N",
                "BLOCK_SIZE_K",
                "GATE_UP_FUSED",
            ),
            search_only=True,
        ),
    ]


def _moe_format_rules(problem: Problem, target: Target) -> list[Constraint]:
    """B_TMA only on weight rows of 16-byte multiples (where it exists: TMA, not MXFP4); FP8 K tiles
    within one scale block; on AMD the 32-wide MFMA only on tiles of 32 and more."""
    out: list[Constraint] = []
    fp8 = _fp8(problem)
    if target.tma and not _mxfp4(problem):
        w_bytes = 1 if fp8 else DTYPE_BYTES[problem.dtype_b]
        out.append(
            Constraint(
                "b_tma_rows",
                f"B_TMA 1 needs weight rows of 16-byte multiples (K={problem.K}, N={problem.N})",
                lambda c: not int(c["B_TMA"]) or (problem.K * w_bytes % 16 == problem.N * w_bytes % 16 == 0),
                knobs=("B_TMA",),
            )
        )
    if fp8:
        out.append(
            Constraint(
                "fp8_block_k",
                f"BLOCK_SIZE_K {{BLOCK_SIZE_K}} must divide the {FP8_BLOCK}-wide scale blocks",
                lambda c: FP8_BLOCK % int(c["BLOCK_SIZE_K"]) == 0,
                knobs=("BLOCK_SIZE_K",),
            )
        )
    if target.is_amd:
        out.append(
            Constraint(
                "mfma_32_small_tile",
                "matrix_instr_nonkdim 32 needs BLOCK_SIZE_M and BLOCK_SIZE_N >= 32",
                lambda c: (
                    int(c["matrix_instr_nonkdim"]) == 16
                    or min(int(c["BLOCK_SIZE_M"]), int(c["BLOCK_SIZE_N"])) >= 32
                ),
                knobs=("matrix_instr_nonkdim", "BLOCK_SIZE_M", "BLOCK_SIZE_N"),
            )
        )
    return out


def _default_split(problem: Problem, target: Target, bm: int, bn: int, bk: int) -> int:
    """K slices for a gate/up grid of at most a quarter of the CUs' worth of tiles: the most (up to 8, and
    at most the K steps) that keep tiles x slices within the CUs. Unsplit, such a grid leaves most CUs
    idle (docs/notes/2026-11-22-moe.md)."""
    tiles = _gate_up_tiles(problem, bm, bn)
    if 4 * tiles > target.cu_count:
        return 1
    split = 1
    while split < 8 and 2 * split * tiles <= target.cu_count and 2 * split <= -(-problem.K // bk):
        split *= 2
    return split


#: Tokens per expert from which bf16 and fp16 weights take 128 x 256 tiles on 8 warps, 4 stages, in
#: vLLM's structure, walked by a program an SM with the weights through TMA (`_wide_tile`), where the
#: target has TMA. Read off Mixtral-8x7B TP 2 and Qwen3-30B-A3B (H200): 1.04-1.25x the 64 x 128 and
#: 128 x 128 fused tiles from 64 tokens an expert, while at 32 the 64 x 128 tile ran 1.04-1.07x faster
#: than it; 1.03-1.24x the previous default on 17 problems of 7 other layers
#: (docs/notes/2026-11-28-moe-persistent.md).
WIDE_TILE_MIN_TPE = 64


def _wide_prefill(problem: Problem, target: Target) -> bool:
    """Whether the default takes the wide persistent tile (WIDE_TILE_MIN_TPE)."""
    return (
        problem.dtype_b in ("bf16", "fp16") and target.tma and tokens_per_expert(problem) >= WIDE_TILE_MIN_TPE
    )


def _wide_tile(problem: Problem, target: Target, core: Core) -> bool:
    """Whether `core` runs as the wide prefill tile does: vLLM's structure (GATE_UP_FUSED 0) on a program
    an SM (PERSISTENT 1): the rule's 128-row, 8-warp cores where `_wide_prefill` holds."""
    return _wide_prefill(problem, target) and core.bm == 128 and core.warps == 8


def _moe_core(problem: Problem, target: Target) -> Core:
    """The row block, column tile, K step, warps and stages for the tokens each expert gets."""
    if target.interpreter:
        return Core(16, 32, 32, 4, 1)
    tpe = tokens_per_expert(problem)
    fp8 = _fp8(problem)
    # FP8 weights: K tiles of the 128-wide scale blocks, one scale load per step (MXFP4 weights: 128 too,
    # four scale groups a step, a 16x16x128 scaled MFMA's K where there is one). From 16 tokens per expert
    # on, 64-row tiles (a Hopper warp group's MMA is 64 rows), from 256 on 128 x 128 tiles on 8 warps: what
    # the tuned winners of benchmarks/moe.py took (docs/notes/2026-11-22-moe.md).
    wide_k = 128 if fp8 or _mxfp4(problem) else 64
    wide = _wide_prefill(problem, target)
    if wide:  # bf16/fp16 on TMA targets from WIDE_TILE_MIN_TPE tokens an expert
        bm, bn, bk, warps = 128, 256, 64, 8
    elif tpe <= 16:
        bm, bn, bk, warps = 16, 64, 128, 4
    elif tpe < 256:
        bm, bn, bk, warps = 64, 128, wide_k, 4
    else:
        bm, bn, bk, warps = 128, 128, wide_k, 8
    bn = min(bn, max(32, next_pow2(problem.N)))
    deep = fp8 and bm == 16 and problem.M * experts(problem)[1] <= FP8_DEEP_RING_MAX_PAIRS
    return Core(bm, bn, bk, warps, 2 if target.is_amd else 4 if deep or wide else 3)


#: Token-expert pairs (M x topk) up to which FP8 block weights in 16-row tiles take 4 stages instead of 3
#: on NVIDIA: measured on five FP8 layers of top-8 models (H200), 4 stages ran 0.997-1.077x of 3 at M = 1
#: to 4 (32 pairs) and 0.983-1.029x at M = 8 (docs/notes/2026-11-28-untuned-decode.md).
FP8_DEEP_RING_MAX_PAIRS = 32


def _moe_config(problem: Problem, target: Target, core: Core, *, vllm: bool = False) -> Config | None:
    """`core` with K slices where the gate/up grid is small (`_default_split`), AMD's knobs, the weight
    tiles through TMA where `_tma_weights` says so, and the largest GROUP_SIZE_M that still changes the
    order (walking the row blocks grouped was faster wherever both were measured:
    docs/notes/2026-11-22-moe.md); None where no group makes it a config of the space. `vllm`: vLLM's
    choices around the core instead (its structure, GATE_UP_FUSED 0; no K slices; groups of 32)."""
    params = moe_params(problem, target)
    bm, bn, bk, warps, stages = core
    wide = _wide_tile(problem, target, core)
    split = 1 if vllm or wide else _default_split(problem, target, bm, bn, bk)
    values: dict[str, Value] = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, SPLIT_K=split,
                                    GATE_UP_FUSED=int(not (vllm or wide)), num_warps=warps,
                                    num_stages=stages)  # fmt: skip
    if "PERSISTENT" in params:
        values["PERSISTENT"] = int(wide)
    tma: list[int | None] = [None]  # the knob is not there (AMD)
    if "B_TMA" in params:
        tma = [1, 0] if _tma_weights(problem, bm) else [0]
    if _mxfp4(problem):  # the down GEMM's columns in tiles as wide as the gate/up GEMM's
        values["BLOCK_SIZE_N_DOWN"] = min(bn, max(32, next_pow2(problem.K)))
    if target.is_amd:
        values.update(matrix_instr_nonkdim=16, waves_per_eu=0)
        if "kpack" in params:
            values["kpack"] = 2
    groups = [32] if vllm else sorted((int(g) for g in params["GROUP_SIZE_M"]), reverse=True)
    sub = SubSpace("triton", params, moe_constraints(problem, target))
    for b_tma in tma:
        for group in groups:
            config = Config(backend="triton", GROUP_SIZE_M=group, **values)
            config = config if b_tma is None else config.replace(B_TMA=b_tma)
            if sub.check(config) is None:
                return config
    return None


def _tma_weights(problem: Problem, block_m: int) -> bool:
    """Whether the default loads the weight tiles through TMA (B_TMA 1, where the target has it): bf16 and
    fp16 weights in row blocks of 64 or more. Measured out of sample on seven layers (H200): 1.008-1.061x
    from 256 tokens, within 2% either way in 16-row decode tiles, and 0.65-0.97x with FP8 weights
    (docs/notes/2026-11-28-moe-untuned.md)."""
    return problem.dtype_b in ("bf16", "fp16") and block_m >= 64


#: Tokens per expert above which FP8 block weights take vLLM's own fallback tiles and structure
#: (`_vllm_fp8_tiles`). Measured without a table against vLLM's fallback on five FP8 layers (H200): our
#: 16-row decode tiles won to 8 tokens an expert (0.95-1.21, geomean above 1), and lost 3-14% from 12-16
#: on, where our fused 64- and 128-row tiles lost 4-14% at every M (docs/notes/2026-11-28-moe-untuned.md).
FP8_OWN_TILES_MAX_TPE = 8


def _fp8_past_decode(problem: Problem) -> bool:
    return _fp8(problem) and tokens_per_expert(problem) > FP8_OWN_TILES_MAX_TPE


def _vllm_fp8_tiles(problem: Problem, target: Target) -> Config | None:
    """The config vLLM's fallback rule runs FP8 128x128-block weights in, at every M: 64 x 128 tiles
    (the scale block's width), K steps of 128, groups of 32, 4 warps, 3 stages (2 on AMD), its structure
    (GATE_UP_FUSED 0) and pointer loads (`_tma_weights` takes no FP8); None where it is no config of the
    space."""
    return _moe_config(problem, target, Core(64, 128, 128, 4, 2 if target.is_amd else 3), vllm=True)


def moe_default_candidates(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The heuristic's candidates for the MoE default, in order, each a member of its space.

    The row block follows the tokens each expert gets (decode: 16 rows, most of them padding anyway);
    decode is bandwidth-bound (long K tiles, 4 warps), prefill compute-bound (64x128 tiles, and 128x128
    on 8 warps from 256 tokens per expert; bf16 and fp16 weights on targets with TMA take 128x256 tiles
    on a program an SM from WIDE_TILE_MIN_TPE tokens per expert); the row blocks of all experts are
    walked in the largest useful GROUP_SIZE_M; a gate/up grid too small for the GPU gets K slices
    (`_default_split`). FP8 block
    weights past FP8_OWN_TILES_MAX_TPE tokens an expert take vLLM's fallback config instead
    (`_vllm_fp8_tiles`), which was measured ahead of that rule's there. That pick first (on small targets
    or odd shapes where it is no config of the space, the space's first), then its safer cores
    (`autotune.kernels.candidates`).
    """
    params = moe_params(problem, target)
    if target.interpreter:
        values: dict[str, Value] = dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
                                        SPLIT_K=1, GATE_UP_FUSED=1, num_warps=4, num_stages=1)  # fmt: skip
        if _mxfp4(problem):
            values["BLOCK_SIZE_N_DOWN"] = 32
        return (Config(backend="triton", **values),)
    core = _moe_core(problem, target)
    pick = _vllm_fp8_tiles(problem, target) if _fp8_past_decode(problem) else None
    pick = pick or _moe_config(problem, target, core)
    cores = safer_cores(
        core, rows=params["BLOCK_SIZE_M"], cols=params["BLOCK_SIZE_N"], k_tiles=params["BLOCK_SIZE_K"],
        warps=params["num_warps"], stages=params["num_stages"],
    )  # fmt: skip
    if pick is None and _mxfp4(problem):  # emulated MXFP4 past its register budget: the first safer core
        pick = next((c for c in map(lambda core: _moe_config(problem, target, core), cores) if c), None)
    if pick is None:  # small targets (less LDS) or odd shapes: the first valid config of the space
        sub = SubSpace("triton", params, moe_constraints(problem, target))
        pick = next(Config({**v}) for v, broken in sub.walk() if broken is None)
    return candidates((pick,), cores, lambda c: _moe_config(problem, target, c), params["num_warps"])


def moe_default_config(problem: Problem, target: Target) -> Config:
    """The heuristic config for shapes nobody tuned: the first of `moe_default_candidates` whose binary
    passes the static checks on `target` (`autotune.engine.verdicts.first_passing`). Always a member of
    the MoE's space."""
    return first_passing(get_op(problem.op), problem, target, moe_default_candidates(problem, target))
