"""The "gluon" backend of gemm_fp8_blockwise: a blockwise-scaled FP8 GEMM for NVIDIA Hopper (sm_90) in Gluon.

C (M, N) = Σ_g a_scale[:, g] · b_scale[n // 128, g] · (A[:, g] · B[:, g]ᵀ) over the 128-wide K groups g,
A (M, K) and B (N, K) in e4m3 with fp32 scales per 1x128 (A) and 128x128 (B) block, fp32 accumulation.

Why: each K group's product must be scaled before it joins the accumulator. Plain Triton (`quant.kernel`,
and a TMA prototype) waits for every group's wgmma (`wgmma.wait_group 0`) before the scale FMA, so the
tensor cores idle while it runs (docs/notes/2026-11-22-fp8-blockwise-prefill.md). Here every K step issues
the wgmma of group g + 1 asynchronously, then `warpgroup_mma_wait(num_outstanding=1)` (`wgmma.wait_group 1`)
makes group g's product ready, and acc += p_g · a_scale[:, None] · b_scale runs in registers while g + 1's
wgmma does. TMA loads run STAGES - 1 groups ahead of the wgmma issued through a ring of mbarriers.

Layout of the work: one program per C tile (BLOCK_M x BLOCK_N, BLOCK_K = 128 = one scale group), or
(PERSISTENT) one per SM walking the tiles in grouped order. The wgmma accumulator layout stacks warps along
M, 16 rows each, so 8 warps at BLOCK_M 128 are two warpgroups of 64 rows. Per thread the K loop holds
three fp32 tiles (the accumulator, the product being scaled and the product in flight): 64 registers each
at 64 rows x 128 columns per warpgroup, which is why BLOCK_N is at most 128 (it must divide 128 anyway:
one B scale per tile and group). The loop is unrolled twice so that the even and odd products keep their
own registers from issue to reuse: a register copy of a product whose wgmma is in flight makes ptxas
serialize every wgmma (C7514; see `_issue` and `_retire`). A slot of the ring is refilled after a CTA
barrier, since each warpgroup waits for its own wgmmas only (Triton adds a few more around TMA issues, and
one after every wgmma wait of a partition of more than 4 warps).

WARP_SPEC (`gl.warp_specialize`): no CTA barrier in the K loop. The num_warps consumer warps are
num_warps / 4 partitions of one warpgroup each (the kernel's num_warps, the default partition's, is 4),
each computing its rows of every tile as above, with its own C block (c_desc's) and epilogue; one more
warp, the loader, makes every TMA load. The ring has two mbarriers per slot:
- ready (count 1): the loader's expect (one arrival, plus the bytes) and the two TMA loads complete it;
  use n of a slot (load number it = n · STAGES + slot) completes its phase n, waited for with parity n & 1;
- empty (count `release_count`: every consumer warp on 3.9, every consumer warpgroup on 3.6): each consumer
  warp arrives once for each load, after the wait that retired the wgmma reading it (the tails' waits for
  0 too); use n's arrivals complete its phase n. Load `it` waits for phase n - 1, parity (n & 1) ^ 1, which
  a fresh barrier counts as complete for n = 0.
Neither barrier can run two phases ahead of a waiter (a load needs the release of the slot's previous
load, which needs every consumer past its wait for it), so parities are unambiguous. Persistent programs:
the loader walks the consumers' tile sequence, and load numbers (so slots and phases) continue across
tiles. On 3.9 the consumers wait and arrive in PTX of their own (`wait_ready`, `release` of
`common.gluon_hopper`): Gluon's calls put a bar.sync of the partition before each. Registers
(setmaxnreg): 240 a thread for each consumer warpgroup, 24 for the loader's.

SPLIT_K (decode grids of fewer tiles than SMs): a grid of tiles x K slices; each slice's fp32 part goes to
a workspace, and the last slice of a block of C to bump its counter sums the parts in slice order and
stores C (`_add_up`; the counter is left at zero for the next launch, CUDA-graph replays included).

SWAP_AB (decode, `SWAP`): the kernel runs on Cᵀ = B · Aᵀ, the weight as its A (BLOCK_N rows, 64 or 128,
on wgmma's M side: one weight scale per tile and group) and the activations as its B (BLOCK_M rows, 16
to 64, its N side), so a decode tile wastes no wgmma rows; the activations' scales then run along the
accumulator's columns, and C is stored transposed through shared memory.

Knobs (the op's space, `quant.space.GLUON_PARAMS`): BLOCK_M, BLOCK_N, num_warps, num_stages (the
ring's depth, STAGES), PERSISTENT, GROUP_M, WARP_SPEC, SPLIT_K and SWAP_AB (a config without the last
three runs with 0, 1 and 0, as stored before they existed). `gluon_launcher` builds the launch of one
config (its tensor descriptors once per `bind`); `compile_for_target` cross-compiles one without a GPU.
Gluon has no interpreter: the kernel runs on Hopper only. Imported lazily (it imports triton and
Gluon). Triton 3.6 and 3.9 spell a few Gluon calls differently: the shims below pick whichever the
installed Triton has.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from autotune.core.config import Config
from autotune.core.op import FP_OPTIONS
from autotune.core.problem import cdiv
from autotune.kernels.common.gluon_hopper import (
    CONSUMER_REGS,
    GL_DTYPES,
    LOADER_REGS,
    check_tma,
    cta_barrier,
    release,
    release_count,
    wait_ready,
    wgmma_layout,
)
from autotune.kernels.launch import pinned
from autotune.kernels.quant.gluon_hopper import _k_slice, _load, _load_all, _origin, _store
from autotune.kernels.quant.gluon_split import split_slices
from autotune.kernels.scratch import split_scratch

__all__ = [
    "CONFIG_KEYS",
    "OPTIONAL_KEYS",
    "SCALE_BLOCK",
    "GluonBlockwiseLauncher",
    "compile_for_target",
    "gluon_blockwise_launcher",
    "gluon_fp8_blockwise_kernel",
    "gluon_launcher",
]

#: The K extent of one scale group, and the BLOCK_K of every K step.
SCALE_BLOCK = 128


@gluon.jit
def _issue(bars, a_bufs, b_bufs, it, regs, no: gl.tensor, STAGES: gl.constexpr, ROW0: gl.constexpr,
           ROWS: gl.constexpr, WARP_SPEC: gl.constexpr):  # fmt: skip
    """Waits for load `it`, then issues its product A_g · B_gᵀ (rows ROW0 .. ROW0 + ROWS of the A tile)
    asynchronously, into the registers of `regs` (a retired product, whose values are ignored: `no` is
    False at run time)."""
    slot = it % STAGES
    # The slot's n-th load completes the barrier's phase n; wait(parity) returns once that phase is done.
    wait_ready(bars.index(slot), (it // STAGES) & 1, WARP_SPEC)
    a = a_bufs.index(slot)
    if a_bufs.shape[1] > ROWS:  # one consumer warpgroup's rows (WARP_SPEC)
        a = a.slice(ROW0, ROWS)
    b_t = b_bufs.index(slot).permute((1, 0))  # (BLOCK_K, BLOCK_N), K-major: what fp8 wgmma takes
    # use_acc=False as a constant gives the wgmma fresh output registers, and LLVM then copies the
    # product in flight at the loop's back edge: ptxas sees its registers read before the wait and
    # serializes every wgmma (C7514). A run-time False ties the outputs to `regs`, so each product
    # stays in the same registers from issue through wait, scale and reuse.
    return warpgroup_mma(a, b_t, regs, use_acc=no, is_async=True)


@gluon.jit
def _scales(vec_ptrs, mask, one_row, group, stride_vk, stride_1k):
    """The scales of K group `group`: one per row of the tile (SWAP: per column; `vec_ptrs`, the
    activations' per-row scales) times the weight's one scale of its 128x128 block (`one_row`)."""
    per_row = gl.load(vec_ptrs + group * stride_vk, mask=mask, other=0.0)
    block = gl.load(one_row + group * stride_1k)
    return per_row * block


@gluon.jit
def _scaled_add(acc, done, scale, SWAP: gl.constexpr):
    """acc + done · scale, one FMA per element (fp fusion): `scale` runs along the tile's rows, or (SWAP:
    the activations' scales) along its columns."""
    if SWAP:
        total = acc + done * scale[None, :]
    else:
        total = acc + done * scale[:, None]
    return total


@gluon.jit
def _retire(acc, done, scale, a_desc, b_desc, bars, empty, a_bufs, b_bufs, off_m, off_n, k0, group, it,
            k_tiles, STAGES: gl.constexpr, WARP_SPEC: gl.constexpr, SWAP: gl.constexpr):  # fmt: skip
    """Group k0 + `group`'s product `done` (load `it`; waited for with one wgmma, group + 1's, left in flight)
    joins `acc`, scaled. Its ring slot is refilled with group + STAGES once every warpgroup is past its
    wait, or (WARP_SPEC) released to the loader. Returns (acc, done), done's registers free for the next
    product."""
    if WARP_SPEC:
        # The wait before this call retired the wgmma that read the slot (a wgmma-group completes as a
        # whole, the warpgroup's smem reads included): this warp's part of releasing it.
        release(empty.index(it % STAGES))
    else:
        # Each warpgroup waited for its own wgmma only: the barrier makes sure all of them have finished
        # reading the slot before the TMA (one thread) overwrites it.
        cta_barrier()
        nxt = group + STAGES
        more = nxt < k_tiles
        _load(a_desc, b_desc, bars, a_bufs, b_bufs, off_m, off_n, k0 + nxt, it + STAGES, more, STAGES)
    acc = _scaled_add(acc, done, scale, SWAP)
    # A pin: LLVM would sink these FMAs below the next wgmma, which reuses `done`'s registers, and copy
    # them while that wgmma is in flight. Passing acc and done through a wait (one wgmma, the one in
    # flight, may stay outstanding: it does not stall) keeps the FMAs before it.
    return warpgroup_mma_wait(num_outstanding=1, deps=(acc, done))


@gluon.jit
def _tile(a_desc, b_desc, as_ptr, bs_ptr, bars, empty, a_bufs, b_bufs, off_m, off_n, base, M, N, k0, k_tiles,
          stride_asm, stride_ask, stride_bsn, stride_bsk, mma_layout: gl.constexpr, STAGES: gl.constexpr,
          ROW0: gl.constexpr, ROWS: gl.constexpr, WARP_SPEC: gl.constexpr, SWAP: gl.constexpr):  # fmt: skip
    """The scaled fp32 rows off_m + ROW0 .. + ROWS of the C tile at (off_m, off_n) (all of its rows but
    under WARP_SPEC) over the k_tiles K groups from k0; `base` is the number of loads this program made
    before (the ring's slots and barrier phases continue across the tiles of a persistent program)."""
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    if not WARP_SPEC:  # (the loader partition makes every load of WARP_SPEC)
        # Prologue: the ring is free here (every earlier wgmma has been waited for, then a CTA barrier).
        for i in gl.static_range(STAGES):
            _load(a_desc, b_desc, bars, a_bufs, b_bufs, off_m, off_n, k0 + i, base + i, i < k_tiles, STAGES)

    if SWAP:  # A is the weight: one scale per 128x128 block; B's (the activations') per row: per column
        offs_v = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        mask_v = offs_v < N
        vec_ptrs = bs_ptr + offs_v * stride_bsn + k0 * stride_bsk
        one_row = as_ptr + (off_m // 128) * stride_asm + k0 * stride_ask
        stride_vk = stride_bsk
        stride_1k = stride_ask
    else:  # A's scales per row, B's per 128x128 block
        offs_v = off_m + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma_layout))
        mask_v = offs_v < M
        vec_ptrs = as_ptr + offs_v * stride_asm + k0 * stride_ask  # the scales of the slice's groups
        one_row = bs_ptr + (off_n // 128) * stride_bsn + k0 * stride_bsk
        stride_vk = stride_ask
        stride_1k = stride_bsk
    acc = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout)
    d1 = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout)

    s0 = _scales(vec_ptrs, mask_v, one_row, 0, stride_vk, stride_1k)
    no = k_tiles < 0  # False, but not a constant (see _issue)
    p0 = _issue(bars, a_bufs, b_bufs, base, gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout), no, STAGES,
                ROW0, ROWS, WARP_SPEC)  # fmt: skip
    # Two groups per iteration: p0 / p1 are the products of even / odd groups in flight, d0 / d1 the same
    # registers once retired. At the back edge p0 is in flight and d1 is free, always in the same
    # registers. The scales of a group are loaded when its wgmma is issued, one K step before their use.
    for g in range(1, k_tiles - 1, 2):
        s1 = _scales(vec_ptrs, mask_v, one_row, g, stride_vk, stride_1k)
        p1 = _issue(bars, a_bufs, b_bufs, base + g, d1, no, STAGES, ROW0, ROWS, WARP_SPEC)
        d0 = warpgroup_mma_wait(num_outstanding=1, deps=(p0,))
        acc, d0 = _retire(acc, d0, s0, a_desc, b_desc, bars, empty, a_bufs, b_bufs, off_m, off_n, k0, g - 1,
                          base + g - 1, k_tiles, STAGES, WARP_SPEC, SWAP)  # fmt: skip
        s0 = _scales(vec_ptrs, mask_v, one_row, g + 1, stride_vk, stride_1k)
        p0 = _issue(bars, a_bufs, b_bufs, base + g + 1, d0, no, STAGES, ROW0, ROWS, WARP_SPEC)
        d1 = warpgroup_mma_wait(num_outstanding=1, deps=(p1,))
        acc, d1 = _retire(acc, d1, s1, a_desc, b_desc, bars, empty, a_bufs, b_bufs, off_m, off_n, k0, g,
                          base + g, k_tiles, STAGES, WARP_SPEC, SWAP)  # fmt: skip
    # Issued so far: groups 0 .. 2·iterations, the last (in p0) still in flight.
    if k_tiles % 2 == 0:
        last = k_tiles - 1
        s1 = _scales(vec_ptrs, mask_v, one_row, last, stride_vk, stride_1k)
        p1 = _issue(bars, a_bufs, b_bufs, base + last, d1, no, STAGES, ROW0, ROWS, WARP_SPEC)
        d0 = warpgroup_mma_wait(num_outstanding=1, deps=(p0,))
        acc, d0 = _retire(acc, d0, s0, a_desc, b_desc, bars, empty, a_bufs, b_bufs, off_m, off_n, k0,
                          last - 1, base + last - 1, k_tiles, STAGES, WARP_SPEC, SWAP)  # fmt: skip
        d1 = warpgroup_mma_wait(num_outstanding=0, deps=(p1,))
        if WARP_SPEC:  # the last group's slot, or the next tile's loads would wait for it forever
            release(empty.index((base + last) % STAGES))
        acc = _scaled_add(acc, d1, s1, SWAP)
    else:
        d0 = warpgroup_mma_wait(num_outstanding=0, deps=(p0,))
        if WARP_SPEC:
            release(empty.index((base + k_tiles - 1) % STAGES))
        acc = _scaled_add(acc, d0, s0, SWAP)
    return acc


