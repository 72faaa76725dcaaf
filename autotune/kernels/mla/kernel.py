"""The split-KV MLA decode kernels (Triton) and their launcher.

Stage 1 (`mla_split_kernel`), one program per (sequence, group of BLOCK_H heads, split): the split's slice
of the sequence's context, read through the page table in tiles of BLOCK_N tokens, scored against the
queries (latent and RoPE parts, two dots), softmaxed online in base 2, and the latent part of each token
(its first LATENT dims: v) summed with those weights. With one split it writes the output itself; with
several, each split writes its normalized partial output and its log-sum-exp (base 2) to a workspace and
stage 2 (`mla_reduce_kernel`, one program per (sequence, head)) combines them.

Rules:
- A split's slice is a whole number of BLOCK_N tiles, cdiv(context, splits) rounded up: the grid depends
  on the shapes only, every context length is read from `context_lens` on the device (no host sync), and
  a split past the end of a short sequence writes an empty part (log-sum-exp -inf), which stage 2 weighs 0.
- A sequence of context 0 gets a zero output.
- An FP8 cache is dequantized by its per-tensor scale `kv_scale`, applied to the scores and the output
  (not to the tiles). With Q_FP8 the queries are quantized in the kernel (one scale per head, from its
  absolute maximum) and the scores are FP8 products. P·V takes v upcast: to fp16 with F16_TILES, else to
  the queries' bf16.
- F16_TILES (a knob, NVIDIA sm_89 on with an FP8 cache): the cache's tiles are upcast to fp16 and both
  dots run in fp16. e4m3 values are exact in fp16, and Triton compiles the dots of 16- and 32-head tiles
  to fp16 `mma.sync` on sm_90 anyway, FP8 operands upcast; FP8 → fp16 is one instruction per two values,
  where FP8 → bf16 takes that one and then one per value. FP8 queries are upcast too; bf16 queries are
  scaled per head by a power of two that puts their absolute maximum in [2^14, 2^15) (exact: fp16 holds
  every bf16 mantissa), the scale folded into the scores'. On a GPU (ASM_CVT) the tiles are upcast in
  registers right after their load, by a conversion the compiler may not move (`_e4m3_to_f16`): left to
  itself, it moves the upcast past the tiles' trip through shared memory, where an FP8 tile is read
  without `ldmatrix`.
- SWAP: both dots transposed, the tile's tokens on the MMAs' M side: scores Sᵀ = K·Qᵀ (BLOCK_N x
  BLOCK_H), softmax along the tokens (axis 0), output Oᵀ += Vᵀ·Pᵀ. On sm_90 with BLOCK_N >= 16 x
  num_warps the dots are warpgroup MMAs of 64 tokens a warpgroup, which a 16-head tile cannot have
  unswapped (its M is 16). The latent dims run in four quarters, each loaded, scored and summed into its
  own accumulator, so no whole upcast tile is held in registers. With FP8 queries on a GPU the scores
  are FP8 warpgroup MMAs read straight from the staged FP8 tile, and F16_TILES then sets only P·V's
  dtype (fp16 with v upcast in registers, else bf16). Pipelined only: with one stage the swapped kernel
  faults on sm_90 (Triton 3.6).
- QUARTERS (a knob, unswapped): the whole-tile loop replaced by the swapped loop's quarters in the
  usual orientation (S = Q·Kᵀ, O += P·V): four (BLOCK_H, LATENT / 4) accumulators, each quarter of a
  tile loaded, upcast and consumed on its own, so no whole upcast tile is held in registers (where it
  pays: `autotune.kernels.mla.space`).
- FP8_SCORES (set by the launcher): the score dots take the FP8 tile as loaded. FP8 queries on a GPU,
  except fp16 tiles unswapped (both dots fp16).
- DOT_F32 (Triton's CPU interpreter only, whose bf16 and FP8 dots and FP8 → bf16 casts are wrong): FP8
  tiles upcast to fp32 and every dot in fp32. ROUND_FP8 (the interpreter too): the queries' FP8 cast
  rounded first (`_round_fp8`; the interpreter's cast drops a mantissa's carry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.op import FP_OPTIONS
from autotune.kernels.common.tile import column_halves
from autotune.kernels.launch import pinned

__all__ = [
    "AMD_LAUNCH_OPTIONS",
    "JIT_KERNELS",
    "launch_reduce",
    "launcher",
    "mla_reduce_kernel",
    "mla_split_kernel",
]

#: Compile options of AMD's knobs, passed to the launch as they are.
AMD_LAUNCH_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim")
_LOG2E = 1.4426950408889634


@triton.jit
def _round_fp8(x, MIN_NORMAL: tl.constexpr):
    """x (fp32, finite, within the FP8 range) rounded to the nearest e4m3 value (ties to even; subnormal
    spacing MIN_NORMAL / 8 below MIN_NORMAL), still in fp32: the interpreter's cast is then exact."""
    bits = x.to(tl.uint32, bitcast=True)
    normal = (((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) << 20).to(tl.float32, bitcast=True)
    magic: tl.constexpr = 1.5 * 8388608.0 * (MIN_NORMAL / 8)
    subnormal = (tl.abs(x) + magic) - magic
    subnormal = tl.where(x < 0, -subnormal, subnormal)
    return tl.where(tl.abs(x) < MIN_NORMAL, subnormal, normal)


@triton.jit
def _e4m3_to_f16(x, ASM_CVT: tl.constexpr):
    """e4m3 → fp16. With ASM_CVT in registers, four values a call (two packed conversions), not marked
    pure, so the compiler keeps it where it stands instead of moving the tile's layout conversion above
    it: the fp16 tile then reaches the MMA through shared memory with `ldmatrix`, as a bf16 cache's does.
    Else Triton's cast (the interpreter runs no inline assembly)."""
    if not ASM_CVT:
        return x.to(tl.float16)
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        "=r,=r,r",
        [x],
        dtype=tl.float16,
        is_pure=False,
        pack=4,
    )


