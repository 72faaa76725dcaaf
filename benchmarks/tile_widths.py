"""Tile widths that are not powers of two (GPU): the TMA kernel with 80- to 320-column tiles against its
power-of-two tiles and cuBLAS, on the shapes where cuBLAS's grids fill the SMs and ours cannot.

cuBLAS sizes its tiles so that a grid comes to about one program per SM (96-wide tiles for 256 x 6144,
80-wide for 1024 x 1280, ...). Triton's blocks are powers of two; the TMA kernel runs a tile whose width is
not one as two or three column parts that share each A tile (`autotune.kernels.gemm_space.tile_parts`).
For each shape this times every power-of-two config of a grid of tiles (BLOCK_M 64/128/256, widths 64,
128, 256, K tiles 64/128, 3-5 stages, split-K 1-3) and every other-width config whose grid fills at least
90% of its last wave, all compiled ahead on the host's cores. The best three of each kind then run again
with cuBLAS in 3 interleaved rounds. Every config passes the Benchmarker's correctness gate first; times
are its medians (CUDA-graph replay or events, cold inputs).

    python benchmarks/tile_widths.py --out results/ [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.problem import cdiv
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import GEMM
from autotune.kernels.gemm_space import tile_parts

#: (name, M, N, K): the rows of the dense benchmark where tuned Triton trails cuBLAS most.
SHAPES = (
    ("llama-3.1-8b qkv", 256, 6144, 4096),
    ("llama-3.1-70b tp8 gate_up", 256, 7168, 8192),
    ("llama-3.1-70b tp8 qkv", 1024, 1280, 8192),
    ("llama-3.1-70b tp8 qkv", 4096, 1280, 8192),
    ("llama-3.1-8b qkv", 1024, 6144, 4096),
    ("llama-3.1-70b tp8 qkv", 256, 1280, 8192),
)
WIDTHS = (64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
SMEM = 232448  # bytes of shared memory a block may use on sm_90


def configs(M: int, N: int, K: int, cus: int) -> list[Config]:
    """The grid: power-of-two widths whatever their fill, other widths where the last wave is >= 90% full."""
    out = []
    grid = itertools.product(WIDTHS, (64, 128, 256), (64, 128), (3, 4, 5), (1, 2, 3))
    for width, bm, bk, stages, split_k in grid:
        big = bm * width > 128 * 128
        if bm > max(64, M) or bm * width > 256 * 256 or K // split_k < 4 * bk or (big and stages > 4):
            continue
        if (bm + width) * bk * 2 * stages + bm * width * 2 > SMEM:
            continue
        programs = cdiv(M, bm) * cdiv(N, width) * split_k
        fill = programs / (cdiv(programs, cus) * cus)
        pow2 = width & (width - 1) == 0
        if programs > 4 * cus or (not pow2 and fill < 0.9):
            continue
        tile_parts(width)  # a width the kernel takes
        out.append(
            Config(
                backend="triton_tma",
                BLOCK_M=bm,
                BLOCK_N=width,
                BLOCK_K=bk,
                GROUP_M=8,
                SPLIT_K=split_k,
                PERSISTENT=int(programs > cus),
                TAIL_SPLIT=0,
                num_warps=8 if bm * width >= 128 * 192 else 4,
                num_stages=stages,
            )
        )
    return out


def _best(group: list[Config], med: dict[str, float]) -> tuple[float, str]:
    got = [(med[c.canonical()], c.short()) for c in group if c.canonical() in med]
    return min(got) if got else (float("nan"), "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"), help="folder for the JSON details")
    ap.add_argument("--seconds", type=float, default=420.0, help="stop timing new configs after this")
    ap.add_argument("--quick", action="store_true", help="the first two shapes only")
    ap.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="compile processes"
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/tile_widths.py needs a GPU", file=sys.stderr)
        return 2
    from autotune.engine.compile import CompilePool

    target = local_target()
    bench = Benchmarker(GEMM, target)
    shapes = SHAPES[:2] if args.quick else SHAPES
    grids = {(M, N, K): configs(M, N, K, target.cu_count) for _, M, N, K in shapes}
    t0 = time.perf_counter()
    with CompilePool(target, workers=args.workers) as pool:  # fills Triton's cache for the timing below
        futures = [pool.submit(GEMM, Problem.gemm(*mnk), c) for mnk, grid in grids.items() for c in grid]
        compile_failed = sum(not f.result().compiled for f in futures)
    compile_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    summary: list[str] = []
    winners: list[str] = []
    t0 = time.perf_counter()
    for name, M, N, K in shapes:
        problem = Problem.gemm(M, N, K)
        timed: list[tuple[float, Config]] = []
        bench.run(problem, Config(backend="torch"), full=True)  # first: fixes the timing method by its time
        for config in grids[(M, N, K)]:
            if time.perf_counter() - t0 > args.seconds:
                break
            r = bench.run(problem, config)
            rows.append(dict(M=M, N=N, K=K, config=config.canonical(), status=r.status.value, us=r.time_us))
            if r.ok and r.time_us is not None:
                timed.append((r.time_us, config))
        timed.sort(key=lambda t: t[0])
        pow2 = [c for _, c in timed if int(c["BLOCK_N"]) & (int(c["BLOCK_N"]) - 1) == 0][:3]
        other = [c for _, c in timed if int(c["BLOCK_N"]) & (int(c["BLOCK_N"]) - 1)][:3]
        finals: dict[str, list[float]] = {}
        contenders = [Config(backend="torch"), *pow2, *other]
        for _ in range(3):  # interleaved rounds
            for config in contenders:
                r = bench.run(problem, config, full=True)
                if r.ok and r.time_us is not None:
                    finals.setdefault(config.canonical(), []).append(r.time_us)
        med = {k: sorted(v)[len(v) // 2] for k, v in finals.items()}
        vendor = med.get(Config(backend="torch").canonical(), float("nan"))
        bp, bo = _best(pow2, med), _best(other, med)
        rows.append(dict(M=M, N=N, K=K, final=med))
        winners.append(f"{M}x{N}x{K}: pow-2 {bp[1]}; other {bo[1]}")
        summary.append(
            f"| {name} | {M} | {N} | {K} | {vendor:.2f} | {bp[0]:.2f} | {bo[0]:.2f} | {vendor / bp[0]:.3f} | "
            f"{vendor / bo[0]:.3f} |"
        )
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    detail = dict(
        gpu=target.name, toolchain=target.toolchain, compile_s=compile_s, failed=compile_failed, rows=rows
    )
    (outdir / "tile_widths.json").write_text(json.dumps(detail, indent=1))
    print(f"{target.name} {target.toolchain}; {sum(map(len, grids.values()))} configs compiled in "
          f"{compile_s:.0f} s ({compile_failed} failed)")  # fmt: skip
    print(
        "| shape | M | N | K | cuBLAS µs | best pow-2 µs | best other µs | pow-2 / cuBLAS | other / cuBLAS |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    print("\n".join(summary))
    print("\n".join(winners))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
