"""The constraints that the ops' tiled, TMA and GEMV Triton GEMMs share: what their configs keep to (tiles
no wider than the problem, shared memory, registers, the knobs that go together), each with the reason
recorded when it prunes."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.config import Value
from autotune.core.problem import DTYPE_BYTES, Problem, cdiv, next_pow2
from autotune.core.space import Constraint
from autotune.core.target import Target
from autotune.engine.model import GEMV_PARTIALS
from autotune.kernels.common.geometry import (
    GEMV_ROWS,
    MIN_TILE,
    c_store_cols,
    tail_split_schedule,
    tile_parts,
)
from autotune.kernels.common.knobs import gemv_params, tile_widths

__all__ = ["TMA_ACC_LIMIT", "gemv_constraints", "tile_constraints", "tile_count", "tma_constraints"]

#: Accumulator registers a lane may hold in the TMA kernel on NVIDIA: 128 x 384 on 8 warps (192) compiles
#: without spilling on sm_90 (218 registers in all), where the pointer kernel keeps the limit of 128.
TMA_ACC_LIMIT = 192


def tile_count(problem: Problem, c: Mapping[str, Value]) -> int:
    """The C tiles of `problem` in `c`'s BLOCK_M x BLOCK_N tiles."""
    return cdiv(problem.M, int(c["BLOCK_M"])) * cdiv(problem.N, int(c["BLOCK_N"]))