@triton.jit
def _operands(k, FP8_SCORES: tl.constexpr, KV_FP8: tl.constexpr, DOT_F32: tl.constexpr,
              F16_TILES: tl.constexpr, ASM_CVT: tl.constexpr):  # fmt: skip
    """A cache chunk as the score dot takes it (as loaded with FP8_SCORES, else v) and as P·V takes it
    (v: fp32 under DOT_F32, fp16 with F16_TILES, else bf16)."""
    if DOT_F32:
        v = k.to(tl.float32)
    elif not KV_FP8:
        v = k
    elif F16_TILES:
        v = _e4m3_to_f16(k, ASM_CVT)
    else:
        v = k.to(tl.bfloat16)
    if FP8_SCORES:
        score = k
    else:
        score = v
    return score, v


@triton.jit
def _cache_tile(
    kv_ptr, pages, n0, end, stride_kvp, stride_kvr,
    LATENT: tl.constexpr, ROPE: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
    FP8_SCORES: tl.constexpr, KV_FP8: tl.constexpr, DOT_F32: tl.constexpr, F16_TILES: tl.constexpr,
    ASM_CVT: tl.constexpr,
):  # fmt: skip
    """The BLOCK_N tokens from `n0` (through the page table): their latent and RoPE parts as the score dot
    takes them, the latent part as P·V takes it (v), and which tokens are before `end` (`_operands`)."""
    t = n0 + tl.arange(0, BLOCK_N)
    tmask = t < end
    page = tl.load(pages + t // PAGE, mask=tmask, other=0)
    row = kv_ptr + page.to(tl.int64) * stride_kvp + (t % PAGE) * stride_kvr
    k_nope = tl.load(row[:, None] + tl.arange(0, LATENT)[None, :], mask=tmask[:, None], other=0.0)
    k_pe = tl.load(row[:, None] + LATENT + tl.arange(0, ROPE)[None, :], mask=tmask[:, None], other=0.0)
    k_nope, v = _operands(k_nope, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
    k_pe, _ = _operands(k_pe, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
    return k_nope, k_pe, v, tmask


@triton.jit
def _write_out(acc, l_i, col0, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh,
               LATENT: tl.constexpr, SPLITS: tl.constexpr):  # fmt: skip
    """Columns [col0, col0 + acc's width) of the output (one split) or of the split's normalized part."""
    acc = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    cols = col0 + tl.arange(0, acc.shape[1])
    if SPLITS == 1:
        o = out_ptr + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + cols[None, :]
        tl.store(o, acc.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
    else:
        slot = (b.to(tl.int64) * H + heads) * SPLITS + s
        tl.store(part_ptr + slot[:, None] * LATENT + cols[None, :], acc, mask=hmask[:, None])


@triton.jit
def _write_lse(m_i, l_i, lse_ptr, b, s, H, heads, hmask, SPLITS: tl.constexpr):
    """The split's log-sum-exp (base 2; -inf where it holds no token), for stage 2."""
    if SPLITS > 1:
        slot = (b.to(tl.int64) * H + heads) * SPLITS + s
        lse = tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + slot, lse, mask=hmask)


@triton.jit
def _online_softmax(scores, tmask, row_scale, m_i, l_i, AXIS: tl.constexpr):
    """One tile's step of the online softmax in base 2 along the tokens (`AXIS` 1: scores (heads, tokens);
    0: swapped, (tokens, heads)): the probabilities, the rescale of what came before, the new running
    maximum and sum."""
    if AXIS == 1:
        scores = scores * row_scale[:, None]
        scores = tl.where(tmask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
    else:
        scores = scores * row_scale[None, :]
        scores = tl.where(tmask[:, None], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[None, :])
    return p, alpha, m_new, l_i * alpha + tl.sum(p, AXIS)


@triton.jit
def _quartered_loop(
    q_nope, q_pe, row_scale, m_i, l_i, kv_ptr, pages, start, end, stride_kvp, stride_kvr, kv_scale,
    out_ptr, part_ptr, lse_ptr, b, s, H, heads, hmask, stride_ob, stride_oh,
    LATENT: tl.constexpr, ROPE: tl.constexpr, PAGE: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, FP8_SCORES: tl.constexpr, KV_FP8: tl.constexpr,
    DOT_F32: tl.constexpr, F16_TILES: tl.constexpr, ASM_CVT: tl.constexpr, SWAP: tl.constexpr,
):  # fmt: skip
    """The split's tiles with the latent dims in four quarters (four accumulators; each quarter of a tile
    is loaded, upcast for P·V and consumed on its own, so no whole upcast tile is held in registers), then
    the output written. SWAP: the tokens on the MMAs' M side (Sᵀ = K·Qᵀ, Oᵀ += Vᵀ·Pᵀ); else S = Q·Kᵀ and
    O += P·V as in the whole-tile loop."""
    C: tl.constexpr = LATENT // 4
    qa, qb = column_halves(q_nope)
    q0, q1 = column_halves(qa)
    q2, q3 = column_halves(qb)
    qp = q_pe
    if DOT_F32:
        q0, q1, q2, q3 = q0.to(tl.float32), q1.to(tl.float32), q2.to(tl.float32), q3.to(tl.float32)
        qp = qp.to(tl.float32)
    if SWAP:
        q0, q1, q2, q3, qp = tl.trans(q0), tl.trans(q1), tl.trans(q2), tl.trans(q3), tl.trans(qp)
        acc0 = tl.zeros((C, BLOCK_H), tl.float32)
        acc1 = tl.zeros((C, BLOCK_H), tl.float32)
        acc2 = tl.zeros((C, BLOCK_H), tl.float32)
        acc3 = tl.zeros((C, BLOCK_H), tl.float32)
    else:
        acc0 = tl.zeros((BLOCK_H, C), tl.float32)
        acc1 = tl.zeros((BLOCK_H, C), tl.float32)
        acc2 = tl.zeros((BLOCK_H, C), tl.float32)
        acc3 = tl.zeros((BLOCK_H, C), tl.float32)
    dc = tl.arange(0, C)
    dr = tl.arange(0, ROPE)
    for n0 in range(start, end, BLOCK_N):
        t = n0 + tl.arange(0, BLOCK_N)
        tmask = t < end
        page = tl.load(pages + t // PAGE, mask=tmask, other=0)
        row = kv_ptr + page.to(tl.int64) * stride_kvp + (t % PAGE) * stride_kvr
        k0 = tl.load(row[:, None] + dc[None, :], mask=tmask[:, None], other=0.0)
        k1 = tl.load(row[:, None] + C + dc[None, :], mask=tmask[:, None], other=0.0)
        k2 = tl.load(row[:, None] + 2 * C + dc[None, :], mask=tmask[:, None], other=0.0)
        k3 = tl.load(row[:, None] + 3 * C + dc[None, :], mask=tmask[:, None], other=0.0)
        kp = tl.load(row[:, None] + LATENT + dr[None, :], mask=tmask[:, None], other=0.0)
        s0, v0 = _operands(k0, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
        s1, v1 = _operands(k1, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
        s2, v2 = _operands(k2, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
        s3, v3 = _operands(k3, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
        sp, _ = _operands(kp, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT)
        if SWAP:  # scores (BLOCK_N, BLOCK_H): the softmax runs along axis 0
            st = tl.dot(s0, q0)
            st = tl.dot(s1, q1, st)
            st = tl.dot(s2, q2, st)
            st = tl.dot(s3, q3, st)
            st = tl.dot(sp, qp, st)
            pt, alpha, m_new, l_i = _online_softmax(st, tmask, row_scale, m_i, l_i, 0)
            pt = pt.to(v0.dtype)
            acc0 = acc0 * alpha[None, :] + tl.dot(tl.trans(v0), pt)
            acc1 = acc1 * alpha[None, :] + tl.dot(tl.trans(v1), pt)
            acc2 = acc2 * alpha[None, :] + tl.dot(tl.trans(v2), pt)
            acc3 = acc3 * alpha[None, :] + tl.dot(tl.trans(v3), pt)
        else:  # scores (BLOCK_H, BLOCK_N): the softmax runs along axis 1
            qk = tl.dot(q0, tl.trans(s0))
            qk = tl.dot(q1, tl.trans(s1), qk)
            qk = tl.dot(q2, tl.trans(s2), qk)
            qk = tl.dot(q3, tl.trans(s3), qk)
            qk = tl.dot(qp, tl.trans(sp), qk)
            p, alpha, m_new, l_i = _online_softmax(qk, tmask, row_scale, m_i, l_i, 1)
            p = p.to(v0.dtype)
            acc0 = acc0 * alpha[:, None] + tl.dot(p, v0)
            acc1 = acc1 * alpha[:, None] + tl.dot(p, v1)
            acc2 = acc2 * alpha[:, None] + tl.dot(p, v2)
            acc3 = acc3 * alpha[:, None] + tl.dot(p, v3)
        m_i = m_new
    scale = kv_scale if KV_FP8 else 1.0
    if SWAP:
        acc0, acc1, acc2, acc3 = tl.trans(acc0), tl.trans(acc1), tl.trans(acc2), tl.trans(acc3)
    _write_out(acc0 * scale, l_i, 0, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh, LATENT,
               SPLITS)  # fmt: skip
    _write_out(acc1 * scale, l_i, C, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh, LATENT,
               SPLITS)  # fmt: skip
    _write_out(acc2 * scale, l_i, 2 * C, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh,
               LATENT, SPLITS)  # fmt: skip
    _write_out(acc3 * scale, l_i, 3 * C, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh,
               LATENT, SPLITS)  # fmt: skip
    _write_lse(m_i, l_i, lse_ptr, b, s, H, heads, hmask, SPLITS)


@triton.jit
def mla_split_kernel(
    q_ptr, kv_ptr, pt_ptr, lens_ptr, out_ptr, part_ptr, lse_ptr,
    scale, kv_scale, H,
    stride_qb, stride_qh, stride_kvp, stride_kvr, stride_ptb, stride_ob, stride_oh,
    LATENT: tl.constexpr, ROPE: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
    Q_FP8: tl.constexpr, KV_FP8: tl.constexpr, FP8_MAX: tl.constexpr, FP8_MIN_NORMAL: tl.constexpr,
    DOT_F32: tl.constexpr = False, ROUND_FP8: tl.constexpr = False, F16_TILES: tl.constexpr = False,
    ASM_CVT: tl.constexpr = False, SWAP: tl.constexpr = False, FP8_SCORES: tl.constexpr = False,
    QUARTERS: tl.constexpr = False,
):  # fmt: skip
    b = tl.program_id(0)
    g = tl.program_id(1)
    s = tl.program_id(2)
    heads = g * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    dl = tl.arange(0, LATENT)
    dr = tl.arange(0, ROPE)
    q_row = q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh
    q_nope = tl.load(q_row + dl[None, :], mask=hmask[:, None], other=0.0)
    q_pe = tl.load(q_row + LATENT + dr[None, :], mask=hmask[:, None], other=0.0)
    # `scale`: sm_scale · log2(e) (· kv_scale for an FP8 cache), per head once the queries are quantized
    row_scale = tl.full((BLOCK_H,), 1.0, tl.float32) * scale
    if Q_FP8:
        amax = tl.maximum(tl.max(tl.abs(q_nope.to(tl.float32)), 1), tl.max(tl.abs(q_pe.to(tl.float32)), 1))
        q_scale = tl.maximum(amax, 1e-12) / FP8_MAX
        qn = q_nope.to(tl.float32) / q_scale[:, None]
        qp = q_pe.to(tl.float32) / q_scale[:, None]
        if ROUND_FP8:
            qn = _round_fp8(qn, FP8_MIN_NORMAL)
            qp = _round_fp8(qp, FP8_MIN_NORMAL)
        q_nope = qn.to(kv_ptr.dtype.element_ty)
        q_pe = qp.to(kv_ptr.dtype.element_ty)
        if F16_TILES and not FP8_SCORES:
            q_nope = q_nope.to(tl.float16)
            q_pe = q_pe.to(tl.float16)
        row_scale = row_scale * q_scale
    elif F16_TILES:
        amax = tl.maximum(tl.max(tl.abs(q_nope.to(tl.float32)), 1), tl.max(tl.abs(q_pe.to(tl.float32)), 1))
        exponent = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF  # floor(log2(amax)) + 127
        q_scale = (tl.minimum(tl.maximum(exponent - 14, 1), 254) << 23).to(tl.float32, bitcast=True)
        q_nope = (q_nope.to(tl.float32) / q_scale[:, None]).to(tl.float16)
        q_pe = (q_pe.to(tl.float32) / q_scale[:, None]).to(tl.float16)
        row_scale = row_scale * q_scale

    ctx = tl.load(lens_ptr + b)
    per_split = tl.cdiv(tl.cdiv(ctx, SPLITS), BLOCK_N) * BLOCK_N
    start = s * per_split
    end = tl.minimum(start + per_split, ctx)
    m_i = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_H,), tl.float32)
    pages = pt_ptr + b.to(tl.int64) * stride_ptb
    if SWAP or QUARTERS:
        _quartered_loop(
            q_nope, q_pe, row_scale, m_i, l_i, kv_ptr, pages, start, end, stride_kvp, stride_kvr, kv_scale,
            out_ptr, part_ptr, lse_ptr, b, s, H, heads, hmask, stride_ob, stride_oh,
            LATENT, ROPE, PAGE, BLOCK_H, BLOCK_N, SPLITS, FP8_SCORES, KV_FP8, DOT_F32, F16_TILES, ASM_CVT,
            SWAP,
        )  # fmt: skip
    else:
        acc = tl.zeros((BLOCK_H, LATENT), tl.float32)
        for n0 in range(start, end, BLOCK_N):
            k_nope, k_pe, v, tmask = _cache_tile(
                kv_ptr, pages, n0, end, stride_kvp, stride_kvr, LATENT, ROPE, PAGE, BLOCK_N, FP8_SCORES,
                KV_FP8, DOT_F32, F16_TILES, ASM_CVT,
            )  # fmt: skip
            if DOT_F32:
                qk = tl.dot(q_nope.to(tl.float32), tl.trans(k_nope.to(tl.float32)))
                qk = tl.dot(q_pe.to(tl.float32), tl.trans(k_pe.to(tl.float32)), qk)
            else:
                qk = tl.dot(q_nope, tl.trans(k_nope))
                qk = tl.dot(q_pe, tl.trans(k_pe), qk)
            p, alpha, m_new, l_i = _online_softmax(qk, tmask, row_scale, m_i, l_i, 1)
            if DOT_F32:
                pv = tl.dot(p, v.to(tl.float32))
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        if KV_FP8:
            acc = acc * kv_scale
        _write_out(acc, l_i, 0, out_ptr, part_ptr, b, s, H, heads, hmask, stride_ob, stride_oh, LATENT,
                   SPLITS)  # fmt: skip
        _write_lse(m_i, l_i, lse_ptr, b, s, H, heads, hmask, SPLITS)


@triton.jit
def mla_reduce_kernel(
    part_ptr, lse_ptr, out_ptr, H, stride_ob, stride_oh,
    LATENT: tl.constexpr, SPLITS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    h = tl.program_id(1)
    base = (b.to(tl.int64) * H + h) * SPLITS
    lse = tl.load(lse_ptr + base + tl.arange(0, SPLITS))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(tl.exp2(lse - top), 0)
    dl = tl.arange(0, LATENT)
    acc = tl.zeros((LATENT,), tl.float32)
    for s in range(SPLITS):
        w = tl.exp2(tl.load(lse_ptr + base + s) - top)
        acc += w * tl.load(part_ptr + (base + s) * LATENT + dl)
    acc = acc / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + dl, acc.to(out_ptr.dtype.element_ty))


#: The JIT functions of a launch, in order (what a Recorder stands in for).
JIT_KERNELS = (mla_split_kernel, mla_reduce_kernel)


def launcher(
    params: dict[str, Any], *, is_amd: bool, interpret: bool = False, kernels: tuple[Any, Any] | None = None
) -> Callable[..., None]:
    """The launch of one config's knobs (`params`: num_kv_splits, BLOCK_H, BLOCK_N, num_warps,
    num_stages, Q_FP8, F16_TILES, SWAP, QUARTERS and AMD's options) as `run(q, kv_cache, page_table,
    context_lens, out, part, lse, sm_scale, kv_scale)`; `part` and `lse` are the split workspace (None with
    one split).
    `kernels`: stand-ins of `JIT_KERNELS` (recorders) in their order; `interpret`: Triton's CPU interpreter
    (DOT_F32, except with F16_TILES, whose fp16 dots and FP8 → fp16 casts the interpreter runs right)."""
    splits = int(params["num_kv_splits"])
    opts: dict[str, Any] = dict(num_warps=int(params["num_warps"]), num_stages=int(params["num_stages"]))
    if is_amd:
        opts.update({k: int(params[k]) for k in AMD_LAUNCH_OPTIONS if k in params})
    block_h, block_n = int(params["BLOCK_H"]), int(params["BLOCK_N"])
    q_fp8 = bool(int(params.get("Q_FP8", 0)))
    f16_tiles = bool(int(params.get("F16_TILES", 0)))
    swap = bool(int(params.get("SWAP", 0)))
    quarters = bool(int(params.get("QUARTERS", 0)))
    if swap and quarters:
        raise ValueError("QUARTERS 1 with SWAP 1: the swapped loop is quartered already; give QUARTERS 0")
    split_fn, reduce_fn = kernels if kernels is not None else JIT_KERNELS
    recorded = kernels is not None

    def run(
        q: torch.Tensor, kv: torch.Tensor, page_table: torch.Tensor, lens: torch.Tensor, out: torch.Tensor,
        part: torch.Tensor | None, lse: torch.Tensor | None, sm_scale: float, kv_scale: float,
    ) -> None:  # fmt: skip
        B, H, K = q.shape
        latent = out.shape[2]
        kv_fp8 = kv.dtype != q.dtype
        info = torch.finfo(kv.dtype if kv_fp8 else torch.float32)
        fp8_max, fp8_min = (float(info.max), float(info.smallest_normal)) if kv_fp8 else (1.0, 1.0)
        grid = (B, triton.cdiv(H, block_h), splits)
        scale = sm_scale * _LOG2E * (kv_scale if kv_fp8 else 1.0)
        f16 = f16_tiles and kv_fp8 and not is_amd
        flags = {"DOT_F32": interpret and not f16, "ROUND_FP8": interpret, "F16_TILES": f16,
                 "ASM_CVT": f16 and not interpret, "SWAP": swap, "QUARTERS": quarters}  # fmt: skip
        # FP8 queries score the tile as loaded, unless every dot is fp32 (DOT_F32) or fp16 (F16_TILES
        # unswapped, or under the interpreter)
        flags["FP8_SCORES"] = (
            q_fp8 and kv_fp8 and not flags["DOT_F32"] and not (f16 and (interpret or not swap))
        )
        consts = dict(LATENT=latent, ROPE=K - latent, PAGE=kv.shape[1], BLOCK_H=block_h, BLOCK_N=block_n,
                      SPLITS=splits, Q_FP8=q_fp8 and kv_fp8, KV_FP8=kv_fp8, FP8_MAX=fp8_max,
                      FP8_MIN_NORMAL=fp8_min, **{k: True for k, on in flags.items() if on})  # fmt: skip
        fn = split_fn if recorded else pinned(split_fn, **consts, **opts, **FP_OPTIONS)
        extra = dict(**consts, **opts, **FP_OPTIONS) if recorded else {}
        ws_part = out if part is None else part
        ws_lse = lens if lse is None else lse
        fn[grid](
            q, kv, page_table, lens, out, ws_part, ws_lse, scale, kv_scale, H,
            q.stride(0), q.stride(1), kv.stride(0), kv.stride(1), page_table.stride(0),
            out.stride(0), out.stride(1), **extra,
        )  # fmt: skip
        if splits > 1:
            launch_reduce(reduce_fn, recorded, part, lse, out, splits)

    return run


def launch_reduce(
    reduce_fn: Any, recorded: bool, part: torch.Tensor | None, lse: torch.Tensor | None, out: torch.Tensor,
    splits: int,
) -> None:  # fmt: skip
    """Stage 2 of `splits` splits: `mla_reduce_kernel` (or its recorder, `recorded`) over (B, H),
    combining the workspace's parts and log-sum-exps into `out` (B, H, latent). Both kernels' launchers
    (this module's, `mla.gluon_launch`) end with it."""
    B, H, latent = out.shape
    consts = dict(LATENT=latent, SPLITS=splits, num_warps=4, num_stages=1, **FP_OPTIONS)
    fn = reduce_fn if recorded else pinned(reduce_fn, **consts)
    fn[(B, H)](part, lse, out, H, out.stride(0), out.stride(1), **(consts if recorded else {}))
