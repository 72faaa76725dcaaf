"""GEMM benchmark (GPU): tune real model shapes, then measure side by side in one run.

Per shape: the vendor library (torch.mm → cuBLAS/hipBLASLt), our heuristic default, our tuned Triton
winner and the dispatched best-of-backends (the real `autotune.kernels.gemm` call reading an emitted
table), in µs, TFLOP/s, GB/s and fraction of the roofline; the sweep's cost; the regret of each M-bucket
policy on M values that were not tuned; and the host cost of a dispatched call and of a lookup.
A control times the vendor call a second time on the same buffers (`control`): vendor/control is what
two identical calls differ by, the yardstick for a dispatched call that runs the vendor library itself.
Rounds go on past --rounds (up to --max-rounds) while a variant's run-to-run spread leaves its median
less precise than --precision.

    python benchmarks/gemm.py --db bench.db --out results/      # resumable: the tuning is stored
    python benchmarks/gemm.py --phase final ...                 # final rounds over all backends' trials
    python benchmarks/gemm.py --phase measure ...               # measure only, from a tuned database

Prints a short table last; details go to --out (JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time

import harness
import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.db import Store
from autotune.dispatch import M_POLICIES, Dispatcher, Table, install_dispatcher
from autotune.dispatch.emit import emit_table
from autotune.dispatch.table import pick
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.engine.runner import Runner
from autotune.engine.strategies import Budget
from autotune.kernels import GEMM

# (model, layer, N, K): bf16 linear layers of real models, N and K per GPU shard.
SHAPES = [
    ("llama-3.1-8b", "qkv", 6144, 4096),
    ("llama-3.1-8b", "down", 4096, 14336),
    ("llama-3.1-70b tp8", "qkv", 1280, 8192),
    ("llama-3.1-70b tp8", "gate_up", 7168, 8192),
]
DECODE_M = [1, 16, 64, 256]
PREFILL_M = [1024, 4096]
# M values between the tuned buckets, for choosing how a table serves an untuned M.
UNTUNED_M = [4, 8, 32, 48, 128, 192, 512, 768, 2048, 3072]


def problems(quick: bool, regime: str = "all") -> list[tuple[str, str, Problem]]:
    shapes = SHAPES[:1] if quick else SHAPES
    ms = [1, 64, 1024] if quick else DECODE_M + PREFILL_M
    if regime == "large":
        ms = [m for m in ms if m >= 256]
    elif regime != "all":
        ms = [m for m in ms if (m in DECODE_M) == (regime == "decode")]
    return [(model, layer, Problem.of("gemm", m, n, k, "bf16")) for model, layer, n, k in shapes for m in ms]


def tune(store: Store, problems: list[Problem], args: argparse.Namespace, log: list[dict]) -> None:
    target = local_target()
    bench = Benchmarker(GEMM, target)
    sweep_id = store.start_sweep("benchmarks/gemm.py", json.dumps(vars(args), default=str), target)
    checker = None
    if args.compile_ahead:  # compile the strategy's upcoming configs on other cores while the GPU measures
        from autotune.engine.checker import StaticChecker

        checker = StaticChecker(target, workers=args.compile_ahead)
    runner = Runner(store, target, bench, sweep_id=sweep_id, checker=checker, final_rounds=args.final_rounds)
    for i, p in enumerate(problems):
        strategy = args.strategy
        if strategy == "auto":  # small spaces are swept whole; large ones searched by TPE
            size = len(GEMM.space(p, target, tuple(args.backends.split(",")) if args.backends else None))
            strategy = "exhaustive" if size <= 1.5 * args.trials else "optuna"
        backends = tuple(args.backends.split(",")) if args.backends else None
        rep = runner.tune(
            GEMM, p, strategy=strategy, budget=Budget(args.trials, args.seconds), seed=0, backends=backends
        )
        best = rep.best
        print(
            f"[tune {i + 1}/{len(problems)}] {p}: space {rep.space_size}/{rep.raw_size}, ran {rep.ran}, "
            f"cached {rep.cached}, failed {rep.failed}, compile {rep.compile_s:.1f}s, measure "
            f"{rep.measure_s:.1f}s, wall {rep.wall_s:.1f}s, best {best.config.short() if best else '-'} "
            f"{best.time_us if best else float('nan'):.2f}us",
            flush=True,
        )
        log.append(
            dict(
                problem=p.key(),
                space=rep.space_size,
                raw=rep.raw_size,
                ran=rep.ran,
                cached=rep.cached,
                failed=rep.failed,
                compile_s=rep.compile_s,
                measure_s=rep.measure_s,
                wall_s=rep.wall_s,
            )
        )
    store.finish_sweep(sweep_id)
    if checker is not None:
        checker.close()


def final_rounds(store: Store, problems: list[Problem], rounds: int, log: list[dict]) -> None:
    """Each problem's final round over every backend's stored trials (`Runner.final_round`): the tuning
    splits M >= 256 between two searches of other backends, whose own final rounds each saw half."""
    target = local_target()
    runner = Runner(store, target, Benchmarker(GEMM, target), final_rounds=rounds)
    for i, p in enumerate(problems):
        t0 = time.perf_counter()
        final = runner.final_round(GEMM, p)
        log.append(dict(problem=p.key(), final={r.config.short(): r.time_us for r in final}))
        print(
            f"[final {i + 1}/{len(problems)}] {p}: "
            + ", ".join(f"{r.config.short()} {r.time_us:.2f}us" for r in final if r.time_us)
            + f" ({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )


def best_of_ours(store: Store, problem: Problem, fingerprint: str) -> Config | None:
    """Our fastest measured config of `problem` (any backend but the vendor's)."""
    for rec in store.best(problem, fingerprint=fingerprint, limit=10_000):
        if rec.config.backend != "torch":  # our kernels: triton or triton_tma
            return rec.config
    return None


def measure(
    store: Store,
    problems: list[tuple[str, str, Problem]],
    rounds: int,
    out: dict,
    precision: float | None = None,
    max_rounds: int | None = None,
) -> Table:
    target = local_target()
    fp = target.fingerprint()
    table = emit_table(store, fingerprint=fp)  # exactly what `autotune emit` writes
    install_dispatcher(Dispatcher([table], device_key=target.device_key()))
    bench = Benchmarker(GEMM, target)
    rows = []
    for model, layer, p in problems:
        tuned = best_of_ours(store, p, fp)
        variants = {"vendor": Config(backend="torch"), "default": GEMM.default_config(p, target)}
        if tuned is not None:
            variants["tuned"] = tuned
        # The dispatched call (`autotune.kernels.gemm(a, b, out=out)`, lookup included) is timed by the same
        # method as the variants it is compared with, in the same rounds, on the vendor variant's very inputs
        # and output (`share_problem`): where the table dispatches to the vendor library the two are the
        # same GPU work on the same buffers. Each round times every variant and then the dispatched call.
        interleaved_medians(bench, p, {"vendor": variants["vendor"]}, 1)  # fixes the timing method
        method = bench.method_for(p) or "auto"
        settings = dataclasses.replace(BenchSettings(), method=method)
        dbench = Benchmarker(harness.ServedCall(GEMM), target, settings=settings)
        dbench.share_problem(bench, p)
        control = Benchmarker(GEMM, target, settings=dbench.settings)
        control.share_problem(bench, p)
        others = {
            "dispatched": (dbench, Config(backend="dispatched")),
            "control": (control, variants["vendor"]),  # the vendor call again: identical GPU work
        }
        res = interleaved_medians(
            bench, p, variants, rounds, others=others, precision=precision, max_rounds=max_rounds
        )
        timed = {k: (*v, method) for k, v in res.items()}
        roof = target.roofline_us(p.flops(), p.min_bytes())
        row = dict(
            model=model,
            layer=layer,
            M=p.M,
            N=p.N,
            K=p.K,
            regime="decode" if p.M <= 256 else "prefill",
            dispatched_config=table.lookup("gemm", p.M, p.N, p.K).canonical()  # type: ignore[union-attr]
            if table.lookup("gemm", p.M, p.N, p.K)
            else "default",
            tuned_config=tuned.canonical() if tuned else None,
            dispatched_backend=entry.backend if (entry := table.lookup("gemm", p.M, p.N, p.K)) else "default",
        )
        for name, (t, st, how) in timed.items():
            row[f"{name}_us"] = t
            row[f"{name}_status"] = st
            row[f"{name}_method"] = how
            row[f"{name}_tflops"] = p.flops() / t / 1e6 if t == t else math.nan
            row[f"{name}_gbps"] = p.min_bytes() / t / 1e3 if t == t else math.nan
            row[f"{name}_roofline"] = roof / t if t == t and roof else math.nan
        rows.append(row)
        print(f"[measure] {p}: " + ", ".join(f"{k} {v[0]:.2f}us" for k, v in timed.items()), flush=True)
    out["shapes"] = rows
    return table


def policy_regret(store: Store, out: dict, quick: bool) -> None:
    """For M values between tuned buckets: time the lower and the upper bucket's config; each policy's
    regret is its pick's time over the faster of the two (geomean over M, per (N, K))."""
    target = local_target()
    fp = target.fingerprint()
    bench = Benchmarker(GEMM, target)
    winners = store.winners(fp)
    by_nk: dict[tuple[int, int], dict[int, Config]] = {}
    for w in winners:
        by_nk.setdefault((w.problem.N, w.problem.K), {})[w.problem.M] = w.best.config
    results = []
    for (n, k), buckets in list(by_nk.items())[: 1 if quick else 2]:
        ms = tuple(sorted(buckets))
        for m in UNTUNED_M:
            if m in buckets or m > ms[-1] or m < ms[0]:
                continue
            p = Problem.of("gemm", m, n, k, "bf16")
            lo = max(x for x in ms if x <= m)
            hi = min(x for x in ms if x >= m)
            times: dict[int, float] = {}
            for bucket in {lo, hi}:
                r = bench.run(p, buckets[bucket], full=True)
                times[bucket] = r.time_us if r.ok and r.time_us else math.inf
            vendor = bench.run(p, Config(backend="torch"), full=True)
            best = min(times.values())
            rec = dict(
                N=n,
                K=k,
                M=m,
                lo=lo,
                hi=hi,
                t_lo=times[lo],
                t_hi=times[hi],
                vendor_us=vendor.time_us if vendor.ok else math.nan,
            )
            for policy in M_POLICIES:
                chosen = ms[pick(ms, m, policy)]
                rec[policy] = times[chosen] / best if chosen in times else math.nan
            results.append(rec)
            print(
                f"[regret] N={n} K={k} M={m}: lo {lo}→{times[lo]:.2f}us hi {hi}→{times[hi]:.2f}us", flush=True
            )
    summary = {}
    for policy in M_POLICIES:
        vals = [float(v) for r in results if (v := r[policy]) is not None and math.isfinite(v)]
        summary[policy] = dict(
            geomean=math.exp(statistics.fmean(math.log(v) for v in vals)) if vals else math.nan,
            worst=max(vals) if vals else math.nan,
        )
    out["m_policy"] = dict(points=results, summary=summary)


def host_overhead(out: dict) -> None:
    """Host time per call of the dispatched gemm() vs launching the same config directly, and a lookup."""
    import timeit

    from autotune.dispatch import lookup
    from autotune.kernels import gemm
    from autotune.kernels.dense.kernel import launcher

    target = local_target()
    p = Problem.of("gemm", 1, 256, 256, "bf16")  # tiny: the GPU keeps up, so the host is what is measured
    config = GEMM.default_config(p, target)
    install_dispatcher(Dispatcher([Table.from_winners(target, [(p, config, None)])],
                                  device_key=target.device_key()))  # fmt: skip
    a, b = GEMM.make_inputs(p, "cuda", seed=0)
    if config.backend == "triton_gemv":  # the NVIDIA default at M = 1; the same call as the pointer kernel's
        from autotune.kernels.dense.gemv import gemv_launcher

        run = gemv_launcher(config)
    else:
        run = launcher(config, is_amd=target.is_amd)
    split_k = int(config.get("SPLIT_K", 1))

    def direct() -> None:
        o = torch.empty((1, 256), device="cuda", dtype=torch.bfloat16)
        ws = torch.empty(split_k * 256, device="cuda", dtype=torch.float32) if split_k > 1 else None
        run(a, b, o, b.stride(1), b.stride(0), 1, 256, 256, ws)

    def dispatched() -> None:
        gemm(a, b)

    # Paired batches, alternating; the overhead is the median of the per-pair differences.
    per_call = harness.host_us_per_call({"direct": direct, "dispatched": dispatched}, 60, 200, warmup=100)
    lk = min(timeit.repeat(lambda: lookup("gemm", 1, 256, 256), number=200_000, repeat=5)) / 200_000 * 1e6
    over = harness.paired_overhead(per_call["dispatched"], per_call["direct"])
    out["host"] = dict(
        direct_us=statistics.median(per_call["direct"]),
        dispatched_us=statistics.median(per_call["dispatched"]),
        overhead_us=over["median"],
        overhead_p20_us=over["p20"],
        overhead_p80_us=over["p80"],
        lookup_us=lk,
        config=config.canonical(),
    )


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--db", default="bench-gemm.db", help="SQLite file or URL (resumable)")
    harness.add_out(ap)
    ap.add_argument(
        "--phase",
        choices=("tune", "final", "measure", "host", "all"),
        default="all",
        help="tune: the searches (each ends with its own final round); final: each problem's final round "
        "over every backend's trials; measure and host: the tables below",
    )
    ap.add_argument(
        "--strategy",
        default="auto",
        help="auto (exhaustive for small spaces, else optuna), exhaustive, random or optuna",
    )
    ap.add_argument("--trials", type=int, default=40, help="trial budget per shape")
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget per shape")
    ap.add_argument(
        "--final-rounds",
        type=int,
        default=3,
        help="rounds of each search's final head-to-head of finalists and vendor (0: none)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds (at least)")
    ap.add_argument(
        "--precision",
        type=float,
        default=0.005,
        help="more rounds while a variant's median is less precise than this fraction (0: never)",
    )
    ap.add_argument("--max-rounds", type=int, default=30, help="rounds at most, with --precision")
    ap.add_argument("--quick", action="store_true", help="one (N, K), three M: a smoke run")
    ap.add_argument(
        "--regime",
        choices=("decode", "prefill", "large", "all"),
        default="all",
        help="which shapes to tune and measure (large: M >= 256)",
    )
    ap.add_argument("--backends", default=None, help="comma-separated backends to tune (default: all)")
    ap.add_argument(
        "--compile-ahead",
        type=int,
        default=0,
        metavar="PROCS",
        help="compile upcoming configs on PROCS processes while the GPU measures (default 0: in line)",
    )
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not torch.cuda.is_available():
        print("benchmarks/gemm.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    info = harness.run_info(target, fingerprint=target.fingerprint(), args=vars(args))
    to_tune = problems(args.quick, args.regime)
    measured = problems(args.quick) if args.regime == "all" else to_tune  # the regime's shapes
    tune_log: list[dict] = []
    with Store(args.db) as store:
        t0 = time.perf_counter()
        if args.phase in ("tune", "all"):
            tune(store, [p for _, _, p in to_tune], args, tune_log)
            info["tune"] = dict(per_shape=tune_log, wall_s=time.perf_counter() - t0)
        if args.phase in ("final", "all"):
            info["final"] = []
            final_rounds(store, [p for _, _, p in to_tune], args.final_rounds, info["final"])
        if args.phase in ("measure", "all"):
            measure(store, measured, args.rounds, info, args.precision or None, args.max_rounds)
            if args.regime == "all":  # the M policies are judged on untuned M across all regimes
                policy_regret(store, info, args.quick)
        if args.phase in ("measure", "host", "all"):
            host_overhead(info)
    harness.write_json(args.out, f"gemm-{args.phase}-{args.regime}", info)
    print_summary(info)
    return 0


def print_summary(info: dict) -> None:
    """The short table, last: per shape the four variants and their ratios to the vendor, then per regime
    the geomeans, the sweep's cost, the host cost and the M policies' regret."""
    print(f"\n{harness.describe(info)}")
    if "tune" in info:
        t = info["tune"]["per_shape"]
        print(
            f"sweep cost: {sum(r['ran'] for r in t)} configs run, "
            f"compile {sum(r['compile_s'] for r in t):.0f}s, measure {sum(r['measure_s'] for r in t):.0f}s, "
            f"wall {info['tune']['wall_s']:.0f}s"
        )
    if "host" in info:
        h = info["host"]
        print(
            f"host per call: direct {h['direct_us']:.2f}us, dispatched {h['dispatched_us']:.2f}us; overhead "
            f"median +{h['overhead_us']:.2f}us (p20 {h['overhead_p20_us']:.2f}, "
            f"p80 {h['overhead_p80_us']:.2f}); lookup {h['lookup_us'] * 1000:.0f}ns"
        )
    if "shapes" not in info:
        return
    rows = []
    for r in info["shapes"]:
        v, t, d = r["vendor_us"], r.get("tuned_us", math.nan), r["dispatched_us"]
        ctl = r.get("control_us", math.nan)
        rows.append((f"{r['model']} {r['layer']}", r["M"], r["N"], r["K"], v, r["default_us"], t, d,
                     v / t, v / d, v / ctl,
                     r["dispatched_tflops"], r["dispatched_gbps"], r["dispatched_roofline"]))  # fmt: skip
    cols = ("model/layer", "M", "N", "K", "vendor", "default", "tuned", "disp",
            "tun/ven", "dis/ven", "ven/ctl", "TF/s", "GB/s", "roof")  # fmt: skip
    harness.print_table(cols, rows, digits=(0, 0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 0, 0, 2))
    for regime in ("decode", "prefill"):
        rs = [
            r for r in info["shapes"] if r["regime"] == regime and not math.isnan(r.get("tuned_us", math.nan))
        ]
        if rs:
            g = harness.geomean(r["vendor_us"] / r["tuned_us"] for r in rs)
            worst = min(r["vendor_us"] / r["dispatched_us"] for r in rs)
            ours = [r["vendor_us"] / r["dispatched_us"] for r in rs if r.get("dispatched_backend") != "torch"]
            noise = max(abs(1 - r["vendor_us"] / r.get("control_us", math.nan)) for r in rs)
            print(
                f"{regime}: tuned Triton vs vendor geomean {g:.3f}x; dispatched vs vendor worst {worst:.3f}x "
                f"(rows dispatched to our kernels: worst {min(ours, default=math.nan):.3f}x; "
                f"vendor vs itself up to {noise:.3f} apart)"
            )
    if "m_policy" in info:
        print(
            "M policy regret (geomean / worst): "
            + ", ".join(
                f"{k} {v['geomean']:.3f}/{v['worst']:.3f}" for k, v in info["m_policy"]["summary"].items()
            )
        )


if __name__ == "__main__":
    sys.exit(main())
