"""Triton FP8 GEMMs through tensor descriptors (TMA on Hopper): backend "triton_tma" of gemm_fp8_rowwise
and gemm_fp8_blockwise.

C = (A·a_scale) · (B·b_scale)ᵀ with A (M, K) and B (N, K) in e4m3 and fp32 scales per row (or per tensor,
a scale stride of 0), applied to each tile in the epilogue. The tiles load through tensor descriptors as
in the dense `dense.tma` kernel (whose K loop, `common.tma`, it shares), which zero-fill past the edges.
Knobs: BLOCK_M/N/K, GROUP_M, SPLIT_K (fp32 slices summed by the reduce kernel of `common.splitk`),
PERSISTENT, SWAP_AB, num_warps, num_stages. SWAP_AB runs the kernel on Cᵀ = B·Aᵀ (the config's BLOCK_M
still tiles M and BLOCK_N tiles N) and stores each tile transposed into C: at decode the weight's rows
become wgmma's M side, which needs 64.
The descriptor loads read decode layers faster than the pointer kernel's
(docs/notes/2026-11-22-fp8-rowwise-decode.md).

Blockwise (BLOCKWISE): the scales per 1x128 (activations) and 128x128 (weight) blocks, applied to each
128-wide K group's product before it joins the accumulator, as in `quant.kernel`: the descriptors load
K sub-tiles of at most one group, and the scales of the next K tile load while this one runs (as that
kernel's SCALES_AHEAD). The weight's tile (BLOCK_N, or BLOCK_M swapped) must lie in one 128-row scale block,
so its scale is one number per group. The TMA loads need no proxy fence before each wgmma, which the
pointer kernel's `cp.async` loads do (one per group). Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.config import Config
from autotune.core.op import FP_OPTIONS
from autotune.core.problem import cdiv
from autotune.kernels.common.splitk import REDUCE_BLOCK, splitk_reduce_kernel
from autotune.kernels.common.tile import edge_clamped
from autotune.kernels.common.tma import tile_origin, tile_part_sums, tma_ready, work_item
from autotune.kernels.launch import descriptor, pinned, tensor_key
from autotune.kernels.quant.kernel import FP8_SCALE_BLOCK, _nth, _tile_scales, swap_operands

__all__ = ["fp8_tma_launcher", "gemm_fp8_tma_kernel"]


@triton.jit
def _blockwise_tile(
    a_desc, b_desc, as_ptr, bs_ptr, M, N, K, stride_asm, stride_ask, stride_bsm, stride_bsk,
    off_m, off_n, k_first, k_last,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SUB: tl.constexpr,
    SCALE_BLOCK: tl.constexpr, A_GROUPED: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """The blockwise-scaled fp32 sum of one C tile over K tiles k_first .. k_last - 1, in sub-tiles of SUB
    (at most one scale group). A_GROUPED (swapped): A is the weight, one scale per group for the tile,
    and B's scales are per row (the kernel's columns); else the other way round."""
    G: tl.constexpr = BLOCK_K // SUB
    rows = edge_clamped(off_m, BLOCK_M, M)
    cols = edge_clamped(off_n, BLOCK_N, N)
    if A_GROUPED:  # w: the weight's scale row of this tile; x: the other side's scale rows
        w_ptr = as_ptr + (off_m // SCALE_BLOCK) * stride_asm
        x_ptrs = bs_ptr + cols * stride_bsm
        stride_w = stride_ask
        stride_x = stride_bsk
        x_offs = cols
    else:
        w_ptr = bs_ptr + (off_n // SCALE_BLOCK) * stride_bsm
        x_ptrs = as_ptr + rows * stride_asm
        stride_w = stride_bsk
        stride_x = stride_ask
        x_offs = rows
    k0 = k_first * BLOCK_K
    wn0, wn1, wn2, wn3 = _tile_scales(w_ptr, 0, k0, K, stride_w, SUB, SCALE_BLOCK, G, False)
    xn0, xn1, xn2, xn3 = _tile_scales(x_ptrs, x_offs, k0, K, stride_x, SUB, SCALE_BLOCK, G, True)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(k_first, k_last):
        w0, w1, w2, w3 = wn0, wn1, wn2, wn3
        x0, x1, x2, x3 = xn0, xn1, xn2, xn3
        kn = (kt + 1) * BLOCK_K  # the next tile's scales load while this one runs
        wn0, wn1, wn2, wn3 = _tile_scales(w_ptr, 0, kn, K, stride_w, SUB, SCALE_BLOCK, G, False)
        xn0, xn1, xn2, xn3 = _tile_scales(x_ptrs, x_offs, kn, K, stride_x, SUB, SCALE_BLOCK, G, True)
        for j in tl.static_range(G):
            off_k = kt * BLOCK_K + j * SUB
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_n, off_k]).T
            if DOT_F32:  # interpreter only: its fp8 dots are unreliable; the products are exact in fp32
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            scale = _nth(x0, x1, x2, x3, j) * _nth(w0, w1, w2, w3, j)
            if A_GROUPED:
                acc = tl.fma(tl.dot(a, b), scale[None, :], acc)
            else:
                acc = tl.fma(tl.dot(a, b), scale[:, None], acc)
    return acc


@triton.jit
def gemm_fp8_tma_kernel(
    a_desc, b_desc, c_desc, as_ptr, bs_ptr,
    M, N, K, stride_as, stride_bs, stride_ask, stride_bsk, NUM_PROGRAMS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, TRANS_C: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCKWISE: tl.constexpr = False, SUB: tl.constexpr = 128, SCALE_BLOCK: tl.constexpr = 128,
    A_GROUPED: tl.constexpr = False,
):  # fmt: skip
    """Work items pid, pid + NUM_PROGRAMS, ... (a C tile and a K slice) in grouped order, each tile scaled
    by its rows' A scales and its columns' B scales (blockwise: `_blockwise_tile`, the K stride of the
    scales stride_ask and stride_bsk). TRANS_C: C (or the (SPLIT_K, N, M) fp32 workspace) is stored
    transposed, tile (off_m, off_n) at (off_n, off_m)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles_all = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles_all, SPLIT_K)
    num_tiles = num_pid_m * num_pid_n
    for item in tl.range(tl.program_id(0), num_tiles * SPLIT_K, NUM_PROGRAMS, flatten=True):
        tile, split, k_first, k_last = work_item(item, num_tiles, k_per_split, k_tiles_all)
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        if BLOCKWISE:
            acc = _blockwise_tile(
                a_desc, b_desc, as_ptr, bs_ptr, M, N, K, stride_as, stride_ask, stride_bs, stride_bsk,
                off_m, off_n, k_first, k_last, BLOCK_M, BLOCK_N, BLOCK_K, SUB, SCALE_BLOCK, A_GROUPED,
                DOT_F32,
            )  # fmt: skip
        else:
            # the scales are loaded before the K loop, so that their latency hides behind it
            rows = off_m + tl.arange(0, BLOCK_M)
            cols = off_n + tl.arange(0, BLOCK_N)
            a_s = tl.load(as_ptr + rows * stride_as, mask=rows < M, other=0.0)
            b_s = tl.load(bs_ptr + cols * stride_bs, mask=cols < N, other=0.0)
            acc = tile_part_sums(
                a_desc, b_desc, None, None, off_m, off_n, k_first, k_last,
                BLOCK_M, BLOCK_N, 0, 0, BLOCK_K, False, DOT_F32,
            )[0]  # fmt: skip
            acc = acc * a_s[:, None] * b_s[None, :]
        if TRANS_C:
            if SPLIT_K == 1:
                c_desc.store([off_n, off_m], acc.T.to(c_desc.dtype))
            else:
                c_desc.store([split, off_n, off_m], acc.T.reshape(1, BLOCK_N, BLOCK_M))
        elif SPLIT_K == 1:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            c_desc.store([split, off_m, off_n], acc.reshape(1, BLOCK_M, BLOCK_N))


