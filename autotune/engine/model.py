"""An analytical cost model of the dense GEMM: predicted µs of a config on a target, without running it.

It ranks the configs of a space so that a sweep can measure the promising ones first (or only those).
Rank order matters more than absolute numbers. An op's own model (`ProblemRules.predict_us`) is asked
first; else the model of the backend record's cost kind (`autotune.core.backend.Cost`):

- ``library`` (hipBLASLt / cuBLAS, torch._scaled_mm, aiter): a good library, so the roofline of the
  target's published peaks at a fixed efficiency, plus one launch.
- ``tiled`` (the Triton kernels, ``tma`` where tiles load through tensor descriptors): the tile grid
  (cdiv(M, BM) x cdiv(N, BN) x SPLIT_K programs) runs in waves over the CUs, ``resident`` blocks per CU at
  a time (from the compiled features' occupancy, else estimated from shared memory and registers); the
  last partial wave costs a full one. A wave costs its K loop: per iteration the soft maximum of the MMA
  time of the padded tile (edge tiles compute the whole tile; small tiles waste part of the matrix
  instruction), the load time of its A and B slices through the CU's share of L2 / HBM bandwidth (so the
  tile's arithmetic intensity BM·BN/(BM+BN) decides how compute-bound it is), and the pipeline's load
  chain: a slice's load is issued num_stages - 1 iterations before its use and takes the latency plus its
  own transfer, so few stages expose a big BLOCK_K's load (co-resident blocks overlap each other's
  chains); plus a prologue and an epilogue. The whole kernel cannot beat the HBM roofline of the traffic
  that misses the last-level cache (re-reads of A and B across tiles, cut by GROUP_M's swizzle and by the
  cache when A and B fit). SPLIT_K > 1 writes an fp32 workspace (HBM traffic) and adds a reduce kernel:
  its launch, a latency, and the partials read by a grid of M·N/REDUCE_BLOCK programs. Spills multiply the
  time; a config that did not compile is inf. A config without BLOCK_K has the cost's ``block_k`` (the
  Gluon blockwise FP8 kernel's: 128, its K step).
- ``gemv`` (A of at most 4 rows, no matrix instructions) streams B once: its minimum bytes at
  MEMORY_EFF of the bandwidth, stretched where its N / BLOCK_N programs are fewer than GEMV_PROGRAMS_PER_CU
  per CU, plus a launch and a per-step overhead; past GEMV_PARTIALS register partials it spills.

Targets without published peaks (Triton's CPU interpreter) get a finite estimate from work alone.
Bump MODEL_VERSION whenever a formula or a constant changes, so stored predictions can be told apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.backend import Cost
from autotune.core.config import Config
from autotune.core.problem import DTYPE_BYTES, Problem, cdiv, rules_of
from autotune.core.registry import backend_of
from autotune.core.static import StaticFeatures
from autotune.core.target import Target

__all__ = ["LAUNCH_US", "MODEL_VERSION", "library_us", "predict_us", "rank"]

MODEL_VERSION = "roofline-3"

# --- constants (each with its reason) -----------------------------------------------------------------

#: Host launch plus kernel start and drain as events and graphs see it on current GPUs (2-4 µs).
LAUNCH_US = 2.5
#: Fraction of the bf16 peak a vendor library reaches on large compute-bound GEMMs (AMD's published
#: peaks assume a boost clock that dense MFMA work does not hold).
LIBRARY_COMPUTE_EFF = {"nvidia": 0.8, "amd": 0.65}
#: Fraction of the published peak the matrix units sustain under dense load (clocks drop under MMA load,
#: more on AMD); applies to the Triton kernels, whose other losses the model counts itself.
MMA_SUSTAINED = {"nvidia": 0.9, "amd": 0.75}
#: Fraction of HBM bandwidth a vendor library reaches on memory-bound (decode) GEMMs.
LIBRARY_MEMORY_EFF = 0.85
#: Fraction of HBM bandwidth any kernel can sustain (refresh, page misses, read/write turnarounds).
MEMORY_EFF = 0.9
#: Aggregate L2-level bandwidth as a multiple of HBM bandwidth (H100 L2 ≈ 10 TB/s; MI300X infinity
#: cache and L2 ≈ 17-20 TB/s); each CU gets 1/cu_count of it.
L2_BW_FACTOR = {"nvidia": 3.0, "amd": 4.0}
#: How much more than its fair share (1/cu_count) of HBM bandwidth one CU can draw: a grid that leaves
#: CUs idle cannot saturate HBM (the reason split-K and narrow tiles win decode shapes). An H100 SM pulls
#: ~80-90 GB/s when few SMs run (3.5x its share), so a grid of a half or two thirds of the SMs can already
#: saturate HBM and needs no split-K.
CU_DRAM_SHARE = 3.5
#: Load-to-use latency (µs) of an L2 hit and of an HBM access, under load (an L2 hit queues behind the
#: other SMs' traffic: about twice its idle latency).
L2_LATENCY_US = {"nvidia": 0.5, "amd": 0.6}
DRAM_LATENCY_US = {"nvidia": 0.7, "amd": 1.0}
#: Outputs per program of the pointer kernel's split-K reduce kernel (common.splitk.REDUCE_BLOCK).
REDUCE_BLOCK = 1024
#: Fraction of the last-level cache that holds A and B (the rest holds C, the workspace and conflicts).
LLC_USABLE = 0.75
#: Loop bookkeeping of one K iteration (address math, barrier, wait) in µs; TMA needs half of it.
ITER_OVERHEAD_US = 0.03
TMA_ITER_OVERHEAD_US = 0.015
#: Exponent of the soft maximum that combines overlapping costs: smooth, and still rewards hiding the
#: smaller cost (deeper pipelines, more co-resident warps) a little.
SOFT_MAX_P = 4.0
#: Rows of one Hopper wgmma (per warpgroup): a BLOCK_M under it wastes the rest of the instruction.
WGMMA_M = 64
#: Fraction of the MMA peak one CU reaches with few warps resident; full from WARPS_FOR_PEAK warps on
#: (two warpgroups on Hopper, two waves per SIMD on CDNA keep the matrix units issuing back to back).
FEW_WARPS_EFF = 0.7
WARPS_FOR_PEAK = 8
#: AMD: 32x32 MFMA slightly behind 16x16 in AMD's tuning guidance (longer latency, more accumulators).
MFMA32_EFF = 0.97
#: gfx942: kpack=2 widens LDS reads of the MFMA operands (AMD's recommended setting).
KPACK2_GAIN = 1.03
#: AMD: without the XCD remapping, neighbouring tiles land on different XCDs' L2s (fewer L2 hits).
NO_XCD_REMAP_L2_SLOWDOWN = 1.15
#: Persistent kernels overlap a tile's epilogue with the next tile's loads (this fraction hidden).
PERSISTENT_EPILOGUE_HIDDEN = 0.5
#: Registers spilled to scratch/local memory: every spilled value goes through memory in the K loop.
SPILL_PENALTY = 2.0
#: Register file per CU in 32-bit registers x lanes: NVIDIA SM 64 Ki; CDNA SIMD 512 per lane (VGPR+AGPR).
NV_REGS_PER_SM = 65536
NV_MAX_REGS_PER_THREAD = 255
NV_MAX_WARPS_PER_SM = 64
NV_MAX_BLOCKS_PER_SM = 32
AMD_SIMDS_PER_CU = 4
AMD_REGS_PER_LANE = 512
AMD_MAX_WAVES_PER_SIMD = 8
#: Registers per thread besides the accumulator (addresses, loop state, operand fragments).
BASE_REGS = 40
#: Peak relative to dense bf16 by input element size (fp32 runs as tf32 / xf32; fp8 doubles; fp4 4x).
PEAK_SCALE_BY_BYTES = {4.0: 0.5, 2.0: 1.0, 1.0: 2.0, 0.5: 4.0}
#: Targets without peaks (the CPU interpreter): numpy-ish work rate (flops per µs) and per-program and
#: per-iteration Python overheads (µs).
FALLBACK_FLOPS_PER_US = 2.0e3
FALLBACK_LAUNCH_US = 50.0
FALLBACK_PROGRAM_US = 20.0
FALLBACK_ITER_US = 10.0


def _smax(*xs: float) -> float:
    """Soft maximum: ≥ max(xs), ≤ (len(xs))^(1/p) · max(xs), strictly increasing in every argument."""
    top = max(xs)
    if top <= 0:
        return 0.0
    return top * sum((x / top) ** SOFT_MAX_P for x in xs if x > 0) ** (1.0 / SOFT_MAX_P)


def _vendor(target: Target) -> str:
    return "amd" if target.is_amd else "nvidia"


def _peak_flops_per_us(problem: Problem, target: Target) -> float:
    elem = rules_of(problem.op).element_bytes(problem, target)  # the op's own rate (MX formats)
    scale = PEAK_SCALE_BY_BYTES.get(elem, 1.0)
    return target.peak_tflops * 1e6 * scale


def _spilling(features: StaticFeatures | None) -> bool:
    return features is not None and (features.spills > 0 or features.scratch_bytes > 0)


# --- public API ---------------------------------------------------------------------------------------


def predict_us(
    problem: Problem, config: Config, target: Target, features: StaticFeatures | None = None
) -> float:
    """Predicted time (µs) of one call of `config` on `problem` and `target`.

    `features` (the compiler's view of this config on this target) refine the occupancy; a config that
    did not compile, or needs more shared memory than the target has, is ``inf``; spills multiply the
    time by SPILL_PENALTY. Always positive; finite unless the config cannot run.
    """
    if features is not None:
        if not features.compiled:
            return math.inf
        if target.lds_bytes and not target.interpreter and features.lds_bytes > target.lds_bytes:
            return math.inf
    own = rules_of(problem.op).predict_us(problem, config, target, features)
    if own is not None:  # the op's own cost model
        return own
    cost = backend_of(problem.op, config.backend).cost  # ValueError for an unknown backend
    if cost is None:
        raise ValueError(f"no cost model for backend {config.backend!r} of {problem.op}")
    if target.peak_tflops <= 0 or target.mem_gbps <= 0 or target.cu_count <= 0:
        us = _fallback_us(problem, config, cost)
    elif cost.kind == "gemv":
        us = _gemv_us(problem, config, target)
    elif cost.kind == "library":
        us = library_us(problem, target)
    else:
        us = _tiled_us(problem, config, cost, target, features)
    if _spilling(features):
        us *= SPILL_PENALTY
    return us


def rank(
    problem: Problem,
    configs: Sequence[Config],
    target: Target,
    features: Mapping[str, StaticFeatures] | None = None,
) -> list[tuple[Config, float]]:
    """`configs` with their predicted µs, fastest first; ties keep their input order.

    `features` maps ``config.digest()`` to the config's static features, where known.
    """
    feats = features or {}
    scored = [(c, predict_us(problem, c, target, feats.get(c.digest()))) for c in configs]
    return sorted(scored, key=lambda pair: pair[1])  # sorted() is stable


# --- backends -----------------------------------------------------------------------------------------


def library_us(problem: Problem, target: Target) -> float:
    compute = problem.flops() / (_peak_flops_per_us(problem, target) * LIBRARY_COMPUTE_EFF[_vendor(target)])
    memory = problem.min_bytes() / (target.mem_gbps * 1e3 * LIBRARY_MEMORY_EFF)
    return LAUNCH_US + max(compute, memory)


#: GEMV programs per CU that keep enough loads in flight to stream at full bandwidth (fewer stretch it).
GEMV_PROGRAMS_PER_CU = 4
#: Register partials of the GEMV kernel: BLOCK_N x BLOCK_K x M fp32 values per program at most (the
#: fastest configs sit at or under it; more spills). The GEMV space's limit too.
GEMV_PARTIALS = 16384


def _gemv_us(problem: Problem, config: Config, target: Target) -> float:
    bn, bk = max(1, int(config.get("BLOCK_N", 4))), max(1, int(config.get("BLOCK_K", 256)))
    fill = min(1.0, cdiv(problem.N, bn) / (GEMV_PROGRAMS_PER_CU * target.cu_count))
    memory = problem.min_bytes() / (target.mem_gbps * 1e3 * MEMORY_EFF * fill)
    us = LAUNCH_US + memory + cdiv(problem.K, bk) * ITER_OVERHEAD_US
    return us * SPILL_PENALTY if bn * bk * problem.M > GEMV_PARTIALS else us


def _fallback_us(problem: Problem, config: Config, cost: Cost) -> float:
    """Where the target has no peaks (the CPU interpreter): the work and the per-program overheads."""
    if cost.kind == "library":
        return FALLBACK_LAUNCH_US + problem.flops() / (10 * FALLBACK_FLOPS_PER_US)
    bm, bn, bk = (max(1, int(config.get(k, 32))) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    split_k = max(1, int(config.get("SPLIT_K", 1)))
    programs = cdiv(problem.M, bm) * cdiv(problem.N, bn) * split_k
    iters = cdiv(problem.K, split_k * bk)
    padded_flops = 2.0 * programs * bm * bn * bk * iters
    launches = 2 if split_k > 1 else 1
    return (
        launches * FALLBACK_LAUNCH_US
        + programs * (FALLBACK_PROGRAM_US + iters * FALLBACK_ITER_US)
        + padded_flops / FALLBACK_FLOPS_PER_US
    )


@dataclass(frozen=True)
class _Tile:
    """The knobs of a tiled config, read once."""

    bm: int
    bn: int
    bk: int
    group_m: int
    split_k: int
    warps: int
    stages: int
    tma: bool
    persistent: bool
    nonkdim: int
    waves_per_eu: int
    kpack: int
    num_xcds: int

    @classmethod
    def of(cls, config: Config, cost: Cost) -> _Tile:
        def knob(name: str, default: int) -> int:
            return int(config.get(name, default))

        return cls(
            bm=max(1, knob("BLOCK_M", 64)),
            bn=max(1, knob("BLOCK_N", 64)),
            bk=max(1, knob("BLOCK_K", cost.block_k)),
            group_m=max(1, knob("GROUP_M", 1)),
            split_k=max(1, knob("SPLIT_K", 1)),
            warps=max(1, knob("num_warps", 4)),
            stages=max(1, knob("num_stages", 2)),
            tma=cost.tma,
            persistent=bool(knob("PERSISTENT", 0)),
            nonkdim=knob("matrix_instr_nonkdim", 16),
            waves_per_eu=knob("waves_per_eu", 0),
            kpack=knob("kpack", 1),
            num_xcds=max(1, knob("NUM_XCDS", 1)),
        )


def _regs_per_thread(t: _Tile, elem: float, target: Target) -> float:
    """Estimated registers per thread (lane): the fp32 accumulator, the staged operands on AMD, a base."""
    threads = t.warps * target.wave_size
    regs = t.bm * t.bn / threads + BASE_REGS
    if target.is_amd:  # global loads are staged through registers before LDS
        regs += (t.bm + t.bn) * t.bk * elem / 4 / threads
    return regs


def _lds_per_block(t: _Tile, elem: float, out_elem: float, target: Target) -> float:
    buffers = max(1, t.stages - 1) if target.is_amd else t.stages
    lds = (t.bm + t.bn) * t.bk * elem * buffers
    if t.tma:  # the C tile is staged in shared memory for the TMA store
        lds += t.bm * t.bn * (4 if t.split_k > 1 else out_elem)
    return lds


def _resident_blocks(
    t: _Tile, elem: float, out_elem: float, target: Target, features: StaticFeatures | None
) -> tuple[int, float]:
    """Blocks resident per CU and a register-pressure penalty (≥ 1, AMD waves_per_eu forcing spills)."""
    if features is not None and features.occupancy > 0:
        if target.is_amd:  # waves per SIMD; a block's waves spread over the CU's SIMDs
            return max(1, features.occupancy * AMD_SIMDS_PER_CU // t.warps), 1.0
        return max(1, features.occupancy), 1.0
    lds = features.lds_bytes if features is not None and features.lds_bytes > 0 else None
    lds_block = float(lds) if lds is not None else _lds_per_block(t, elem, out_elem, target)
    by_lds = int(target.lds_bytes // lds_block) if lds_block > 0 else NV_MAX_BLOCKS_PER_SM
    regs = _regs_per_thread(t, elem, target)
    penalty = 1.0
    if target.is_amd:
        waves_per_simd = min(AMD_MAX_WAVES_PER_SIMD, int(AMD_REGS_PER_LANE // math.ceil(regs)))
        if t.waves_per_eu > 0:  # the compiler caps registers to reach the asked occupancy
            cap = AMD_REGS_PER_LANE / t.waves_per_eu
            if regs > cap:
                penalty = min(SPILL_PENALTY, 1.0 + (regs / cap - 1.0))
            waves_per_simd = max(waves_per_simd, min(t.waves_per_eu, AMD_MAX_WAVES_PER_SIMD))
        by_regs = waves_per_simd * AMD_SIMDS_PER_CU // t.warps
        by_warps = AMD_MAX_WAVES_PER_SIMD * AMD_SIMDS_PER_CU // t.warps
    else:
        per_thread = min(NV_MAX_REGS_PER_THREAD, 8 * math.ceil(regs / 8))
        by_regs = int(NV_REGS_PER_SM // (per_thread * t.warps * target.wave_size))
        by_warps = min(NV_MAX_BLOCKS_PER_SM, NV_MAX_WARPS_PER_SM // t.warps)
    return max(1, min(by_lds, by_regs, by_warps)), penalty


def _mma_utilization(t: _Tile, target: Target) -> float:
    """Fraction of the matrix instruction's work that is useful for a tile of this shape."""
    if target.is_amd:
        n = 32 if t.nonkdim == 32 else 16
        util = (min(t.bm, n) / n) * (min(t.bn, n) / n)
        if t.nonkdim == 32:
            util *= MFMA32_EFF
        if t.kpack == 2 and target.arch == "gfx942":
            util *= KPACK2_GAIN
        return util
    return min(t.bm, WGMMA_M) / WGMMA_M


def _reuse_window(t: _Tile, tiles_m: int, tiles_n: int, in_flight: int) -> tuple[float, float]:
    """Rows and columns of tiles the programs in flight cover (GROUP_M rows are walked column-wise)."""
    w = max(1, min(in_flight, tiles_m * tiles_n))
    if t.group_m > 1:
        rows = min(tiles_m, max(min(t.group_m, tiles_m, w), cdiv(w, tiles_n)))
    else:
        rows = max(1, min(tiles_m, cdiv(w, tiles_n)))
    cols = min(tiles_n, cdiv(w, rows))
    return float(rows), float(cols)


def _reduce_us(mn: int, split_k: int, out_elem: float, target: Target) -> float:
    """The split-K reduce kernel: REDUCE_BLOCK outputs per program, each reads its `split_k` fp32 partials
    (written back to HBM by the time it runs) and writes C. A small grid cannot draw the whole HBM."""
    vendor = _vendor(target)
    mem_bw = target.mem_gbps * 1e3
    programs = cdiv(mn, REDUCE_BLOCK)
    bytes_ = mn * (4.0 * split_k + out_elem)
    bw = min(mem_bw * MEMORY_EFF, min(programs, target.cu_count) * CU_DRAM_SHARE * mem_bw / target.cu_count)
    return LAUNCH_US + DRAM_LATENCY_US[vendor] + bytes_ / bw


def _tiled_us(
    problem: Problem, config: Config, cost: Cost, target: Target, features: StaticFeatures | None
) -> float:
    t = _Tile.of(config, cost)
    M, N, K = problem.M, problem.N, problem.K
    ea, eb, eo = DTYPE_BYTES[problem.dtype_a], DTYPE_BYTES[problem.dtype_b], DTYPE_BYTES[problem.dtype_out]
    elem = max(ea, eb)
    vendor = _vendor(target)
    cus = target.cu_count
    mem_bw = target.mem_gbps * 1e3  # bytes per µs
    l2_bw = L2_BW_FACTOR[vendor] * mem_bw

    tiles_m, tiles_n = cdiv(M, t.bm), cdiv(N, t.bn)
    tiles = tiles_m * tiles_n
    items = tiles * t.split_k  # one program each, or the work items of a persistent grid
    k_iters = cdiv(K, t.split_k * t.bk)

    resident, reg_penalty = _resident_blocks(t, elem, eo, target, features)
    if t.persistent:
        programs = min(items, cus)
        per_cu = cdiv(items, programs)  # items the busiest program walks
        concurrent = 1
    else:
        per_cu = cdiv(items, cus)  # programs the busiest CU runs
        concurrent = min(resident, per_cu)
    waves = cdiv(per_cu, concurrent)

    # Memory traffic. L2-level: every program loads its A and B slices (rows past an edge wrap around
    # and hit in cache). HBM: A and B once, plus the re-reads that fall out of the reuse window of the
    # programs in flight and do not stay in the last-level cache.
    a_bytes, b_bytes = M * K * ea, N * K * eb
    l2_in = tiles_n * a_bytes + tiles_m * b_bytes
    rows_w, cols_w = _reuse_window(t, tiles_m, tiles_n, cus * concurrent)
    no_cache = a_bytes * tiles_n / cols_w + b_bytes * tiles_m / rows_w
    kept = min(1.0, LLC_USABLE * target.llc_bytes / (a_bytes + b_bytes))
    dram_in = (a_bytes + b_bytes) + (no_cache - a_bytes - b_bytes) * (1.0 - kept)
    miss = min(1.0, dram_in / l2_in)
    out_bytes = M * N * (4 if t.split_k > 1 else eo) * t.split_k
    dram_bytes = dram_in + out_bytes

    # One K iteration of one block, with the whole CU to itself.
    l2_side = 1.0 - miss
    if target.is_amd and target.xcds > 1 and t.num_xcds == 1 and tiles >= 2 * target.xcds:
        l2_side *= NO_XCD_REMAP_L2_SLOWDOWN
    us_per_byte = l2_side / (l2_bw / cus) + miss / (CU_DRAM_SHARE * mem_bw / cus)
    load_bytes = (min(t.bm, M) + min(t.bn, N)) * t.bk * elem
    t_load = load_bytes * us_per_byte
    warp_eff = FEW_WARPS_EFF + (1 - FEW_WARPS_EFF) * min(1.0, concurrent * t.warps / WARPS_FOR_PEAK)
    peak_cu = _peak_flops_per_us(problem, target) * MMA_SUSTAINED[vendor] / cus
    t_mma = 2.0 * t.bm * t.bn * t.bk / (peak_cu * _mma_utilization(t, target) * warp_eff)
    latency = (1.0 - miss) * L2_LATENCY_US[vendor] + miss * DRAM_LATENCY_US[vendor]
    ahead = t.stages - 1  # K slices in flight while one is consumed
    # A slice's load is issued when its buffer frees up, `ahead` iterations before it is consumed, and
    # takes the latency plus its own transfer: with few stages that chain, not the MMA, sets the pace.
    t_latency = (latency + t_load) / ahead if ahead >= 1 else latency + t_mma + t_load

    # A round: `concurrent` blocks share the CU's matrix units and its bandwidth, and hide each other's
    # latency. Then the prologue (the first loads) and the epilogue (storing C or the fp32 partials).
    overhead = TMA_ITER_OVERHEAD_US if t.tma else ITER_OVERHEAD_US
    t_iter = _smax(concurrent * t_mma, concurrent * t_load, t_latency) + overhead
    store = min(t.bm, M) * min(t.bn, N) * (4 if t.split_k > 1 else eo) / (l2_bw / cus)
    if t.persistent:
        busiest = latency + per_cu * (k_iters * t_iter + (1 - PERSISTENT_EPILOGUE_HIDDEN) * store)
    else:
        busiest = waves * (latency + k_iters * t_iter + concurrent * store)
    main = _smax(busiest * reg_penalty, dram_bytes / (mem_bw * MEMORY_EFF))
    us = LAUNCH_US + main

    if t.split_k > 1:
        us += _reduce_us(M * N, t.split_k, eo, target)
    return us
