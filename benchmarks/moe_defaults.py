"""The fused MoE's heuristic default against the rule it replaced (GPU), on MoE layers it was not fitted to.

The default's tile rule was read off the tuned winners of `benchmarks/moe.py`'s 18 problems (Mixtral-8x7B
TP2, Qwen3-30B-A3B TP1, DeepSeek-V3 TP16). This script checks it out of sample: other deployments of
those models (other E and N), timed side by side with the previous rule's config by one Benchmarker
(CUDA-graph replay, as `moe.py` times), interleaved rounds, every config gated on correctness first.

    python benchmarks/moe_defaults.py --out results/

Prints a short table last; details go to OUT/moe_defaults.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from autotune import Config, Problem
from autotune.core.problem import next_pow2
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.kernels.moe_op import MoeOp
from autotune.kernels.moe_space import tokens_per_expert

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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="folder for moe_defaults.json")
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
            res = interleaved_medians(bench, problem, variants, args.rounds)
            row = dict(model=f"{model} {deploy}", M=m, E=e, N=n, K=k, topk=topk, weights=weights)
            row |= {f"{name}_config": c.short() for name, c in variants.items()}
            row |= {f"{name}_us": t for name, (t, _) in res.items()}
            row["status"] = {name: s for name, (_, s) in res.items()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), rows=rows)
        (args.out / "moe_defaults.json").write_text(json.dumps(info, indent=1))
    print(f"\n{'model':22s} {'M':>5s} {'previous µs':>11s} {'current µs':>10s} {'speed-up':>8s}  configs")
    ratios = []
    for r in rows:
        prev, cur = r["previous_us"], r["current_us"]
        same = r["previous_config"] == r["current_config"]
        if not same and math.isfinite(prev) and math.isfinite(cur):
            ratios.append(prev / cur)
        what = "same config" if same else f"{r['previous_config']} -> {r['current_config']}"
        print(f"{r['model']:22s} {r['M']:5d} {prev:11.1f} {cur:10.1f} {prev / cur:8.3f}  {what}")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geomean over the {len(ratios)} problems where the configs differ: {geo:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
