"""The fused MoE's heuristic default against the rule it replaced (GPU), on MoE layers it was not fitted to.

The default's newest rule (`WIDE_TILE_MIN_TPE`: bf16 and fp16 weights from 64 tokens an expert take
128 x 256 tiles on 8 warps in vLLM's structure, a program an SM, where the GPU has TMA) was read off
Mixtral-8x7B TP 2 and Qwen3-30B-A3B TP 1. This script checks it out of sample: other deployments of
those models and other models' MoE layers, the current default timed side by side with the default
without that rule by one Benchmarker (CUDA-graph replay, as `moe.py` times), interleaved rounds, every
config gated on correctness first. Where the GPU has TMA, the current default with its weight tiles
loaded the other way (`B_TMA` flipped) is timed beside (a third column, its own geomean).

    python benchmarks/moe_defaults.py --out results/

Prints a short table last; details go to OUT/moe_defaults.json.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels.moe.op import MoeOp

# (model, deployment, E, N, K, topk, weights): MoE layers that benchmarks/moe.py does not tune.
MODELS = [
    ("mixtral-8x7b", "tp8", 8, 1792, 4096, 2, "bf16"),
    ("qwen3-30b-a3b", "tp4", 128, 192, 2048, 8, "bf16"),
    ("deepseek-v3", "ep8", 32, 2048, 7168, 8, "fp8e4m3"),
    ("mixtral-8x22b", "tp8", 8, 2048, 6144, 2, "bf16"),
    ("olmoe-1b-7b", "tp1", 64, 1024, 2048, 8, "bf16"),
    ("deepseek-v2-lite", "tp1", 64, 1408, 2048, 6, "bf16"),
    ("dbrx", "tp8", 16, 1344, 6144, 4, "bf16"),
    ("llama-4-scout", "tp8", 16, 1024, 5120, 1, "bf16"),
]
MS = [64, 256, 1024, 4096]


def previous_default(problem: Problem, target: Target) -> Config:
    """The default without its wide-tile rule (`WIDE_TILE_MIN_TPE` set past any M)."""
    from autotune.kernels.moe import space

    kept = space.WIDE_TILE_MIN_TPE
    space.WIDE_TILE_MIN_TPE = math.inf
    try:
        return space.moe_default_candidates(problem, target)[0]
    finally:
        space.WIDE_TILE_MIN_TPE = kept


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for moe_defaults.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    args = ap.parse_args()
    op = MoeOp()
    target = local_target()
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    rows: list[dict[str, Any]] = []
    for model, deploy, e, n, k, topk, weights in MODELS:
        for m in MS:
            problem = Problem.of("moe", m, n, k, "bf16", weights, E=e, topk=topk)
            current = op.default_config(problem, target)
            variants = {"current": current, "previous": previous_default(problem, target)}
            if "B_TMA" in current:  # the other way of loading the weight tiles
                variants["b_tma"] = current.replace(B_TMA=1 - int(current["B_TMA"]))
            row: dict[str, Any] = dict(
                model=f"{model} {deploy}", M=m, E=e, N=n, K=k, topk=topk, weights=weights
            )
            row |= harness.side_by_side(bench, problem, variants, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    harness.write_json(args.out, "moe_defaults", harness.run_info(target, rows=rows))
    table, ratios, tma = [], [], []
    for r in rows:
        if "b_tma_us" in r and math.isfinite(r["b_tma_us"]) and math.isfinite(r["current_us"]):
            tma.append(r["current_us"] / r["b_tma_us"])
        prev, cur = r["previous_us"], r["current_us"]
        same = r["configs"]["previous"] == r["configs"]["current"]
        if not same and math.isfinite(prev) and math.isfinite(cur):
            ratios.append(prev / cur)
        what = "same config" if same else f"{r['configs']['previous']} -> {r['configs']['current']}"
        table.append((r["model"], r["M"], prev, cur, prev / cur, what))
    cols = ("model", "M", "previous µs", "current µs", "speed-up", "configs")
    harness.print_table(
        cols, table, digits=(0, 0, 1, 1, 3, 0), title=harness.describe(harness.run_info(target))
    )
    if ratios:
        geo = harness.geomean(ratios)
        print(f"geomean over the {len(ratios)} problems where the configs differ: {geo:.3f}x")
    if tma:
        print(
            f"the current default with B_TMA flipped against it, geomean over {len(tma)} problems: "
            f"{harness.geomean(tma):.3f}x (lowest {min(tma):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
