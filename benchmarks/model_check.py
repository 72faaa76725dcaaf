"""Validate the cost model where we can measure: exhaustive sweeps on the local GPU vs the model's ranking.

Phase `measure` (GPU) measures every config of the Triton GEMM space of each shape (exhaustive, resumable:
run it again to continue), compiling ahead on every CPU core through the StaticChecker, which also stores
each config's static features. Phase `report` (anywhere, from the database) predicts every measured
config with the cost model and its stored features, and reports per shape: Spearman's rank correlation
between predicted and measured times, and the measured time of the model's top-1 and the best of its
top-5 against the exhaustive optimum. The goal: best of top-5 within 5% of the optimum on >= 80% of shapes.

    python benchmarks/model_check.py --phase measure --db out/model.db --minutes 9
    python benchmarks/model_check.py --phase report --db out/model.db --out out/model-check
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from typing import Any

import harness

from autotune import Problem
from autotune.core.result import Source, TrialStatus
from autotune.core.target import Target
from autotune.db import Store

# (label, N, K): bf16 linear layers (Llama-3.1-8B qkv and down, Llama-3.1-70B qkv and gate_up under TP 8).
SHAPES = [("l8b.qkv", 6144, 4096), ("l8b.down", 4096, 14336), ("l70b-tp8.qkv", 1280, 8192),
          ("l70b-tp8.gate_up", 7168, 8192)]  # fmt: skip
MS = {"l8b.qkv": [1, 16, 64, 256, 1024, 4096], "l8b.down": [1, 16, 1024, 4096, 64, 256],
      "l70b-tp8.qkv": [1, 16, 1024, 4096], "l70b-tp8.gate_up": [1, 16, 64, 256, 1024, 4096]}  # fmt: skip
#: The shapes the model's constants were calibrated on; every other shape is held out.
CALIBRATION = ("l8b.qkv", "l70b-tp8.qkv")
BACKENDS = ("triton",)
TOP = 5
GOAL = 0.05


def problems(labels: str | None = None) -> list[tuple[str, Problem]]:
    wanted = set(labels.split(",")) if labels else {label for label, _, _ in SHAPES}
    out = [
        (label, Problem.of("gemm", m, n, k, "bf16"))
        for label, n, k in SHAPES
        if label in wanted
        for m in MS[label]
    ]
    return sorted(out, key=lambda lp: (lp[1].M > 256, lp[1].M, lp[0]))  # cheap shapes first


def measure(args: argparse.Namespace) -> None:
    from autotune.core.static import StaticPolicy
    from autotune.core.target import local_target
    from autotune.engine.bench import Benchmarker, BenchSettings
    from autotune.engine.checker import StaticChecker
    from autotune.engine.runner import Runner
    from autotune.engine.strategies import Budget
    from autotune.kernels import GEMM

    target = local_target()
    deadline = time.monotonic() + args.minutes * 60
    # Every config timed fully (no racing): the slow ones are part of the ground truth too.
    settings = BenchSettings(target_time_s=0.02, min_reps=5, max_reps=50, race=None, precision=None)
    bench = Benchmarker(GEMM, target, settings=settings)
    # Exhaustive ground truth: nothing is pruned, but every config is compiled ahead and its features kept.
    policy = StaticPolicy(prune=())
    with Store(args.db) as store, StaticChecker(target, policy, store=store, workers=args.workers) as checker:
        runner = Runner(store, target, bench, checker=checker)
        for label, problem in problems(args.only):
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"time limit reached before {label} {problem}; run again to continue", flush=True)
                break
            t0 = time.perf_counter()
            report = runner.tune(GEMM, problem, strategy="exhaustive", backends=BACKENDS,
                                 budget=Budget(seconds=left))  # fmt: skip
            compiled = checker.compiled.get(problem.key(), 0)
            done = report.ran + report.cached
            print(
                f"{label:13s} M={problem.M:<5d} space {report.space_size:4d}: ran {report.ran:4d} "
                f"cached {report.cached:4d} ({'complete' if done >= report.space_size else 'PARTIAL'}), "
                f"compiled ahead {compiled}, bench compile {report.compile_s:.1f} s, "
                f"measure {report.measure_s:.1f} s, wall {time.perf_counter() - t0:.1f} s",
                flush=True,
            )


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx > 0 and sy > 0 else float("nan")


def report(args: argparse.Namespace) -> int:
    from autotune.core.static import check_features
    from autotune.engine.model import MODEL_VERSION, predict_us
    from autotune.kernels import GEMM

    rows: list[dict[str, Any]] = []
    with Store(args.db) as store:
        gpus = [g for g in store.gpus() if not g.interpreter]
        if len(gpus) != 1:
            print(f"expected one GPU in {args.db}, found {len(gpus)}", file=sys.stderr)
            return 1
        gpu = gpus[0]
        target: Target = gpu.target
        for label, problem in problems(args.only):
            space = GEMM.space(problem, target, BACKENDS)
            trials = store.trials(fingerprint=gpu.fingerprint, problem=problem, source=Source.MEASURED)
            trials = [t for t in trials if t.config.backend in BACKENDS]
            if not trials:
                print(f"skip {label} M={problem.M}: not measured", file=sys.stderr)
                continue
            # The kernel version measured last (the measuring machine computed its hash).
            newest = max(trials, key=lambda t: t.created_at)
            kernels = {newest.config.backend: (newest.kernel, newest.source_hash)}
            trials = [t for t in trials if (t.kernel, t.source_hash) == kernels[newest.config.backend]]
            if len(trials) < len(space):
                print(f"skip {label} M={problem.M}: {len(trials)} of {len(space)} measured", file=sys.stderr)
                continue
            feats = store.features(
                arch=target.arch, toolchain=target.toolchain, problem=problem, kernels=kernels
            )
            measured: dict[str, float] = {}
            predicted: dict[str, float] = {}
            pruned: set[str] = set()
            for t in trials:
                digest = t.config.digest()
                features = feats.get(digest, (None, []))[0]
                if features is not None and features.arch.startswith("sm_") and features.spills == 0:
                    # Stored before local memory and stack frames were told apart: a stack frame is no spill.
                    features = dataclasses.replace(features, scratch_bytes=0)
                predicted[digest] = predict_us(problem, t.config, target, features)
                if features is not None and check_features(features, t.config, target):
                    pruned.add(digest)
                if t.status is TrialStatus.OK and t.time_us is not None:
                    measured[digest] = t.time_us
            ok = sorted(measured)
            rho = spearman([predicted[d] for d in ok], [measured[d] for d in ok])
            optimum = min(measured.values())
            # The model's picks, as a compile-only sweep makes them: statically pruned configs excluded.
            picks = sorted((d for d in predicted if d not in pruned), key=lambda d: predicted[d])[:TOP]
            times = [measured.get(d, math.inf) for d in picks]
            rows.append(
                dict(
                    calibration=label in CALIBRATION,
                    shape=label,
                    M=problem.M,
                    N=problem.N,
                    K=problem.K,
                    space=len(space),
                    ok=len(ok),
                    pruned=len(pruned),
                    spearman=rho,
                    optimum_us=optimum,
                    top1_us=times[0],
                    top5_us=min(times),
                    top1_ratio=times[0] / optimum,
                    top5_ratio=min(times) / optimum,
                )
            )
    if not rows:
        print("no complete shapes in the database", file=sys.stderr)
        return 1
    hits = sum(r["top5_ratio"] <= 1 + GOAL for r in rows)
    summary: dict[str, Any] = dict(
        gpu=str(target),
        toolchain=target.toolchain,
        model=MODEL_VERSION,
        shapes=len(rows),
        top5_within_5pct=hits,
        fraction=hits / len(rows),
        goal_met=hits / len(rows) >= 0.8,
        median_spearman=statistics.median(r["spearman"] for r in rows),
    )
    for group, members in (("calibration", [r for r in rows if r["calibration"]]),
                           ("held_out", [r for r in rows if not r["calibration"]])):  # fmt: skip
        if members:
            summary[group] = dict(
                shapes=len(members),
                top5_within_5pct=sum(r["top5_ratio"] <= 1 + GOAL for r in members),
                median_spearman=statistics.median(r["spearman"] for r in members),
            )  # fmt: skip
    harness.write_json(args.out, "model_check", {"summary": summary, "rows": rows})
    table = [
        (r["shape"] + ("" if r["calibration"] else " *"), r["M"], r["space"], r["pruned"], r["spearman"],
         r["optimum_us"], r["top1_ratio"], r["top5_ratio"])
        for r in rows
    ]  # fmt: skip
    cols = ("shape (* held out)", "M", "space", "pruned", "rho", "opt µs", "top1", "top5")
    title = f"cost model {MODEL_VERSION} vs exhaustive measurement on {target}"
    harness.print_table(cols, table, digits=(0, 0, 0, 0, 2, 2, 3, 3), title=title)
    for group in ("calibration", "held_out"):
        if group in summary:
            g = summary[group]
            print(f"{group:11s}: top-5 within 5% on {g['top5_within_5pct']}/{g['shapes']} shapes, "
                  f"median Spearman {g['median_spearman']:.2f}")  # fmt: skip
    print(
        f"best of top-5 within 5% of the optimum on {hits}/{len(rows)} shapes "
        f"({'goal met' if summary['goal_met'] else 'goal NOT met'}: 80%); "
        f"median Spearman {summary['median_spearman']:.2f}"
    )
    return 0


def main() -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--phase", choices=("measure", "report", "all"), default="all")
    parser.add_argument("--db", default="model_check.db", help="database (resumable)")
    harness.add_out(parser, "folder for model_check.json (report)")
    parser.add_argument("--minutes", type=float, default=9.0, help="stop starting new configs after this")
    parser.add_argument("--workers", type=int, help="compiler processes (default: one per core)")
    parser.add_argument("--only", help="only these shape labels (comma-separated)")
    args = parser.parse_args()
    if args.phase in ("measure", "all"):
        measure(args)
    if args.phase in ("report", "all"):
        return report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