def tile_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The rules of a tiled Triton GEMM's configs (`knob_values`): no tile or K slice wider than the
    problem needs (the narrowest tile of the space always stays), split-K and stream-K only on grids that
    underfill the CUs and each without the knobs it excludes, tiles that fit shared memory and registers,
    no idle warps; on AMD the 32-wide MFMA only on tiles of 32 and more, and the XCD remap only on grids
    of enough tiles."""
    out = [*_tile_waste(problem, target), *_grid_rules(problem, target), *_tile_resources(problem, target)]
    if target.is_amd:
        out += _amd_tile_rules(problem, target)
    return out


def _tile_waste(problem: Problem, target: Target) -> list[Constraint]:
    """No tile or K slice wider than the problem needs; the narrowest tile of the space always stays."""
    M, N, K = problem.M, problem.N, problem.K
    narrowest_n = min(tile_widths(target))
    return [
        Constraint(
            "block_m_waste",
            f"BLOCK_M {{BLOCK_M}} > next_pow2(M={M}): rows computed for nothing",
            lambda c: int(c["BLOCK_M"]) <= max(MIN_TILE, next_pow2(M)),
            knobs=("BLOCK_M",),
        ),
        Constraint(
            "block_n_waste",
            f"BLOCK_N {{BLOCK_N}} > next_pow2(N={N}): columns computed for nothing",
            # the narrowest tile of the space always stays (a router GEMM has N = 8 experts)
            lambda c: int(c["BLOCK_N"]) <= max(MIN_TILE, next_pow2(N), narrowest_n),
            knobs=("BLOCK_N",),
        ),
        Constraint(
            "block_k_waste",
            f"BLOCK_K x SPLIT_K > next_pow2(K={K}): empty K slices",
            lambda c: int(c["BLOCK_K"]) * int(c.get("SPLIT_K", 1)) <= max(MIN_TILE, next_pow2(K)),
            knobs=("BLOCK_K", "SPLIT_K"),
        ),
    ]


def _grid_rules(problem: Problem, target: Target) -> list[Constraint]:
    """Split-K and stream-K only on grids that underfill the CUs, each without the knobs it excludes;
    GROUP_M only over several rows of tiles."""
    M, cus = problem.M, target.cu_count

    def tiles(c: Mapping[str, Value]) -> int:
        return tile_count(problem, c)

    return [
        Constraint(
            "split_k_needless",
            f"SPLIT_K on a tile grid that already fills {cus} CUs (tiles x SPLIT_K > 2 x CUs)",
            lambda c: int(c.get("SPLIT_K", 1)) == 1 or tiles(c) * int(c["SPLIT_K"]) <= 2 * cus,
            knobs=("SPLIT_K", "BLOCK_M", "BLOCK_N"),
            search_only=True,
        ),
        Constraint(
            "fused_split_alone",
            "FUSED_SPLIT sums K slices in the GEMM's launch: it needs SPLIT_K > 1",
            lambda c: not int(c.get("FUSED_SPLIT", 0)) or int(c.get("SPLIT_K", 1)) > 1,
            knobs=("FUSED_SPLIT", "SPLIT_K"),
        ),
        Constraint(
            "stream_k_alone",
            "STREAM_K deals the K steps itself: it goes with SPLIT_K 1",
            lambda c: not int(c.get("STREAM_K", 0)) or int(c.get("SPLIT_K", 1)) == 1,
            knobs=("STREAM_K", "SPLIT_K"),
        ),
        Constraint(
            "stream_k_needless",
            f"STREAM_K on a tile grid that already fills {cus} CUs twice (tiles > 2 x CUs)",
            lambda c: not int(c.get("STREAM_K", 0)) or tiles(c) <= 2 * cus,
            knobs=("STREAM_K", "BLOCK_M", "BLOCK_N"),
        ),
        Constraint(
            "group_m_redundant",
            f"GROUP_M {{GROUP_M}} with one row of tiles (M={M}) equals GROUP_M 1",
            lambda c: int(c["GROUP_M"]) == 1 or cdiv(M, int(c["BLOCK_M"])) > 1,
            knobs=("GROUP_M", "BLOCK_M"),
        ),
    ]


def _tile_resources(problem: Problem, target: Target) -> list[Constraint]:
    """Tiles that fit shared memory (the stages AMD keeps in LDS: one fewer) and the accumulator registers
    a lane may hold; no idle warps (more than 4 only on tiles of 8192 elements and more)."""
    elem = max(DTYPE_BYTES[problem.dtype_a], DTYPE_BYTES[problem.dtype_b])
    acc_limit = 256 if target.is_amd else 128

    def lds_bytes(c: Mapping[str, Value]) -> int:
        stages = int(c["num_stages"])
        buffers = max(1, stages - 1) if target.is_amd else max(1, stages)
        return int((int(c["BLOCK_M"]) + int(c["BLOCK_N"])) * int(c["BLOCK_K"]) * elem * buffers)

    return [
        Constraint(
            "lds_overflow",
            f"A and B tiles x stages need more than the {target.lds_bytes} bytes of shared memory/LDS",
            lambda c: target.interpreter or lds_bytes(c) <= target.lds_bytes,
            knobs=("num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_K"),
        ),
        Constraint(
            "accumulator_spill",
            f"BLOCK_M x BLOCK_N accumulator over {{num_warps}} warps exceeds {acc_limit} registers a lane",
            lambda c: (
                int(c["BLOCK_M"]) * int(c["BLOCK_N"]) <= acc_limit * int(c["num_warps"]) * target.wave_size
                or target.interpreter
            ),
            knobs=("BLOCK_M", "BLOCK_N", "num_warps"),
        ),
        Constraint(
            "idle_warps",
            "{num_warps} warps on a {BLOCK_M}x{BLOCK_N} tile leave warps idle",
            lambda c: int(c["num_warps"]) <= 4 or int(c["BLOCK_M"]) * int(c["BLOCK_N"]) >= 8192,
            knobs=("num_warps", "BLOCK_M", "BLOCK_N"),
        ),
    ]


def _amd_tile_rules(problem: Problem, target: Target) -> list[Constraint]:
    """On AMD: the 32-wide MFMA only on tiles of 32 and more, the XCD remap only on grids of at least two
    tiles an XCD."""
    return [
        Constraint(
            "mfma_32_small_tile",
            "matrix_instr_nonkdim 32 needs BLOCK_M and BLOCK_N >= 32",
            lambda c: int(c["matrix_instr_nonkdim"]) == 16 or min(int(c["BLOCK_M"]), int(c["BLOCK_N"])) >= 32,
            knobs=("matrix_instr_nonkdim", "BLOCK_M", "BLOCK_N"),
        ),
        Constraint(
            "xcd_remap_redundant",
            f"NUM_XCDS remapping with fewer than {2 * target.xcds} tiles",
            lambda c: int(c["NUM_XCDS"]) == 1 or tile_count(problem, c) >= 2 * target.xcds,
            knobs=("NUM_XCDS", "BLOCK_M", "BLOCK_N"),
        ),
    ]


def tma_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The TMA kernels' rules: 16-byte aligned rows for the descriptors, the tail split's and the
    persistent grid's knobs only where they change something, shared memory for the ring of loads and the
    C store, and on NVIDIA the accumulator in TMA_ACC_LIMIT registers a lane; then those of
    `tile_constraints` that these do not replace."""
    extra = [_tma_alignment(problem), *_tma_knob_rules(problem, target), *_tma_resources(problem, target)]
    replaced = {x.name for x in extra}
    return extra + [c for c in tile_constraints(problem, target) if c.name not in replaced]


