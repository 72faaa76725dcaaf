"""Triton fused MoE MLP with MXFP4 weights and bf16 activations (`weights` "fp4e2m1").

Imported lazily (it imports triton). The structure is `moe.kernel`'s (routing aligned in blocks of
BLOCK_SIZE_M rows, the gate/up GEMM in either GATE_UP_FUSED structure, SiLU·up, the down GEMM times the
routing weight, the top-k sum, SPLIT_K slices summed in the launch); only the B operand differs: w1
(E, 2N, K/2) and w2 (E, K, N/2) hold e2m1 values packed two per byte along K with e8m0 scales per 32
along K (`moe.ref`'s layout). Each K step loads BLOCK_SIZE_K/2 bytes and BLOCK_SIZE_K/32 scales per
weight row. Two paths, chosen by the target (`NATIVE`, `quant.space.mx_native`):

- native (gfx950, Blackwell): `tl.dot_scaled(a, None, "bf16", b, b_scale, "e2m1")`;
- emulated (gfx942, Hopper, the interpreter): the B tile is made bf16 in registers (exact: an e2m1
  value times a power of two fits bf16), its bits assembled from each nibble and its scale's exponent
  without unpacking the bytes into K order: A's even and odd columns meet the low and the high nibbles in
  two tl.dot calls. MI300X and H100 have no MX instructions: this is what MX weights cost there.

The down GEMM has its own column tile, BLOCK_SIZE_N_DOWN (its output columns are the K of the problem,
its reduction the intermediate N). Knobs: those of `moe.kernel` plus BLOCK_SIZE_N_DOWN; BLOCK_SIZE_K is
a multiple of 32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.config import Value
from autotune.core.op import FP_OPTIONS
from autotune.core.problem import cdiv
from autotune.kernels.common.formats import MX_BLOCK
from autotune.kernels.common.splitk import arrives_last, publish_part, release_tile, sum_parts
from autotune.kernels.common.tile import edge_clamped
from autotune.kernels.launch import pinned
from autotune.kernels.moe.kernel import (
    _launch_options,
    _moe_store,
    _row_block,
    aligned,
    output_for,
    silu_mul_kernel,
)
from autotune.kernels.moe.ref import validate_mxfp4_moe_inputs
from autotune.kernels.moe.routing import Buffers, fresh_buffer
from autotune.kernels.scratch import split_scratch

__all__ = ["MX_JIT_KERNELS", "fused_moe_mx", "moe_mx_gemm_kernel", "moe_mx_gemm_split_kernel"]

_ACT_ROWS = 4


@triton.jit
def _load_b(b_ptrs, s_ptrs, k_left, EVEN_K: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    """One K step of packed e2m1 B (BLOCK_SIZE_K/2, BLOCK_SIZE_N) and its e8m0 scales (BLOCK_SIZE_N,
    BLOCK_SIZE_K/32); past K (k_left elements left) bytes and scales read 0, which decode to 0."""
    if EVEN_K:
        b = tl.load(b_ptrs)
        s = tl.load(s_ptrs)
    else:
        half = tl.arange(0, BLOCK_SIZE_K // 2)
        groups = tl.arange(0, BLOCK_SIZE_K // 32)
        b = tl.load(b_ptrs, mask=half[:, None] < k_left // 2, other=0)
        s = tl.load(s_ptrs, mask=groups[None, :] < k_left // 32, other=0)
    return b, s


@triton.jit
def _e2m1_bf16(code, bias):
    """e2m1 codes (int32, low 4 bits) times 2^(scale - 127), built as bf16 bits, exact: `bias` is
    (scale - 1) << 7 (int32) for the code's e8m0 scale, in [2, 252] (`quant.quantize_mx` gives
    2^(exponent of the amax - 2): any finite weights of magnitude above 2^-124). Code 0 is 0 whatever
    the scale (masked bytes and scales read 0)."""
    mag = code & 7  # exponent (2 bits), mantissa (1 bit)
    bits = tl.where(mag >= 2, (mag << 6) + bias, tl.where(mag == 1, bias, 0))  # 1: the subnormal 0.5
    return (bits | ((code & 8) << 12)).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _mx_dot(a, b, s, acc, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
            NATIVE: tl.constexpr, DOT_F32: tl.constexpr):  # fmt: skip
    """acc + a (bf16) @ dequant(b, s): scaled dot where NATIVE. Else each byte's two weights (K elements 2i
    and 2i + 1, of the scale of 16 bytes) are made bf16 from their bits, without unpacking the bytes
    into K order: A's even and odd columns meet the low and the high nibbles in two dots."""
    if NATIVE:
        out = tl.dot_scaled(a, None, "bf16", b, s, "e2m1", acc)
    else:
        HALF: tl.constexpr = BLOCK_SIZE_K // 2
        bias = tl.trans((s.to(tl.int32) - 1) << 7)  # (BLOCK_SIZE_K / 32, BLOCK_SIZE_N)
        bias = tl.reshape(
            tl.broadcast_to(bias[:, None, :], (BLOCK_SIZE_K // 32, 16, BLOCK_SIZE_N)), (HALF, BLOCK_SIZE_N)
        )
        packed = b.to(tl.int32)
        w_even = _e2m1_bf16(packed & 0xF, bias)
        w_odd = _e2m1_bf16(packed >> 4, bias)
        a_even, a_odd = tl.split(tl.reshape(a, (BLOCK_SIZE_M, HALF, 2)))
        if DOT_F32:  # interpreter only: the bf16 products are exact in fp32
            out = tl.dot(a_even.to(tl.float32), w_even.to(tl.float32), acc)
            out = tl.dot(a_odd.to(tl.float32), w_odd.to(tl.float32), out)
        else:
            out = tl.dot(a_odd, w_odd, tl.dot(a_even, w_even, acc))
    return out


@triton.jit
def _mx_tile(
    a_ptr, b_ptr, bs_ptr, sorted_ids_ptr, expert_ids_ptr, pid, num_padded, num_valid, N, K, first_step, steps,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_bse, stride_bsn, stride_bsk,
    A_ROW_DIV: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SWIGLU: tl.constexpr, EVEN_K: tl.constexpr,
    NATIVE: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """`moe.kernel._moe_tile` with MXFP4 B: sorted ids, mask, column block and the fp32 partial products
    (gate, up) over K steps [first_step, first_step + steps). B strides count bytes (stride_bk: one byte
    holds two K elements), scale strides scales."""
    pid_m, pid_n = _row_block(pid, num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    ids = tl.load(sorted_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    row_mask = ids < num_valid
    a_rows = ids // A_ROW_DIV
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = edge_clamped(pid_n * BLOCK_SIZE_N, BLOCK_SIZE_N, N)
    chunk = tl.arange(0, BLOCK_SIZE_K)
    half = first_step * (BLOCK_SIZE_K // 2) + tl.arange(0, BLOCK_SIZE_K // 2)
    groups = first_step * (BLOCK_SIZE_K // 32) + tl.arange(0, BLOCK_SIZE_K // 32)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + (first_step * BLOCK_SIZE_K + chunk)[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + half[:, None] * stride_bk
    s_ptrs = bs_ptr + expert * stride_bse + offs_n[:, None] * stride_bsn + groups[None, :] * stride_bsk
    up_ptrs = b_ptrs + N * stride_bn
    up_s_ptrs = s_ptrs + N * stride_bsn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(first_step, first_step + steps):
        k_left = K - k * BLOCK_SIZE_K
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_mask[:, None], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_mask[:, None] & (chunk[None, :] < k_left), other=0.0)
        b, s = _load_b(b_ptrs, s_ptrs, k_left, EVEN_K, BLOCK_SIZE_K)
        acc = _mx_dot(a, b, s, acc, BLOCK_SIZE_M, BLOCK_SIZE_K, BLOCK_SIZE_N, NATIVE, DOT_F32)
        if SWIGLU:
            b_up, s_up = _load_b(up_ptrs, up_s_ptrs, k_left, EVEN_K, BLOCK_SIZE_K)
            acc_up = _mx_dot(a, b_up, s_up, acc_up, BLOCK_SIZE_M, BLOCK_SIZE_K, BLOCK_SIZE_N, NATIVE, DOT_F32)
            up_ptrs += (BLOCK_SIZE_K // 2) * stride_bk
            up_s_ptrs += (BLOCK_SIZE_K // 32) * stride_bsk
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += (BLOCK_SIZE_K // 2) * stride_bk
        s_ptrs += (BLOCK_SIZE_K // 32) * stride_bsk
    return ids, row_mask, pid_n, acc, acc_up


@triton.jit
def moe_mx_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bs_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded, num_valid, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_bse, stride_bsn,
    stride_bsk,
    A_ROW_DIV: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SWIGLU: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr, EVEN_K: tl.constexpr, NATIVE: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):  # fmt: skip
    """One (BLOCK_SIZE_M sorted rows, BLOCK_SIZE_N columns) tile of C = A[rows] @ dequant(B[e])ᵀ, as
    `moe.kernel.moe_gemm_kernel` with MXFP4 B (module docstring)."""
    pid_m, _ = _row_block(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    if tl.load(expert_ids_ptr + pid_m) < 0:
        return
    ids, row_mask, pid_n, acc, acc_up = _mx_tile(
        a_ptr, b_ptr, bs_ptr, sorted_ids_ptr, expert_ids_ptr, tl.program_id(0), num_padded, num_valid, N, K,
        0, tl.cdiv(K, BLOCK_SIZE_K),
        stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_bse, stride_bsn, stride_bsk,
        A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, EVEN_K, NATIVE, DOT_F32,
    )  # fmt: skip
    _moe_store(acc, acc_up, c_ptr, weights_ptr, ids, row_mask, pid_n, N, stride_cm, stride_cn,
               BLOCK_SIZE_N, SWIGLU, MUL_ROUTED_WEIGHT, DOT_F32)  # fmt: skip


@triton.jit
def moe_mx_gemm_split_kernel(
    a_ptr, b_ptr, c_ptr, bs_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr, ws_ptr, count_ptr, num_padded,
    num_valid, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_bse, stride_bsn,
    stride_bsk,
    A_ROW_DIV: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SPLIT_K: tl.constexpr, SWIGLU: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr, EVEN_K: tl.constexpr, NATIVE: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):  # fmt: skip
    """`moe_mx_gemm_kernel` with K in SPLIT_K slices over grid axis 1, summed in this launch in slice
    order by the last slice to arrive (`moe.kernel.moe_gemm_split_kernel`'s protocol)."""
    tile = tl.program_id(0)
    pid_m, _ = _row_block(tile, num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    if tl.load(expert_ids_ptr + pid_m) < 0:
        return
    pid_k = tl.program_id(1)
    k_steps = tl.cdiv(K, BLOCK_SIZE_K)
    per_slice = tl.cdiv(k_steps, SPLIT_K)
    first = pid_k * per_slice
    ids, row_mask, pid_n, acc, acc_up = _mx_tile(
        a_ptr, b_ptr, bs_ptr, sorted_ids_ptr, expert_ids_ptr, tile, num_padded, num_valid, N, K,
        first, max(0, min(per_slice, k_steps - first)),
        stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_bse, stride_bsn, stride_bsk,
        A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, EVEN_K, NATIVE, DOT_F32,
    )  # fmt: skip
    slots: tl.constexpr = 2 if SWIGLU else 1
    ws_tile = ws_ptr + tile.to(tl.int64) * (SPLIT_K * slots * BLOCK_SIZE_M * BLOCK_SIZE_N)
    publish_part(acc, ws_tile, pid_k * slots, BLOCK_SIZE_M, BLOCK_SIZE_N)
    if SWIGLU:
        publish_part(acc_up, ws_tile, pid_k * slots + 1, BLOCK_SIZE_M, BLOCK_SIZE_N)
    if arrives_last(count_ptr, tile, SPLIT_K):
        acc = sum_parts(ws_tile, 0, slots, SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
        if SWIGLU:
            acc_up = sum_parts(ws_tile, 1, slots, SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
        _moe_store(acc, acc_up, c_ptr, weights_ptr, ids, row_mask, pid_n, N, stride_cm, stride_cn,
                   BLOCK_SIZE_N, SWIGLU, MUL_ROUTED_WEIGHT, DOT_F32)  # fmt: skip
        release_tile(count_ptr, tile)


#: The JIT functions fused_moe_mx launches, in the order its `kernels` argument replaces them.
MX_JIT_KERNELS = (moe_mx_gemm_kernel, moe_mx_gemm_split_kernel, silu_mul_kernel)


def _mx_options(config: Mapping[str, Value], is_amd: bool) -> tuple[dict[str, Any], int]:
    """The launch options of `config` (`moe.kernel._launch_options`) and its BLOCK_SIZE_N_DOWN (the
    gate/up BLOCK_SIZE_N where absent); ValueError for a config that cannot run on MXFP4 weights."""
    rest = dict(config)
    down = rest.pop("BLOCK_SIZE_N_DOWN", None)
    opts = _launch_options(rest, is_amd, False)
    if opts.pop("B_TMA"):
        raise ValueError("B_TMA 1: the MXFP4 weights decode through pointer loads; the knob is 0 there")
    if opts.pop("PERSISTENT"):
        raise ValueError("PERSISTENT > 0: the MXFP4 kernels run a program a tile; the knob is 0 there")
    bn_down = opts["BLOCK_SIZE_N"] if down is None else int(down)
    if bn_down < 16 or bn_down & (bn_down - 1):
        raise ValueError(f"BLOCK_SIZE_N_DOWN must be a power of two >= 16, got {bn_down}")
    if opts["BLOCK_SIZE_K"] % MX_BLOCK:
        raise ValueError(
            f"with MXFP4 weights BLOCK_SIZE_K must be a multiple of the {MX_BLOCK}-wide scale groups, "
            f"got {opts['BLOCK_SIZE_K']}"
        )
    return opts, bn_down


def fused_moe_mx(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: Mapping[str, Value],
    *,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    native: bool = False,
    is_amd: bool = False,
    interpret: bool = False,
    out: torch.Tensor | None = None,
    kernels: Sequence[Any] | None = None,
    alignment: tuple[torch.Tensor, torch.Tensor, int] | None = None,
    buffers: Buffers = fresh_buffer,
) -> torch.Tensor:
    """The MoE MLP of bf16 `x` (M, K) with MXFP4 experts → (M, K) bf16: w1 (E, 2N, K/2) and w2 (E, K, N/2)
    packed uint8 with e8m0 uint8 scales w1_scale (E, 2N, K/32) and w2_scale (E, K, N/32) (`moe.ref`).

    `native`: `tl.dot_scaled` (the target has MX instructions: `quant.space.mx_native`), else B dequantized
    in registers. `config`, `is_amd`, `interpret`, `out`, `alignment` and `buffers` as in
    `moe.kernel.fused_moe`, plus BLOCK_SIZE_N_DOWN (the down GEMM's column tile; BLOCK_SIZE_N where
    absent). `kernels` replaces MX_JIT_KERNELS. Raises ValueError for bad input, before any launch.
    """
    validate_mxfp4_moe_inputs(x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale,
                              check_ids=alignment is None)  # fmt: skip
    opts, bn_down = _mx_options(config, is_amd)
    split = opts.pop("SPLIT_K")
    fused_gate_up = bool(opts.pop("GATE_UP_FUSED"))
    if interpret:
        opts["DOT_F32"] = True
    if kernels is not None and len(kernels) != len(MX_JIT_KERNELS):
        raise ValueError(
            f"kernels must replace the {len(MX_JIT_KERNELS)} of MX_JIT_KERNELS, got {len(kernels)}"
        )
    kernel, split_kernel, act_kernel = MX_JIT_KERNELS if kernels is None else tuple(kernels)
    M, K = x.shape
    E, N = w1.shape[0], w1.shape[1] // 2
    topk = topk_ids.shape[1]
    out = output_for(x, out)
    if M == 0:
        return out
    bm, bk = opts["BLOCK_SIZE_M"], opts["BLOCK_SIZE_K"]
    num_valid = M * topk
    sorted_ids, expert_ids, num_padded = aligned(topk_ids, bm, E, x.device, alignment)
    weights = topk_weights.reshape(-1)
    if weights.dtype != torch.float32 or not weights.is_contiguous():
        weights = weights.float().contiguous()

    def gemm(a: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, c: torch.Tensor, n: int, k: int,
             bn: int, a_row_div: int, swiglu: bool, mul_weight: bool) -> None:  # fmt: skip
        tiles = cdiv(num_padded, bm) * cdiv(n, bn)
        parts = min(split, cdiv(k, bk))
        run_opts = {**opts, "BLOCK_SIZE_N": bn}
        scratch: tuple[Any, ...] = ()
        if parts > 1:
            scratch = split_scratch(x.device, tiles * parts * (2 if swiglu else 1) * bm * bn, tiles)
            launch = pinned(split_kernel, **run_opts)[(tiles, parts)]
        else:
            launch = pinned(kernel, **run_opts)[(tiles,)]
        launch(
            a, b, c, b_scale, weights, sorted_ids, expert_ids, *scratch, num_padded, num_valid, n, k,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
            b_scale.stride(0), b_scale.stride(1), b_scale.stride(2),
            A_ROW_DIV=a_row_div, SWIGLU=swiglu, MUL_ROUTED_WEIGHT=mul_weight, EVEN_K=k % bk == 0,
            NATIVE=native, **({"SPLIT_K": parts} if parts > 1 else {}),
        )  # fmt: skip

    bn = opts["BLOCK_SIZE_N"]
    inter = buffers("inter", (num_valid, N), x.dtype, x.device)
    if fused_gate_up:
        gemm(x, w1, w1_scale, inter, N, K, bn, topk, True, False)
    else:  # vLLM's structure: the GEMM over all 2N rows of w1, then the activation
        gate_up = buffers("gate_up", (num_valid, 2 * N), x.dtype, x.device)
        gemm(x, w1, w1_scale, gate_up, 2 * N, K, bn, topk, False, False)
        block_n = min(1024, triton.next_power_of_2(N))
        act = pinned(act_kernel, ROWS=_ACT_ROWS, BLOCK_N=block_n, num_warps=4,
                     **({"ROUND_BF16": True} if interpret else {}), **FP_OPTIONS)  # fmt: skip
        act[(cdiv(num_valid, _ACT_ROWS), cdiv(N, block_n))](
            gate_up, inter, num_valid, N, gate_up.stride(0), inter.stride(0)
        )
    if topk == 1:  # pair id == token: write the output directly
        gemm(inter, w2, w2_scale, out, K, N, bn_down, 1, False, True)
        return out
    down = buffers("down", (num_valid, K), x.dtype, x.device)
    gemm(inter, w2, w2_scale, down, K, N, bn_down, 1, False, True)
    torch.sum(down.view(M, topk, K), dim=1, out=out)
    return out
