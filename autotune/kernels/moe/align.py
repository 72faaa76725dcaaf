"""The MoE's block alignment on the device in two launches, on a grid set by the shapes alone.

Imported lazily (it imports triton). `moe.routing.align_fixed` launches these: one program per expert
and span of the pair ids in each (`spans_for`: one span for short routings), so the alignment of a call
costs two short launches, and nothing is read back.

1. `count_kernel`: program (e, s) counts the (token, slot) pairs of span s of the ids routed to expert e.
2. `place_kernel`: program (e, s) reads every count, takes its group's start (the padded counts of the
   experts before it) and its place there (expert e's pairs of the spans before s), and writes its
   pairs' ids in pair order; the spans of an expert share the sentinel of its group's padding and its id
   in its blocks' expert ids, and all programs share the grid's tail past the last group (the sentinel
   and expert id -1).

Every slot of the result is written by exactly one program, so the layout is `moe.ref.align_block_size`'s
(the same order within each expert), then the tail.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autotune.kernels.launch import pinned

__all__ = ["align_on_device", "count_kernel", "place_kernel", "spans_for"]

#: Pair ids a program reads per step, and slots it writes per step.
CHUNK = 1024
#: About how many programs each launch runs: the pair ids are cut into spans so that experts x spans
#: comes near it (one span where the ids are few), so that many experts' scans of long routings run
#: side by side instead of one after another.
PROGRAMS = 512
#: The most (experts, spans) counts a program of `place_kernel` holds at once.
TABLE = 4096


@triton.jit
def count_kernel(ids_ptr, counts_ptr, n, SPAN, CHUNK: tl.constexpr):
    """counts[e, s] = the pairs of span s (ids [s·SPAN, (s+1)·SPAN)) routed to expert e (program e, s)."""
    e = tl.program_id(0)
    s = tl.program_id(1)
    spans = tl.num_programs(1)
    stop = tl.minimum(n, (s + 1) * SPAN)
    total = tl.zeros([CHUNK], dtype=tl.int32)
    for start in range(s * SPAN, stop, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < stop, other=-1)
        total += (ids == e).to(tl.int32)
    tl.store(counts_ptr + e * spans + s, tl.sum(total, axis=0))


@triton.jit
def place_kernel(
    ids_ptr,
    counts_ptr,
    sorted_ptr,
    expert_ptr,
    n,
    slots,
    E,
    SPAN,
    BLOCK_M: tl.constexpr,
    E_P2: tl.constexpr,
    S_P2: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """Program (e, s): the ids of span s's pairs of expert e at their places in its group (after its pairs
    of earlier spans), in pair order; with the other spans, the sentinel `n` in its group's padding and
    its id in its blocks; with every program, the sentinel and -1 past the last group."""
    e = tl.program_id(0)
    s = tl.program_id(1)
    spans = tl.num_programs(1)
    rows = tl.arange(0, E_P2)[:, None]
    cols = tl.arange(0, S_P2)[None, :]
    table = tl.load(counts_ptr + rows * spans + cols, mask=(rows < E) & (cols < spans), other=0)
    counts = tl.sum(table, axis=1)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    mine = tl.arange(0, E_P2) == e
    begin = tl.sum(tl.where(mine, ends - padded, 0), axis=0)
    count = tl.sum(tl.where(mine, counts, 0), axis=0)
    size = tl.sum(tl.where(mine, padded, 0), axis=0)
    used = tl.sum(padded, axis=0)
    seen = tl.sum(tl.sum(tl.where((rows == e) & (cols < s), table, 0), axis=1), axis=0)
    sentinel = tl.zeros([CHUNK], dtype=tl.int32) + n
    stop = tl.minimum(n, (s + 1) * SPAN)
    for start in range(s * SPAN, stop, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < stop, other=-1)
        hit = (ids == e).to(tl.int32)
        rank = tl.cumsum(hit, axis=0) - hit
        tl.store(sorted_ptr + begin + seen + rank, offs.to(tl.int32), mask=hit != 0)
        seen += tl.sum(hit, axis=0)
    # the group's padding and its blocks' expert id, shared out over the spans
    for start in range(begin + count + s * CHUNK, begin + size, spans * CHUNK):
        offs = start + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + offs, sentinel, mask=offs < begin + size)
    last = (begin + size) // BLOCK_M
    for start in range(begin // BLOCK_M + s * CHUNK, last, spans * CHUNK):
        blocks = start + tl.arange(0, CHUNK)
        tl.store(expert_ptr + blocks, tl.zeros([CHUNK], dtype=tl.int32) + e, mask=blocks < last)
    # the tail past every group, shared out over all programs: CHUNK slots (and blocks) at a time
    me = e * spans + s
    for start in range(used + me * CHUNK, slots, E * spans * CHUNK):
        offs = start + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + offs, sentinel, mask=offs < slots)
    for start in range(used // BLOCK_M + me * CHUNK, slots // BLOCK_M, E * spans * CHUNK):
        blocks = start + tl.arange(0, CHUNK)
        tl.store(expert_ptr + blocks, tl.zeros([CHUNK], dtype=tl.int32) - 1, mask=blocks < slots // BLOCK_M)


def spans_for(pairs: int, num_experts: int) -> int:
    """Spans the pair ids are cut into: about PROGRAMS programs in all, at most one a CHUNK of ids, and
    at most TABLE counts in all (1 for short routings)."""
    steps = -(-pairs // CHUNK)
    wanted = -(-PROGRAMS // num_experts)
    most = max(1, TABLE // triton.next_power_of_2(num_experts))
    return max(1, min(steps, wanted, most))


def align_on_device(
    flat_ids: torch.Tensor,
    block_m: int,
    num_experts: int,
    sorted_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    counts: torch.Tensor,
) -> None:
    """Writes the alignment of `flat_ids` (the M·topk expert ids, contiguous) into `sorted_ids` (slots,)
    and `expert_ids` (slots / block_m,), int32; `counts` (E · `spans_for`,) int32 is the scratch of the
    two launches."""
    n = flat_ids.numel()
    spans = spans_for(n, num_experts)
    if counts.numel() < num_experts * spans:
        raise ValueError(f"counts holds {counts.numel()} ints, the launches need {num_experts * spans}")
    span = -(-n // spans)
    grid = (num_experts, spans)
    pinned(count_kernel, CHUNK=CHUNK, num_warps=4)[grid](flat_ids, counts, n, span)
    place = pinned(
        place_kernel, BLOCK_M=block_m, E_P2=triton.next_power_of_2(num_experts),
        S_P2=triton.next_power_of_2(spans), CHUNK=CHUNK, num_warps=4,
    )  # fmt: skip
    place[grid](flat_ids, counts, sorted_ids, expert_ids, n, sorted_ids.numel(), num_experts, span)
