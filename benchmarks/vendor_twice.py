"""One vendor call timed as two variants (GPU): where does a `torch.mm` against itself lose 6%?

`benchmarks/gemm.py` times the dispatched call beside the vendor's, and where the table dispatches to
`torch` both run `torch.mm(a, b.t(), out=out)` on the same buffers; yet one row (Llama-3.1-70B QKV at
M = 1024) measured 0.940 in two runs. Per shape this script times, in interleaved rounds whose order
rotates (so neither side always runs first):
- `vendor`: the Benchmarker's `torch` config, as gemm.py's vendor column;
- `vendor again`: the same config through a second Benchmarker sharing the problem's buffers;
- `dispatched`: `autotune.kernels.gemm(a, b, out=out)` reading a table that names `torch` for the shape,
  as gemm.py's dispatched column;
repeated `--measurements` times, and records which CUDA kernels each variant's timing ran (torch.profiler),
to tell a different cuBLAS kernel apart from a timing effect.

    python benchmarks/vendor_twice.py --out results/

Prints a short table last; details go to --out (JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.dispatch import Dispatcher, Table
from autotune.dispatch import dispatcher as dispatcher_module
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels import GEMM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm import _Dispatched  # the very facade gemm.py times

# (label, M, N, K): the row that lost, its neighbours, and decode rows for contrast
SHAPES = [
    ("70B qkv", 1024, 1280, 8192),
    ("70B qkv", 4096, 1280, 8192),
    ("8B qkv", 1024, 6144, 4096),
    ("70B gate_up", 1024, 7168, 8192),
    ("70B gate_up", 16, 7168, 8192),
    ("8B down", 64, 4096, 14336),
]
TORCH = Config(backend="torch")


def kernels_run(bench: Benchmarker, problem: Problem, config: Config) -> list[str]:
    """The CUDA kernels (name: count) one timing of `config` ran, GEMM-like names only."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        bench.run(problem, config, full=True)
        torch.cuda.synchronize()
    names: Counter[str] = Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.name
            if any(s in name.lower() for s in ("gemm", "cutlass", "sm90", "xmma", "ampere", "cublas")):
                names[name[:90]] += 1
    return [f"{n} x{c}" for n, c in names.most_common(4)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-out", help="folder for the JSON details")
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds per measurement")
    ap.add_argument("--measurements", type=int, default=3, help="measurements per shape")
    ap.add_argument("--only", default="", help="the shapes whose label contains this text")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/vendor_twice.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    shapes = [(label, Problem.gemm(m, n, k, "bf16")) for label, m, n, k in SHAPES if args.only in label]
    table = Table.from_winners(target, [(p, TORCH, None) for _, p in shapes])
    dispatcher_module._default = Dispatcher([table], device_key=target.device_key())
    info: dict[str, Any] = dict(
        gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), rows=[]
    )
    for label, p in shapes:
        bench = Benchmarker(GEMM, target)
        bench.run(p, TORCH, full=True)  # fixes the timing method, as gemm.py does
        settings = dataclasses.replace(BenchSettings(), method=bench.method_for(p) or "auto")
        again = Benchmarker(GEMM, target, settings=settings)
        dbench = Benchmarker(_Dispatched(), target, settings=settings)
        again.share_problem(bench, p)
        dbench.share_problem(bench, p)
        runs = {
            "vendor": (bench, TORCH),
            "vendor again": (again, TORCH),
            "dispatched": (dbench, Config(backend="dispatched")),
        }
        names = list(runs)
        row: dict[str, Any] = dict(shape=label, M=p.M, N=p.N, K=p.K, method=bench.method_for(p), samples={})
        for m in range(args.measurements):
            samples: dict[str, list[float]] = {k: [] for k in names}
            for r in range(args.rounds):
                order = names[(r + m) % 3 :] + names[: (r + m) % 3]
                for name in order:
                    timer, config = runs[name]
                    res = timer.run(p, config, full=True)
                    samples[name].append(res.time_us if res.ok and res.time_us else float("nan"))
            row["samples"][m] = samples
        row["kernels"] = {name: kernels_run(timer, p, config) for name, (timer, config) in runs.items()}
        info["rows"].append(row)
        meds = [{k: statistics.median(v) for k, v in s.items()} for s in row["samples"].values()]
        print(f"[{label} M={p.M}] " + "; ".join(
            " ".join(f"{k} {v:.2f}" for k, v in med.items()) for med in meds
        ), flush=True)  # fmt: skip
        for name, ks in row["kernels"].items():
            print(f"    {name}: {', '.join(ks)}", flush=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "vendor_twice.json").write_text(json.dumps(info, indent=1, default=str))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}; µs, median of {args.rounds} rounds each")
    print(
        f"{'shape':20} {'meas':>4} {'vendor':>9} {'again':>9} {'disp':>9} {'vendor/again':>12} "
        f"{'vendor/disp':>11}"
    )
    for row in info["rows"]:
        for m, s in row["samples"].items():
            v, a, d = (statistics.median(s[k]) for k in ("vendor", "vendor again", "dispatched"))
            print(f"{row['shape'] + ' M=' + str(row['M']):20} {m:>4} {v:9.2f} {a:9.2f} {d:9.2f} "
                  f"{v / a:12.3f} {v / d:11.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
