"""Warps and pipeline depth at FP8 decode (GPU): knobs the row-wise space leaves out, timed on the rows
that stay under 80% of the copy bandwidth.

The row-wise space gives decode tiles 4 warps only (8 warps on a tile under 8192 elements are pruned as
idle, a rule made for compute) and 2 to 4 stages. A memory-bound kernel may want more loads in flight:
this times the best config of the whole space (an exhaustive search, 2026-11-22) of each row beside the
same tiles with 4 or 8 warps and 2 to 6 stages, and the same with half the K tile. Then, for every
decode layer of the two models at M = 16 and 64, the heuristic default beside the same config with 3
stages (the default's depth before). Every config passes the Benchmarker's correctness gate first;
CUDA-graph replay, 3 interleaved rounds, medians.

    python benchmarks/decode_knobs.py --out results/

Prints a short table last; details go to --out (JSON).
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

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.kernels import get_op

#: (label, M, N, K, the exhaustive search's winner as (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, STREAM_K, stages)).
ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168, (16, 64, 512, 1, 0, 4)),
    ("deepseek-v3 mlp.gate_up", 64, 4608, 7168, (64, 64, 256, 1, 0, 4)),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584, (16, 32, 256, 1, 2, 4)),
    ("llama-3.1-70b mlp.down", 64, 8192, 3584, (64, 64, 256, 1, 0, 4)),
    ("llama-3.1-70b mlp.gate_up", 64, 7168, 8192, (64, 64, 256, 1, 0, 4)),
)
OP = "gemm_fp8_rowwise"


def variants(winner: tuple[int, ...]) -> dict[str, Config]:
    bm, bn, bk, split_k, stream_k, stages = winner
    out = {}
    for warps, s, k in itertools.product((4, 8), (2, 3, 4, 5, 6), (bk, bk // 2)):
        name = f"w{warps} s{s} BK{k}" + (" (space best)" if (warps, s, k) == (4, stages, bk) else "")
        out[name] = Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=k, GROUP_M=1, SPLIT_K=split_k,
                           FUSED_SPLIT=0, STREAM_K=stream_k, SWAP_AB=0, num_warps=warps,
                           num_stages=s)  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for decode_knobs.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/decode_knobs.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    op = get_op(OP)
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    date = time.strftime("%Y-%m-%d")
    info: dict[str, object] = dict(gpu=target.name, toolchain=target.toolchain, date=date)
    rows: list[dict[str, Any]] = []
    for label, m, n, k, winner in ROWS:
        p = Problem.quant(OP, m, n, k)
        res = interleaved_medians(bench, p, variants(winner), args.rounds)
        best_name = min((v[0], name) for name, v in res.items() if v[1] == "ok")[1]
        rows.append(dict(layer=label, M=m, N=n, K=k, times={k2: v[0] for k2, v in res.items()},
                         status={k2: v[1] for k2, v in res.items()}, best=best_name))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    info["rows"] = rows
    info["defaults"] = defaults = check_defaults(bench, target, args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_knobs.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}")
    print(f"{'layer':26} {'M':>3} {'space best µs':>14} {'best µs':>8} {'gain':>6}  best knobs")
    for r in rows:
        times = r["times"]
        base = next(v for name, v in times.items() if name.endswith("(space best)"))
        print(f"{r['layer']:26} {r['M']:3d} {base:14.2f} {times[r['best']]:8.2f} "
              f"{base / times[r['best']]:6.3f}  {r['best']}")  # fmt: skip
    print(f"\n{'layer':26} {'M':>3} {'default':>44} {'µs':>7} {'3 stages µs':>12} {'gain':>6}")
    for r in defaults:
        print(f"{r['layer']:26} {r['M']:3d} {r['config']:>44} {r['default_us']:7.2f} {r['stages3_us']:12.2f} "
              f"{r['stages3_us'] / r['default_us']:6.3f}")  # fmt: skip
    return 0


def check_defaults(bench: Benchmarker, target: Any, rounds: int) -> list[dict[str, Any]]:
    """The default config of every decode layer (M = 16, 64) against the same config with 3 stages."""
    from autotune.sweeps.catalog import layer_shapes

    op = get_op(OP)
    out = []
    for model in ("deepseek-v3", "llama-3.1-70b"):
        for s in layer_shapes(model, tp=8):
            if s.op != "gemm":
                continue
            for m in (16, 64):
                p = Problem.quant(OP, m, s.N, s.K)
                default = op.default_config(p, target)
                pair = {"default": default, "s3": default.replace(num_stages=3)}
                res = interleaved_medians(bench, p, pair, rounds)
                out.append(dict(layer=f"{model} {s.label}", M=m, config=default.short(),
                                default_us=res["default"][0], stages3_us=res["s3"][0],
                                status={k: v[1] for k, v in res.items()}))  # fmt: skip
                print(json.dumps(out[-1]), flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