@gluon.jit
def _store_c(c_desc, c_smem, acc, off_m, off_n, SWAP: gl.constexpr):
    """The tile at (off_m, off_n) of the kernel's C, or (SWAP) of its transpose: C's block at
    (off_n, off_m)."""
    if SWAP:
        _store(c_desc, c_smem, gl.permute(acc, [1, 0]), off_n, off_m)
    else:
        _store(c_desc, c_smem, acc, off_m, off_n)


@gluon.jit
def _add_up(acc, c_desc, c_smem, ws_ptr, count_ptr, part, off_m, off_n, SPLIT_K: gl.constexpr,
            mma_layout: gl.constexpr, SWAP: gl.constexpr):  # fmt: skip
    """One K slice's fp32 `acc` of C's block at (off_m, off_n), summed with the other slices in this
    launch: written to slot program_id(1) of the block's SPLIT_K slots in the workspace, then the block's
    counter `part` is bumped; the last slice to arrive sums the slots in slice order (deterministic, no
    waiting), stores C and resets the counter to 0 for the next launch."""
    ROWS: gl.constexpr = acc.shape[0]
    BLOCK_N: gl.constexpr = acc.shape[1]
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma_layout))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
    offs = rows[:, None] * BLOCK_N + cols[None, :]
    slots = ws_ptr + part * (SPLIT_K * ROWS * BLOCK_N)
    gl.store(slots + gl.program_id(1) * (ROWS * BLOCK_N) + offs, acc)
    cta_barrier()  # every thread's part is written before the counter says so
    arrived = gl.atomic_add(count_ptr + part, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        cta_barrier()
        total = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout)
        for sl in gl.static_range(SPLIT_K):
            total += gl.load(slots + sl * (ROWS * BLOCK_N) + offs, cache_modifier=".cg")
        _store_c(c_desc, c_smem, total, off_m, off_n, SWAP)
        gl.atomic_xchg(count_ptr + part, 0, sem="relaxed", scope="gpu")


