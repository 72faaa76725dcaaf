"""Triton helpers of the kernels that load tiles through tensor descriptors (TMA on Hopper and newer).

Shared by the ops' TMA kernels: where a work item's tile starts and which K tiles it sums, a tile's fp32
sums as up to three column parts (a width that is not a power of two), and inputs made fit for a
descriptor. Imported lazily (it imports triton).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune.kernels.common.grid import tile_rows_cols

__all__ = ["dot_part", "tile_origin", "tile_part_sums", "tma_ready", "work_item"]


@triton.jit
def tile_origin(
    tile, num_pid_m, num_pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr
):
    """Where `tile` starts in C (row, column), in grouped order (`tile_rows_cols`)."""
    pid_m, pid_n = tile_rows_cols(tile, num_pid_m, num_pid_n, GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def work_item(item, num_tiles, k_per_split, k_tiles_all):
    """(tile, K slice, first K tile, end K tile) of work item `item`: items run tile-major within a slice."""
    tile = item % num_tiles
    split = item // num_tiles
    k_first = split * k_per_split
    return tile, split, k_first, min(k_first + k_per_split, k_tiles_all)


@triton.jit
def dot_part(acc, a, b_desc, off_n, off_k, B_KN: tl.constexpr, DOT_F32: tl.constexpr):
    """acc + a · (the B tile of `b_desc` at column off_n and K offset off_k)."""
    if B_KN:
        b = b_desc.load([off_k, off_n])
    else:
        b = b_desc.load([off_n, off_k]).T
    # DOT_F32: interpreter only (its bf16 dot multiplies raw bits; bf16 products are exact in fp32)
    if DOT_F32:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def tile_part_sums(
    a_desc, b_desc, b2_desc, b3_desc, off_m, off_n, k_lo, k_hi,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BN2: tl.constexpr, BN3: tl.constexpr,
    BLOCK_K: tl.constexpr, B_KN: tl.constexpr, DOT_F32: tl.constexpr,
):  # fmt: skip
    """The fp32 sums over K tiles k_lo .. k_hi - 1 of one C tile BLOCK_N + BN2 + BN3 wide, as up to three
    column parts (a width that is not a power of two, which Triton's blocks must be) that share each A
    tile: (acc, acc2, acc3), where a part of width 0 is absent and its accumulator a stand-in nobody
    stores (BN2 = BN3 = 0: the plain tile, one dot per K tile)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if BN2 > 0:
        acc2 = tl.zeros((BLOCK_M, BN2), dtype=tl.float32)
    else:
        acc2 = acc
    if BN3 > 0:
        acc3 = tl.zeros((BLOCK_M, BN3), dtype=tl.float32)
    else:
        acc3 = acc
    for kt in range(k_lo, k_hi):
        off_k = kt * BLOCK_K
        a = a_desc.load([off_m, off_k])
        acc = dot_part(acc, a, b_desc, off_n, off_k, B_KN, DOT_F32)
        if BN2 > 0:
            acc2 = dot_part(acc2, a, b2_desc, off_n + BLOCK_N, off_k, B_KN, DOT_F32)
        if BN3 > 0:
            acc3 = dot_part(acc3, a, b3_desc, off_n + BLOCK_N + BN2, off_k, B_KN, DOT_F32)
    return acc, acc2, acc3


def tma_ready(t: torch.Tensor) -> torch.Tensor:
    """`t`, or a dense copy where its rows are not dense and 16-byte aligned, as tensor descriptors need."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)
