"""The MLA decode's "gluon" backend: a split-KV decode kernel for NVIDIA Hopper (sm_90) in Gluon.

Why: at 128 heads the decode is bound by its dots. The Triton kernel (`mla.kernel`) reads each cache tile
through registers and shared memory twice (once per dot) and its 64-head tiles spill; here each tile
crosses from global to shared memory once, by TMA, and both dots read it there with warpgroup MMAs.

Layout of the work (FlashMLA's): one program per (group of 64 query heads, sequence, split of the
context), two warpgroups (8 warps, num_warps fixed). The head groups are the grid's fastest dimension, so
the groups of a sequence run at the same time and all but the first read its tiles from L2 (at 128 heads
and batch 128, grouped by sequence first, a whole wave of first groups would read the cache from DRAM
and the second groups again). Shared memory holds the group's queries (64 x 576
bf16, 72 KiB, staged once), a ring of STAGES cache tiles (BLOCK_N tokens x 576 each, 72 KiB at 64 tokens)
and the probabilities P (64 x BLOCK_N bf16). Both accumulators have the wgmma layout with warps [4, 2]:
- scores S = Q·Kᵀ (64 x BLOCK_N, K = 512 latent + 64 RoPE dims, two dots): warpgroup w scores the tile's
  tokens [w·BLOCK_N/2, (w+1)·BLOCK_N/2) (an N = BLOCK_N/2 wgmma each);
- the output O (64 x 512 fp32): warpgroup w sums the columns [256w, 256w + 256) (128 registers a thread,
  one N = 256 wgmma per 16 tokens), O += P·V with V the tile's first 512 columns, read from the same slot.
The softmax's row maxima and sums meet across the two warpgroups through shared memory (Triton's
reduction across warps), P is written to shared memory for both, and O is rescaled by each tile's
alpha before its P·V.

Each tile of a split, in order (one CTA barrier after each step that another warpgroup's next step
reads): wait for the slot's TMA (its `ready` mbarrier); S = Q·Kᵀ (async wgmmas, waited for); the
online softmax in base 2 (`scale` = sm_scale · log2 e, tokens past the split's end at -inf); P to shared
memory; O = O·alpha + P·V (async, waited for); then the slot is refilled with the tile STAGES ahead
(one TMA load per 64 columns, into the slot's column slices). A tile lies inside one page (PAGE %
BLOCK_N == 0, and a split starts at a multiple of BLOCK_N), so its rows are contiguous in the cache seen
as 2-D, (pages · PAGE, 576): the first at page_table[b, t // PAGE] · PAGE + t % PAGE.

Rules (the Triton kernel's, so the launcher's contract and the split workspace are the same):
- A split's slice is a whole number of BLOCK_N tiles, cdiv(context, splits) rounded up; the context is
  read on the device; a split past the end writes an empty part (log-sum-exp -inf), and a context of 0
  gives a zero output. One split writes the output; several write their normalized parts and base-2
  log-sum-exps, which `mla.kernel.mla_reduce_kernel` combines.
- The ring's first STAGES tiles are loaded before the queries are staged, so that their DRAM latency
  overlaps the staging.
- The tail tile (the split's end inside it) has its rows past the end zeroed in shared memory before the
  dots: the TMA reads the whole tile (the rest of the page, whatever it holds), and a probability of 0
  times a NaN would still be a NaN.
- 64 heads a program (the last group's rows past H are zero queries, their output not stored: at 16
  heads a rank three quarters of the dots are padding, which a memory-bound shape can afford); 512 latent
  + 64 RoPE dims.

A bf16 cache or an FP8 one (e4m3, per-tensor `v_scale`; the launcher folds it into `scale` for the
scores). FP8 tiles land in the ring by TMA (half the bytes) and are upcast, tile by tile, into one fp16
tile that the 16-bit dots read (e4m3 is exact in fp16; the queries are staged as fp16, each head scaled
by a power of two that keeps it exact and in range, and P is fp16); the tail's rows are zeroed in the
same pass. Why not FP8 dots throughout: FP8 wgmma takes K-major operands only, and P·V's B (V, tokens by
dims) is MN-major, so V must be upcast (or transposed) through registers either way. With `Q_FP8` 1 the
scores are FP8 wgmmas: the queries quantized per head (their absolute maximum over 448) against the
slot's FP8 tile as loaded (K-major), while the warps upcast only the latent part for P·V; the slot is
refilled once both warpgroups' scores have retired. That halves the scores' shared-memory bytes and
costs the queries' quantization error (docs/notes/2026-12-07-mla-gluon.md). Each head's query scale
multiplies its scores (`row_scale`).

Knobs (`mla.space`, backend "gluon"): num_kv_splits, BLOCK_N (32 or 64 tokens a tile), num_stages (the
ring's depth; shared memory: 72 KiB of queries + stages x BLOCK_N x 1152 bytes + P) and SCHEDULE: 0 this
module's kernel (the warpgroups in lockstep), 1 the seesaw (`mla.gluon_seesaw`: the warpgroups take the
tiles in turn, a loader warp, the same launch contract), 2 the swapped kernel (`mla.gluon_swapped`: at
most 32 heads on the wgmmas' N, an e4m3 cache); with an FP8 cache, Q_FP8. Gluon has no
interpreter: the kernel runs on Hopper only and is cross-compiled for sm_90 by the static checks.
Imported lazily (it imports triton and Gluon).
"""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from autotune.kernels.common.gluon_hopper import cta_barrier, tma_load
from autotune.kernels.mla.kernel import mla_reduce_kernel