@gluon.jit
def _consume(a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, bars, empty, a_bufs, b_bufs, c_smem,
             M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk, GROUP_M: gl.constexpr,
             STAGES: gl.constexpr, PERSISTENT: gl.constexpr, WARP_SPEC: gl.constexpr, SPLIT_K: gl.constexpr,
             CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, mma_layout: gl.constexpr,
             SWAP: gl.constexpr):  # fmt: skip
    """The program's C tiles, one or (PERSISTENT) pid, pid + programs, ...: all of each (the kernel), or
    (WARP_SPEC) consumer warpgroup CONSUMER's rows of each, c_desc's block; over K slice program_id(1)
    (SPLIT_K > 1, not PERSISTENT), summed in the launch (`_add_up`, a counter per block of C)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    ROWS: gl.constexpr = BLOCK_M // CONSUMERS
    ROW0: gl.constexpr = CONSUMER * ROWS
    k0, k_tiles = _k_slice(K, BLOCK_K, SPLIT_K)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        base = 0
        for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            off_m, off_n = _origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _tile(a_desc, b_desc, as_ptr, bs_ptr, bars, empty, a_bufs, b_bufs, off_m, off_n, base, M,
                        N, k0, k_tiles, stride_asm, stride_ask, stride_bsn, stride_bsk, mma_layout, STAGES,
                        ROW0, ROWS, WARP_SPEC, SWAP)  # fmt: skip
            base += k_tiles
            _store_c(c_desc, c_smem, acc, off_m + ROW0, off_n, SWAP)
    else:
        off_m, off_n = _origin(gl.program_id(0), num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile(a_desc, b_desc, as_ptr, bs_ptr, bars, empty, a_bufs, b_bufs, off_m, off_n, 0, M, N, k0,
                    k_tiles, stride_asm, stride_ask, stride_bsn, stride_bsk, mma_layout, STAGES, ROW0, ROWS,
                    WARP_SPEC, SWAP)  # fmt: skip
        if SPLIT_K == 1:
            _store_c(c_desc, c_smem, acc, off_m + ROW0, off_n, SWAP)
        else:
            part = gl.program_id(0) * CONSUMERS + CONSUMER
            _add_up(acc, c_desc, c_smem, ws_ptr, count_ptr, part, off_m + ROW0, off_n, SPLIT_K, mma_layout,
                    SWAP)  # fmt: skip
    tma.store_wait(0)


@gluon.jit
def gluon_fp8_blockwise_kernel(
    a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, M, N, K, stride_asm, stride_ask, stride_bsn,
    stride_bsk, GROUP_M: gl.constexpr, STAGES: gl.constexpr, PERSISTENT: gl.constexpr,
    WARP_SPEC: gl.constexpr, SPLIT_K: gl.constexpr, CONSUMERS: gl.constexpr, num_warps: gl.constexpr,
    SWAP: gl.constexpr = False,
):  # fmt: skip
    """C tiles of blockwise-scaled A · Bᵀ: one per program, or (PERSISTENT) pid, pid + programs, ...
    WARP_SPEC: num_warps is 4; CONSUMERS (1 or 2) warpgroup partitions compute the rows of c_desc's block
    each, and a loader warp makes every TMA load. SPLIT_K > 1 (not PERSISTENT): a grid of (tiles, SPLIT_K),
    the K slices summed in the launch through the fp32 workspace ws_ptr (SPLIT_K blocks of c_desc's per
    block of C) and the zeroed int32 counters count_ptr (one per block of C; left at zero)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(BLOCK_K == 128, "BLOCK_K must be one scale group (128)")
    if SWAP:  # A is the weight
        gl.static_assert(128 % BLOCK_M == 0, "SWAP: BLOCK_M must divide 128 (one A scale per tile and group)")
        gl.static_assert(c_desc.block_type.shape[1] * CONSUMERS == BLOCK_M, "C blocks: one per consumer")
    else:
        gl.static_assert(128 % BLOCK_N == 0, "BLOCK_N must divide 128 (one B scale per tile and group)")
        gl.static_assert(c_desc.block_type.shape[0] * CONSUMERS == BLOCK_M, "C blocks: one per consumer")
    gl.static_assert(STAGES >= 2, "the ring needs a slot for the wgmma in flight and one being refilled")
    gl.static_assert(WARP_SPEC or CONSUMERS == 1, "several consumers: WARP_SPEC only")
    gl.static_assert(not WARP_SPEC or num_warps == 4, "WARP_SPEC: one warpgroup per consumer partition")
    gl.static_assert(SPLIT_K == 1 or not PERSISTENT, "SPLIT_K: one program per tile and K slice")
    mma_layout: gl.constexpr = wgmma_layout(BLOCK_M // CONSUMERS, BLOCK_N, num_warps)

    # (constexpr lists concatenate inside @gluon.jit; starred unpacking does not)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)  # noqa: RUF005
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)  # one arrival (the expect) plus the TMA bytes
    if not WARP_SPEC:
        fence_async_shared()
        cta_barrier()
        _consume(a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, bars, bars, a_bufs, b_bufs,
                 c_smem, M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk, GROUP_M, STAGES, PERSISTENT,
                 WARP_SPEC, SPLIT_K, 0, CONSUMERS, mma_layout, SWAP)  # fmt: skip
    else:
        # "empty": a slot's phase completes when every consumer warp is past the wait that retired the
        # wgmma reading it (see `release` for the count).
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(empty.index(i), count=release_count(CONSUMERS * num_warps))
        loads = (a_desc, b_desc, bars, empty, a_bufs, b_bufs, M, N, K, GROUP_M, STAGES, PERSISTENT, SPLIT_K)
        if CONSUMERS == 1:
            fence_async_shared()
            cta_barrier()
            gl.warp_specialize(
                [
                    (_consume, (a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, bars, empty,
                                a_bufs, b_bufs, c_smem, M, N, K, stride_asm, stride_ask, stride_bsn,
                                stride_bsk, GROUP_M, STAGES, PERSISTENT, WARP_SPEC, SPLIT_K, 0, CONSUMERS,
                                mma_layout, SWAP)),
                    (_load_all, loads),
                ],
                [1],
                [LOADER_REGS],
            )  # fmt: skip
        else:
            c_smem1 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
            fence_async_shared()
            cta_barrier()
            gl.warp_specialize(
                [
                    (_consume, (a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, bars, empty,
                                a_bufs, b_bufs, c_smem, M, N, K, stride_asm, stride_ask, stride_bsn,
                                stride_bsk, GROUP_M, STAGES, PERSISTENT, WARP_SPEC, SPLIT_K, 0, CONSUMERS,
                                mma_layout, SWAP)),
                    (_consume, (a_desc, b_desc, c_desc, as_ptr, bs_ptr, ws_ptr, count_ptr, bars, empty,
                                a_bufs, b_bufs, c_smem1, M, N, K, stride_asm, stride_ask, stride_bsn,
                                stride_bsk, GROUP_M, STAGES, PERSISTENT, WARP_SPEC, SPLIT_K, 1, CONSUMERS,
                                mma_layout, SWAP)),
                    (_load_all, loads),
                ],
                [num_warps, 1],
                [CONSUMER_REGS, LOADER_REGS],
            )  # fmt: skip


