"""An op's default beside a grid of its own overrides (GPU): one script for a quick kernel question.

Each --set is a JSON object of knobs that replace the default's (an empty object times the default
again, as a control); the product of several --grid lists is added to them. Rows are (M, N, K) triples.
Every config passes the Benchmarker's correctness gate first; CUDA-graph replay, interleaved rounds,
medians; the copy bandwidth of a 1 GiB copy measured in the same run gives each time's share of it.

    python benchmarks/config_grid.py --op gemm_fp8_blockwise --rows 16,4608,7168 64,8192,3584 \\
        --grid num_warps=4,8 --grid BLOCK_N=64,128 --set '{"SPLIT_K": 2, "FUSED_SPLIT": 1}' --out results/

--base '{"backend": "gluon", ...}' starts the overrides from a config of another backend.
Prints the best override per row last; details go to --out (config_grid.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from gemm_quant import copy_bandwidth_gbps

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.kernels import get_op


def overrides(sets: list[str], grids: list[str]) -> list[dict[str, Any]]:
    """The --set objects, then the product of the --grid lists (KEY=v1,v2,...), each as knob values."""
    out = [dict(json.loads(s)) for s in sets]
    axes = []
    for g in grids:
        key, _, values = g.partition("=")
        axes.append([(key, json.loads(v)) for v in values.split(",")])
    if axes:
        out += [dict(combo) for combo in itertools.product(*axes)]
    return out


def grid_configs(default: Config, base: Config | None, changes: list[dict[str, Any]]) -> dict[str, Config]:
    """{"default": default} and each change applied to `base` (the default where None), by short name;
    a change that gives a config already named is timed once."""
    configs = {"default": default}
    for change in changes:
        c = (base or default).replace(**change)
        configs.setdefault(c.short(), c)
    return configs


def beside_default(
    bench: Benchmarker, problem: Problem, configs: dict[str, Config], rounds: int, copy_gbps: float
) -> dict[str, Any]:
    """`configs` (one of them named "default") timed in `rounds` interleaved rounds: the default's time,
    the fastest other's, each as µs and as % of `copy_gbps`, and every config's time and failure."""
    res = interleaved_medians(bench, problem, configs, rounds)
    ok = [(t, name) for name, (t, status) in res.items() if status == "ok" and name != "default"]
    best_t, best = min(ok) if ok else (math.nan, "-")
    d = res["default"][0]
    pct = 100 * problem.min_bytes() / 1e3 / copy_gbps  # copy % = this / µs
    return dict(default=configs["default"].short(), default_us=d, best=best, best_us=best_t, gain=d / best_t,
                default_pct=pct / d, best_pct=pct / best_t, times={name: v[0] for name, v in res.items()},
                status={name: v[1] for name, v in res.items() if v[1] != "ok"})  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", required=True, help="a quantized op or gemm")
    ap.add_argument("--rows", nargs="+", required=True, metavar="M,N,K")
    ap.add_argument("--set", action="append", default=[], help="a JSON object of knobs (repeatable)")
    ap.add_argument("--grid", action="append", default=[], help="KEY=v1,v2,... (repeatable; their product)")
    ap.add_argument(
        "--base",
        default="",
        help="a JSON config (backend included) the overrides replace "
        "knobs of, instead of the default's (the default is still timed as the control)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for config_grid.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/config_grid.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    op = get_op(args.op)
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    copy = copy_bandwidth_gbps()
    changes = overrides(args.set, args.grid)
    rows = []
    for spec in args.rows:
        m, n, k = map(int, spec.split(","))
        p = Problem.quant(args.op, m, n, k) if args.op != "gemm" else Problem("gemm", m, n, k)
        default = op.default_config(p, target)
        configs = grid_configs(default, Config.from_json(args.base) if args.base else None, changes)
        rows.append(dict(M=m, N=n, K=k, **beside_default(bench, p, configs, args.rounds, copy)))
        print(json.dumps(rows[-1]), flush=True)
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), copy_gbps=copy,
                op=args.op, sets=args.set, grids=args.grid, rows=rows)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config_grid.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}, copy {copy:.0f} GB/s")
    for r in rows:
        print(f"M={r['M']} N={r['N']} K={r['K']}: default {r['default_us']:.2f} µs "
              f"({r['default_pct']:.0f}%), best {r['best_us']:.2f} µs ({r['best_pct']:.0f}%) "
              f"{r['best']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
