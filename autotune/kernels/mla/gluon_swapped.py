"""The MLA decode's Gluon kernel, "swapped" schedule (backend "gluon", SCHEDULE 2): tokens on the MMA's M
side, for few heads (at most 32) and an e4m3 cache.

Why: at 16 heads a rank the decode is bound by memory, and the padded kernels (`mla.gluon_kernel`, 64 heads
a program) spend four times the dots and an fp16 copy of every tile on 48 rows of padding; with an e4m3
cache they lost to the Triton kernel's swapped form (docs/notes/2026-12-07-mla-gluon.md). Here the heads
are the N of every wgmma (HEADS: 16, or 32 for 17 to 32 heads), so nothing is padded to 64 rows:

- scores, transposed: Sᵀ = K·Qᵀ (BLOCK_N = 64 tokens x HEADS, two FP8 wgmmas m64nHEADSk32: the slot's
  latent and RoPE parts as loaded, K-major, against the queries quantized to e4m3 per head, as Q_FP8 1);
- the online softmax per head runs down the columns (the maxima and sums across the warpgroup's four
  warps);
- the output, transposed: Oᵀ (512 x HEADS fp32, 64 or 128 registers a thread) += Vᵀ·Pᵀ, Vᵀ the slot's latent
  part upcast to fp16 in shared memory (FP8 wgmma takes K-major operands only, and Vᵀ is MN-major), Pᵀ
  (64 x HEADS fp16) from shared memory.

One warpgroup (num_warps 4), one program per (sequence, split): grid (B, SPLITS). Each tile: wait for
the slot's TMA (`ready`); issue Sᵀ (async); upcast V into the fp16 tile (rows past the split's end as 0,
so no NaN of another sequence's tokens reaches Pᵀ·V); wait for Sᵀ; a CTA barrier, then the slot is
refilled with the tile STAGES ahead; the softmax (tokens past the end at -inf); Pᵀ to shared memory; Oᵀ =
Oᵀ·alpha + Vᵀ·Pᵀ (waited for). The ring's first tiles are loaded before the queries are staged.

Rules, outputs, workspace and launch contract: `mla.gluon_kernel`'s (the heads past H are zero queries,
not stored; several splits write normalized fp32 parts and base-2 log-sum-exps for the reduce), with
`v_scale` on the output and the cache's scale folded into `scale` by the launcher. Shared memory: the
queries (HEADS x 576 e4m3), STAGES tiles (64 x 576 e4m3 each), the fp16 V tile (64 KiB) and Pᵀ:
`gluon_space.gluon_smem_bytes`. Imported lazily (it imports triton and Gluon).
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

from autotune.kernels.common.gluon_hopper import cta_barrier
from autotune.kernels.mla.gluon_kernel import (
    _copy_rows,
    _fill_ring,
    _load_tile,
    _ring_layout,
    _smem_layout,
    _split_range,
    _stage_queries,
)

__all__ = ["mla_swapped_kernel"]


@gluon.constexpr_function
def _swapped_layout(rows: int, heads: int, k: int) -> gl.NVMMADistributedLayout:
    """The wgmma accumulator layout of a (rows, heads) tile on one warpgroup: warps [4, 1], each
    instruction 64 rows x `heads`, K `k` (32 for FP8 operands, 16 for fp16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, heads, k])