def _check_config(
    block_m: int, block_n: int, num_warps: int, num_stages: int, persistent: bool, split_k: int,
    swap: bool = False,
) -> None:  # fmt: skip
    """ValueError for a tile, warp count, ring depth or K split the kernel cannot run (the config's tiles:
    swapped, BLOCK_N is the kernel's M side and BLOCK_M its N side)."""
    if swap:
        if SCALE_BLOCK % block_n or block_n < 64 or num_warps != 4:
            raise ValueError(
                f"SWAP_AB: BLOCK_N {block_n} is wgmma's M side, one weight scale a tile: want 64 or 128, and "
                f"4 warps (got {num_warps})"
            )
        if block_m not in (16, 32, 64):
            raise ValueError(f"SWAP_AB: BLOCK_M {block_m} is wgmma's N side: want 16, 32 or 64")
    else:
        if SCALE_BLOCK % block_n or block_n < 16:
            raise ValueError(f"BLOCK_N must divide {SCALE_BLOCK} (one B scale per tile), got {block_n}")
        if num_warps not in (4, 8) or block_m % 64 or block_m < 16 * num_warps:
            raise ValueError(
                f"BLOCK_M {block_m} with {num_warps} warps: want a multiple of 64, 4 or 8 warps and 16 rows "
                "per warp (the wgmma layout stacks warps along M)"
            )
    if num_stages < 2:
        raise ValueError(f"num_stages must be at least 2, got {num_stages}")
    if split_k < 1 or (split_k > 1 and persistent):
        raise ValueError(f"SPLIT_K must be at least 1, and 1 with PERSISTENT; got {split_k}")


