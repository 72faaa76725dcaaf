"""The fused MoE's heuristic default against the rule it replaced (GPU), on MoE layers it was not fitted to.

The default's tile rule was read off the tuned winners of `benchmarks/moe.py`'s 18 problems (Mixtral-8x7B
TP2, Qwen3-30B-A3B TP1, DeepSeek-V3 TP16). This script checks it out of sample: other deployments of
those models (other E and N), timed side by side with the previous rule's config by one Benchmarker
(CUDA-graph replay, as `moe.py` times), interleaved rounds, every config gated on correctness first.
Where the GPU has TMA, the current default with its weight tiles loaded the other way (`B_TMA` flipped:
descriptors where it uses pointers, and the reverse) is timed beside (a third column, its own geomean).

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
from autotune.core.problem import next_pow2
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels.moe.op import MoeOp
from autotune.kernels.moe.space import tokens_per_expert

# (model, deployment, E, N, K, topk, weights): MoE layers that benchmarks/moe.py does not tune.
MODELS = [
    ("mixtral-8x7b", "tp8", 8, 1792, 4096, 2, "bf16"),
    ("qwen3-30b-a3b", "tp4", 128, 192, 2048, 8, "bf16"),
    ("deepseek-v3", "ep8", 32, 2048, 7168, 8, "fp8e4m3"),
]
MS = [64, 256, 1024, 4096]


def previous_default(problem: Problem, target: Target, current: Config) -> Config:
    """The tile rule the default had before (16 rows up to 32 tokens per expert, 32 rows up to 64, 64 rows
    above, 4 warps below 256 tokens per expert, K tiles of 64 for FP8 too up to 256), with the current
    default's GROUP_SIZE_M, SPLIT_K and stages."""
    tpe = tokens_per_expert(problem)
    fp8 = problem.dtype_b.startswith("fp8")
    if tpe <= 32:
        bm, bn, bk, warps = 16, 64, 128, 4
    elif tpe <= 256:
        bm, bn, bk, warps = 32 if tpe <= 64 else 64, 128, 64, 4
    else:
        bm, bn, bk, warps = 64, 128, 128 if fp8 else 64, 8
    bn = min(bn, max(32, next_pow2(problem.N)))
    return current.replace(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, num_warps=warps)


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
            problem = Problem.moe(m, n, k, e, topk, "bf16", weights)
            current = op.default_config(problem, target)
            variants = {"current": current, "previous": previous_default(problem, target, current)}
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
