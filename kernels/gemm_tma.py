"""Triton dense GEMM through tensor descriptors (TMA on Hopper), optionally persistent.

Backend "triton_tma", for NVIDIA sm_90 and newer. The tile loads and the C store go through host-built
tensor descriptors, which handle the ragged edges (no masks, no wrap-around). With PERSISTENT = 1 the grid
is one program per SM and each program walks the tiles with a stride of the grid (no wave quantization
tail); with PERSISTENT = 0 there is one program per tile. With SPLIT_K > 1 each (tile, K slice) is a work
item and the partial sums go through a 3-D descriptor into an fp32 workspace that the split-K reduce kernel
of `gemm_triton` sums in a fixed order. Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.config import Config
from autotune.kernels.base import FP_OPTIONS

__all__ = ["gemm_tma_kernel", "tma_launcher"]


@triton.jit
def gemm_tma_kernel(
    a_desc, b_desc, c_desc,
    M, N, K, NUM_PROGRAMS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, B_KN: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """Work items pid, pid + NUM_PROGRAMS, ... (a C tile and a K slice) in grouped order; B is (N, K)
    unless B_KN. With SPLIT_K > 1, c_desc describes the (SPLIT_K, M, N) fp32 workspace."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles_all = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles_all, SPLIT_K)
    num_tiles = num_pid_m * num_pid_n
    width = GROUP_M * num_pid_n
    for item in tl.range(tl.program_id(0), num_tiles * SPLIT_K, NUM_PROGRAMS, flatten=True):
        tile = item % num_tiles
        split = item // num_tiles
        k_first = split * k_per_split
        k_tiles = min(k_per_split, k_tiles_all - k_first)
        group_id = tile // width
        first_m = group_id * GROUP_M
        group_size = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + ((tile % width) % group_size)
        pid_n = (tile % width) // group_size
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            off_k = (k_first + kt) * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_KN:
                b = b_desc.load([off_k, off_n])
            else:
                b = b_desc.load([off_n, off_k]).T
            # DOT_F32: interpreter only (its bf16 dot multiplies raw bits; bf16 products are exact in fp32)
            if DOT_F32:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
            else:
                acc = tl.dot(a, b, acc)
        if SPLIT_K == 1:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            c_desc.store([split, off_m, off_n], acc.reshape(1, BLOCK_M, BLOCK_N))


def tma_launcher(
    config: Config, *, num_sms: int, interpret: bool = False, kernels: tuple[Any, Any] | None = None
) -> Callable[..., None]:
    """A function `launch(a, b, out, b_kn, M, N, K, workspace)` for `config`; descriptors are built per
    call. `workspace` is an fp32 tensor of SPLIT_K·M·N elements when SPLIT_K > 1 (else ignored).
    `kernels` replaces (gemm_tma_kernel, splitk_reduce_kernel), as in `gemm_triton.launcher`."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from autotune.kernels.gemm_triton import REDUCE_BLOCK, splitk_reduce_kernel

    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    persistent = bool(config.get("PERSISTENT", 0))
    split_k = int(config.get("SPLIT_K", 1))
    opts: dict[str, Any] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=int(config.get("GROUP_M", 1)),
        SPLIT_K=split_k,
        DOT_F32=interpret,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 3)),
        **FP_OPTIONS,
    )
    kernel, reduce_kernel = kernels or (gemm_tma_kernel, splitk_reduce_kernel)

    def launch(
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        b_kn: bool,
        M: int,
        N: int,
        K: int,
        workspace: torch.Tensor | None = None,
    ) -> None:
        items = triton.cdiv(M, bm) * triton.cdiv(N, bn) * split_k
        programs = min(items, num_sms) if persistent else items
        a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
        b_desc = TensorDescriptor.from_tensor(b, [bk, bn] if b_kn else [bn, bk])
        if split_k == 1:
            c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
        else:
            assert workspace is not None, "SPLIT_K > 1 needs an fp32 workspace of SPLIT_K * M * N"
            c_desc = TensorDescriptor(workspace, [split_k, M, N], [M * N, N, 1], [1, bm, bn])
        kernel[(programs,)](a_desc, b_desc, c_desc, M, N, K, programs, B_KN=b_kn, **opts)
        if split_k > 1:
            mn = M * N
            reduce_kernel[(triton.cdiv(mn, REDUCE_BLOCK),)](
                workspace, out, mn, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS
            )

    return launch
