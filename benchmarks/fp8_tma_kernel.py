"""A Triton FP8 GEMM through tensor descriptors (TMA on Hopper), optionally warp-specialized: a measured
prototype, not a backend. `fp8_variants.py` times it against the pointer kernel of `gemm_fp8_triton`;
on the H100 it was at most 3% faster at the best tiles, and warp specialization made it slower (numbers
in BENCHMARKS.md), so the tuner does not carry it.

For NVIDIA sm_90 and newer. A and B
tiles come through host-built descriptors (ragged M and N edges are filled with zeros by the hardware),
K tiles are 128 wide, one blockwise scale group each. Row-wise scales are applied once in the epilogue;
blockwise, each K tile's product is scaled by its A scales (one per row) and B scale before it joins the
accumulator, which makes every iteration wait for its matrix multiply. WARP_SPEC = 1 asks Triton to
specialize warps: producer warps issue the TMA loads while consumer warps multiply and scale, so the
loads and the scaling of one iteration overlap the next iteration's multiply. PERSISTENT = 1 runs one
program per SM over the tiles in grouped order. Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.config import Config
from autotune.core.op import FP_OPTIONS

__all__ = ["fp8_tma_launcher", "gemm_fp8_tma_kernel"]


@triton.jit
def _origin(tile, num_pid_m, num_pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Where `tile` starts in C (row, column), in grouped order: GROUP_M rows of tiles column by column."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((tile % width) % group_size)
    pid_n = (tile % width) // group_size
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _tile(
    a_desc, b_desc, as_ptr, bs_ptr, off_m, off_n, M, N, K,
    stride_asm, stride_ask, stride_bsn, stride_bsk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCKWISE: tl.constexpr,
    WARP_SPEC: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """The scaled fp32 tile of C at (off_m, off_n)."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    in_m = offs_m < M
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WARP_SPEC):
        a = a_desc.load([off_m, kt * BLOCK_K])
        b = b_desc.load([off_n, kt * BLOCK_K]).T
        if DOT_F32:  # interpreter only: its fp8 dots are unreliable; the products are exact in fp32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if BLOCKWISE:
            a_s = tl.load(as_ptr + offs_m * stride_asm + kt * stride_ask, mask=in_m, other=0.0)
            if 128 % BLOCK_N == 0:  # the tile's columns share one B scale
                b_s = tl.load(bs_ptr + (off_n // 128) * stride_bsn + kt * stride_bsk)
                acc = tl.fma(tl.dot(a, b), (a_s * b_s)[:, None], acc)
            else:
                bs_ptrs = bs_ptr + (offs_n // 128) * stride_bsn + kt * stride_bsk
                b_s = tl.load(bs_ptrs, mask=offs_n < N, other=0.0)
                acc = tl.fma(tl.dot(a, b), a_s[:, None] * b_s[None, :], acc)
        else:
            acc = tl.dot(a, b, acc)
    if not BLOCKWISE:  # per row (stride 1) or per tensor (stride 0)
        a_s = tl.load(as_ptr + offs_m * stride_asm, mask=in_m, other=0.0)
        b_s = tl.load(bs_ptr + offs_n * stride_bsn, mask=offs_n < N, other=0.0)
        acc = acc * a_s[:, None] * b_s[None, :]
    return acc


@triton.jit
def gemm_fp8_tma_kernel(
    a_desc, b_desc, c_desc, as_ptr, bs_ptr,
    M, N, K, stride_asm, stride_ask, stride_bsn, stride_bsk, NUM_PROGRAMS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    BLOCKWISE: tl.constexpr, PERSISTENT: tl.constexpr, WARP_SPEC: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """C tiles of (A·a_scale)·(B·b_scale)ᵀ, one per program or (PERSISTENT) pid, pid + NUM_PROGRAMS, ..."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=True):
            off_m, off_n = _origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _tile(
                a_desc, b_desc, as_ptr, bs_ptr, off_m, off_n, M, N, K, stride_asm, stride_ask, stride_bsn,
                stride_bsk, BLOCK_M, BLOCK_N, BLOCK_K, BLOCKWISE, False, DOT_F32,
            )  # fmt: skip
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        off_m, off_n = _origin(tl.program_id(0), num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile(
            a_desc, b_desc, as_ptr, bs_ptr, off_m, off_n, M, N, K, stride_asm, stride_ask, stride_bsn,
            stride_bsk, BLOCK_M, BLOCK_N, BLOCK_K, BLOCKWISE, WARP_SPEC, DOT_F32,
        )  # fmt: skip
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def fp8_tma_launcher(
    config: Config, *, blockwise: bool, num_sms: int, interpret: bool = False, kernel: Any = None
) -> Callable[..., None]:
    """`launch(a, b, out, a_scale, b_scale, scale_strides, M, N, K)` for `config`; descriptors are built
    per call. `kernel` replaces `gemm_fp8_tma_kernel` (a recorder in tests)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config.get("BLOCK_K", 128))
    persistent = bool(config.get("PERSISTENT", 0))
    opts: dict[str, Any] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=int(config.get("GROUP_M", 1)),
        BLOCKWISE=blockwise,
        PERSISTENT=persistent,
        WARP_SPEC=bool(config.get("WARP_SPEC", 0)),
        DOT_F32=interpret,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 3)),
        **FP_OPTIONS,
    )
    run = kernel or gemm_fp8_tma_kernel

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
    ) -> None:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        programs = min(tiles, num_sms) if persistent else tiles
        a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
        b_desc = TensorDescriptor.from_tensor(b, [bn, bk])
        c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
        run[(programs,)](
            a_desc, b_desc, c_desc, a_scale, b_scale, M, N, K, *scale_strides, programs, **opts
        )  # fmt: skip

    return launch
