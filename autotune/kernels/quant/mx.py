"""Triton MX GEMMs: C = dequant(A) · dequant(B)ᵀ with e8m0 scales per 1x32 along K, fp32 accumulation.

Imported lazily (it imports triton). B (N, K) is e4m3 (MXFP8) or e2m1 packed two per byte along K
(MXFP4), with scales (N, K/32). A is the same, or bf16 (`A_FMT` "bf16"): then every (BLOCK_M, BLOCK_K)
tile is quantized to MXFP4 inside the K loop (per-32 amax, the scale from its exponent bits, e2m1 with
round-to-nearest-even, packed) and fed straight to the dot, never written to global memory.
`HW_FP4_CVT` (gfx950) does that with the hardware conversion: A is read as 32-bit words, each two
consecutive bf16, the scale comes from the largest exponent field of each 16 words, and
v_cvt_scalef32_pk_fp4_bf16 turns each word into one packed byte (two a VGPR per call); the same scale rule and
rounding as the software path (`quant.fp4_cvt` models the instruction). In the interpreter
(CVT_MODEL) the instruction is replaced by that model in software.

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

from autotune.kernels.common.grid import remap_xcd
from autotune.kernels.common.tile import edge_clamped

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
    return _e2m1_code(y).to(tl.uint8), s.to(tl.uint8)


@triton.jit
def _cvt_pk_fp4_bf16(words, scale):
    """v_cvt_scalef32_pk_fp4_bf16 on each word (two bf16, the earlier in the low half) with its fp32
    `scale` (a power of two): uint8, e2m1(lo / scale) in the low nibble, e2m1(hi / scale) in the high one,
    rounded to nearest even and saturated at ±6. Two words a call, their bytes in bits 0-7 and 16-23 of one
    VGPR (op_sel picks the byte; LLVM allocates no VGPR for four bytes of inline asm output), each a
    uint16 that the caller truncates. Early-clobber: each instruction keeps the other bytes of $0."""
    out = tl.inline_asm_elementwise(
        asm="v_cvt_scalef32_pk_fp4_bf16 $0, $1, $3\nv_cvt_scalef32_pk_fp4_bf16 $0, $2, $4 op_sel:[0,0,0,1]",
        constraints="=&v,v,v,v,v",
        args=[words, scale],
        dtype=tl.uint16,
        is_pure=True,
        pack=2,
    )
    return out.to(tl.uint8)


@triton.jit
def _cvt_pk_fp4_model(words, scale):
    """`_cvt_pk_fp4_bf16` in software (targets without the instruction: the interpreter)."""
    lo = (words << 16).to(tl.float32, bitcast=True)
    hi = (words & -65536).to(tl.float32, bitcast=True)  # 0xFFFF0000
    inv = ((254 - ((scale.to(tl.int32, bitcast=True) >> 23) & 0xFF)) << 23).to(tl.float32, bitcast=True)
    return (_e2m1_code(lo * inv) | (_e2m1_code(hi * inv) << 4)).to(tl.uint8)


@triton.jit
def _e2m1_code(y):
    """fp32 → e2m1 code (int32): nearest value, ties to even, saturated at ±6 (`quant.e2m1_encode`)."""
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
    return code | tl.where(y < 0, 8, 0)


@triton.jit
def _quantize_words(words, ROWS: tl.constexpr, WORDS: tl.constexpr, MODEL: tl.constexpr):
    """words (ROWS, WORDS) int32, each two consecutive bf16 of A (the earlier in the low half) → (packed
    e2m1 bytes (ROWS, WORDS) uint8, e8m0 scales (ROWS, WORDS/16) uint8). The scale of each 32-group is
    2^(largest exponent field − 2), clamped at 0: the exponent of its amax, as `_quantize_e2m1` and
    `quant.quantize_mx`. `MODEL`: the instruction's software model instead of the instruction."""
    e = tl.maximum((words >> 23) & 0xFF, (words >> 7) & 0xFF)
    s = tl.maximum(tl.max(tl.reshape(e, (ROWS, WORDS // 16, 16)), axis=2) - 2, 0)
    scale = (s << 23).to(tl.float32, bitcast=True)  # 2^(s - 127)
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (ROWS, WORDS // 16, 16)), (ROWS, WORDS))
    if MODEL:
        packed = _cvt_pk_fp4_model(words, scale)
    else:
        packed = _cvt_pk_fp4_bf16(words, scale)
    return packed, s.to(tl.uint8)


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
    HW_FP4_CVT: tl.constexpr = False,
    CVT_MODEL: tl.constexpr = False,
):
    """One (BLOCK_M, BLOCK_N) tile of C over one K slice; K strides count stored bytes/elements (a packed
    FP4 row has K/2). With SPLIT_K > 1, c_ptr is the fp32 workspace. HW_FP4_CVT (A_FMT "bf16"): A is read
    as 32-bit words (stride_ak 1, stride_am even, 4-byte aligned) and converted by `_quantize_words`
    (CVT_MODEL: by the instruction's software model, for the interpreter)."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = remap_xcd(pid, num_pid_m * num_pid_n, NUM_XCDS)
    width = GROUP_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % group_size)
    pid_n = (pid % width) // group_size

    A_WORDS: tl.constexpr = HW_FP4_CVT and A_FMT == "bf16"  # two bf16 a 32-bit word
    A_PACK: tl.constexpr = 2 if A_FMT == "e2m1" or A_WORDS else 1
    B_PACK: tl.constexpr = 2 if B_FMT == "e2m1" else 1
    DOT_A_FMT: tl.constexpr = "e2m1" if A_FMT == "bf16" else A_FMT
    offs_m = edge_clamped(pid_m * BLOCK_M, BLOCK_M, M)
    offs_n = edge_clamped(pid_n * BLOCK_N, BLOCK_N, N)
    k_span = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    k_start = pid_k * k_span
    offs_ka = tl.arange(0, BLOCK_K // A_PACK)
    offs_kb = tl.arange(0, BLOCK_K // B_PACK)
    offs_s = tl.arange(0, BLOCK_K // 32)
    if A_WORDS:
        a_words = a_ptr.to(tl.pointer_type(tl.int32))
        a_ptrs = a_words + offs_m[:, None] * (stride_am // 2) + (k_start // 2 + offs_ka)[None, :]
    else:
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
            if A_WORDS:
                a = tl.load(a_ptrs, mask=offs_ka[None, :] < k_left // 2, other=0)
            else:
                a = tl.load(a_ptrs, mask=offs_ka[None, :] < k_left // A_PACK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_kb[:, None] < k_left // B_PACK, other=0.0)
            b_s = tl.load(bs_ptrs, mask=offs_s[None, :] < k_left // 32, other=0)
            if A_FMT != "bf16":
                a_s = tl.load(as_ptrs, mask=offs_s[None, :] < k_left // 32, other=0)
        if A_WORDS:  # packed MXFP4 activations from the conversion instruction
            a, a_s = _quantize_words(a, BLOCK_M, BLOCK_K // 2, CVT_MODEL)
        elif A_FMT == "bf16":  # MXFP4 activations made here, in registers
            a_code, a_s = _quantize_e2m1(a.to(tl.float32), BLOCK_M, BLOCK_K)
            if NATIVE:
                a = _pack_rows(a_code, BLOCK_M, BLOCK_K)
            else:
                a = a_code
        if NATIVE:
            acc = tl.dot_scaled(a, a_s, DOT_A_FMT, b, b_s, B_FMT, acc)
        else:
            if A_FMT == "e2m1" or A_WORDS:
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
        if A_WORDS:
            a_ptrs += BLOCK_K // 2
        else:
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