__all__ = [
    "BLOCK_H",
    "CHUNK",
    "JIT_KERNELS",
    "LATENT",
    "NUM_WARPS",
    "ROPE",
    "mla_gluon_kernel",
]

#: Query heads a program takes (the M of every wgmma: one warpgroup's 64 rows).
BLOCK_H = 64
#: Warps a program runs: two warpgroups.
NUM_WARPS = 8
#: The latent (value) and RoPE dims the kernel is built for (DeepSeek-V3, Kimi-K2).
LATENT = 512
ROPE = 64
#: Columns of one TMA box (128 bytes of bf16: one 128-byte swizzle row).
CHUNK = 64


@gluon.constexpr_function
def _smem_layout(cols: int, bits: int = 16) -> Any:
    """The NVMMA shared layout of a tile `cols` wide of `bits`-bit values (the widest swizzle its rows
    fill, 128 bytes)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=min(128, cols * bits // 8), element_bitwidth=bits, rank=2)


@gluon.constexpr_function
def _ring_layout(bits: int) -> Any:
    """The NVMMA shared layout of the ring's tiles and of the TMA boxes that fill them: one box of CHUNK
    columns a swizzle row (128 bytes of bf16, 64 of FP8)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=CHUNK * bits // 8, element_bitwidth=bits, rank=2)


@gluon.constexpr_function
def _is_fp8(dtype: Any) -> bool:
    return dtype.is_fp8()


