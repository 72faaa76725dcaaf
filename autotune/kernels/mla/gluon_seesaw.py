"""The MLA decode's Gluon kernel, "seesaw" schedule (backend "gluon", SCHEDULE 1): the warpgroups take the
cache tiles in turn, so that one's softmax runs beside the other's dots.

Why: the lockstep schedule (`mla.gluon_kernel`, SCHEDULE 0) splits each tile's scores by tokens across the
two warpgroups and keeps them in step (the row maxima and P shared every tile, three CTA barriers a
tile, each warpgroup waiting for its own dots), so nothing overlaps the softmax. Here (FlashMLA's seesaw
on Hopper), with a loader warp:

- warpgroup w scores the tiles i = w, w + 2, ... alone (S = Q·Kᵀ, one N = BLOCK_N wgmma), runs their
  online softmax from the other's last maximum and sum, and publishes P_i (64 x BLOCK_N bf16), the
  running row maxima m_i and sums l_i in shared memory (one buffer each: see the order below);
- each warpgroup keeps its half of the output, O_w = the columns [256w, 256w + 256) (64 x 256 fp32, 128
  registers a thread), and adds P_j·V_j[:, its half] for every tile j: its own from registers right
  after its softmax, the other's from shared memory once published, O_w rescaled first by exp2(m - m_j);
- the loader is the default partition (the kernel's 4 warps, which stage the queries first; setmaxnreg
  24 registers), the two consumer warpgroups are its workers (240 each): every TMA load goes into the
  next ring slot once both warpgroups have released it.

Per own tile i of warpgroup w (j = i - 1, the other's tile before it): wait `ready` of i's slot; (tail
tile) rows past the split's end zeroed; issue S_i (async); wait `p_ready[1-w]`, read m_j, l_j, rescale
O_w, issue O_w += P_j·V_j (async); wait for S_i (P·V_j stays in flight); the softmax of S_i; wait for
P·V_j, release j's slot; publish P_i, m_i, l_i (stores, fence, a barrier of the warpgroup, arrive on
`p_ready[w]`); O_w = O_w·alpha_i + P_i·V_i (waited for); release i's slot. Tile 0 takes tile -1: what
the kernel's body put there (P = 0, m = _NO_MAX, finite so that no exp2(-inf + inf) arises, l = 0)
against tile 0's slot, waiting for p_ready's phase before the first (complete on a fresh barrier) and
releasing nothing; so both warpgroups run one loop with no first tile peeled (a peeled copy of the tile
made ptxas spill). After its last own tile a warpgroup takes the other's last tile if the split ends
there. Both end with the last tile's m and l, so each divides its own half.

One P buffer and one (m, l) suffice: the other warpgroup overwrites them (publishing P_(i+1)) only after
its P·V of tile i is retired, and this one publishes P_(i+2) only after it took P_(i+1) (the maximum it
needs), so no reader is ever overtaken; the scorer's own P·V reads P from registers.

The mbarriers (a use n completes phase n, waited for with parity n & 1; a fresh barrier counts the
phase before the first as complete):
- ready[slot] (count 1): the expect plus the TMA bytes; tile t is use t // STAGES of its slot. The
  first STAGES tiles are loaded by the prologue before it stages the queries (their DRAM latency
  overlaps), the rest by the loader.
- empty[slot] (`release_count(8)`: every warp of both warpgroups on Triton 3.9, both partitions on 3.6):
  each warpgroup releases a tile once its P·V of it is retired; the loader's load of tile t waits for
  the release of t - STAGES. So STAGES >= 2: with one slot the second warpgroup's first tile would wait
  for its own release of the first.
- p_ready[w] (`release_count(4)`): w's k-th publish (tile i = 2k + w, k = i // 2) completes phase k.

Shared memory (bf16): the queries (72 KiB), STAGES tiles (BLOCK_N x 1,152 bytes each), P (64 x BLOCK_N),
m and l (2 x 64 fp32) and 8-byte mbarriers (two a slot, two more): `gluon_space.gluon_smem_bytes`.
Registers: the consumers hold the 64 x 256 accumulator (128 a thread), the scores and P, within 240. What
LLVM hoists out of the loop costs registers for the whole loop: the queries' wgmma descriptors (one a K
step: 36), the tail zeroing's addresses (with 2 stages a warpgroup's slots are constants), the output's
addresses. So these are derived from a zero the compiler cannot see (`_opaque_zero`, volatile PTX),
tile by tile (the queries as a one-slot ring, `.index(zero)`), and after the loop for the output. Then
ptxas spills nothing in any ring, 64 x 2 included (Triton 3.6 and 3.9; the consumers' highest register
213-236 of 240).

`tests/kernels/mla/test_mla_gpu.py` checks it on ragged contexts; on an H100 its 32-token tiles in 4
stages are the fastest form at 128 heads (docs/notes/2026-12-07-mla-gluon.md).

Rules, outputs and the launch contract: `mla.gluon_kernel`'s (same grid, same workspace; num_warps 4: the
default partition's). Imported lazily (it imports triton and Gluon).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from autotune.kernels.common.gluon_hopper import (
    CONSUMER_REGS,
    cta_barrier,
    release,
    release_count,
    wait_ready,
)
from autotune.kernels.mla.gluon_kernel import (
    _acc_layout,
    _copy_rows,
    _fill_ring,
    _load_tile,
    _smem_layout,
    _split_range,
    _stage_queries,
    _store_split,
)

__all__ = ["mla_seesaw_kernel"]

#: The row maximum before any tile: finite, so that exp2(m - m_new) is 0 or 1, never exp2(-inf + inf).
_NO_MAX = gl.constexpr(-1.0e30)


@gluon.constexpr_function
def _vec_layout() -> gl.SwizzledSharedLayout:
    """The shared layout of the row statistics (m, l): plain rows of fp32."""
    return gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])


@gluon.jit
def _opaque_zero(i):
    """0, computed from `i` where the compiler cannot see it (volatile PTX): what is derived from it (a
    shared-memory view's descriptors and addresses) varies with the tile to the compiler, so it is not
    hoisted out of the loop into registers kept across it (module docstring)."""
    return gl.inline_asm_elementwise("and.b32 $0, $1, 0;", "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _take_other(acc, m_i, j, k_lat, ready, p_ready, p_smem, m_smem, l_smem, W: gl.constexpr,
                HALF: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """The other warpgroup's tile j: waits for its P, m and l, rescales O_w to its maximum and issues O_w
    += P_j·V_j[:, w's half] (async, not waited for). Returns (acc, m_j, l_j, j's slot)."""
    row_s: gl.constexpr = m_i.type.layout
    o_layout: gl.constexpr = acc.type.layout
    # j = -1 (before warpgroup 0's first tile) takes the initial P = 0, m = _NO_MAX, l = 0 against tile
    # 0's slot: its p_ready parity is 1, the phase before the first, complete on a fresh barrier
    jt = gl.maximum(j, 0)
    jslot = jt % STAGES
    wait_ready(p_ready.index(1 - W), ((j + 2) // 2 + 1) & 1, True)
    wait_ready(ready.index(jslot), (jt // STAGES) & 1, True)  # the tile's TMA bytes, seen by this warpgroup
    m_j = m_smem.load(row_s)
    l_j = l_smem.load(row_s)
    alpha = gl.exp2(m_i - m_j)  # m_i <= m_j (finite: _NO_MAX before any tile, so no inf - inf)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    v = k_lat.index(jslot).slice(W * HALF, HALF, dim=1)
    acc = warpgroup_mma(p_smem.index(0), v, acc, is_async=True)
    return acc, m_j, l_j, jslot


@gluon.jit
def _own_tile(acc, m_i, l_i, i, q_lat, q_rope, k_lat, k_rope, p_smem, m_smem, l_smem, ready, empty, p_ready,
              scale, start, end, W: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              LATENT: gl.constexpr, CHUNK: gl.constexpr):  # fmt: skip
    """Warpgroup W's tile i, and the other's tile i - 1 (module docstring). Returns (acc, m, l) after
    both."""
    HALF: gl.constexpr = LATENT // 2
    s_layout: gl.constexpr = _acc_layout(BLOCK_N, 4)
    o_layout: gl.constexpr = acc.type.layout
    slot = i % STAGES
    wait_ready(ready.index(slot), (i // STAGES) & 1, True)
    lat = k_lat.index(slot)
    rope = k_rope.index(slot)
    n0 = start + i * BLOCK_N
    if n0 + BLOCK_N > end:  # the tail tile: no NaN past the end may reach either warpgroup's P·V
        tail = k_lat.index(slot + _opaque_zero(i))
        _copy_rows(tail, tail, end - n0, BLOCK_N, LATENT, CHUNK, 4)
        fence_async_shared()
        cta_barrier()  # (this warpgroup's warps; the other reads the tile after p_ready)
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, s_layout)
    # (the queries' descriptors, one a K step, computed tile by tile: 36 registers kept across the loop
    # otherwise)
    zq = _opaque_zero(i)
    qk = warpgroup_mma(q_lat.index(zq), lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    qk = warpgroup_mma(q_rope.index(zq), rope.permute((1, 0)), qk, is_async=True)
    acc, m_i, l_i, jslot = _take_other(acc, m_i, i - 1, k_lat, ready, p_ready, p_smem, m_smem, l_smem, W,
                                       HALF, STAGES)  # fmt: skip
    qk = warpgroup_mma_wait(num_outstanding=1, deps=(qk,))  # S_i; the other's P·V stays in flight
    # the online softmax in base 2, from the maximum and sum of the tile before (either warpgroup's)
    tokens = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout)) + _opaque_zero(i)
    x = gl.where((tokens < end - n0)[None, :], qk * scale, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(x, 1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(x - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, 1)
    m_i = m_new
    # the other's P·V retired: its P, m and l read, their buffers free, its slot released (not tile -1's)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    if i > 0:
        release(empty.index(jslot))
    # publish P_i, m_i, l_i (the other warpgroup waits for them before it publishes its next)
    p16 = p.to(gl.bfloat16)
    p_smem.index(_opaque_zero(i)).store(p16)
    m_smem.store(m_i)
    l_smem.store(l_i)
    fence_async_shared()  # P (generic-proxy stores) → visible to the other's wgmma (async proxy) ...
    cta_barrier()  # ... once every warp of this warpgroup has stored its part
    release(p_ready.index(W))
    # O_w += P_i·V_i, P_i from registers (the shared buffer is the other's to read, then to overwrite)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_op = gl.convert_layout(p16, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    acc = warpgroup_mma(p_op, lat.slice(W * HALF, HALF, dim=1), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    release(empty.index(slot))
    return acc, m_i, l_i


@gluon.jit
def _consumer(q_lat, q_rope, k_lat, k_rope, p_smem, m_smem, l_smem, ready, empty, p_ready, out_ptr,
              part_ptr, lse_ptr, scale, H, b, g, s, start, end, n_tiles, stride_ob, stride_oh,
              W: gl.constexpr, LATENT: gl.constexpr, BLOCK_N: gl.constexpr, SPLITS: gl.constexpr,
              STAGES: gl.constexpr, CHUNK: gl.constexpr):  # fmt: skip
    """Warpgroup W (a partition of 4 warps): its tiles, the other's, and its half of the output."""
    HALF: gl.constexpr = LATENT // 2
    s_layout: gl.constexpr = _acc_layout(BLOCK_N, 4)
    o_layout: gl.constexpr = _acc_layout(HALF, 4)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_i = gl.full([64], _NO_MAX, gl.float32, row_s)
    l_i = gl.zeros([64], gl.float32, row_s)
    acc = gl.zeros([64, HALF], gl.float32, o_layout)
    for i in range(W, n_tiles, 2):  # own tiles; warpgroup 0's first takes tile -1 (nothing)
        acc, m_i, l_i = _own_tile(acc, m_i, l_i, i, q_lat, q_rope, k_lat, k_rope, p_smem, m_smem, l_smem,
                                  ready, empty, p_ready, scale, start, end, W, BLOCK_N, STAGES, LATENT,
                                  CHUNK)  # fmt: skip
    last = n_tiles - 1
    if (last >= 0) & (last % 2 != W):  # the other's last tile
        acc, m_i, l_i, jslot = _take_other(acc, m_i, last, k_lat, ready, p_ready, p_smem, m_smem, l_smem, W,
                                           HALF, STAGES)  # fmt: skip
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        release(empty.index(jslot))

    # this warpgroup's half of the output (one split) or of the split's normalized part; the log-sum-exp
    # (base 2; -inf when empty) by warpgroup 0
    z = _opaque_zero(n_tiles)  # (the output's addresses computed here, not kept across the loop)
    b = b + z
    s = s + z
    l_o = gl.convert_layout(l_i, row_o)
    heads = (g + z) * 64 + gl.arange(0, 64, layout=row_o)
    cols = W * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))
    o = acc / gl.where(l_o > 0, l_o, 1.0)[:, None]
    _store_split(o, m_i, l_o, heads, cols, b, s, H, out_ptr, part_ptr, lse_ptr, stride_ob, stride_oh, LATENT,
                 SPLITS, W == 0)  # fmt: skip


