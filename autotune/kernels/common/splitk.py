"""Summing a tile's K parts: by the split-K reduce kernel, or in the GEMM's own launch.

Split-K writes each K slice's fp32 tile to a workspace; `splitk_reduce_kernel` then sums the slices in
split order. Summed in the launch (FUSED_SPLIT, stream-K, split tails), each part is published to its
slot of the tile's workspace and the last part to arrive (a per-tile counter, no waiting) adds the slots
up in slot order and resets the counter. Either way the sum is deterministic. Triton helpers shared by
the ops' kernels; imported lazily (it imports triton).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.problem import cdiv
from autotune.kernels.common.grid import stream_plan
from autotune.kernels.scratch import split_scratch

__all__ = [
    "REDUCE_BLOCK",
    "add_up",
    "arrives_last",
    "publish_part",
    "release_tile",
    "splitk_reduce_kernel",
    "store_tile",
    "stream_store",
    "sum_parts",
    "summed_launch",
]

#: Elements of C per program of `splitk_reduce_kernel`.
REDUCE_BLOCK = 1024


@triton.jit
def publish_part(acc, ws_tile, slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Writes the fp32 part `acc` to slot `slot` of a tile's workspace `ws_tile`."""
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_tile + slot * (BLOCK_M * BLOCK_N) + offs, acc)


@triton.jit
def arrives_last(count_ptr, tile, parts):
    """Bumps `tile`'s counter once every thread's parts are written: True for the last of `parts`."""
    tl.debug_barrier()  # every thread's part is written before the counter says so
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    return arrived == parts - 1


@triton.jit
def sum_parts(ws_tile, first, stride, parts, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The sum of slots first, first + stride, … (`parts` of them) of `ws_tile`, in slot order."""
    tl.debug_barrier()
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for sl in range(parts):
        total += tl.load(ws_tile + (first + sl * stride) * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
    return total


@triton.jit
def release_tile(count_ptr, tile):
    """Resets `tile`'s counter to 0 for the next launch (by the part that summed it)."""
    tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def add_up(
    acc, ws_tile, slot, parts, count_ptr, tile, c_ptrs, mask, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    """One of `parts` fp32 parts of `tile`: written to slot `slot` of its workspace `ws_tile`, then the
    tile's counter is bumped; the last part to arrive sums the slots in order (deterministic, no waiting),
    stores C at `c_ptrs` and resets the counter to 0 for the next launch."""
    publish_part(acc, ws_tile, slot, BLOCK_M, BLOCK_N)
    if arrives_last(count_ptr, tile, parts):
        total = sum_parts(ws_tile, 0, 1, parts, BLOCK_M, BLOCK_N)
        tl.store(c_ptrs, total.to(c_ptrs.dtype.element_ty), mask=mask)
        release_tile(count_ptr, tile)


@triton.jit
def store_tile(
    acc, c_ptr, ws_ptr, count_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N,
    stride_cs, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, FUSED_SPLIT: tl.constexpr,
):  # fmt: skip
    """Store one K slice's fp32 tile. Without FUSED_SPLIT: into C (SPLIT_K 1) or the workspace slice
    `pid_k` that the reduce kernel sums. With FUSED_SPLIT the slices are summed in this launch
    (`add_up`; `ws_ptr` holds SPLIT_K tiles per tile of C)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K == 1 or not FUSED_SPLIT:
        c_ptrs = c_ptr + pid_k * stride_cs + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tile = pid_m * num_pid_n + pid_n
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        ws_tile = ws_ptr + tile * (SPLIT_K * BLOCK_M * BLOCK_N)
        add_up(acc, ws_tile, pid_k, SPLIT_K, count_ptr, tile, c_ptrs, mask, BLOCK_M, BLOCK_N)


@triton.jit
def stream_store(
    acc, c_ptr, ws_ptr, count_ptr, tile, k0, k1, iters, per, pid_m, pid_n, M, N, stride_cm, stride_cn,
    MAX_PARTS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Store the part of `tile` over K steps k0 .. k1 - 1 that this program computed, where program p owns
    the flat K steps [p·per, (p + 1)·per) of all tiles in order. A whole tile goes straight to C; the
    programs that share a tile add up their parts (`add_up`; MAX_PARTS slots per tile, in program
    order)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    if k0 == 0 and k1 == iters:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        first = (tile * iters) // per
        parts = ((tile + 1) * iters - 1) // per - first + 1
        ws_tile = ws_ptr + tile * MAX_PARTS * BLOCK_M * BLOCK_N
        slot = tl.program_id(0) - first
        add_up(acc, ws_tile, slot, parts, count_ptr, tile, c_ptrs, mask, BLOCK_M, BLOCK_N)


@triton.jit
def splitk_reduce_kernel(w_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """C[i] = sum over s of W[s, i], summed in split order (deterministic), cast to C's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(w_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def summed_launch(
    out: torch.Tensor, M: int, N: int, K: int, bm: int, bn: int, bk: int, split_k: int, stream: int,
    num_sms: int,
) -> tuple[tuple[int, int], dict[str, Any], tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """(grid, the PER, MAX_PARTS, EVEN_K and STREAM arguments, (workspace, counters)) of a launch of a
    sum kernel: `stream` (STREAM_K) programs per SM over the K steps of all tiles, or else one program per
    (tile, K slice) of SPLIT_K."""
    tiles = cdiv(M, bm) * cdiv(N, bn)
    if stream:
        programs, per, parts = stream_plan(tiles, cdiv(K, bk), stream * num_sms)
        grid, even_k = (programs, 1), K % bk == 0
    else:
        grid, per, parts, even_k = (tiles, split_k), 0, split_k, K % (bk * split_k) == 0
    args = dict(PER=per, MAX_PARTS=parts, EVEN_K=even_k, STREAM=bool(stream))
    return grid, args, split_scratch(out.device, tiles * parts * bm * bn, tiles)
