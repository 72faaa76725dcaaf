"""Optuna TPE naming configs ahead (GPU): trials per second and what the search finds, with and without.

A sweep compiles ahead only what its strategy names (`Strategy.upcoming`). Optuna TPE used to name
nothing, so its compiles ran in line with the measurements; it now names its random start-up trials and a
few more sampled with the constant liar. This runs the same TPE tuning twice, each in its own process with
an empty Triton cache and a fresh database, compiling ahead on `--cores` processes:

- none: TPE names nothing ahead (the former behaviour);
- ahead: TPE names its start-up trials and `lookahead` more.

Problems: bf16 GEMMs of `gemm.py`'s shapes at M 256 and 1024 on the `triton_tma` backend (large spaces,
where TPE is what the sweep uses), each with a budget of `--trials` trials and `--seconds` seconds.
Reported per mode: configs measured, wall seconds, configs per second, and the geometric mean of the
best time found per problem (lower is better). Prints a short table last; details go to
OUT/tpe_lookahead.json.

    python benchmarks/tpe_lookahead.py --out results/ [--cores 15] [--trials 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MS = (256, 1024)


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One tuning in this process: `mode` "none" or "ahead"."""
    from gemm import SHAPES

    from autotune import Problem
    from autotune.core.target import local_target
    from autotune.db import Store
    from autotune.engine.bench import Benchmarker
    from autotune.engine.checker import StaticChecker
    from autotune.engine.runner import Runner
    from autotune.engine.strategies import Budget, OptunaTPE, Strategy
    from autotune.kernels import GEMM

    if mode == "none":
        OptunaTPE.upcoming = Strategy.upcoming  # type: ignore[method-assign]
    target = local_target()
    problems = [Problem.gemm(m, n, k, "bf16") for _, _, n, k in SHAPES for m in MS]
    checker = StaticChecker(target, workers=args.cores)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, Store(str(Path(tmp) / "t.db")) as store:
        runner = Runner(store, target, Benchmarker(GEMM, target), checker=checker)
        t0 = time.perf_counter()
        for p in problems:
            rep = runner.tune(GEMM, p, strategy="optuna", budget=Budget(args.trials, args.seconds), seed=0,
                              backends=("triton_tma",))  # fmt: skip
            best = rep.best
            rows.append(dict(problem=p.key(), ran=rep.ran, wall_s=rep.wall_s,
                             best_us=best.time_us if best else math.nan))  # fmt: skip
            print(f"[{mode}] {p}: ran {rep.ran}, wall {rep.wall_s:.1f} s, best "
                  f"{best.time_us if best else math.nan:.2f} µs", flush=True)  # fmt: skip
        wall = time.perf_counter() - t0
    checker.close()
    ran = sum(r["ran"] for r in rows)
    found = [r["best_us"] for r in rows if r["best_us"] == r["best_us"]]
    geo = math.exp(statistics.fmean(math.log(b) for b in found)) if found else math.nan
    return dict(mode=mode, ran=ran, wall_s=wall, per_s=ran / wall, best_geomean_us=geo, rows=rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for tpe_lookahead.json")
    ap.add_argument("--cores", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="compile processes")
    ap.add_argument("--trials", type=int, default=100, help="trial budget per problem (default 100)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time budget per problem (default 20)")
    ap.add_argument("--mode", choices=("none", "ahead"), help=argparse.SUPPRESS)  # one child run
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        args.result.write_text(json.dumps(run_mode(args.mode, args)))
        return 0

    import torch
    import triton

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    results = []
    for mode in ("none", "ahead"):
        with tempfile.TemporaryDirectory() as cache:
            result = Path(cache) / "result.json"
            env = dict(os.environ, TRITON_CACHE_DIR=str(Path(cache) / "triton"))
            cmd = [sys.executable, __file__, "--out", str(args.out), "--cores", str(args.cores),
                   "--trials", str(args.trials), "--seconds", str(args.seconds), "--mode", mode,
                   "--result", str(result)]  # fmt: skip
            subprocess.run(cmd, env=env, check=True)
            results.append(json.loads(result.read_text()))
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "cores": args.cores, "trials": args.trials,
            "seconds": args.seconds}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tpe_lookahead.json").write_text(json.dumps({"meta": meta, "modes": results}, indent=2))
    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, {args.cores} compile processes")
    print(f"{'mode':<6} {'configs':>8} {'wall s':>7} {'configs/s':>9} {'best geomean µs':>16}")
    for r in results:
        print(f"{r['mode']:<6} {r['ran']:>8} {r['wall_s']:>7.0f} {r['per_s']:>9.2f} "
              f"{r['best_geomean_us']:>16.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
