"""Triton FP8 row-wise GEMM through tensor descriptors (TMA on Hopper): backend "triton_tma" of
gemm_fp8_rowwise.

C = (A·a_scale) · (B·b_scale)ᵀ with A (M, K) and B (N, K) in e4m3 and fp32 scales per row (or per tensor,
a scale stride of 0), applied to each tile in the epilogue. The tiles load through tensor descriptors as
in the dense `gemm_tma` kernel (whose K loop it shares), which zero-fill past the edges. Knobs: BLOCK_M/N/K,
GROUP_M, SPLIT_K (fp32 slices summed by the dense reduce kernel), PERSISTENT, SWAP_AB, num_warps,
num_stages. SWAP_AB runs the kernel on Cᵀ = B·Aᵀ (the config's BLOCK_M still tiles M and BLOCK_N tiles N)
and stores each tile transposed into C: at decode the weight's rows become wgmma's M side, which needs 64.
On the H100 the descriptor loads read the decode layers 3-7% faster than the pointer kernel's
(`benchmarks/fp8_tma_decode.py`). Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.config import Config
from autotune.kernels.base import FP_OPTIONS
from autotune.kernels.gemm_fp8_triton import swap_operands
from autotune.kernels.gemm_tma import _tile_origin, _tile_parts, _work_item, tma_ready
from autotune.kernels.launch import descriptor, pinned, tensor_key
from autotune.problem import cdiv

__all__ = ["fp8_tma_launcher", "gemm_fp8_tma_kernel"]


@triton.jit
def gemm_fp8_tma_kernel(
    a_desc, b_desc, c_desc, as_ptr, bs_ptr,
    M, N, K, stride_as, stride_bs, NUM_PROGRAMS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, TRANS_C: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """Work items pid, pid + NUM_PROGRAMS, ... (a C tile and a K slice) in grouped order, each tile scaled
    by its rows' A scales and its columns' B scales. TRANS_C: C (or the (SPLIT_K, N, M) fp32 workspace) is
    stored transposed, tile (off_m, off_n) at (off_n, off_m)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles_all = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles_all, SPLIT_K)
    num_tiles = num_pid_m * num_pid_n
    for item in tl.range(tl.program_id(0), num_tiles * SPLIT_K, NUM_PROGRAMS, flatten=True):
        tile, split, k_first, k_last = _work_item(item, num_tiles, k_per_split, k_tiles_all)
        off_m, off_n = _tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        # the scales are loaded before the K loop, so that their latency hides behind it
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        a_s = tl.load(as_ptr + rows * stride_as, mask=rows < M, other=0.0)
        b_s = tl.load(bs_ptr + cols * stride_bs, mask=cols < N, other=0.0)
        acc = _tile_parts(
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
    config: Config, *, num_sms: int, interpret: bool = False, kernels: tuple[Any, Any] | None = None
) -> Callable[..., None]:
    """`launch(a, b, out, a_scale, b_scale, scale_strides, M, N, K, workspace)` for `config`, the signature
    of `gemm_fp8_triton.quant_launcher`'s launches (`scale_strides`: (stride_asm, _, stride_bsn, _)).
    `workspace`: fp32, SPLIT_K·M·N elements when SPLIT_K > 1. Inputs whose rows are not dense and 16-byte
    aligned are copied first, and C goes through a dense temporary where `out` is not dense. `kernels`
    replaces (gemm_fp8_tma_kernel, splitk_reduce_kernel) (the compile-only checks record launches)."""
    from autotune.kernels.gemm_triton import REDUCE_BLOCK, splitk_reduce_kernel

    swap = bool(config.get("SWAP_AB", 0))
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    if swap:  # the kernel's M tile runs along N
        bm, bn = bn, bm
    split_k = int(config.get("SPLIT_K", 1))
    persistent = bool(config.get("PERSISTENT", 0))
    kernel, reduce_kernel = kernels or (gemm_fp8_tma_kernel, splitk_reduce_kernel)
    main = pinned(
        kernel, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=int(config.get("GROUP_M", 1)), SPLIT_K=split_k,
        TRANS_C=swap, DOT_F32=interpret, num_warps=int(config.get("num_warps", 4)),
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
        stride_as, stride_bs = scale_strides[0], scale_strides[2]
        c = out
        if not out.is_contiguous() or out.data_ptr() % 16:
            c = torch.empty((M, N), device=out.device, dtype=out.dtype)
        a_desc = descriptor(a, [km, K], [K, 1], [bm, bk])
        b_desc = descriptor(b, [kn, K], [K, 1], [bn, bk])
        if split_k == 1:
            c_base, c_desc = c, descriptor(c, [M, N], [N, 1], c_block)
        else:
            assert workspace is not None, "SPLIT_K > 1 needs an fp32 workspace of SPLIT_K * M * N"
            c_base, c_desc = workspace, descriptor(workspace, [split_k, M, N], [M * N, N, 1], [1, *c_block])
        items = cdiv(km, bm) * cdiv(kn, bn) * split_k
        programs = min(items, num_sms) if persistent else items
        # the launch key: the descriptors' fields follow from the sizes and dtypes (`descriptor` checks
        # each base's alignment); the scales are keyed like any tensor argument
        key = (km, kn, K, stride_as, stride_bs, programs, a.dtype, b.dtype, c_base.dtype,
               *tensor_key(a_scale), *tensor_key(b_scale))  # fmt: skip
        args = (a_desc, b_desc, c_desc, a_scale, b_scale, km, kn, K, stride_as, stride_bs, programs)
        main.launch_keyed((programs,), key, args, {})
        if split_k > 1:
            reduce[(cdiv(M * N, REDUCE_BLOCK),)](workspace, c, M * N)
        if c is not out:
            out.copy_(c)

    return launch