@gluon.constexpr_function
def _acc_layout(cols: int, num_warps: int, k: int = 16) -> Any:
    """The wgmma accumulator layout of a (64, cols) tile on `num_warps` warps: warps [4, num_warps / 4],
    each warpgroup a slice of the columns, the instruction's K `k` (16 for 16-bit operands, 32 for FP8)."""
    warps_n = num_warps // 4
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, warps_n], instr_shape=[16, min(256, cols // warps_n), k]
    )


@gluon.jit
def _stage_queries(q_ptr, q_lat, q_rope, b, g, H, stride_qb, stride_qh, LATENT: gl.constexpr,
                   ROPE: gl.constexpr, BLOCK_H: gl.constexpr, CHUNK: gl.constexpr,
                   num_warps: gl.constexpr):  # fmt: skip
    """The group's queries (heads past H as zeros) into shared memory, CHUNK columns at a time, in the
    buffers' dtype (the dots'); returns each head's scale (fp32, [BLOCK_H]): what its scores are to be
    multiplied by. bf16: 1. fp16: a power of two that puts the head's largest value in [2^14, 2^15)
    (exact, and no bf16 query overflows fp16). e4m3: the head's absolute maximum over 448, e4m3's."""
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    heads = g * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, blocked))
    hmask = heads < H
    rows = q_ptr + b.to(gl.int64) * stride_qb + heads[:, None] * stride_qh + cols[None, :]
    q_scale = gl.full([BLOCK_H], 1.0, gl.float32, gl.SliceLayout(1, blocked))
    if q_lat.dtype != gl.bfloat16:
        amax = gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, blocked))
        for c in gl.static_range((LATENT + ROPE) // CHUNK):
            part = gl.load(rows + c * CHUNK, mask=hmask[:, None], other=0.0).to(gl.float32)
            amax = gl.maximum(amax, gl.max(gl.abs(part), 1))
        if q_lat.dtype == gl.float16:
            exponent = (amax.to(gl.int32, bitcast=True) >> 23) & 0xFF  # floor(log2(amax)) + 127
            q_scale = (gl.minimum(gl.maximum(exponent - 14, 1), 254) << 23).to(gl.float32, bitcast=True)
        else:
            q_scale = gl.maximum(amax, 1e-12) / 448.0
    for c in gl.static_range(LATENT // CHUNK):
        part = gl.load(rows + c * CHUNK, mask=hmask[:, None], other=0.0)
        if q_lat.dtype != gl.bfloat16:
            part = part.to(gl.float32) / q_scale[:, None]
        q_lat.slice(c * CHUNK, CHUNK, dim=1).store(part.to(q_lat.dtype))
    for c in gl.static_range(ROPE // CHUNK):
        part = gl.load(rows + LATENT + c * CHUNK, mask=hmask[:, None], other=0.0)
        if q_lat.dtype != gl.bfloat16:
            part = part.to(gl.float32) / q_scale[:, None]
        q_rope.slice(c * CHUNK, CHUNK, dim=1).store(part.to(q_rope.dtype))
    return q_scale


@gluon.jit
def _load_tile(kv_desc, pages, t0, bar, lat, rope, pred, PAGE: gl.constexpr, LATENT: gl.constexpr,
               ROPE: gl.constexpr):  # fmt: skip
    """TMA loads of the tile of tokens from t0 (inside one page) into a ring slot (its latent and RoPE
    buffers), completing `bar`; nothing where `pred` is false."""
    CHUNK: gl.constexpr = kv_desc.block_type.shape[1]
    page = gl.load(pages + t0 // PAGE, mask=pred, other=0)
    row = page * PAGE + t0 % PAGE
    mbarrier.expect(bar, kv_desc.block_type.nbytes * ((LATENT + ROPE) // CHUNK), pred)
    for c in gl.static_range(LATENT // CHUNK):
        tma_load(kv_desc, [row, c * CHUNK], bar, lat.slice(c * CHUNK, CHUNK, dim=1), pred)
    for c in gl.static_range(ROPE // CHUNK):
        tma_load(kv_desc, [row, LATENT + c * CHUNK], bar, rope.slice(c * CHUNK, CHUNK, dim=1), pred)


@gluon.jit
def _fill_ring(kv_desc, pages, start, n_tiles, ready, k_lat, k_rope, PAGE: gl.constexpr, LATENT: gl.constexpr,
               ROPE: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """The split's first STAGES tiles into the ring, after the barriers' init is made visible to the TMA:
    issued before the queries are staged, so that their DRAM latency overlaps the staging."""
    BLOCK_N: gl.constexpr = kv_desc.block_type.shape[0]
    fence_async_shared()
    cta_barrier()
    for i in gl.static_range(STAGES):
        _load_tile(kv_desc, pages, start + i * BLOCK_N, ready.index(i), k_lat.index(i), k_rope.index(i),
                   i < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip


@gluon.jit
def _split_range(lens_ptr, pt_ptr, b, s, stride_ptb, SPLITS: gl.constexpr, BLOCK_N: gl.constexpr):
    """Split s of sequence b: (start, end, its BLOCK_N tiles, the sequence's page-table row); a split is a
    whole number of tiles, and one past the context's end has none."""
    ctx = gl.load(lens_ptr + b)
    per_split = gl.cdiv(gl.cdiv(ctx, SPLITS), BLOCK_N) * BLOCK_N
    start = s * per_split
    end = gl.minimum(start + per_split, ctx)
    n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)
    return start, end, n_tiles, pt_ptr + b.to(gl.int64) * stride_ptb


@gluon.jit
def _store_split(o, m_i, l_o, heads, cols, b, s, H, out_ptr, part_ptr, lse_ptr, stride_ob, stride_oh,
                 LATENT: gl.constexpr, SPLITS: gl.constexpr, WRITE_LSE: gl.constexpr):  # fmt: skip
    """The normalized output `o` of `heads` x `cols` (past H not stored): into the output (one split), or
    into the split's part, with (WRITE_LSE) its base-2 log-sum-exp from m_i and l_o (-inf when empty)."""
    hmask = heads < H
    if SPLITS == 1:
        dst = out_ptr + b.to(gl.int64) * stride_ob + heads[:, None] * stride_oh + cols[None, :]
        gl.store(dst, o.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
    else:
        slot_o = (b.to(gl.int64) * H + heads) * SPLITS + s
        gl.store(part_ptr + slot_o[:, None] * LATENT + cols[None, :], o, mask=hmask[:, None])
        if WRITE_LSE:
            m_o = gl.convert_layout(m_i, l_o.type.layout)
            lse = gl.where(l_o > 0, m_o + gl.log2(gl.where(l_o > 0, l_o, 1.0)), float("-inf"))
            gl.store(lse_ptr + slot_o, lse, mask=hmask)


@gluon.jit
def _copy_rows(src, dst, keep, BLOCK_N: gl.constexpr, COLS: gl.constexpr, CHUNK: gl.constexpr,
               num_warps: gl.constexpr):  # fmt: skip
    """`src` (BLOCK_N x COLS) into `dst` in dst's dtype, its rows `keep` .. BLOCK_N (the tokens past the
    split's end) as 0: an FP8 slot upcast for the 16-bit dots, or (src = dst) a slot's tail zeroed."""
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    live = (gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, blocked)) < keep)[:, None]
    for c in gl.static_range(COLS // CHUNK):
        x = src.slice(c * CHUNK, CHUNK, dim=1).load(blocked).to(dst.dtype)
        dst.slice(c * CHUNK, CHUNK, dim=1).store(gl.where(live, x, gl.zeros_like(x)))


@gluon.jit
def mla_gluon_kernel(
    q_ptr, kv_desc, pt_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr,
    scale, v_scale, H,
    stride_qb, stride_qh, stride_ptb, stride_ob, stride_oh,
    LATENT: gl.constexpr, ROPE: gl.constexpr, PAGE: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLITS: gl.constexpr, STAGES: gl.constexpr, Q_FP8: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """One (sequence, 64-head group, split) of the MLA decode (module docstring)."""
    BLOCK_H: gl.constexpr = 64
    CHUNK: gl.constexpr = kv_desc.block_type.shape[1]
    gl.static_assert(num_warps == 8, "two warpgroups: num_warps 8")
    gl.static_assert(kv_desc.block_type.shape[0] == BLOCK_N, "the descriptor's box is BLOCK_N rows")
    gl.static_assert(PAGE % BLOCK_N == 0, "a tile must lie inside one page")
    gl.static_assert(STAGES >= 1, "at least one slot")
    KV_TYPE: gl.constexpr = kv_desc.block_type.element_ty
    KV_FP8: gl.constexpr = _is_fp8(KV_TYPE)
    DOT: gl.constexpr = gl.float16 if KV_FP8 else gl.bfloat16  # the dots' operands (module docstring)
    gl.static_assert(KV_FP8 or not Q_FP8, "FP8 queries score an FP8 cache only")
    QT: gl.constexpr = KV_TYPE if Q_FP8 else DOT  # the queries' (the scores' operands)
    s_layout: gl.constexpr = _acc_layout(BLOCK_N, num_warps, 32 if Q_FP8 else 16)
    o_layout: gl.constexpr = _acc_layout(LATENT, num_warps)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    g = gl.program_id(0)  # the head groups of a sequence run side by side: the second reads its tiles from L2
    b = gl.program_id(1)
    s = gl.program_id(2)

    # (constexpr lists concatenate inside @gluon.jit; starred unpacking does not)
    q_lat = gl.allocate_shared_memory(QT, [BLOCK_H, LATENT], _smem_layout(LATENT, QT.primitive_bitwidth))
    q_rope = gl.allocate_shared_memory(QT, [BLOCK_H, ROPE], _smem_layout(ROPE, QT.primitive_bitwidth))
    ring: gl.constexpr = _ring_layout(KV_TYPE.primitive_bitwidth)
    k_lat = gl.allocate_shared_memory(KV_TYPE, [STAGES, BLOCK_N, LATENT], ring)
    k_rope = gl.allocate_shared_memory(KV_TYPE, [STAGES, BLOCK_N, ROPE], ring)
    if KV_FP8:  # the upcast tile the 16-bit dots read (with FP8 scores, P·V's V alone)
        c_lat = gl.allocate_shared_memory(DOT, [BLOCK_N, LATENT], _smem_layout(LATENT))
        if not Q_FP8:
            c_rope = gl.allocate_shared_memory(DOT, [BLOCK_N, ROPE], _smem_layout(ROPE))
    p_smem = gl.allocate_shared_memory(DOT, [BLOCK_H, BLOCK_N], _smem_layout(BLOCK_N))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)  # one arrival (the expect) plus the TMA bytes

    start, end, n_tiles, pages = _split_range(lens_ptr, pt_ptr, b, s, stride_ptb, SPLITS, BLOCK_N)
    _fill_ring(kv_desc, pages, start, n_tiles, ready, k_lat, k_rope, PAGE, LATENT, ROPE, STAGES)

    q_scale = _stage_queries(q_ptr, q_lat, q_rope, b, g, H, stride_qb, stride_qh, LATENT, ROPE, BLOCK_H,
                             CHUNK, num_warps)  # fmt: skip
    row_scale = gl.convert_layout(q_scale, row_s) * scale  # (sm_scale · log2 e, kv_scale: the launcher's)
    fence_async_shared()  # the queries → visible to the wgmmas
    cta_barrier()

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    acc = gl.zeros([BLOCK_H, LATENT], gl.float32, o_layout)
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, s_layout)
    tokens = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    for i in range(n_tiles):
        slot = i % STAGES
        # The slot's n-th load completes its barrier's phase n: wait(parity) returns once that is done.
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        n0 = start + i * BLOCK_N
        if Q_FP8:
            # FP8 scores straight from the slot (a NaN past the end is masked below), its latent part
            # upcast for P·V meanwhile
            qk = warpgroup_mma(q_lat, k_lat.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            qk = warpgroup_mma(q_rope, k_rope.index(slot).permute((1, 0)), qk, is_async=True)
            _copy_rows(k_lat.index(slot), c_lat, end - n0, BLOCK_N, LATENT, CHUNK, num_warps)
            fence_async_shared()  # V (generic-proxy stores) → visible to the wgmmas after the barrier below
            lat = c_lat
        elif KV_FP8:
            _copy_rows(k_lat.index(slot), c_lat, end - n0, BLOCK_N, LATENT, CHUNK, num_warps)
            _copy_rows(k_rope.index(slot), c_rope, end - n0, BLOCK_N, ROPE, CHUNK, num_warps)
            fence_async_shared()  # the 16-bit tile (generic-proxy stores) → visible to the wgmmas ...
            cta_barrier()  # ... once every warp has converted its part: the slot is free, refill it now
            _load_tile(kv_desc, pages, n0 + STAGES * BLOCK_N, ready.index(slot), k_lat.index(slot),
                       k_rope.index(slot), i + STAGES < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip
            lat = c_lat
            qk = warpgroup_mma(q_lat, c_lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            qk = warpgroup_mma(q_rope, c_rope.permute((1, 0)), qk, is_async=True)
        else:
            lat = k_lat.index(slot)
            rope = k_rope.index(slot)
            if n0 + BLOCK_N > end:  # the tail tile: no NaN past the end may reach P·V
                _copy_rows(lat, lat, end - n0, BLOCK_N, LATENT, CHUNK, num_warps)
                fence_async_shared()
                cta_barrier()
            qk = warpgroup_mma(q_lat, lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            qk = warpgroup_mma(q_rope, rope.permute((1, 0)), qk, is_async=True)
        qk = warpgroup_mma_wait(num_outstanding=0, deps=(qk,))
        # the online softmax in base 2 (the row maxima and sums meet across the warpgroups)
        x = gl.where((n0 + tokens < end)[None, :], qk * row_scale[:, None], float("-inf"))
        m_new = gl.maximum(m_i, gl.max(x, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(x - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        p_smem.store(p.to(DOT))
        fence_async_shared()  # P (generic-proxy stores) → visible to the wgmma (async proxy) ...
        cta_barrier()  # ... of both warpgroups: each reads all of P
        if Q_FP8:  # both warpgroups' scores retired and V upcast: the slot is free
            _load_tile(kv_desc, pages, n0 + STAGES * BLOCK_N, ready.index(slot), k_lat.index(slot),
                       k_rope.index(slot), i + STAGES < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        acc = warpgroup_mma(p_smem, lat, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        # every warpgroup is past its wgmmas reading the tile and P: refill the slot (a bf16 cache's)
        cta_barrier()
        if not KV_FP8:
            _load_tile(kv_desc, pages, n0 + STAGES * BLOCK_N, ready.index(slot), lat, rope,
                       i + STAGES < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip

    # the output (one split) or the split's normalized part and log-sum-exp (base 2; -inf when empty)
    l_o = gl.convert_layout(l_i, row_o)
    heads = g * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_o)
    cols = gl.arange(0, LATENT, layout=gl.SliceLayout(0, o_layout))
    o = acc / gl.where(l_o > 0, l_o, 1.0)[:, None]
    if KV_FP8:
        o = o * v_scale
    _store_split(o, m_i, l_o, heads, cols, b, s, H, out_ptr, part_ptr, lse_ptr, stride_ob, stride_oh, LATENT,
                 SPLITS, True)  # fmt: skip
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))


#: The JIT functions of a launch of the lockstep schedule (SCHEDULE 0), in order (what a Recorder stands in
#: for); `jit_kernels` gives those of either schedule.
JIT_KERNELS = (mla_gluon_kernel, mla_reduce_kernel)
