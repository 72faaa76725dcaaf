"""The dense GEMM's heuristic default against the rule it replaced (GPU), on layers it was not fitted to.

From M = 128 up on Hopper the default is a TMA-kernel config. Its tile rule was read off the tuned winners
of `benchmarks/gemm.py`'s shapes (Llama-3.1-8B QKV and down, Llama-3.1-70B TP8 QKV and gate/up), and its
choice between 128 x 256 and 128 x 128 tiles (`WIDE_TILE_COST`) was set with the first group of layers
here (`LAYERS`); the second group (`HELD_OUT`) played no part. The tiles of two column parts (128 x 320
and 128 x 384, `PARTS_TILE_COST`) and the 6-stage ring at M <= 256 (`DEEP_RING_MAX_M`) were read off the
dense benchmark's shapes (docs/notes/2026-11-26-epilogue-slices.md), and these groups are new to them;
"previous" is the rule without them. Each layer is timed side by side with the previous rule's config and
the vendor library by one Benchmarker, interleaved rounds, every config gated on correctness first.

    python benchmarks/gemm_defaults.py --out results/ [--changed-only]

Prints a short table last; details go to --out (gemm_defaults.json).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import GEMM
from autotune.kernels.dense.space import tma_default  # the rule with some of its tiles left out

# (model, layer, N, K): bf16 linear layers (weights N x K, per GPU shard) that gemm.py does not tune.
LAYERS = [
    ("llama-3.1-8b", "gate_up", 28672, 4096),
    ("llama-3.1-8b", "o_proj", 4096, 4096),
    ("llama-3.1-70b tp8", "down", 8192, 3584),
    ("llama-3.1-70b tp8", "o_proj", 8192, 1024),
    ("qwen2.5-7b", "qkv", 4608, 3584),
    ("qwen2.5-7b", "gate_up", 37888, 3584),
    ("deepseek-v3 tp8", "dense gate_up", 4608, 7168),
    ("deepseek-v3 tp8", "dense down", 7168, 2304),
]
# Layers that played no part in fitting the rule: its last check.
HELD_OUT = [
    ("llama-3.1-405b tp8", "qkv", 2304, 16384),
    ("llama-3.1-405b tp8", "o_proj", 16384, 2048),
    ("llama-3.1-405b tp8", "down", 16384, 6656),
    ("qwen2.5-32b tp2", "qkv", 3584, 5120),
    ("qwen2.5-32b tp2", "down", 5120, 13824),
    ("gemma-2-9b", "down", 3584, 14336),
]
# Layers new to every rule here, added after the held-out run had shaped the tiles of two parts
# (PARTS_MIN_M, PARTS_FILL_N came from its two losses).
FRESH = [
    ("qwen3-32b tp4", "qkv", 2560, 5120),
    ("qwen3-32b tp4", "down", 5120, 6400),
    ("mistral-nemo-12b", "qkv", 6144, 5120),
    ("llama-3.1-70b tp4", "qkv", 2560, 8192),
    ("llama-3.1-70b tp2", "qkv", 5120, 8192),
    ("qwen2.5-72b tp8", "gate_up", 7392, 8192),
]
MS = [256, 1024, 4096]


def previous_default(problem: Problem, target: Target) -> Config:
    """The rule the TMA default had before tiles of two parts and deeper rings: 128 x 256 tiles on 8 warps
    (3 stages) where their waves, each WIDE_TILE_COST waves of 128 x 128 tiles, finish no later; else
    128 x 128 on 4 warps with 5 stages (4 where 5 do not fit), split along K where even those underfill the
    SMs; the split tail where the last wave is at most half full (the current rule without its 128 x 320
    and 128 x 384 tiles and without 6 stages at M <= 256)."""
    config = tma_default(problem, target, parts_widths=(), depths=(5, 4))
    assert config is not None, problem
    return config


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for gemm_defaults.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    ap.add_argument("--changed-only", action="store_true", help="only the layers whose two rules differ")
    args = ap.parse_args()
    target = local_target()
    if target.interpreter or not target.is_nvidia:
        print("benchmarks/gemm_defaults.py needs an NVIDIA Hopper GPU (the TMA default)", file=sys.stderr)
        return 2
    bench = Benchmarker(GEMM, target)
    rows: list[dict[str, Any]] = []
    for group, layers in (("fit", LAYERS), ("held out", HELD_OUT), ("fresh", FRESH)):
        for (model, layer, n, k), m in itertools.product(layers, MS):
            problem = Problem.of("gemm", m, n, k, "bf16")
            current = GEMM.default_config(problem, target)
            previous = previous_default(problem, target)
            if args.changed_only and previous == current:
                continue
            variants = {"vendor": Config(backend="torch"), "current": current}
            if previous != current:
                variants["previous"] = previous
            row: dict[str, Any] = dict(group=group, model=model, layer=layer, M=m, N=n, K=k)
            row |= harness.side_by_side(bench, problem, variants, args.rounds)
            if previous == current:  # one config: timed once, as both
                row["previous_us"] = row["current_us"]
                row["configs"]["previous"] = row["configs"]["current"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = harness.run_info(target, rows=rows)
    harness.write_json(args.out, "gemm_defaults", info)
    table = []
    ratios: dict[str, list[float]] = {"fit": [], "held out": [], "fresh": []}
    for r in rows:
        prev, cur, ven = r["previous_us"], r["current_us"], r["vendor_us"]
        same = r["configs"]["previous"] == r["configs"]["current"]
        if not same and math.isfinite(prev) and math.isfinite(cur):
            ratios[r["group"]].append(prev / cur)
        what = "same config" if same else f"{r['configs']['previous']} -> {r['configs']['current']}"
        table.append((f"{r['model']} {r['layer']}", r["M"], ven, prev, cur, prev / cur, what))
    cols = ("layer", "M", "vendor", "previous", "current", "speed-up", "configs")
    harness.print_table(cols, table, digits=(0, 0, 1, 1, 1, 3, 0), title=harness.describe(info))
    for group, values in ratios.items():
        if values:
            geo = harness.geomean(values)
            print(f"{group}: geomean over the {len(values)} problems where the configs differ: {geo:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
