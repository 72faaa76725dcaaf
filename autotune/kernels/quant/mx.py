"""Triton MX GEMMs: C = dequant(A) · dequant(B)ᵀ with e8m0 scales per 1x32 along K, fp32 accumulation.

Imported lazily (it imports triton). B (N, K) is e4m3 (MXFP8) or e2m1 packed two per byte along K
(MXFP4), with scales (N, K/32). A is the same, or bf16 (`A_FMT` "bf16"): then every (BLOCK_M, BLOCK_K)
tile is quantized to MXFP4 inside the K loop (per-32 amax, the scale from its exponent bits, e2m1 with
round-to-nearest-even, packed) and fed straight to the dot, never written to global memory.

Two paths, chosen by the target (`NATIVE`):

- native (gfx950, and Blackwell): `tl.dot_scaled`, which compiles to v_mfma_scale_f32_{16x16x128,32x32x64}
  _f8f6f4 on MI355X;
- emulated (MI300X, H100, anything older): tiles are dequantized in registers to bf16 (exact: e4m3 and
  e2m1 times a power of two fit bf16) and multiplied with tl.dot. This is what MX costs on such GPUs.

Knobs as in the dense GEMM: BLOCK_M/N/K (BLOCK_K a multiple of 32), GROUP_M, SPLIT_K, NUM_XCDS,
num_warps, num_stages and the AMD compile options; `quant.kernel.quant_launcher` launches it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from autotune.kernels.dense.kernel import _remap_xcd, edge_clamped

__all__ = ["gemm_mx_kernel"]


@triton.jit
def _e8m0_to_f32(s):
    """e8m0 (uint8) → fp32 2^(s - 127); 0 gives 0 here (2^-127 in hardware), never produced by our data."""
    return (s.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_to_f32(code):
    """e2m1 codes (uint8, low 4 bits) → fp32."""
    c = code.to(tl.int32)
    e = (c >> 1) & 3
    m = (c & 1).to(tl.float32)
    normal = ((e + 126) << 23).to(tl.float32, bitcast=True) * (1.0 + 0.5 * m)  # 2^(e-1) (1 + m/2)
    mag = tl.where(e == 0, 0.5 * m, normal)
    return tl.where((c & 8) != 0, -mag, mag)


@triton.jit
def _unpack_rows(packed, ROWS: tl.constexpr, COLS: tl.constexpr):
    """(ROWS, COLS/2) bytes → (ROWS, COLS) e2m1 codes; the low nibble holds the earlier element."""
    both = tl.join(packed & 0xF, packed >> 4)  # (ROWS, COLS/2, 2)
    return tl.reshape(both, (ROWS, COLS))


@triton.jit
def _unpack_cols(packed, ROWS: tl.constexpr, COLS: tl.constexpr):
    """(ROWS/2, COLS) bytes packed along rows → (ROWS, COLS) e2m1 codes."""
    both = tl.join(packed & 0xF, packed >> 4)  # (ROWS/2, COLS, 2)
    return tl.reshape(tl.permute(both, (0, 2, 1)), (ROWS, COLS))


@triton.jit
def _scale_rows(x, s, ROWS: tl.constexpr, COLS: tl.constexpr):
    """x (ROWS, COLS) fp32 times e8m0 scales s (ROWS, COLS/32), each over 32 consecutive columns."""
    g = tl.reshape(x, (ROWS, COLS // 32, 32)) * _e8m0_to_f32(s)[:, :, None]
    return tl.reshape(g, (ROWS, COLS))


@triton.jit
def _scale_cols(x, s, ROWS: tl.constexpr, COLS: tl.constexpr):
    """x (ROWS, COLS) fp32 (K by N) times e8m0 scales s (COLS, ROWS/32), each over 32 consecutive rows."""
    g = tl.reshape(x, (ROWS // 32, 32, COLS)) * tl.trans(_e8m0_to_f32(s))[:, None, :]
    return tl.reshape(g, (ROWS, COLS))


@triton.jit
def _quantize_e2m1(x, ROWS: tl.constexpr, COLS: tl.constexpr):
    """x (ROWS, COLS) fp32 → (e2m1 codes (ROWS, COLS) uint8, e8m0 scales (ROWS, COLS/32) uint8): the scale of
    each 32-group is 2^(exponent of its amax − 2); values saturate at ±6, ties round to even (as
    `quant.quantize_mx`)."""
    g = tl.reshape(x, (ROWS, COLS // 32, 32))
    amax = tl.max(tl.abs(g), axis=2)
    biased = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    s = tl.minimum(tl.maximum(biased - 2, 0), 254)
    inv = ((254 - s) << 23).to(tl.float32, bitcast=True)  # 2^(127 - s), exact
    y = tl.reshape(g * inv[:, :, None], (ROWS, COLS))
    a = tl.abs(y)
    code = (
        (a > 0.25).to(tl.int32)
        + (a >= 0.75).to(tl.int32)
        + (a > 1.25).to(tl.int32)
        + (a >= 1.75).to(tl.int32)
        + (a > 2.5).to(tl.int32)
        + (a >= 3.5).to(tl.int32)
        + (a > 5.0).to(tl.int32)
    )
    code = code | tl.where(y < 0, 8, 0)
    return code.to(tl.uint8), s.to(tl.uint8)


@triton.jit
def _pack_rows(code, ROWS: tl.constexpr, COLS: tl.constexpr):
    """(ROWS, COLS) e2m1 codes → (ROWS, COLS/2) bytes, the earlier element in the low nibble."""
    lo, hi = tl.split(tl.reshape(code, (ROWS, COLS // 2, 2)))
    return lo | (hi << 4)


@triton.jit
def gemm_mx_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    as_ptr,
    bs_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cs,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr,
    A_FMT: tl.constexpr,
    B_FMT: tl.constexpr,
    NATIVE: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):
    """One (BLOCK_M, BLOCK_N) tile of C over one K slice; K strides count stored bytes/elements (a packed
    FP4 row has K/2). With SPLIT_K > 1, c_ptr is the fp32 workspace."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = _remap_xcd(pid, num_pid_m * num_pid_n, NUM_XCDS)
    width = GROUP_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % group_size)
    pid_n = (pid % width) // group_size

    A_PACK: tl.constexpr = 2 if A_FMT == "e2m1" else 1
    B_PACK: tl.constexpr = 2 if B_FMT == "e2m1" else 1
    DOT_A_FMT: tl.constexpr = "e2m1" if A_FMT == "bf16" else A_FMT
    offs_m = edge_clamped(pid_m * BLOCK_M, BLOCK_M, M)
    offs_n = edge_clamped(pid_n * BLOCK_N, BLOCK_N, N)
    k_span = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    k_start = pid_k * k_span
    offs_ka = tl.arange(0, BLOCK_K // A_PACK)
    offs_kb = tl.arange(0, BLOCK_K // B_PACK)
    offs_s = tl.arange(0, BLOCK_K // 32)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start // A_PACK + offs_ka)[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :] * stride_bn + (k_start // B_PACK + offs_kb)[:, None] * stride_bk
    if A_FMT != "bf16":  # bf16 activations have no scales in memory
        as_ptrs = as_ptr + offs_m[:, None] * stride_asm + (k_start // 32 + offs_s)[None, :] * stride_ask
    bs_ptrs = bs_ptr + offs_n[:, None] * stride_bsn + (k_start // 32 + offs_s)[None, :] * stride_bsk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_span, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            b_s = tl.load(bs_ptrs)
            if A_FMT != "bf16":
                a_s = tl.load(as_ptrs)
        else:  # K is a multiple of 32: whole scale groups are in or out
            k_left = K - k_start - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_ka[None, :] < k_left // A_PACK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_kb[:, None] < k_left // B_PACK, other=0.0)
            b_s = tl.load(bs_ptrs, mask=offs_s[None, :] < k_left // 32, other=0)
            if A_FMT != "bf16":
                a_s = tl.load(as_ptrs, mask=offs_s[None, :] < k_left // 32, other=0)
        if A_FMT == "bf16":  # MXFP4 activations made here, in registers
            a_code, a_s = _quantize_e2m1(a.to(tl.float32), BLOCK_M, BLOCK_K)
            if NATIVE:
                a = _pack_rows(a_code, BLOCK_M, BLOCK_K)
            else:
                a = a_code
        if NATIVE:
            acc = tl.dot_scaled(a, a_s, DOT_A_FMT, b, b_s, B_FMT, acc)
        else:
            if A_FMT == "e2m1":
                a_f = _e2m1_to_f32(_unpack_rows(a, BLOCK_M, BLOCK_K))
            elif A_FMT == "bf16":
                a_f = _e2m1_to_f32(a)
            else:
                a_f = a.to(tl.float32)
            if B_FMT == "e2m1":
                b_f = _e2m1_to_f32(_unpack_cols(b, BLOCK_K, BLOCK_N))
            else:
                b_f = b.to(tl.float32)
            a_f = _scale_rows(a_f, a_s, BLOCK_M, BLOCK_K)
            b_f = _scale_cols(b_f, b_s, BLOCK_K, BLOCK_N)
            if DOT_F32:  # interpreter only: dot in fp32 (the bf16 values are exact in fp32)
                acc = tl.dot(a_f, b_f, acc)
            else:
                acc = tl.dot(a_f.to(tl.bfloat16), b_f.to(tl.bfloat16), acc)
        a_ptrs += (BLOCK_K // A_PACK) * stride_ak
        b_ptrs += (BLOCK_K // B_PACK) * stride_bk
        if A_FMT != "bf16":
            as_ptrs += (BLOCK_K // 32) * stride_ask
        bs_ptrs += (BLOCK_K // 32) * stride_bsk

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + pid_k * stride_cs + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
