"""The split tail against whole tiles (GPU): the same tile configs of the TMA GEMM, side by side.

For each shape, each tile config runs data-parallel (one program per tile, or persistent when the tiles
outnumber the SMs) and with TAIL_SPLIT = 1 (the tiles of the last, partly filled wave split along K over
the SMs it would leave idle), next to the vendor library, all in one Benchmarker, interleaved. Every run
passes the Benchmarker's correctness gate first.

    python benchmarks/tail_split.py --out results/

Prints a short table last; details go to --out/tail_split.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker, interleaved_medians
from autotune.kernels import GEMM

# (label, M, N, K): the shapes of benchmarks/gemm.py where the TMA kernel competes (M >= 256).
SHAPES = [
    (f"{name} M={m}", m, n, k)
    for name, n, k in [
        ("llama-3.1-8b qkv", 6144, 4096),
        ("llama-3.1-8b down", 4096, 14336),
        ("llama-3.1-70b tp8 qkv", 1280, 8192),
        ("llama-3.1-70b tp8 gate_up", 7168, 8192),
    ]
    for m in (256, 1024, 4096)
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the tiles that won most often in the H100 sweeps.
TILES = [(128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 128, 8, 3)]


def _configs(problem: Problem, target: Target) -> dict[str, Config]:
    space = GEMM.space(problem, target, ("torch", "triton_tma"))
    cus = target.cu_count
    out: dict[str, Config] = {"vendor": Config(backend="torch")}
    for bm, bn, bk, warps, stages in TILES:
        tiles = math.ceil(problem.M / bm) * math.ceil(problem.N / bn)
        for split in (0, 1):
            config = Config(
                backend="triton_tma",
                BLOCK_M=bm,
                BLOCK_N=bn,
                BLOCK_K=bk,
                GROUP_M=8,
                SPLIT_K=1,
                PERSISTENT=1 if split or tiles > cus else 0,
                TAIL_SPLIT=split,
                num_warps=warps,
                num_stages=stages,
            )
            if space.check(config) is None:
                out[f"{bm}x{bn}x{bk} {'tail' if split else 'dp'}"] = config
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-out", help="folder for tail_split.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/tail_split.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    bench = Benchmarker(GEMM, target)
    rows: list[dict[str, Any]] = []
    for label, m, n, k in SHAPES:
        problem = Problem.gemm(m, n, k, "bf16")
        configs = _configs(problem, target)
        times = interleaved_medians(bench, problem, configs, args.rounds)
        rows.append(dict(shape=label, times={name: t for name, (t, _) in times.items()},
                         status={name: s for name, (_, s) in times.items() if s != "ok"}))  # fmt: skip
        print(label, {name: round(t, 2) for name, (t, _) in times.items()}, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), rows=rows)
    (Path(args.out) / "tail_split.json").write_text(json.dumps(info, indent=1))
    head = f"{'shape':34} {'vendor':>8} {'best DP':>8} {'best tail':>9} {'DP/tail':>7} {'vendor/best':>11}"
    print(f"\n{head}  tail config")
    for row in rows:
        t = row["times"]
        dp = {k: v for k, v in t.items() if k.endswith(" dp") and not math.isnan(v)}
        tail = {k: v for k, v in t.items() if k.endswith(" tail") and not math.isnan(v)}
        best_dp = min(dp.values()) if dp else math.nan
        best_tail_name = min(tail, key=tail.__getitem__) if tail else "-"
        best_tail = tail.get(best_tail_name, math.nan)
        best = min(best_dp, best_tail) if tail else best_dp
        print(
            f"{row['shape']:34} {t['vendor']:8.2f} {best_dp:8.2f} {best_tail:9.2f} "
            f"{best_dp / best_tail:7.3f} {t['vendor'] / best:11.3f}  {best_tail_name}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
