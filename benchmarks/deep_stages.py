"""FP8 decode: narrower K tiles in deeper pipelines (GPU), the op's default beside itself re-staged.

At decode a program's ring of K tiles in shared memory is what keeps the weight's bytes in flight. While
the program multiplies one tile, the slot it reads cannot be refilled; with 3 stages of 512-wide tiles
that is a third of the ring, and the blockwise kernel's multiplies are long (each 128-wide K group waits
for its product to be scaled). Narrower K tiles in more stages keep more of the same shared memory in
flight. This times, on the decode rows under 80% of the copy bandwidth, the op's default beside the same
config with K tiles of 128 or 256 and 6 to 16 stages (all that fit 227 KiB of shared memory).

Every config passes the Benchmarker's correctness gate first; CUDA-graph replay, interleaved rounds,
medians; the copy bandwidth of a 1 GiB copy measured in the same run.

    python benchmarks/deep_stages.py --out results/ [--ops gemm_fp8_blockwise,gemm_fp8_rowwise] [--m 16,32,64]

Prints a short table last; details go to --out (deep_stages.json).
"""

from __future__ import annotations

import argparse
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

#: (label, N, K) of the large decode layers under 80%.
LAYERS = (
    ("deepseek-v3 mlp.gate_up", 4608, 7168),
    ("llama-3.1-70b mlp.down", 8192, 3584),
    ("llama-3.1-70b mlp.gate_up", 7168, 8192),
)
#: Shared memory of an H100 SM that one program may take.
SMEM = 227 * 1024
#: (BLOCK_K, num_stages) tried in place of the default's.
DEPTHS = ((128, 6), (128, 8), (128, 10), (128, 12), (128, 16), (256, 6), (256, 7), (256, 8), (256, 10))


def restaged(default: Config) -> dict[str, Config]:
    """The default with each (BLOCK_K, num_stages) of DEPTHS whose ring fits the shared memory."""
    rows = int(default["BLOCK_M"]) + int(default["BLOCK_N"])
    out = {}
    for bk, stages in DEPTHS:
        c = default.replace(BLOCK_K=bk, num_stages=stages)
        if c != default and rows * bk * stages <= SMEM:
            out[f"BK{bk} s{stages}"] = c
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for deep_stages.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--ops", default="gemm_fp8_blockwise,gemm_fp8_rowwise", help="comma-separated FP8 ops")
    ap.add_argument("--m", default="16,32,64", help="comma-separated M values")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/deep_stages.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    copy = copy_bandwidth_gbps()
    info: dict[str, Any] = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"),
                                copy_gbps=copy)  # fmt: skip
    rows = []
    for op_name in args.ops.split(","):
        op = get_op(op_name)
        bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
        for label, n, k in LAYERS:
            for m in map(int, args.m.split(",")):
                p = Problem.quant(op_name, m, n, k)
                default = op.default_config(p, target)
                if default.backend not in ("triton", "triton_tma"):
                    continue
                configs = {"default": default, **restaged(default)}
                row = beside_default(bench, p, configs, args.rounds, copy)
                rows.append(dict(op=op_name, layer=label, M=m, N=n, K=k, **row))
                print(json.dumps(rows[-1]), flush=True)
    info["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deep_stages.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}, copy {copy:.0f} GB/s")
    head = f"{'op':19} {'layer':26} {'M':>3} {'default':>8} {'copy%':>5} {'best':>8} {'copy%':>5} {'gain':>6}"
    print(head + "  best")
    for r in rows:
        print(f"{r['op']:19} {r['layer']:26} {r['M']:3d} {r['default_us']:8.2f} {r['default_pct']:5.0f} "
              f"{r['best_us']:8.2f} {r['best_pct']:5.0f} {r['gain']:6.3f}  {r['best']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
