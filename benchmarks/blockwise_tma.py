"""FP8 blockwise decode through tensor descriptors (GPU): the "triton_tma" kernel beside the op's default.

The pointer kernel loads its tiles with `cp.async`, and a wgmma may read shared memory written that way
only after a proxy fence: the blockwise kernel, which waits for each 128-wide K group's product to scale
it, issues one fence (with a CTA memory barrier) per group, four per K tile of 512, where the row-wise
kernel issues one. TMA loads write shared memory through the async proxy and need none. This times the
blockwise TMA kernel (scales of the next K tile loaded ahead, as the pointer kernel's default) on the
decode rows of the large layers: swapped tiles of 64 or 128 weight rows at M <= 32, unswapped 64 x 64 at
M = 64, K tiles of 128 to 512 in as many stages as fit.

Every config passes the Benchmarker's correctness gate first; CUDA-graph replay, interleaved rounds,
medians; the copy bandwidth of a 1 GiB copy measured in the same run.

    python benchmarks/blockwise_tma.py --out results/ [--m 16,32,64] [--rounds 3]

Prints a short table last; details go to --out (blockwise_tma.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from config_grid import beside_default
from gemm_quant import copy_bandwidth_gbps

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels import get_op

OP = "gemm_fp8_blockwise"
#: (label, N, K) of the decode layers under 80%.
LAYERS = (
    ("deepseek-v3 mlp.gate_up", 4608, 7168),
    ("deepseek-v3 mlp.down", 7168, 2304),
    ("llama-3.1-70b mlp.down", 8192, 3584),
    ("llama-3.1-70b mlp.gate_up", 7168, 8192),
)
#: Shared memory of an H100 SM that one program may take.
SMEM = 227 * 1024
#: (BLOCK_K, stages) of the grid.
DEPTHS = ((128, 4), (128, 6), (128, 8), (256, 3), (256, 4), (256, 5), (512, 2), (512, 3))


def tma(bm: int, bn: int, bk: int, stages: int, swap: int, split: int = 1) -> Config:
    return Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=split,
                  PERSISTENT=0, SWAP_AB=swap, num_warps=4, num_stages=stages)  # fmt: skip


def grid(m: int) -> dict[str, Config]:
    """Swapped (BLOCK_N the weight's rows) at M <= 32, unswapped 64 x 64 at M = 64; whole or split in 2."""
    out = {}
    shapes = [(max(16, m), wn, 1) for wn in (64, 128)] if m <= 32 else [(64, 64, 0)]
    for (bm, bn, swap), (bk, stages), split in itertools.product(shapes, DEPTHS, (1, 2)):
        if (bm + bn) * bk * stages > SMEM or (split > 1 and (bn > 64 or bk == 128)):
            continue
        name = f"tma {'swap ' if swap else ''}{bm}x{bn} BK{bk} s{stages}" + (" SK2" if split > 1 else "")
        out[name] = tma(bm, bn, bk, stages, swap, split)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for blockwise_tma.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--m", default="16,32,64", help="comma-separated M values")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/blockwise_tma.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    op = get_op(OP)
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    copy = copy_bandwidth_gbps()
    info: dict[str, Any] = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"),
                                copy_gbps=copy)  # fmt: skip
    rows = []
    for label, n, k in LAYERS:
        for m in map(int, args.m.split(",")):
            p = Problem.quant(OP, m, n, k)
            configs = {"default": op.default_config(p, target), **grid(m)}
            row = beside_default(bench, p, configs, args.rounds, copy)
            rows.append(dict(layer=label, M=m, N=n, K=k, **row))
            print(json.dumps(rows[-1]), flush=True)
    info["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "blockwise_tma.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}, copy {copy:.0f} GB/s")
    head = f"{'layer':26} {'M':>3} {'default':>8} {'copy%':>5} {'TMA':>8} {'copy%':>5} {'gain':>6}"
    print(head + "  best TMA config")
    for r in rows:
        print(f"{r['layer']:26} {r['M']:3d} {r['default_us']:8.2f} {r['default_pct']:5.0f} "
              f"{r['best_us']:8.2f} {r['best_pct']:5.0f} {r['gain']:6.3f}  {r['best']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
