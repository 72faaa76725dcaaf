"""How many K slices fill the GPU (GPU): the TMA kernel's best time per SPLIT_K, 1 to 6, next to cuBLAS.

The tuned space holds SPLIT_K 1, 2, 3 and 4 for the TMA kernel; this times each count, 5 and 6 included,
over a grid of tiles (64 x 128, 128 x 64, 128 x 128, 128 x 256), K tiles (64, 128) and 3 or 4 stages,
keeping only grids of at most 2 programs per SM. Every config passes the Benchmarker's correctness gate
first; times are its medians (CUDA-graph replay or events, cold inputs).

    python benchmarks/split_counts.py --out results/
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import GEMM

SHAPES = ((256, 1280, 8192), (1024, 1280, 8192), (256, 6144, 4096), (256, 7168, 8192), (4096, 1280, 8192))
TILES = ((128, 64), (128, 128), (128, 256), (64, 128))
SPLITS = (1, 2, 3, 4, 5, 6)


def configs(M: int, N: int, cus: int) -> list[Config]:
    out = []
    for (bm, bn), split_k, bk, stages in itertools.product(TILES, SPLITS, (64, 128), (3, 4)):
        tiles = -(-M // bm) * -(-N // bn)
        big = bm * bn >= 128 * 256
        if tiles * split_k > 2 * cus or (bk == 128 and bn == 256) or (big and stages > 3):
            continue  # more than 2 programs per SM, or more shared memory than an SM has
        warps = 8 if bm * bn >= 128 * 128 else 4
        config = Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=split_k,
                        PERSISTENT=0, TAIL_SPLIT=0, num_warps=warps, num_stages=stages)  # fmt: skip
        out.append(config)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-out", help="folder for the JSON details")
    ap.add_argument("--seconds", type=float, default=300.0, help="stop timing new configs after this")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/split_counts.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    bench = Benchmarker(GEMM, target)
    rows: list[dict] = []
    summary: list[str] = []
    t0 = time.perf_counter()
    for M, N, K in SHAPES:
        problem = Problem.gemm(M, N, K)
        vendor = bench.run(problem, Config(backend="torch"), full=True)
        best: dict[int, tuple[float, str]] = {}
        for config in configs(M, N, target.cu_count):
            if time.perf_counter() - t0 > args.seconds:
                break
            r = bench.run(problem, config)
            rows.append(dict(M=M, N=N, K=K, config=config.canonical(), status=r.status.value, us=r.time_us))
            split_k = int(config["SPLIT_K"])
            if r.ok and r.time_us is not None and (split_k not in best or r.time_us < best[split_k][0]):
                best[split_k] = (r.time_us, config.short())
        summary.append(
            f"{M}x{N}x{K}: cuBLAS {vendor.time_us:.2f}us; "
            + "; ".join(f"SK{k} {v[0]:.2f} ({v[1]})" for k, v in sorted(best.items()))
        )
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "split_counts.json").write_text(json.dumps(dict(gpu=target.name, rows=rows), indent=1))
    print(f"{target.name} {target.toolchain}")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