@gluon.jit
def mla_swapped_kernel(
    q_ptr, kv_desc, pt_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr,
    scale, v_scale, H,
    stride_qb, stride_qh, stride_ptb, stride_ob, stride_oh,
    LATENT: gl.constexpr, ROPE: gl.constexpr, PAGE: gl.constexpr, BLOCK_N: gl.constexpr,
    SPLITS: gl.constexpr, STAGES: gl.constexpr, HEADS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """One (sequence, split) of the MLA decode with its heads on the wgmmas' N (module docstring)."""
    CHUNK: gl.constexpr = kv_desc.block_type.shape[1]
    KV_TYPE: gl.constexpr = kv_desc.block_type.element_ty
    gl.static_assert(num_warps == 4, "one warpgroup: num_warps 4")
    gl.static_assert(BLOCK_N == 64, "64 tokens a tile: the wgmmas' M")
    gl.static_assert(kv_desc.block_type.shape[0] == BLOCK_N, "the descriptor's box is BLOCK_N rows")
    gl.static_assert(PAGE % BLOCK_N == 0, "a tile must lie inside one page")
    gl.static_assert(HEADS == 16 or HEADS == 32, "HEADS: 16 or 32 (64 would need 256 registers for Oᵀ)")
    gl.static_assert(STAGES >= 1, "at least one slot")
    s_layout: gl.constexpr = _swapped_layout(BLOCK_N, HEADS, 32)
    o_layout: gl.constexpr = _swapped_layout(LATENT, HEADS, 16)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)

    b = gl.program_id(0)
    s = gl.program_id(1)

    q_lat = gl.allocate_shared_memory(KV_TYPE, [HEADS, LATENT], _smem_layout(LATENT, 8))
    q_rope = gl.allocate_shared_memory(KV_TYPE, [HEADS, ROPE], _smem_layout(ROPE, 8))
    ring: gl.constexpr = _ring_layout(8)
    k_lat = gl.allocate_shared_memory(KV_TYPE, [STAGES, BLOCK_N, LATENT], ring)
    k_rope = gl.allocate_shared_memory(KV_TYPE, [STAGES, BLOCK_N, ROPE], ring)
    v16 = gl.allocate_shared_memory(gl.float16, [BLOCK_N, LATENT], _smem_layout(LATENT))
    p_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_N, HEADS], _smem_layout(HEADS))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    start, end, n_tiles, pages = _split_range(lens_ptr, pt_ptr, b, s, stride_ptb, SPLITS, BLOCK_N)
    _fill_ring(kv_desc, pages, start, n_tiles, ready, k_lat, k_rope, PAGE, LATENT, ROPE, STAGES)

    q_scale = _stage_queries(q_ptr, q_lat, q_rope, b, 0, H, stride_qb, stride_qh, LATENT, ROPE, HEADS, CHUNK,
                             num_warps)  # fmt: skip
    col_scale = gl.convert_layout(q_scale, col_s) * scale  # (each head's query scale, sm_scale · log2 e)
    fence_async_shared()  # the queries → visible to the wgmmas
    cta_barrier()

    m_i = gl.full([HEADS], float("-inf"), gl.float32, col_s)
    l_i = gl.zeros([HEADS], gl.float32, col_s)
    acc = gl.zeros([LATENT, HEADS], gl.float32, o_layout)
    s_zero = gl.zeros([BLOCK_N, HEADS], gl.float32, s_layout)
    tokens = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    for i in range(n_tiles):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        n0 = start + i * BLOCK_N
        st = warpgroup_mma(k_lat.index(slot), q_lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        st = warpgroup_mma(k_rope.index(slot), q_rope.permute((1, 0)), st, is_async=True)
        _copy_rows(k_lat.index(slot), v16, end - n0, BLOCK_N, LATENT, CHUNK, num_warps)
        st = warpgroup_mma_wait(num_outstanding=0, deps=(st,))
        fence_async_shared()  # V (generic-proxy stores) → visible to the wgmma after the barrier below
        cta_barrier()  # every warp's scores and upcast done: the slot is free, refill it
        _load_tile(kv_desc, pages, n0 + STAGES * BLOCK_N, ready.index(slot), k_lat.index(slot),
                   k_rope.index(slot), i + STAGES < n_tiles, PAGE, LATENT, ROPE)  # fmt: skip
        # the online softmax in base 2, per head (a column), across the warpgroup's warps
        x = gl.where((n0 + tokens < end)[:, None], st * col_scale[None, :], float("-inf"))
        m_new = gl.maximum(m_i, gl.max(x, 0))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(x - m_new[None, :])
        l_i = l_i * alpha + gl.sum(p, 0)
        m_i = m_new
        p_smem.store(p.to(gl.float16))
        fence_async_shared()  # Pᵀ (generic-proxy stores) → visible to the wgmma ...
        cta_barrier()  # ... once every warp has stored its rows
        acc = acc * gl.convert_layout(alpha, col_o)[None, :]
        acc = warpgroup_mma(v16.permute((1, 0)), p_smem, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        cta_barrier()  # the V tile and Pᵀ are free for the next tile

    # the output (one split) or the split's normalized part and log-sum-exp (base 2; -inf when empty)
    l_o = gl.convert_layout(l_i, col_o)
    heads = gl.arange(0, HEADS, layout=col_o)
    dims = gl.arange(0, LATENT, layout=gl.SliceLayout(1, o_layout))
    hmask = (heads < H)[None, :]
    o = acc / gl.where(l_o > 0, l_o, 1.0)[None, :] * v_scale
    if SPLITS == 1:
        dst = out_ptr + b.to(gl.int64) * stride_ob + heads[None, :] * stride_oh + dims[:, None]
        gl.store(dst, o.to(out_ptr.dtype.element_ty), mask=hmask)
    else:
        slot_o = (b.to(gl.int64) * H + heads) * SPLITS + s
        gl.store(part_ptr + slot_o[None, :] * LATENT + dims[:, None], o, mask=hmask)
        m_o = gl.convert_layout(m_i, col_o)
        lse = gl.where(l_o > 0, m_o + gl.log2(gl.where(l_o > 0, l_o, 1.0)), float("-inf"))
        gl.store(lse_ptr + slot_o, lse, mask=heads < H)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
