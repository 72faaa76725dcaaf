"""The MoE's block alignment on the device in two launches, on a grid set by the shapes alone.

Imported lazily (it imports triton). `moe.routing.align_fixed` launches these: one program per expert
in each, so the alignment of a decode call costs two short launches, and nothing is read back.

1. `count_kernel`: program e counts the (token, slot) pairs routed to expert e.
2. `place_kernel`: program e reads every expert's count, takes its group's start (the padded counts of
   the experts before it), writes its pairs' ids there in pair order, the sentinel into its group's
   padding, and its id into its blocks' expert ids. The programs also share the grid's tail past the last
   group: the sentinel and expert id -1.

Every slot of the result is written by exactly one program, so the layout is `moe.ref.align_block_size`'s
(the same order within each expert), then the tail.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune.kernels.launch import pinned

__all__ = ["align_on_device", "count_kernel", "place_kernel"]

#: Pair ids a program reads per step, and slots it writes per step.
CHUNK = 1024


@triton.jit
def count_kernel(ids_ptr, counts_ptr, n, CHUNK: tl.constexpr):
    """counts[e] = the pairs routed to expert e (program e)."""
    e = tl.program_id(0)
    total = tl.zeros([CHUNK], dtype=tl.int32)
    for start in range(0, n, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < n, other=-1)
        total += (ids == e).to(tl.int32)
    tl.store(counts_ptr + e, tl.sum(total, axis=0))


@triton.jit
def place_kernel(
    ids_ptr,
    counts_ptr,
    sorted_ptr,
    expert_ptr,
    n,
    slots,
    E,
    BLOCK_M: tl.constexpr,
    E_P2: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """Program e: its pairs' ids at its group's start in pair order, the sentinel `n` in its padding and
    its id in its blocks; with the others, the sentinel and -1 past the last group."""
    e = tl.program_id(0)
    experts = tl.arange(0, E_P2)
    counts = tl.load(counts_ptr + experts, mask=experts < E, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    mine = experts == e
    begin = tl.sum(tl.where(mine, ends - padded, 0), axis=0)
    count = tl.sum(tl.where(mine, counts, 0), axis=0)
    size = tl.sum(tl.where(mine, padded, 0), axis=0)
    used = tl.sum(padded, axis=0)
    sentinel = tl.zeros([CHUNK], dtype=tl.int32) + n
    seen = count * 0
    for start in range(0, n, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < n, other=-1)
        hit = (ids == e).to(tl.int32)
        rank = tl.cumsum(hit, axis=0) - hit
        tl.store(sorted_ptr + begin + seen + rank, offs.to(tl.int32), mask=hit != 0)
        seen += tl.sum(hit, axis=0)
    for start in range(begin + count, begin + size, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + offs, sentinel, mask=offs < begin + size)
    last = (begin + size) // BLOCK_M
    for start in range(begin // BLOCK_M, last, CHUNK):
        blocks = start + tl.arange(0, CHUNK)
        tl.store(expert_ptr + blocks, tl.zeros([CHUNK], dtype=tl.int32) + e, mask=blocks < last)
    # the tail past every group, shared out: CHUNK slots (and blocks) a program at a time
    for start in range(used + e * CHUNK, slots, E * CHUNK):
        offs = start + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + offs, sentinel, mask=offs < slots)
    for start in range(used // BLOCK_M + e * CHUNK, slots // BLOCK_M, E * CHUNK):
        blocks = start + tl.arange(0, CHUNK)
        tl.store(expert_ptr + blocks, tl.zeros([CHUNK], dtype=tl.int32) - 1, mask=blocks < slots // BLOCK_M)


def align_on_device(
    flat_ids: torch.Tensor,
    block_m: int,
    num_experts: int,
    sorted_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    counts: torch.Tensor,
) -> None:
    """Writes the alignment of `flat_ids` (the M·topk expert ids, contiguous) into `sorted_ids` (slots,)
    and `expert_ids` (slots / block_m,), int32; `counts` (E,) int32 is the scratch of the two launches."""
    n = flat_ids.numel()
    grid = (num_experts,)
    pinned(count_kernel, CHUNK=CHUNK, num_warps=4)[grid](flat_ids, counts, n)
    place = pinned(place_kernel, BLOCK_M=block_m, E_P2=triton.next_power_of_2(num_experts), CHUNK=CHUNK,
                   num_warps=4)  # fmt: skip
    place[grid](flat_ids, counts, sorted_ids, expert_ids, n, sorted_ids.numel(), num_experts)