def _tma_alignment(problem: Problem) -> Constraint:
    """Tensor descriptors need rows of A, B and C in 16-byte multiples."""
    elem = DTYPE_BYTES[problem.dtype_a]
    out_elem = DTYPE_BYTES[problem.dtype_out]
    aligned = (
        (problem.K * elem) % 16 == 0 and (problem.N * elem) % 16 == 0 and (problem.N * out_elem) % 16 == 0
    )
    return Constraint(
        "tma_alignment",
        f"tensor descriptors need 16-byte aligned rows (K={problem.K}, N={problem.N} in {problem.dtype_a})",
        lambda c: aligned,
        knobs=(),
    )


def _tma_knob_rules(problem: Problem, target: Target) -> list[Constraint]:
    """TAIL_SPLIT only persistent, unsplit, on power-of-two BLOCK_N and where the last wave splits;
    PERSISTENT only over more work items than CUs; EPILOGUE_N only where it slices a tile part."""

    def tiles(c: Mapping[str, Value]) -> int:
        return tile_count(problem, c)

    def tail_splits(c: Mapping[str, Value]) -> int:
        return tail_split_schedule(tiles(c), cdiv(problem.K, int(c["BLOCK_K"])), target.cu_count)[2]

    return [
        Constraint(
            "tail_split_alone",
            "TAIL_SPLIT is persistent and splits K itself: it goes with PERSISTENT=1 and SPLIT_K=1",
            lambda c: (
                not int(c.get("TAIL_SPLIT", 0)) or (int(c["PERSISTENT"]) == 1 and int(c["SPLIT_K"]) == 1)
            ),
            knobs=("TAIL_SPLIT", "PERSISTENT", "SPLIT_K"),
        ),
        Constraint(
            "tail_split_pow2",
            "TAIL_SPLIT sums whole tiles of one part: its BLOCK_N is a power of two",
            lambda c: not int(c.get("TAIL_SPLIT", 0)) or tile_parts(int(c["BLOCK_N"]))[1] == 0,
            knobs=("TAIL_SPLIT", "BLOCK_N"),
        ),
        Constraint(
            "persistent_needless",
            "PERSISTENT with fewer work items (tiles x SPLIT_K) than CUs: every program does one",
            lambda c: (
                not int(c["PERSISTENT"])
                or int(c.get("TAIL_SPLIT", 0)) > 0
                or tiles(c) * int(c["SPLIT_K"]) > target.cu_count
            ),
            knobs=("PERSISTENT", "TAIL_SPLIT", "BLOCK_M", "BLOCK_N", "SPLIT_K"),
        ),
        Constraint(
            "tail_split_needless",
            f"TAIL_SPLIT where the last wave of tiles on {target.cu_count} CUs is full, or too full or "
            "too short in K to split",
            lambda c: not int(c.get("TAIL_SPLIT", 0)) or tail_splits(c) > 1,
            knobs=("TAIL_SPLIT", "BLOCK_M", "BLOCK_N", "BLOCK_K"),
        ),
        Constraint(
            "epilogue_needless",
            "EPILOGUE_N {EPILOGUE_N} slices nothing: no tile part is wider, or SPLIT_K > 1 (the fp32 "
            "workspace is stored whole)",
            lambda c: (
                not int(c.get("EPILOGUE_N", 0))
                or (
                    int(c.get("SPLIT_K", 1)) == 1
                    and max(tile_parts(int(c["BLOCK_N"]))) > int(c["EPILOGUE_N"])
                )
            ),
            knobs=("EPILOGUE_N", "SPLIT_K", "BLOCK_N"),
        ),
    ]


