"""Fused-MoE benchmark (GPU): tune real models' MoE layers, then measure side by side in one run.

Per problem: our tuned config (the sweep's best Triton config; with --final-rounds, default 3, each
search's two fastest configs are timed again head to head and the faster is taken), the config vLLM
ships for this GPU and (E, N) (the file's closest M bucket, as vLLM picks it) run through our kernel,
the config vLLM falls back to where it has no file (`autotune.db.vllm.fallback_config`) run through our
kernel, our heuristic default, and the PyTorch baseline (a loop over experts with torch matmuls), in µs
and TFLOP/s, timed in interleaved rounds by one Benchmarker (same method for all). Routing: uniform over
the experts (the default) or skewed (--zipf).

    python benchmarks/moe.py --db moe.db --vllm-configs DIR --out results/   # resumable tuning
    python benchmarks/moe.py --phase measure ...                              # from a tuned database

`--vllm-configs` is a folder holding vLLM's shipped config files (vllm/model_executor/layers/fused_moe/
configs in a vLLM checkout); files are read, never copied into this project. Prints a short table last;
details go to --out (moe.json).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.db import Store
from autotune.db.vllm import fallback_config
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.engine.runner import Runner
from autotune.engine.strategies import Budget
from autotune.kernels.moe.op import MoeOp

#: CUDA-graph replay, as serving engines run MoE layers: the call's few small host-side ops (routing
#: weights, FP8 activation quantization, the top-k sum) would otherwise be timed as GPU idle time.
SETTINGS = BenchSettings(method="graph")

# (model, deployment, E, N, K, topk, weights): MoE layers of real models, per rank.
MODELS = [
    ("mixtral-8x7b", "tp2", 8, 7168, 4096, 2, "bf16"),
    ("qwen3-30b-a3b", "tp1", 128, 768, 2048, 8, "bf16"),
    ("deepseek-v3", "tp16", 256, 128, 7168, 8, "fp8e4m3"),
]
MS = [1, 16, 64, 256, 1024, 4096]
VLLM_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def problems(quick: bool) -> list[tuple[str, Problem]]:
    ms = [1, 256] if quick else MS
    out = []
    for model, deploy, e, n, k, topk, weights in MODELS[: 1 if quick else None]:
        for m in ms:
            out.append((f"{model} {deploy}", Problem.moe(m, n, k, e, topk, "bf16", weights)))
    return out


def vllm_config(folder: Path, problem: Problem, device_name: str) -> tuple[Config | None, str]:
    """The config vLLM would use for `problem` on this GPU: its file's closest M key. (None, why) if no
    file."""
    dtype = ",dtype=fp8_w8a8,block_shape=[128,128]" if problem.dtype_b == "fp8e4m3" else ""
    name = f"E={problem.E},N={problem.N},device_name={device_name.replace(' ', '_')}{dtype}.json"
    path = folder / name
    if not path.is_file():
        return None, f"no {name}"
    table = {int(m): cfg for m, cfg in json.loads(path.read_text()).items()}
    m = min(table, key=lambda key: abs(key - problem.M))
    return Config(backend="triton", **{k: int(table[m][k]) for k in VLLM_KEYS}), f"{name} M={m}"


def tune(
    store: Store, op: MoeOp, todo: list[tuple[str, Problem]], trials: int, final_rounds: int = 3
) -> None:
    from autotune.core.static import StaticPolicy
    from autotune.engine.checker import StaticChecker

    target = local_target()
    bench = Benchmarker(op, target, settings=SETTINGS)
    with StaticChecker(target, StaticPolicy(), store=store) as checker:
        runner = Runner(store, target, bench, checker=checker, final_rounds=final_rounds)
        for label, p in todo:
            t0 = time.perf_counter()
            report = runner.tune(op, p, strategy="optuna", budget=Budget(trials=trials), backends=("triton",))
            best = report.best.time_us if report.best else math.nan
            print(f"tuned {label} M={p.M}: ran {report.ran} cached {report.cached} failed {report.failed} "
                  f"static-pruned {sum(report.static_pruned.values())}, best {best:.1f} µs, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip


def measure(
    store: Store, op: MoeOp, todo: list[tuple[str, Problem]], folder: Path | None, rounds: int
) -> list[dict[str, Any]]:
    target = local_target()
    bench = Benchmarker(op, target, settings=SETTINGS)
    rows = []
    for label, p in todo:
        best = harness.tuned_config(store, p, target.fingerprint(), ("triton",))
        fallback = fallback_config(p.M, p.E, p.dtype_b == "fp8e4m3", rocm=target.is_amd)
        variants = {
            "default": op.default_config(p, target),
            "torch": Config(backend="torch"),
            "fallback": Config(backend="triton", **fallback),
        }
        if best is not None:
            variants["tuned"] = best
        source = "-"
        if folder is not None:
            shipped, source = vllm_config(folder, p, target.name)
            if shipped is not None:
                variants["vllm"] = shipped
        row: dict[str, Any] = dict(model=label, M=p.M, N=p.N, K=p.K, E=p.E, topk=p.topk, weights=p.dtype_b)
        row |= harness.side_by_side(bench, p, variants, rounds)
        row |= dict(vllm_file=source, method=bench.method_for(p))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """The short table: per problem the five variants, the tuned config's speed-ups and TFLOP/s; then the
    geomeans against vLLM's shipped configs, our default and vLLM's fallback."""
    table = []
    vs_vllm, vs_fallback, vs_default = [], [], []
    failed = []
    for r in rows:
        kinds = ("tuned", "vllm", "fallback", "default", "torch")
        t, v, f, d, base = (r.get(f"{k}_us", math.nan) for k in kinds)
        failed += [f"{r['model']} M={r['M']} {k}: {why}" for k, why in r["status"].items() if why != "ok"]
        flops = 6.0 * r["M"] * r["topk"] * r["N"] * r["K"]
        vs_vllm.append(v / t)
        vs_fallback.append(f / t)
        vs_default.append(d / t)
        table.append((r["model"], r["M"], t, v, f, d, base, v / t, f / t, d / t, flops / t / 1e6))
    cols = ("model", "M", "tuned µs", "vLLM µs", "fallback µs", "default µs", "torch µs", "vs vLLM",
            "vs fallback", "vs default", "TFLOP/s")  # fmt: skip
    harness.print_table(cols, table, digits=(0, 0, 1, 1, 1, 1, 1, 3, 3, 3, 1))
    for line in failed:
        print(f"  not timed: {line}")
    print(f"geomean: tuned vs vLLM's shipped configs {harness.geomean(vs_vllm):.3f}x (goal >= 1.0), "
          f"vs our default {harness.geomean(vs_default):.3f}x (goal >= 1.25), "
          f"vs vLLM's fallback without a file {harness.geomean(vs_fallback):.3f}x")  # fmt: skip


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--phase", choices=("tune", "measure", "all"), default="all")
    ap.add_argument("--db", default="moe_bench.db", help="database of the tuning (resumable)")
    ap.add_argument("--vllm-configs", type=Path, help="folder with vLLM's shipped fused-MoE config files")
    harness.add_out(ap, "folder for moe.json")
    ap.add_argument("--trials", type=int, default=60, help="tuning trials per problem")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    ap.add_argument("--final-rounds", type=int, default=3, help="rounds of each search's final "
                    "head-to-head of its two fastest configs, whose fastest is then the tuned config "
                    "(0: none)")  # fmt: skip
    ap.add_argument("--zipf", type=float, default=0.0, help="routing skew (0: uniform)")
    ap.add_argument("--quick", action="store_true", help="one model, two token counts")
    ap.add_argument("--only", help="only models whose name contains this")
    args = ap.parse_args()
    op = MoeOp(zipf=args.zipf)
    todo = [(label, p) for label, p in problems(args.quick) if not args.only or args.only in label]
    with Store(args.db) as store:
        if args.phase in ("tune", "all"):
            tune(store, op, todo, args.trials, args.final_rounds)
        if args.phase in ("measure", "all"):
            rows = measure(store, op, todo, args.vllm_configs, args.rounds)
            harness.write_json(args.out, "moe", harness.run_info(local_target(), args=vars(args), rows=rows))
            report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