def fp8_tma_launcher(
    config: Config, *, num_sms: int, interpret: bool = False, kernels: tuple[Any, Any] | None = None,
    blockwise: bool = False,
) -> Callable[..., None]:  # fmt: skip
    """`launch(a, b, out, a_scale, b_scale, scale_strides, M, N, K, workspace)` for `config`, the signature
    of `quant.kernel.quant_launcher`'s launches (`scale_strides`: (stride_asm, stride_ask, stride_bsn,
    stride_bsk), the K strides used where `blockwise`).
    `workspace`: fp32, SPLIT_K·M·N elements when SPLIT_K > 1. Inputs whose rows are not dense and 16-byte
    aligned are copied first, and C goes through a dense temporary where `out` is not dense. `kernels`
    replaces (gemm_fp8_tma_kernel, splitk_reduce_kernel) (the compile-only checks record launches)."""
    swap = bool(config.get("SWAP_AB", 0))
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    if swap:  # the kernel's M tile runs along N
        bm, bn = bn, bm
    split_k = int(config.get("SPLIT_K", 1))
    persistent = bool(config.get("PERSISTENT", 0))
    sub = min(bk, FP8_SCALE_BLOCK) if blockwise else bk  # the descriptors' K block
    if blockwise and (FP8_SCALE_BLOCK % (bm if swap else bn) or bk % sub or bk // sub > 4):
        raise ValueError(
            f"the blockwise TMA kernel needs the weight's tile inside one {FP8_SCALE_BLOCK}-row scale block "
            f"and BLOCK_K a power of two of at most {4 * FP8_SCALE_BLOCK}: {config.short()}"
        )
    kernel, reduce_kernel = kernels or (gemm_fp8_tma_kernel, splitk_reduce_kernel)
    main = pinned(
        kernel, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=int(config.get("GROUP_M", 1)), SPLIT_K=split_k,
        TRANS_C=swap, DOT_F32=interpret, BLOCKWISE=blockwise, SUB=sub, SCALE_BLOCK=FP8_SCALE_BLOCK,
        A_GROUPED=blockwise and swap,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 3)), **FP_OPTIONS,
    )  # fmt: skip
    reduce = pinned(reduce_kernel, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS)
    c_block = [bn, bm] if swap else [bm, bn]

    def launch(
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        a_scale: torch.Tensor,
        b_scale: torch.Tensor,
        scale_strides: tuple[int, int, int, int],
        M: int,
        N: int,
        K: int,
        workspace: torch.Tensor | None,
    ) -> None:
        a, b = tma_ready(a), tma_ready(b)
        km, kn = M, N  # the kernel's sizes; C keeps (M, N), stored transposed where swapped (TRANS_C)
        if swap:
            swapped = swap_operands(a, b, a_scale, b_scale, scale_strides, M, N)
            a, b, a_scale, b_scale, scale_strides, km, kn = swapped
        stride_as, stride_ask, stride_bs, stride_bsk = scale_strides
        c = out
        if not out.is_contiguous() or out.data_ptr() % 16:
            c = torch.empty((M, N), device=out.device, dtype=out.dtype)
        a_desc = descriptor(a, [km, K], [K, 1], [bm, sub])
        b_desc = descriptor(b, [kn, K], [K, 1], [bn, sub])
        if split_k == 1:
            c_base, c_desc = c, descriptor(c, [M, N], [N, 1], c_block)
        else:
            assert workspace is not None, "SPLIT_K > 1 needs an fp32 workspace of SPLIT_K * M * N"
            c_base, c_desc = workspace, descriptor(workspace, [split_k, M, N], [M * N, N, 1], [1, *c_block])
        items = cdiv(km, bm) * cdiv(kn, bn) * split_k
        programs = min(items, num_sms) if persistent else items
        # the launch key: the descriptors' fields follow from the sizes and dtypes (`descriptor` checks
        # each base's alignment); the scales are keyed like any tensor argument
        key = (km, kn, K, *scale_strides, programs, a.dtype, b.dtype, c_base.dtype,
               *tensor_key(a_scale), *tensor_key(b_scale))  # fmt: skip
        args = (a_desc, b_desc, c_desc, a_scale, b_scale, km, kn, K, stride_as, stride_bs, stride_ask,
                stride_bsk, programs)  # fmt: skip
        main.launch_keyed((programs,), key, args, {})
        if split_k > 1:
            reduce[(cdiv(M * N, REDUCE_BLOCK),)](workspace, c, M * N)
        if c is not out:
            out.copy_(c)

    return launch
