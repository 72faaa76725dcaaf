"""Probe: the MoE entry point's block alignment, the two Triton launches of `moe.align` against the torch
operations it replaced (about 17 launches), per call inside a CUDA graph (GPU).

    python benchmarks/align_probe.py --out results/

Each variant: a graph of 20 calls captured once, replayed 30 times, the median replay over 20 = µs a call;
both variants' results are compared for equality first. Prints a table; details go to OUT/align_probe.json.
"""

from __future__ import annotations

import statistics

import harness
import torch

from autotune.kernels.moe.ref import route, routing_logits
from autotune.kernels.moe.routing import align_fixed, fixed_padded

CASES = [  # (M, E, topk, block_m)
    (1, 8, 2, 16), (1, 64, 8, 16), (1, 128, 8, 16), (1, 256, 8, 16), (16, 128, 8, 16), (64, 256, 8, 16),
    (256, 128, 8, 64), (1024, 64, 8, 64), (4096, 8, 2, 128), (4096, 128, 8, 128), (4096, 256, 8, 128),
]  # fmt: skip


def torch_align(topk_ids: torch.Tensor, block_m: int, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The alignment as torch operations (the entry point's before `moe.align`)."""
    device = topk_ids.device
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    slots = fixed_padded(n, num_experts, block_m)
    counts = torch.zeros(num_experts, dtype=torch.long, device=device)
    counts.index_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    count_start = torch.cumsum(counts, 0) - counts
    order = torch.sort(flat, stable=True).indices
    sorted_experts = flat[order]
    rank = torch.arange(n, device=device) - count_start[sorted_experts]
    sorted_ids = torch.empty(slots, dtype=torch.int32, device=device)
    expert_ids = torch.empty(slots // block_m, dtype=torch.int32, device=device)
    sorted_ids.fill_(n)
    sorted_ids[padded_start[sorted_experts] + rank] = order.to(torch.int32)
    block_starts = torch.arange(0, slots, block_m, device=device)
    block_expert = torch.searchsorted(padded_end, block_starts, right=True)
    expert_ids.copy_(block_expert.masked_fill_(block_expert >= num_experts, -1))
    return sorted_ids, expert_ids


def per_call_us(fn, calls: int = 20, replays: int = 30) -> float:  # type: ignore[no-untyped-def]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(times)


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for align_probe.json")
    args = ap.parse_args()
    rows = []
    gen = torch.Generator().manual_seed(0)
    for M, E, topk, bm in CASES:
        _, ids = route(routing_logits(M, E, generator=gen), topk)
        ids = ids.cuda()
        new_ids, new_experts, _ = align_fixed(ids, bm, E)
        old_ids, old_experts = torch_align(ids, bm, E)
        same = torch.equal(new_ids, old_ids) and torch.equal(new_experts, old_experts)
        row = dict(M=M, E=E, topk=topk, block_m=bm, same=same)
        row["torch_us"] = per_call_us(lambda: torch_align(ids, bm, E))
        row["triton_us"] = per_call_us(lambda: align_fixed(ids, bm, E))
        rows.append(row)
        print(row, flush=True)
    harness.write_json(args.out, "align_probe", {"rows": rows})
    print(f"{'M':>5} {'E':>4} {'topk':>4} {'BM':>4} {'torch µs':>9} {'triton µs':>9} same")
    for r in rows:
        print(f"{r['M']:>5} {r['E']:>4} {r['topk']:>4} {r['block_m']:>4} {r['torch_us']:>9.2f} "
              f"{r['triton_us']:>9.2f} {r['same']}")  # fmt: skip
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