@gluon.jit
def _loader(kv_desc, pages, k_lat, k_rope, ready, empty, start, n_tiles, PAGE: gl.constexpr,
            LATENT: gl.constexpr, ROPE: gl.constexpr, BLOCK_N: gl.constexpr,
            STAGES: gl.constexpr):  # fmt: skip
    """The loader, the default partition: every tile of the split after the first STAGES (the kernel's
    prologue loads those), in order, into the next slot once both warpgroups have released it."""
    for t in range(STAGES, n_tiles):
        slot = t % STAGES
        mbarrier.wait(empty.index(slot), ((t // STAGES) & 1) ^ 1)
        _load_tile(kv_desc, pages, start + t * BLOCK_N, ready.index(slot), k_lat.index(slot),
                   k_rope.index(slot), t < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip


@gluon.jit
def mla_seesaw_kernel(
    q_ptr, kv_desc, pt_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr,
    scale, v_scale, H,
    stride_qb, stride_qh, stride_ptb, stride_ob, stride_oh,
    LATENT: gl.constexpr, ROPE: gl.constexpr, PAGE: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLITS: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """One (sequence, 64-head group, split) of the MLA decode, seesaw schedule (module docstring)."""
    BLOCK_H: gl.constexpr = 64
    CHUNK: gl.constexpr = kv_desc.block_type.shape[1]
    gl.static_assert(num_warps == 4, "the default partition (the loader) is one warpgroup: num_warps 4")
    gl.static_assert(kv_desc.block_type.shape[0] == BLOCK_N, "the descriptor's box is BLOCK_N rows")
    gl.static_assert(PAGE % BLOCK_N == 0, "a tile must lie inside one page")
    gl.static_assert(STAGES >= 2, "the seesaw needs two slots (module docstring)")
    gl.static_assert(kv_desc.block_type.element_ty == gl.bfloat16, "a bf16 cache only (v_scale unused)")

    g = gl.program_id(0)  # the head groups of a sequence run side by side: the second reads its tiles from L2
    b = gl.program_id(1)
    s = gl.program_id(2)

    q_lat = gl.allocate_shared_memory(gl.bfloat16, [1, BLOCK_H, LATENT], _smem_layout(LATENT))
    q_rope = gl.allocate_shared_memory(gl.bfloat16, [1, BLOCK_H, ROPE], _smem_layout(ROPE))
    k_lat = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, LATENT], _smem_layout(LATENT))
    k_rope = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, ROPE], _smem_layout(ROPE))
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [1, BLOCK_H, BLOCK_N], _smem_layout(BLOCK_N))
    m_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], _vec_layout())  # the published m ...
    l_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], _vec_layout())  # ... and l
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)  # one arrival (the expect) plus the TMA bytes
        mbarrier.init(empty.index(i), count=release_count(8))  # both warpgroups
    for i in gl.static_range(2):
        mbarrier.init(p_ready.index(i), count=release_count(4))  # the publishing warpgroup

    start, end, n_tiles, pages = _split_range(lens_ptr, pt_ptr, b, s, stride_ptb, SPLITS, BLOCK_N)
    _fill_ring(kv_desc, pages, start, n_tiles, ready, k_lat, k_rope, PAGE, LATENT, ROPE, STAGES)

    _stage_queries(q_ptr, q_lat.index(0), q_rope.index(0), b, g, H, stride_qb, stride_qh, LATENT, ROPE,
                   BLOCK_H, CHUNK, num_warps)  # fmt: skip
    # what warpgroup 0's first tile takes as tile -1: P = 0, m = _NO_MAX, l = 0
    init: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    p_smem.index(0).store(gl.zeros([BLOCK_H, BLOCK_N], gl.bfloat16, init))
    m_smem.store(gl.full([BLOCK_H], _NO_MAX, gl.float32, gl.SliceLayout(1, init)))
    l_smem.store(gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, init)))
    fence_async_shared()  # the queries and the barriers' init → visible to the TMA and the wgmmas
    cta_barrier()
    gl.warp_specialize(
        [
            (_loader, (kv_desc, pages, k_lat, k_rope, ready, empty, start, n_tiles, PAGE, LATENT, ROPE,
                       BLOCK_N, STAGES)),
            (_consumer, (q_lat, q_rope, k_lat, k_rope, p_smem, m_smem, l_smem, ready, empty, p_ready, out_ptr,
                         part_ptr, lse_ptr, scale, H, b, g, s, start, end, n_tiles, stride_ob, stride_oh, 0,
                         LATENT, BLOCK_N, SPLITS, STAGES, CHUNK)),
            (_consumer, (q_lat, q_rope, k_lat, k_rope, p_smem, m_smem, l_smem, ready, empty, p_ready, out_ptr,
                         part_ptr, lse_ptr, scale, H, b, g, s, start, end, n_tiles, stride_ob, stride_oh, 1,
                         LATENT, BLOCK_N, SPLITS, STAGES, CHUNK)),
        ],
        [4, 4],
        [CONSUMER_REGS, CONSUMER_REGS],
    )  # fmt: skip