@cache
def _layouts(
    block_m: int, block_n: int, out_dtype: torch.dtype, c_block: tuple[int, int]
) -> tuple[Any, Any, Any]:
    """The shared-memory layouts of the A, B and C tiles (the TMA boxes; C's `c_block`)."""
    if out_dtype not in GL_DTYPES:
        raise ValueError(f"the gluon backend writes bf16 or fp16, not {out_dtype}")
    fp8 = gl.float8e4nv
    return (
        gl.NVMMASharedLayout.get_default_for([block_m, SCALE_BLOCK], fp8),
        gl.NVMMASharedLayout.get_default_for([block_n, SCALE_BLOCK], fp8),
        gl.NVMMASharedLayout.get_default_for(list(c_block), GL_DTYPES[out_dtype]),
    )


def _kernel_args(
    a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor, out: torch.Tensor,
    block_m: int, block_n: int, consumers: int = 1, split_k: int = 1, swap: bool = False,
) -> tuple[Any, ...]:  # fmt: skip
    """The positional arguments of one launch: descriptors of A, B and C (a block of C per consumer
    warpgroup: block_m / consumers rows), the scales, the workspace and counters (split_k > 1; else the
    scales stand in, unused) and the scales' strides. `swap`: a is the weight and b the activations (the
    kernel computes Cᵀ), out is C (b's rows by a's), and its blocks are (block_n, block_m)."""
    M, K = a.shape
    N = b.shape[0]
    if K % SCALE_BLOCK or K == 0:  # (K = 0: the first wait for a load would never return)
        raise ValueError(f"K={K} is not a positive multiple of {SCALE_BLOCK}")
    if split_slices(K // SCALE_BLOCK, split_k) != split_k:
        raise ValueError(
            f"SPLIT_K {split_k} over K={K} ({K // SCALE_BLOCK} groups of {SCALE_BLOCK}) leaves a slice empty"
        )
    for name, t in (("a", a), ("b", b), ("out", out)):
        check_tma(name, t)
    c_block = (block_n, block_m // consumers) if swap else (block_m // consumers, block_n)
    a_layout, b_layout, c_layout = _layouts(block_m, block_n, out.dtype, c_block)
    a_desc = TensorDescriptor.from_tensor(a, [block_m, SCALE_BLOCK], a_layout)
    b_desc = TensorDescriptor.from_tensor(b, [block_n, SCALE_BLOCK], b_layout)
    c_desc = TensorDescriptor.from_tensor(out, list(c_block), c_layout)
    ws, counters = a_scale, b_scale
    if split_k > 1:
        tiles = cdiv(M, block_m) * cdiv(N, block_n)
        ws, counters = split_scratch(out.device, tiles * split_k * block_m * block_n, tiles * consumers)
    return (a_desc, b_desc, c_desc, a_scale, b_scale, ws, counters, M, N, K, *a_scale.stride(),
            *b_scale.stride())  # fmt: skip


class GluonBlockwiseLauncher:
    """`launch(a, b, a_scale, b_scale, out)`: a (M, K) and b (N, K) e4m3fn, a_scale (M, K/128) and
    b_scale (cdiv(N, 128), K/128) fp32 (any strides), out (M, N) bf16 or fp16 (a, b and out with unit
    column strides and 16-byte aligned rows: TMA), all on one Hopper GPU; descriptors are built per call.
    `bind(...)` builds them once and returns an argument-less launch. SPLIT_K > 1 sums its K slices in the
    launch through the scratch of the device and stream (`scratch.split_scratch`) current at `bind`.

    Immutable once built; the launch goes through `launch.pinned` (Triton's argument binding once per
    launch key). `kernel` stands in for the JIT function (a `Recorder` to capture launches). ValueError
    for a config the kernel cannot run, at construction.
    """

    def __init__(
        self, block_m: int, block_n: int, num_warps: int, num_stages: int, persistent: bool, group_m: int,
        num_sms: int, kernel: Any = None, warp_spec: bool = False, split_k: int = 1, swap: bool = False,
    ) -> None:  # fmt: skip
        _check_config(block_m, block_n, num_warps, num_stages, persistent, split_k, swap)
        self.split_k, self.swap = split_k, swap
        if swap:  # the kernel's tiles: the weight's rows (its M side), the activations' (its N side)
            block_m, block_n = block_n, block_m
        self.block_m, self.block_n, self.num_warps, self.num_stages = block_m, block_n, num_warps, num_stages
        self.persistent, self.group_m, self.num_sms, self.warp_spec = persistent, group_m, num_sms, warp_spec
        # WARP_SPEC: num_warps consumer warps are num_warps / 4 partitions of one warpgroup (the kernel's
        # num_warps, that of its default partition, is 4), plus the loader warp
        self.consumers = num_warps // 4 if warp_spec else 1
        self.kernel = pinned(
            gluon_fp8_blockwise_kernel if kernel is None else kernel, GROUP_M=group_m, STAGES=num_stages,
            PERSISTENT=persistent, WARP_SPEC=warp_spec, SPLIT_K=split_k, CONSUMERS=self.consumers,
            num_warps=4 if warp_spec else num_warps, SWAP=swap, **FP_OPTIONS,
        )  # fmt: skip

    def bind(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        a_scale: torch.Tensor,
        b_scale: torch.Tensor,
        out: torch.Tensor,
    ) -> Callable[[], None]:
        if self.swap:  # the kernel runs on Cᵀ = B · Aᵀ
            a, b, a_scale, b_scale = b, a, b_scale, a_scale
        args = _kernel_args(
            a, b, a_scale, b_scale, out, self.block_m, self.block_n, self.consumers, self.split_k, self.swap
        )
        programs = triton.cdiv(a.shape[0], self.block_m) * triton.cdiv(b.shape[0], self.block_n)
        if self.persistent:
            sms = self.num_sms or torch.cuda.get_device_properties(out.device).multi_processor_count
            programs = min(programs, sms)
        grid = (programs, self.split_k)
        run = self.kernel.launch
        no_more: dict[str, Any] = {}

        def launch() -> None:
            run(grid, args, no_more)

        return launch

    def __call__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        a_scale: torch.Tensor,
        b_scale: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        self.bind(a, b, a_scale, b_scale, out)()


def gluon_blockwise_launcher(
    block_m: int = 128,
    block_n: int = 128,
    num_warps: int = 8,
    num_stages: int = 4,
    persistent: bool = False,
    *,
    group_m: int = 8,
    num_sms: int = 0,
    kernel: Any = None,
    warp_spec: bool = False,
    split_k: int = 1,
    swap: bool = False,
) -> GluonBlockwiseLauncher:
    """The launcher of one config (see GluonBlockwiseLauncher); ValueError for a config the kernel cannot
    run. `num_sms` (persistent): how many programs, default the device's SM count; `warp_spec`: the
    WARP_SPEC kernel (num_warps consumer warps, in partitions of a warpgroup, and a loader warp);
    `split_k`: K slices summed in the launch (not persistent); `swap`: the kernel on Cᵀ = B · Aᵀ (decode:
    the weight's BLOCK_N rows on wgmma's M side, the activations' BLOCK_M on its N side)."""
    return GluonBlockwiseLauncher(
        block_m, block_n, num_warps, num_stages, persistent, group_m, num_sms, kernel, warp_spec, split_k,
        swap,
    )  # fmt: skip


#: The knobs of a "gluon" config (the op's space), in GluonBlockwiseLauncher's order.
CONFIG_KEYS = (
    "BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "PERSISTENT", "GROUP_M", "WARP_SPEC", "SPLIT_K",
    "SWAP_AB",
)  # fmt: skip
#: Knobs a config may lack, and the value it then has: configs stored before the knob existed.
OPTIONAL_KEYS: dict[str, int] = {"WARP_SPEC": 0, "SPLIT_K": 1, "SWAP_AB": 0}


def gluon_launcher(config: Config, *, num_sms: int, kernel: Any = None) -> GluonBlockwiseLauncher:
    """The launcher of a "gluon" config of gemm_fp8_blockwise; ValueError naming what is wrong with a
    config the kernel cannot run (a knob missing or unknown, a tile it has no layout for). A config
    without a knob of OPTIONAL_KEYS runs with its value there (no WARP_SPEC: the kernel without it; no
    SPLIT_K: 1)."""
    missing = [k for k in CONFIG_KEYS if k not in config and k not in OPTIONAL_KEYS]
    unknown = sorted(set(config) - {*CONFIG_KEYS, "backend"})
    if missing or unknown:
        raise ValueError(
            f"a gluon config has {', '.join(CONFIG_KEYS)}; {config.short()} "
            + (f"lacks {', '.join(missing)}" if missing else f"has unknown {', '.join(unknown)}")
        )
    values = {**OPTIONAL_KEYS, **config}
    bm, bn, warps, stages, persistent, group_m, warp_spec, split_k, swap = (
        int(values[k]) for k in CONFIG_KEYS
    )
    return GluonBlockwiseLauncher(
        bm, bn, warps, stages, bool(persistent), group_m, num_sms, kernel, bool(warp_spec), split_k,
        bool(swap),
    )  # fmt: skip


def compile_for_target(
    block_m: int = 128,
    block_n: int = 128,
    num_warps: int = 8,
    num_stages: int = 4,
    persistent: bool = False,
    *,
    warp_spec: bool = False,
    split_k: int = 1,
    swap: bool = False,
    M: int = 2048,
    N: int = 4608,
    K: int = 7168,
    arch: int = 90,
) -> Any:
    """The kernel compiled for CUDA sm_`arch` without a GPU (a CompiledKernel: .asm["ptx"], ["cubin"]),
    specialized as a launch on (M, N, K) with contiguous inputs would be: the launch is captured with
    inputs on torch's meta device and compiled by `autotune.engine.compile.compile_call`, as a sweep does."""
    from dataclasses import replace

    from autotune.core.op import KernelCall, Recorder
    from autotune.core.target import Target
    from autotune.engine.compile import compile_call

    calls: list[KernelCall] = []
    recorder = Recorder(gluon_fp8_blockwise_kernel, calls)
    launcher = GluonBlockwiseLauncher(
        block_m, block_n, num_warps, num_stages, persistent, 8, 132, recorder, warp_spec, split_k, swap
    )
    fp8 = torch.float8_e4m3fn
    a = torch.empty(M, K, dtype=fp8, device="meta")
    b = torch.empty(N, K, dtype=fp8, device="meta")
    sa = torch.empty(M, K // SCALE_BLOCK, device="meta")
    sb = torch.empty(triton.cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK, device="meta")
    launcher(a, b, sa, sb, torch.empty(M, N, dtype=torch.bfloat16, device="meta"))
    return compile_call(calls[0], replace(Target.for_arch("sm_90"), arch=f"sm_{arch}"))