def _tma_resources(problem: Problem, target: Target) -> list[Constraint]:
    """Shared memory for the ring of loads and the C store; on NVIDIA the accumulator in TMA_ACC_LIMIT
    registers a lane."""
    elem = DTYPE_BYTES[problem.dtype_a]
    out_elem = DTYPE_BYTES[problem.dtype_out]

    def smem(c: Mapping[str, Value]) -> int:
        """The ring of A and B tiles, and the C store's buffer: the tile (fp32 slices of the workspace
        with SPLIT_K > 1), or one EPILOGUE_N-wide slice that every store of the tile reuses."""
        bm, bn, bk = int(c["BLOCK_M"]), int(c["BLOCK_N"]), int(c["BLOCK_K"])
        ring = (bm + bn) * bk * elem * int(c["num_stages"])
        if int(c.get("SPLIT_K", 1)) > 1:
            return int(ring + bm * bn * 4)
        return int(ring + bm * c_store_cols(bn, int(c.get("EPILOGUE_N", 0))) * out_elem)

    out = [
        Constraint(
            "lds_overflow",
            f"A and B tiles x stages + the C store's buffer need more than the {target.lds_bytes} bytes of "
            "shared memory",
            lambda c: target.interpreter or smem(c) <= target.lds_bytes,
            knobs=("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "SPLIT_K", "EPILOGUE_N"),
        )
    ]
    if not target.is_amd:
        out.append(
            Constraint(
                "accumulator_spill",
                f"BLOCK_M x BLOCK_N accumulator over {{num_warps}} warps exceeds {TMA_ACC_LIMIT} registers "
                "a lane",
                lambda c: (
                    int(c["BLOCK_M"]) * int(c["BLOCK_N"]) <= TMA_ACC_LIMIT * int(c["num_warps"]) * 32
                    or target.interpreter
                ),
                knobs=("BLOCK_M", "BLOCK_N", "num_warps"),
            )
        )
    return out


def gemv_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The GEMV kernels' rules: at most GEMV_ROWS rows of A, fp32 partials that stay in registers, and no
    K step wider than K needs."""
    M, K = problem.M, problem.K
    smallest_k = min(int(v) for v in gemv_params(target)["BLOCK_K"])
    return [
        Constraint(
            "gemv_rows",
            f"the GEMV kernel keeps one register partial per row of A: M <= {GEMV_ROWS} (M={M})",
            lambda c: M <= GEMV_ROWS,
            knobs=(),
        ),
        Constraint(
            "gemv_registers",
            f"BLOCK_N x BLOCK_K x M fp32 partials exceed {GEMV_PARTIALS} per program (they would spill)",
            lambda c: int(c["BLOCK_N"]) * int(c["BLOCK_K"]) * M <= GEMV_PARTIALS,
            knobs=("BLOCK_N", "BLOCK_K"),
        ),
        Constraint(
            "gemv_k_tile_needless",
            f"BLOCK_K beyond K={K} rounded up to a power of two: masked lanes only",
            lambda c: int(c["BLOCK_K"]) <= max(smallest_k, next_pow2(K)),
            knobs=("BLOCK_K",),
        ),
    ]
