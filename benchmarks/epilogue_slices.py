"""C stored in column slices (GPU): the TMA kernel's `EPILOGUE_N` against whole-tile C stores, and cuBLAS.

A whole-tile TMA store of C takes a shared-memory buffer the size of the tile (64 KB for 128 x 256 bf16)
that Triton does not share with the K loop's ring, so a 128 x 256 tile fits 3 stages and a 128 x 320 tile
(parts 256 + 64, cuBLAS's tile for 4096 x 1280) none with 64-wide K tiles. With `EPILOGUE_N = 64` the
tile is stored in 64-column slices through one 16 KB buffer: a stage more, and the wide tiles fit.

For each shape this times a grid of tiles (BLOCK_M x width on 4 or 8 warps, K tiles of 64, 3 to 5 stages
or those of `--stages`, persistent where the tiles outnumber the SMs, the split tail for power-of-two
tiles whose last wave it splits), each with whole and with sliced C stores where it fits in shared
memory, all compiled ahead. The
best three of each kind (whole, sliced) and the op's heuristic default then run again with cuBLAS in 3
interleaved rounds. Every config passes the Benchmarker's correctness gate first; times are its medians
(CUDA-graph replay or events by the vendor's time, cold inputs).

    python benchmarks/epilogue_slices.py --out results/ [--only prefill|decode] [--seconds 400]

Prints a short table last; details go to --out (JSON, rewritten after every shape).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.problem import cdiv
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, interleaved_medians
from autotune.kernels import GEMM
from autotune.kernels.gemm_space import c_store_cols, gemm_default_config, tail_split_schedule, tile_parts

#: (name, M, N, K): the dense benchmark's prefill rows and its M = 256 rows.
SHAPES = (
    ("llama-3.1-8b qkv", 1024, 6144, 4096),
    ("llama-3.1-8b qkv", 4096, 6144, 4096),
    ("llama-3.1-8b down", 1024, 4096, 14336),
    ("llama-3.1-8b down", 4096, 4096, 14336),
    ("llama-3.1-70b tp8 qkv", 1024, 1280, 8192),
    ("llama-3.1-70b tp8 qkv", 4096, 1280, 8192),
    ("llama-3.1-70b tp8 gate_up", 1024, 7168, 8192),
    ("llama-3.1-70b tp8 gate_up", 4096, 7168, 8192),
    ("llama-3.1-8b qkv", 256, 6144, 4096),
    ("llama-3.1-8b down", 256, 4096, 14336),
    ("llama-3.1-70b tp8 qkv", 256, 1280, 8192),
    ("llama-3.1-70b tp8 gate_up", 256, 7168, 8192),
)
#: (BLOCK_M, width, warps) of the grid.
TILES = (
    (64, 96, 4), (64, 128, 4), (64, 160, 4), (64, 192, 4), (64, 256, 4),
    (128, 96, 4), (128, 112, 4), (128, 128, 4), (128, 160, 8), (128, 192, 8), (128, 256, 8), (128, 320, 8),
    (128, 384, 8), (256, 128, 8),
)  # fmt: skip
SMEM = 232448  # bytes of shared memory a block may use on sm_90
SLICE = 64


def smem_bytes(bm: int, width: int, bk: int, stages: int, epilogue: int) -> int:
    """The ring of A and B tiles plus the C buffer: the whole tile, or one slice shared by every store."""
    return (bm + width) * bk * 2 * stages + bm * c_store_cols(width, epilogue) * 2


def configs(M: int, N: int, K: int, cus: int, stages_grid: tuple[int, ...] = (3, 4, 5)) -> list[Config]:
    out = []
    for bm, width, warps in TILES:
        if bm > max(64, M):
            continue
        tiles = cdiv(M, bm) * cdiv(N, width)
        pow2 = width & (width - 1) == 0
        tails = (0, 1) if pow2 and tail_split_schedule(tiles, cdiv(K, 64), cus)[2] > 1 else (0,)
        for stages in stages_grid:
            for epilogue in (0, SLICE):
                if epilogue and max(tile_parts(width)) <= epilogue:
                    continue  # nothing to slice
                if smem_bytes(bm, width, 64, stages, epilogue) > SMEM:
                    continue
                for tail in tails:
                    out.append(
                        Config(
                            backend="triton_tma",
                            BLOCK_M=bm,
                            BLOCK_N=width,
                            BLOCK_K=64,
                            GROUP_M=8,
                            SPLIT_K=1,
                            PERSISTENT=int(tiles > cus or bool(tail)),
                            TAIL_SPLIT=tail,
                            EPILOGUE_N=epilogue,
                            num_warps=warps,
                            num_stages=stages,
                        )
                    )
    return out


def _best(group: list[Config], med: dict[str, float]) -> tuple[float, str]:
    """(time, name) of the fastest config of `group` that ran (NaN when none did)."""
    got = [(med[c.canonical()], c.short()) for c in group if not math.isnan(med[c.canonical()])]
    return min(got) if got else (math.nan, "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"), help="folder for the JSON details")
    ap.add_argument("--seconds", type=float, default=400.0, help="start no new shape after this")
    ap.add_argument("--only", choices=("prefill", "decode"), help="M >= 1024 or M = 256 shapes only")
    ap.add_argument(
        "--stages", default="3,4,5", help="comma-separated pipeline depths of the grid (default 3,4,5)"
    )
    ap.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="compile processes"
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/epilogue_slices.py needs a GPU", file=sys.stderr)
        return 2
    from autotune.engine.compile import CompilePool

    target = local_target()
    shapes = [s for s in SHAPES if args.only is None or (s[1] >= 1024) == (args.only == "prefill")]
    stages = tuple(int(x) for x in args.stages.split(","))
    grids = {(M, N, K): configs(M, N, K, target.cu_count, stages) for _, M, N, K in shapes}
    t_start = time.perf_counter()
    with CompilePool(target, workers=args.workers) as pool:  # fills Triton's cache for the timing below
        futures = [pool.submit(GEMM, Problem.gemm(*mnk), c) for mnk, grid in grids.items() for c in grid]
        compile_failed = sum(not f.result().compiled for f in futures)
    compile_s = time.perf_counter() - t_start
    bench = Benchmarker(GEMM, target)
    rows: list[dict[str, Any]] = []
    summary: list[str] = []
    winners: list[str] = []
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, M, N, K in shapes:
        if time.perf_counter() - t_start > args.seconds:
            print(f"stopped before {name} M = {M}: --seconds reached", file=sys.stderr)
            break
        problem = Problem.gemm(M, N, K)
        vendor_cfg = Config(backend="torch")
        bench.run(problem, vendor_cfg, full=True)  # first: fixes the timing method by its time
        timed: list[tuple[float, Config]] = []
        for config in grids[(M, N, K)]:
            r = bench.run(problem, config)
            rows.append(dict(M=M, N=N, K=K, config=config.canonical(), status=r.status.value, us=r.time_us))
            if r.ok and r.time_us is not None:
                timed.append((r.time_us, config))
        timed.sort(key=lambda t: t[0])
        whole = [c for _, c in timed if not int(c["EPILOGUE_N"])][:3]
        sliced = [c for _, c in timed if int(c["EPILOGUE_N"])][:3]
        default = gemm_default_config(problem, target)
        contenders = {c.canonical(): c for c in (vendor_cfg, default, *whole, *sliced)}
        med = {k: t for k, (t, _) in interleaved_medians(bench, problem, contenders, 3).items()}
        vendor, dflt = med[vendor_cfg.canonical()], med[default.canonical()]
        bw, bs = _best(whole, med), _best(sliced, med)
        rows.append(dict(M=M, N=N, K=K, final=med, default=default.canonical()))
        winners.append(f"{name} M={M}: whole {bw[1]}; sliced {bs[1]}")
        summary.append(
            f"| {name} | {M} | {N} | {K} | {vendor:.2f} | {dflt:.2f} | {bw[0]:.2f} | {bs[0]:.2f} | "
            f"{vendor / bw[0]:.3f} | {vendor / bs[0]:.3f} | {bw[0] / bs[0]:.3f} |"
        )
        detail = dict(gpu=target.name, toolchain=target.toolchain, compile_s=compile_s, rows=rows)
        (outdir / "epilogue_slices.json").write_text(json.dumps(detail, indent=1))
    n_configs = sum(map(len, grids.values()))
    print(f"{target.name} {target.toolchain}; {n_configs} configs compiled in {compile_s:.0f} s "
          f"({compile_failed} failed)")  # fmt: skip
    print("\n".join(winners))
    print(
        "| shape | M | N | K | cuBLAS µs | default µs | best whole-C µs | best sliced-C µs | whole / cuBLAS "
        "| sliced / cuBLAS | sliced gain |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
