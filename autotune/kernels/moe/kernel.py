"""Triton fused MoE MLP: out = Σ_topk weight · (silu(x·w1_gateᵀ) · x·w1_upᵀ)·w2ᵀ, bf16/fp16 or FP8 weights.

Imported lazily (it imports triton). `align_block_size` (moe.ref) sorts the M·topk (token, slot) pairs by
expert and pads every expert's group to a multiple of BLOCK_SIZE_M, so each block of BLOCK_SIZE_M sorted
rows belongs to one expert. One grouped-GEMM kernel then runs twice over (row blocks × N tiles), walked in
GROUP_SIZE_M swizzle order:

1. x rows (sorted_id // topk) @ w1[e]ᵀ → intermediate (M·topk, N) in x's dtype, in one of two structures
   (`GATE_UP_FUSED`): 0 (vLLM's, the default) runs the GEMM over all 2N rows of w1 into (M·topk, 2N), then
   SiLU(gate)·up in a separate launch (`silu_mul_kernel`); 1 accumulates the gate and up tiles of the same
   columns side by side in one tile and applies SiLU(gate)·up in the epilogue (its B tile is twice as
   large, so vLLM's configs and ours mean other tiles under the same BLOCK_SIZE_N);
2. intermediate rows @ w2[e]ᵀ, times the routing weight in the epilogue → (M·topk, K) in x's dtype (with
   topk = 1 straight into `out`); a sum over the topk slots of each token gives out (M, K).

A row block whose expert id is negative is padding past the routed pairs (`moe.routing.align_fixed`
sizes the grid for the worst case without reading the routing back): its programs return at once.

FP8 weights carry fp32 scales per [128, 128] block; activations (x, then the intermediate) are quantized
per 1×128 group by `act_quant_kernel` (the bits of moe.ref's quantizer, in one launch) and every
BLOCK_SIZE_K chunk (a divisor of 128) of the K loop is scaled by a_scale[row, k // 128] ·
b_scale[e, n // 128, k // 128] before it joins the fp32 accumulator. With SPLIT_K > 1 each GEMM's K runs
in up to SPLIT_K slices (`moe_gemm_split_kernel`): the slices' fp32 parts meet in a workspace and the last
slice of a tile to finish adds them up in slice order and runs the epilogue, in the same launch.
B_TMA = 1 (NVIDIA sm_90 and newer) loads the weight tiles through tensor descriptors (TMA) instead of
pointers; the activation rows, gathered by sorted id, stay pointer loads. PERSISTENT = p > 0 (SPLIT_K 1)
runs each GEMM on p programs an SM that walk the routed tiles in one loop of tiles and K steps, instead of
a program a tile.
Knobs: BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SPLIT_K, GATE_UP_FUSED, B_TMA, PERSISTENT,
num_warps, num_stages, and on AMD matrix_instr_nonkdim, waves_per_eu and kpack.
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
from autotune.core.target import local_target
from autotune.kernels.common.knobs import AMD_LAUNCH_OPTIONS
from autotune.kernels.common.splitk import arrives_last, publish_part, release_tile, sum_parts
from autotune.kernels.common.tile import edge_clamped
from autotune.kernels.launch import descriptor, pinned
from autotune.kernels.moe.ref import FP8_BLOCK, align_block_size, validate_moe_inputs
from autotune.kernels.moe.routing import Buffers, fresh_buffer
from autotune.kernels.scratch import split_scratch

__all__ = [
    "JIT_KERNELS",
    "MOE_PARAMS",
    "act_quant_kernel",
    "fused_moe",
    "moe_gemm_kernel",
    "moe_gemm_split_kernel",
    "silu_mul_kernel",
]

#: The config parameters of the kernel (vLLM's names, so its tuned JSON files read as they are).
MOE_PARAMS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


@triton.jit
def _round_bf16(x):
    """x (fp32) rounded to the nearest bf16, ties to even, still in fp32 (finite x). The interpreter's fp32 →
    bf16 cast truncates; after this it is exact, as the GPU's round-to-nearest-even cast is."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return ((bits >> 16) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _row_block(pid, num_padded, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
               GROUP_SIZE_M: tl.constexpr):  # fmt: skip
    """Tile `pid`'s row block and column block in GROUP_SIZE_M swizzle order: GROUP_SIZE_M row blocks are
    walked column by column, so weight tiles stay in L2."""
    num_pid_m = tl.cdiv(num_padded, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    width = GROUP_SIZE_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_SIZE_M
    group_size = min(num_pid_m - first_m, GROUP_SIZE_M)
    return first_m + ((pid % width) % group_size), (pid % width) // group_size


@triton.jit
def _moe_tile(
    a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, sorted_ids_ptr, expert_ids_ptr, pid, num_padded, num_valid, N, K,
    first_step, steps,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_asm, stride_ask, stride_bse, stride_bsn,
    stride_bsk,
    A_ROW_DIV: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SWIGLU: tl.constexpr, FP8: tl.constexpr,
    SCALE_GROUP: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr, ONE_B_SCALE: tl.constexpr,
    b_desc, B_TMA: tl.constexpr,
):  # fmt: skip
    """Tile `pid`'s sorted ids, their mask, its column block and its fp32 partial products (gate, up) over
    K steps [first_step, first_step + steps). With B_TMA the B tiles load through `b_desc`, a descriptor
    of B's (E·rows, K) view: rows past an expert's read the next expert's (columns the store masks), and
    columns past K read zeros."""
    pid_m, pid_n = _row_block(pid, num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)

    # num_padded is a multiple of BLOCK_SIZE_M: the sorted ids of a block are always in bounds.
    ids = tl.load(sorted_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    row_mask = ids < num_valid
    a_rows = ids // A_ROW_DIV
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = edge_clamped(pid_n * BLOCK_SIZE_N, BLOCK_SIZE_N, N)
    chunk = tl.arange(0, BLOCK_SIZE_K)
    offs_k = first_step * BLOCK_SIZE_K + chunk
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    up_ptrs = b_ptrs + N * stride_bn
    b_row = (expert * (stride_be // stride_bn) + pid_n * BLOCK_SIZE_N).to(tl.int32)  # B_TMA: B dense
    if FP8:
        a_scale_ptrs = a_scale_ptr + a_rows * stride_asm
        if ONE_B_SCALE:
            first_n = pid_n * BLOCK_SIZE_N
            b_scale_ptrs = b_scale_ptr + expert * stride_bse + (first_n // SCALE_GROUP) * stride_bsn
            up_scale_ptrs = b_scale_ptr + expert * stride_bse + ((first_n + N) // SCALE_GROUP) * stride_bsn
        else:
            b_scale_ptrs = b_scale_ptr + expert * stride_bse + (offs_n // SCALE_GROUP) * stride_bsn
            up_scale_ptrs = b_scale_ptr + expert * stride_bse + ((offs_n + N) // SCALE_GROUP) * stride_bsn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(first_step, first_step + steps):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_mask[:, None], other=0.0)
        else:
            a = tl.load(a_ptrs, mask=row_mask[:, None] & (chunk[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        if B_TMA:
            b = b_desc.load([b_row, k * BLOCK_SIZE_K]).T
        elif EVEN_K:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=chunk[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        if DOT_F32:  # interpreter only: its bf16/fp8 dots are unreliable; the products are exact in fp32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if FP8:
            # BLOCK_SIZE_K divides SCALE_GROUP: the whole chunk lies in one scale group along K.
            k_group = (k * BLOCK_SIZE_K) // SCALE_GROUP
            a_s = tl.load(a_scale_ptrs + k_group * stride_ask, mask=row_mask, other=0.0)
            b_s = tl.load(b_scale_ptrs + k_group * stride_bsk)
            if ONE_B_SCALE:
                acc = tl.fma(tl.dot(a, b), (a_s * b_s)[:, None], acc)
            else:
                acc = tl.fma(tl.dot(a, b), a_s[:, None] * b_s[None, :], acc)
        else:
            acc = tl.dot(a, b, acc)
        if SWIGLU:
            if B_TMA:
                b_up = b_desc.load([b_row + N, k * BLOCK_SIZE_K]).T
            elif EVEN_K:
                b_up = tl.load(up_ptrs)
            else:
                b_up = tl.load(up_ptrs, mask=chunk[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            if DOT_F32:
                b_up = b_up.to(tl.float32)
            if FP8:
                up_s = tl.load(up_scale_ptrs + ((k * BLOCK_SIZE_K) // SCALE_GROUP) * stride_bsk)
                if ONE_B_SCALE:
                    acc_up = tl.fma(tl.dot(a, b_up), (a_s * up_s)[:, None], acc_up)
                else:
                    acc_up = tl.fma(tl.dot(a, b_up), a_s[:, None] * up_s[None, :], acc_up)
            else:
                acc_up = tl.dot(a, b_up, acc_up)
            up_ptrs += BLOCK_SIZE_K * stride_bk
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    return ids, row_mask, pid_n, acc, acc_up


@triton.jit
def _moe_store(
    acc, acc_up, c_ptr, weights_ptr, ids, row_mask, pid_n, N, stride_cm, stride_cn,
    BLOCK_SIZE_N: tl.constexpr, SWIGLU: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """The epilogue: silu(gate)·up, times the routing weight, stored to C rows `ids` (padding masked)."""
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc_up
    if MUL_ROUTED_WEIGHT:
        w = tl.load(weights_ptr + ids, mask=row_mask, other=0.0)
        acc = acc * w[:, None]
    if DOT_F32 and c_ptr.dtype.element_ty == tl.bfloat16:
        acc = _round_bf16(acc)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + ids[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_mask[:, None] & (cols[None, :] < N))


@triton.jit
def _moe_tile_and_store(
    a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr, tile,
    num_padded, num_valid, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_asm, stride_ask,
    stride_bse, stride_bsn, stride_bsk,
    A_ROW_DIV: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SWIGLU: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr, FP8: tl.constexpr, SCALE_GROUP: tl.constexpr, EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr, ONE_B_SCALE: tl.constexpr, b_desc, B_TMA: tl.constexpr,
):  # fmt: skip
    """Tile `tile` over all of K (`_moe_tile`), then its epilogue (`_moe_store`)."""
    ids, row_mask, pid_n, acc, acc_up = _moe_tile(
        a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, sorted_ids_ptr, expert_ids_ptr, tile, num_padded,
        num_valid, N, K, 0, tl.cdiv(K, BLOCK_SIZE_K),
        stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_asm, stride_ask, stride_bse, stride_bsn,
        stride_bsk,
        A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, FP8, SCALE_GROUP, EVEN_K,
        DOT_F32, ONE_B_SCALE, b_desc, B_TMA,
    )  # fmt: skip
    _moe_store(acc, acc_up, c_ptr, weights_ptr, ids, row_mask, pid_n, N, stride_cm, stride_cn,
               BLOCK_SIZE_N, SWIGLU, MUL_ROUTED_WEIGHT, DOT_F32)  # fmt: skip


@triton.jit
def _routed_blocks(expert_ids_ptr, max_blocks, CHUNK: tl.constexpr):
    """The row blocks that hold routed pairs: those before the first block of expert id -1 (the padding
    of a worst-case grid is the tail of `expert_ids`)."""
    blocks = 0
    for start in range(0, max_blocks, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        e = tl.load(expert_ids_ptr + offs, mask=offs < max_blocks, other=-1)
        blocks += tl.sum((e >= 0).to(tl.int32), axis=0)
    return blocks


@triton.jit
def moe_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_padded,
    num_valid,
    N,
    K,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    A_ROW_DIV: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SWIGLU: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    FP8: tl.constexpr,
    SCALE_GROUP: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr = False,
    ONE_B_SCALE: tl.constexpr = False,
    B_TMA: tl.constexpr = False,
    b_desc=None,
    PERSISTENT: tl.constexpr = False,
    NUM_PROGRAMS=1,
):
    """One (BLOCK_SIZE_M sorted rows, BLOCK_SIZE_N columns) tile of C = A[rows] @ B[e]ᵀ, e the block's expert.

    Row r of the tile is pair id = sorted_ids[r] (id >= num_valid: padding, neither loaded nor stored); it
    reads A row id // A_ROW_DIV and writes C row id. B is (E, rows, K) by strides. With SWIGLU the tile
    also accumulates B rows n + N (the up projection) and stores silu(gate)·up. With FP8, a_scale is
    (A rows, cdiv(K, SCALE_GROUP)) and b_scale (E, cdiv(B rows, SCALE_GROUP), cdiv(K, SCALE_GROUP)).
    DOT_F32 (Triton's CPU interpreter only): dots in fp32, and a rounding (not truncating) cast to bf16.
    ONE_B_SCALE (FP8, the launcher's promise that BLOCK_SIZE_N divides SCALE_GROUP and N): every column of
    a tile shares one B scale per K group, so a partial product is scaled by a per-row vector. B_TMA (the
    launcher's promise that B is dense): the B tiles load through `b_desc`, a tensor descriptor of B as
    (E·rows, K) with (BLOCK_SIZE_N, BLOCK_SIZE_K) blocks (TMA on sm_90 and newer). A row block
    whose expert id is negative (padding of a worst-case grid) returns at once. PERSISTENT: the grid is
    NUM_PROGRAMS programs, and program p runs tiles p, p + NUM_PROGRAMS, ... of the routed row blocks
    (the padding blocks are not walked) in one loop whose K steps run on from tile to tile
    (`tl.range(flatten=True)`), so that a tile's epilogue overlaps the next tile's first loads.
    """
    if PERSISTENT:
        blocks = _routed_blocks(expert_ids_ptr, num_padded // BLOCK_SIZE_M, 1024)
        for tile in tl.range(tl.program_id(0), blocks * tl.cdiv(N, BLOCK_SIZE_N), NUM_PROGRAMS, flatten=True):
            _moe_tile_and_store(
                a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr,
                tile, blocks * BLOCK_SIZE_M, num_valid, N, K,
                stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_asm,
                stride_ask, stride_bse, stride_bsn, stride_bsk,
                A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, MUL_ROUTED_WEIGHT,
                FP8, SCALE_GROUP, EVEN_K, DOT_F32, ONE_B_SCALE, b_desc, B_TMA,
            )  # fmt: skip
    else:
        pid_m, _ = _row_block(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
        if tl.load(expert_ids_ptr + pid_m) < 0:
            return
        _moe_tile_and_store(
            a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr,
            tl.program_id(0), num_padded, num_valid, N, K,
            stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_asm,
            stride_ask, stride_bse, stride_bsn, stride_bsk,
            A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, MUL_ROUTED_WEIGHT,
            FP8, SCALE_GROUP, EVEN_K, DOT_F32, ONE_B_SCALE, b_desc, B_TMA,
        )  # fmt: skip


@triton.jit
def moe_gemm_split_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    weights_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    ws_ptr,
    count_ptr,
    num_padded,
    num_valid,
    N,
    K,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    A_ROW_DIV: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SWIGLU: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    FP8: tl.constexpr,
    SCALE_GROUP: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr = False,
    ONE_B_SCALE: tl.constexpr = False,
    B_TMA: tl.constexpr = False,
    b_desc=None,
):
    """`moe_gemm_kernel` with K split in SPLIT_K slices over grid axis 1, summed in this launch: each slice
    writes its fp32 parts (gate, and up with SWIGLU) to slots of the tile's workspace in `ws_ptr` and bumps
    the tile's counter in `count_ptr`; the last slice to arrive adds the slots up in slice order
    (deterministic), runs the epilogue and resets the counter to 0."""
    tile = tl.program_id(0)
    pid_m, _ = _row_block(tile, num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    if tl.load(expert_ids_ptr + pid_m) < 0:  # padding of a worst-case grid: no slice publishes or counts
        return
    pid_k = tl.program_id(1)
    k_steps = tl.cdiv(K, BLOCK_SIZE_K)
    per_slice = tl.cdiv(k_steps, SPLIT_K)
    first = pid_k * per_slice
    ids, row_mask, pid_n, acc, acc_up = _moe_tile(
        a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, sorted_ids_ptr, expert_ids_ptr, tile, num_padded,
        num_valid, N, K, first, max(0, min(per_slice, k_steps - first)),
        stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_asm, stride_ask, stride_bse, stride_bsn,
        stride_bsk,
        A_ROW_DIV, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, SWIGLU, FP8, SCALE_GROUP, EVEN_K,
        DOT_F32, ONE_B_SCALE, b_desc, B_TMA,
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


@triton.jit
def _round_fp8(x, MIN_NORMAL: tl.constexpr):
    """x (fp32, finite, within the FP8 range) rounded to the nearest FP8 e4m3 value (3 mantissa bits, ties
    to even; below MIN_NORMAL the subnormal spacing MIN_NORMAL / 8), still in fp32. The interpreter's fp32
    → FP8 cast drops the carry of a mantissa that rounds up (124.3 becomes 64, not 128); after this the
    cast is exact."""
    bits = x.to(tl.uint32, bitcast=True)
    normal = (((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) << 20).to(tl.float32, bitcast=True)
    magic: tl.constexpr = 1.5 * 8388608.0 * (MIN_NORMAL / 8)  # adding it rounds to the subnormal spacing
    subnormal = (tl.abs(x) + magic) - magic
    subnormal = tl.where(x < 0, -subnormal, subnormal)  # keeps the sign of a value that rounds to zero
    return tl.where(tl.abs(x) < MIN_NORMAL, subnormal, normal)


@triton.jit
def act_quant_kernel(
    x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_xk, stride_qm, stride_sm,
    FP8_MAX: tl.constexpr, MIN_NORMAL: tl.constexpr, GROUP: tl.constexpr, ROWS: tl.constexpr,
    EXACT_CAST: tl.constexpr = False,
):  # fmt: skip
    """ROWS rows × one GROUP-wide group of K of x → FP8 `q` and one fp32 scale per row and group in `s`:
    scale = amax / FP8_MAX (1 for an all-zero group), q = x / scale, both divisions correctly rounded, so
    the bits equal `moe.ref.quantize_fp8_act_groupwise`'s. EXACT_CAST (the interpreter): `_round_fp8`
    before the cast."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * GROUP + tl.arange(0, GROUP)
    row_ok = rows < M
    mask = row_ok[:, None] & (cols[None, :] < K)
    row_off = rows[:, None].to(tl.int64)
    x = tl.load(x_ptr + row_off * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.where(amax > 0, tl.div_rn(amax, tl.full(amax.shape, FP8_MAX, tl.float32)), 1.0)
    q = tl.clamp(tl.div_rn(x, scale[:, None]), -FP8_MAX, FP8_MAX)
    if EXACT_CAST:  # Triton's CPU interpreter only
        q = _round_fp8(q, MIN_NORMAL)
    tl.store(q_ptr + row_off * stride_qm + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + rows.to(tl.int64) * stride_sm + tl.program_id(1), scale, mask=row_ok)


@triton.jit
def silu_mul_kernel(
    h_ptr, y_ptr, rows, N, stride_hm, stride_ym, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
    ROUND_BF16: tl.constexpr = False,
):  # fmt: skip
    """y[r, n] = silu(h[r, n]) · h[r, N + n] in fp32, stored in y's dtype: the activation of vLLM's
    structure, after the gate/up GEMM wrote h (rows, 2N). ROUND_BF16 (the interpreter): round, not
    truncate, to bf16."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (r[:, None] < rows) & (n[None, :] < N)
    h_row = h_ptr + r[:, None].to(tl.int64) * stride_hm
    gate = tl.load(h_row + n[None, :], mask=mask, other=0.0).to(tl.float32)
    up = tl.load(h_row + N + n[None, :], mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    if ROUND_BF16:
        y = _round_bf16(y)
    tl.store(
        y_ptr + r[:, None].to(tl.int64) * stride_ym + n[None, :], y.to(y_ptr.dtype.element_ty), mask=mask
    )


#: The JIT functions fused_moe launches, in the order its `kernels` argument replaces them.
JIT_KERNELS = (moe_gemm_kernel, moe_gemm_split_kernel, act_quant_kernel, silu_mul_kernel)
#: FP8: one B scale per tile and K group where BLOCK_SIZE_N allows (benchmarks set it False to compare
#: with the per-column scales).
PER_TILE_B_SCALE = True


def _launch_options(config: Mapping[str, Value], is_amd: bool, fp8: bool) -> dict[str, Any]:
    """The constexpr block sizes and compile options of `config`; ValueError for a config that cannot run."""
    missing = [k for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K") if k not in config]
    if missing:
        raise ValueError(f"MoE config lacks {', '.join(missing)}: {dict(config)}")
    opts: dict[str, Any] = {
        "BLOCK_SIZE_M": int(config["BLOCK_SIZE_M"]),
        "BLOCK_SIZE_N": int(config["BLOCK_SIZE_N"]),
        "BLOCK_SIZE_K": int(config["BLOCK_SIZE_K"]),
        "GROUP_SIZE_M": int(config.get("GROUP_SIZE_M", 1)),
        "num_warps": int(config.get("num_warps", 4)),
        "num_stages": int(config.get("num_stages", 2)),
        "SPLIT_K": int(config.get("SPLIT_K", 1)),
        "GATE_UP_FUSED": int(config.get("GATE_UP_FUSED", 0)),
        "B_TMA": int(config.get("B_TMA", 0)),
        "PERSISTENT": int(config.get("PERSISTENT", 0)),
    }
    for name in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"):
        v = opts[name]
        if v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {v}")
    if opts["GROUP_SIZE_M"] < 1:
        raise ValueError(f"GROUP_SIZE_M must be >= 1, got {opts['GROUP_SIZE_M']}")
    if opts["SPLIT_K"] < 1:
        raise ValueError(f"SPLIT_K must be >= 1, got {opts['SPLIT_K']}")
    if opts["GATE_UP_FUSED"] not in (0, 1):
        raise ValueError(f"GATE_UP_FUSED must be 0 (vLLM's structure) or 1, got {opts['GATE_UP_FUSED']}")
    if opts["B_TMA"] not in (0, 1):
        raise ValueError(f"B_TMA must be 0 (pointer loads) or 1 (tensor descriptors), got {opts['B_TMA']}")
    if opts["PERSISTENT"] not in (0, 1, 2):
        raise ValueError(
            f"PERSISTENT must be 0 (a program a tile), 1 or 2 (programs an SM), got {opts['PERSISTENT']}"
        )
    if opts["PERSISTENT"] and opts["SPLIT_K"] > 1:
        raise ValueError("PERSISTENT runs whole tiles: it takes SPLIT_K 1")
    if opts["B_TMA"] and is_amd:
        raise ValueError("B_TMA 1 loads through tensor descriptors (TMA): NVIDIA sm_90 and newer only")
    group = FP8_BLOCK[1]
    if fp8 and group % opts["BLOCK_SIZE_K"]:
        raise ValueError(
            f"with FP8 block scales BLOCK_SIZE_K must divide the scale block {group} "
            f"(16, 32, 64 or 128), got {opts['BLOCK_SIZE_K']}"
        )
    if is_amd:
        opts.update({k: int(config[k]) for k in AMD_LAUNCH_OPTIONS if k in config})
    else:
        stray = [k for k in AMD_LAUNCH_OPTIONS if k in config]
        if stray:
            raise ValueError(f"{', '.join(stray)} exist only on AMD targets; config: {dict(config)}")
    return {**opts, **FP_OPTIONS}


def _check_tma_weights(w1: torch.Tensor, w2: torch.Tensor) -> None:
    """ValueError unless w1 and w2 can be read through tensor descriptors: dense, 16-byte aligned rows."""
    for name, w in (("w1", w1), ("w2", w2)):
        row_bytes = w.shape[-1] * w.element_size()
        if not w.is_contiguous() or row_bytes % 16 or (not w.is_meta and w.data_ptr() % 16):
            raise ValueError(
                f"B_TMA 1 needs contiguous weights with 16-byte aligned rows; {name} is {tuple(w.shape)} "
                f"{w.dtype}, strides {w.stride()}"
            )


#: Rows per program of the activation quantization kernel, and of `silu_mul_kernel`.
_QUANT_ROWS = 16
_ACT_ROWS = 4


def _quantize_act(
    kernel: Any,
    x: torch.Tensor,
    fp8_dtype: torch.dtype,
    interpret: bool = False,
    buffers: Buffers = fresh_buffer,
    name: str = "a",
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) → (FP8 (M, K), fp32 scales (M, cdiv(K, 128))) per 1x128 group, in one launch of `kernel`
    (`act_quant_kernel`); the same bits as `quantize_fp8_act_groupwise`."""
    finfo = torch.finfo(fp8_dtype)
    M, K = x.shape
    group = FP8_BLOCK[1]
    q = buffers(f"{name}_q", (M, K), fp8_dtype, x.device)
    scale = buffers(f"{name}_scale", (M, cdiv(K, group)), torch.float32, x.device)
    quant = pinned(
        kernel, FP8_MAX=float(finfo.max), MIN_NORMAL=float(finfo.smallest_normal), GROUP=group,
        ROWS=_QUANT_ROWS, num_warps=4, **({"EXACT_CAST": True} if interpret else {}), **FP_OPTIONS,
    )  # fmt: skip
    quant[(cdiv(M, _QUANT_ROWS), cdiv(K, group))](
        x, q, scale, M, K, x.stride(0), x.stride(1), q.stride(0), scale.stride(0)
    )
    return q, scale


def _sm_count(device: torch.device) -> int:
    """The SMs (CUs) of a GPU `device` (`local_target`'s, cached); 1 elsewhere (the interpreter's one
    program walks every tile)."""
    return local_target(device.index or 0).cu_count if device.type == "cuda" else 1


def output_for(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """`out` checked to be a contiguous tensor of x's shape, dtype and device (a new one where None)."""
    M, K = x.shape
    if out is None:
        return torch.empty(M, K, dtype=x.dtype, device=x.device)
    if out.shape != (M, K) or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
        raise ValueError(
            f"out must be a contiguous ({M}, {K}) {x.dtype} tensor on {x.device}, "
            f"got {tuple(out.shape)} {out.dtype} on {out.device}"
        )
    return out


def aligned(
    topk_ids: torch.Tensor,
    bm: int,
    E: int,
    device: torch.device,
    alignment: tuple[torch.Tensor, torch.Tensor, int] | None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(sorted_ids, expert_ids, num_padded) of the routing in blocks of `bm` rows: `alignment` checked
    where given, the worst case's shapes on the meta device, else `align_block_size`."""
    num_valid = topk_ids.numel()
    if alignment is not None:
        sorted_ids, expert_ids, num_padded = alignment
        if (
            num_padded % bm
            or num_padded < num_valid
            or sorted_ids.shape != (num_padded,)
            or expert_ids.shape != (num_padded // bm,)
            or sorted_ids.dtype != torch.int32
            or expert_ids.dtype != torch.int32
            or sorted_ids.device != device
        ):
            raise ValueError(
                f"alignment must be align_block_size(topk_ids, BLOCK_SIZE_M={bm}, E={E}); got "
                f"sorted_ids {tuple(sorted_ids.shape)} {sorted_ids.dtype}, expert_ids "
                f"{tuple(expert_ids.shape)} {expert_ids.dtype}, num_padded {num_padded} "
                f"(on {sorted_ids.device}, x on {device})"
            )
        return sorted_ids, expert_ids, num_padded
    if topk_ids.is_meta:  # no data to route: the most blocks any routing can need
        num_padded = (num_valid + min(E, num_valid) * (bm - 1)) // bm * bm
        sorted_ids = torch.empty(num_padded, dtype=torch.int32, device="meta")
        expert_ids = torch.empty(num_padded // bm, dtype=torch.int32, device="meta")
        return sorted_ids, expert_ids, num_padded
    return align_block_size(topk_ids, bm, E)


def fused_moe(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: Mapping[str, Value],
    *,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    block_shape: Sequence[int] | None = None,
    is_amd: bool = False,
    interpret: bool = False,
    out: torch.Tensor | None = None,
    kernels: Sequence[Any] | None = None,
    alignment: tuple[torch.Tensor, torch.Tensor, int] | None = None,
    buffers: Buffers = fresh_buffer,
    num_sms: int = 0,
) -> torch.Tensor:
    """The MoE MLP of `x` (M, K) with experts w1 (E, 2N, K) and w2 (E, K, N) → (M, K) in x's dtype.

    `topk_weights`/`topk_ids` (M, topk) come from `moe.ref.route`. FP8 weights (e4m3fn or e4m3fnuz) need
    `w1_scale` (E, cdiv(2N, 128), cdiv(K, 128)), `w2_scale` (E, cdiv(K, 128), cdiv(N, 128)), fp32, and
    `block_shape=[128, 128]`. `config` holds MOE_PARAMS, optionally SPLIT_K (default 1), and on AMD
    AMD_LAUNCH_OPTIONS (ValueError for those elsewhere). `interpret` works around Triton's CPU
    interpreter (fp32 dots, bf16 and FP8 stores rounded). `out`, when given, must be a contiguous (M, K)
    tensor of x's dtype and is returned.
    `kernels` replaces JIT_KERNELS by objects indexed and called the same way, e.g. recorders that
    capture the launches for a compile-only run; every launch goes through them. On the meta device
    (compile-only), where the routing is unknown, the token blocks are sized for the worst case.
    `alignment`, when given, is `align_block_size(topk_ids, BLOCK_SIZE_M, E)` computed beforehand (which
    checked the expert ids): then fused_moe reads nothing back from the device, so it can be timed
    without host syncs or captured in a CUDA graph; its blocks past the routed pairs may carry the expert
    id -1 (`moe.routing.align_fixed`: a grid sized for the worst case). `buffers` supplies the
    intermediate tensors (the run-time entry point keeps them per shape). `config["GATE_UP_FUSED"]` picks
    the structure of the first GEMM (module docstring; 0, vLLM's, where absent); with
    `config["PERSISTENT"]` > 0 each GEMM runs on that many programs per SM, of `num_sms` (the device's
    SM count where 0). Raises ValueError for bad input.
    """
    fp8 = validate_moe_inputs(
        x,
        w1,
        w2,
        topk_weights,
        topk_ids,
        w1_scale=w1_scale,
        w2_scale=w2_scale,
        block_shape=block_shape,
        check_ids=alignment is None,
    )
    opts = _launch_options(config, is_amd, fp8)
    split = opts.pop("SPLIT_K")
    fused_gate_up = bool(opts.pop("GATE_UP_FUSED"))
    b_tma = bool(opts.pop("B_TMA"))
    persistent = int(opts.pop("PERSISTENT"))
    if persistent and num_sms <= 0:
        num_sms = _sm_count(x.device)
    if b_tma:
        _check_tma_weights(w1, w2)
    if interpret:
        opts["DOT_F32"] = True
    if kernels is not None and len(kernels) != len(JIT_KERNELS):
        raise ValueError(f"kernels must replace the {len(JIT_KERNELS)} of JIT_KERNELS, got {len(kernels)}")
    kernel, split_kernel, quant_kernel, act_kernel = JIT_KERNELS if kernels is None else tuple(kernels)
    M, K = x.shape
    E, N = w1.shape[0], w1.shape[1] // 2
    topk = topk_ids.shape[1]
    out = output_for(x, out)
    if M == 0:
        return out

    bm, bn = opts["BLOCK_SIZE_M"], opts["BLOCK_SIZE_N"]
    num_valid = M * topk
    sorted_ids, expert_ids, num_padded = aligned(topk_ids, bm, E, x.device, alignment)
    weights = topk_weights.reshape(-1)
    if weights.dtype != torch.float32 or not weights.is_contiguous():
        weights = weights.float().contiguous()
    dummy = weights  # stands in for the scale pointers without FP8 (never read)

    if fp8:
        assert w1_scale is not None and w2_scale is not None
        a1, a1_scale = _quantize_act(quant_kernel, x, w1.dtype, interpret, buffers, "x")
    else:
        a1, a1_scale = x, dummy
    s1 = w1_scale if w1_scale is not None else dummy
    s2 = w2_scale if w2_scale is not None else dummy

    pinned_main, pinned_split = pinned(kernel, **opts), pinned(split_kernel, **opts)

    def gemm(
        a: torch.Tensor,
        a_scale: torch.Tensor,
        b: torch.Tensor,
        b_scale: torch.Tensor,
        c: torch.Tensor,
        n: int,
        k: int,
        a_row_div: int,
        swiglu: bool,
        mul_weight: bool,
    ) -> None:
        tiles = cdiv(num_padded, bm) * cdiv(n, bn)
        parts = min(split, cdiv(k, opts["BLOCK_SIZE_K"]))
        scratch: tuple[Any, ...] = ()
        if parts > 1:
            slots = 2 if swiglu else 1
            scratch = split_scratch(x.device, tiles * parts * slots * bm * bn, tiles)
        launch = pinned_main[(tiles,)] if parts == 1 else pinned_split[(tiles, parts)]
        walk: dict[str, Any] = {}
        if persistent:  # programs an SM walk the tiles
            walk = dict(PERSISTENT=True, NUM_PROGRAMS=min(tiles, persistent * num_sms))
            launch = pinned_main[(walk["NUM_PROGRAMS"],)]
        tma: dict[str, Any] = {}
        if b_tma:  # B as (E·rows, k), one (BLOCK_SIZE_N, BLOCK_SIZE_K) block a load
            rows = b.shape[0] * b.shape[1]
            tma = dict(B_TMA=True, b_desc=descriptor(b, [rows, k], [k, 1], [bn, opts["BLOCK_SIZE_K"]]))
        launch(
            a,
            b,
            c,
            a_scale,
            b_scale,
            weights,
            sorted_ids,
            expert_ids,
            *scratch,
            num_padded,
            num_valid,
            n,
            k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            b.stride(2),
            c.stride(0),
            c.stride(1),
            a_scale.stride(0) if fp8 else 0,
            a_scale.stride(1) if fp8 else 0,
            b_scale.stride(0) if fp8 else 0,
            b_scale.stride(1) if fp8 else 0,
            b_scale.stride(2) if fp8 else 0,
            A_ROW_DIV=a_row_div,
            SWIGLU=swiglu,
            MUL_ROUTED_WEIGHT=mul_weight,
            FP8=fp8,
            SCALE_GROUP=FP8_BLOCK[1],
            EVEN_K=k % opts["BLOCK_SIZE_K"] == 0,
            ONE_B_SCALE=fp8 and PER_TILE_B_SCALE and FP8_BLOCK[0] % bn == 0 and n % bn == 0,
            **({"SPLIT_K": parts} if parts > 1 else {}),
            **tma,
            **walk,
        )

    inter = buffers("inter", (num_valid, N), x.dtype, x.device)
    if fused_gate_up:
        gemm(a1, a1_scale, w1, s1, inter, N, K, topk, True, False)
    else:  # vLLM's structure: the GEMM over all 2N rows of w1, then the activation
        gate_up = buffers("gate_up", (num_valid, 2 * N), x.dtype, x.device)
        gemm(a1, a1_scale, w1, s1, gate_up, 2 * N, K, topk, False, False)
        block_n = min(1024, triton.next_power_of_2(N))
        act = pinned(
            act_kernel, ROWS=_ACT_ROWS, BLOCK_N=block_n, num_warps=4,
            **({"ROUND_BF16": True} if interpret and x.dtype == torch.bfloat16 else {}), **FP_OPTIONS,
        )  # fmt: skip
        act[(cdiv(num_valid, _ACT_ROWS), cdiv(N, block_n))](
            gate_up, inter, num_valid, N, gate_up.stride(0), inter.stride(0)
        )
    if fp8:
        a2, a2_scale = _quantize_act(quant_kernel, inter, w1.dtype, interpret, buffers, "inter")
    else:
        a2, a2_scale = inter, dummy
    if topk == 1:  # pair id == token: write the output directly
        gemm(a2, a2_scale, w2, s2, out, K, N, 1, False, True)
        return out
    down = buffers("down", (num_valid, K), x.dtype, x.device)
    gemm(a2, a2_scale, w2, s2, down, K, N, 1, False, True)
    torch.sum(down.view(M, topk, K), dim=1, out=out)
    return out
