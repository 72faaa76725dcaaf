"""Triton dense GEMM through tensor descriptors (TMA on Hopper), optionally persistent.

Backend "triton_tma", for NVIDIA sm_90 and newer. The tile loads and the C store go through host-built
tensor descriptors, which handle the ragged edges (no masks, no wrap-around). With PERSISTENT = 1 the grid
is one program per SM and each program walks the tiles with a stride of the grid (no wave quantization
tail); with PERSISTENT = 0 there is one program per tile. No split-K: this backend is for shapes whose
tile grid fills the GPU. Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.config import Config

__all__ = ["gemm_tma_kernel", "tma_launcher"]


@triton.jit
def gemm_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    NUM_PROGRAMS,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    B_KN: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """C tiles pid, pid + NUM_PROGRAMS, ... in grouped order; B is (N, K) unless B_KN."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    width = GROUP_M * num_pid_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=True):
        group_id = tile // width
        first_m = group_id * GROUP_M
        group_size = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + ((tile % width) % group_size)
        pid_n = (tile % width) // group_size
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            off_k = kt * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_KN:
                b = b_desc.load([off_k, off_n])
            else:
                b = b_desc.load([off_n, off_k]).T
            if (
                DOT_F32
            ):  # interpreter only (its bf16 dot multiplies raw bits; bf16 products are exact in fp32)
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
            else:
                acc = tl.dot(a, b, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def tma_launcher(config: Config, *, num_sms: int, interpret: bool = False) -> Callable[..., None]:
    """A function `launch(a, b, out, b_kn, M, N, K)` for `config`; descriptors are built per call."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    persistent = bool(config.get("PERSISTENT", 0))
    opts: dict[str, Any] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=int(config.get("GROUP_M", 1)),
        DOT_F32=interpret,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 3)),
    )
    kernel = gemm_tma_kernel

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_kn: bool, M: int, N: int, K: int
    ) -> None:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        programs = min(tiles, num_sms) if persistent else tiles
        a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
        b_desc = TensorDescriptor.from_tensor(b, [bk, bn] if b_kn else [bn, bk])
        c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
        kernel[(programs,)](a_desc, b_desc, c_desc, M, N, K, programs, B_KN=b_kn, **opts)

    return launch
