"""Probe: where an M profile's time goes, per (M, config) timing, in-process on one GPU.

Times one shape family's candidates (cuBLAS, the default at each M, two fixed Triton configs) at the
serving ladder with the Benchmarker of a ServedTiming op (as the sweep's profile does), splitting each
timing into its phases; then the same with cheaper alternatives, and prints how the picks agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

import autotune.bench as bench_mod
from autotune.bench import Benchmarker, BenchSettings, ServedTiming
from autotune.config import Config
from autotune.kernels.gemm_op import GemmOp
from autotune.ladder import serving_ladder
from autotune.problem import Problem
from autotune.target import local_target

PHASES: dict[str, float] = defaultdict(float)


def timed(name, fn):
    def wrapper(*a, **k):
        torch.cuda.synchronize()
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            torch.cuda.synchronize()
            PHASES[name] += time.perf_counter() - t

    return wrapper


def instrument() -> None:
    B = Benchmarker
    B._state_for = timed("state", B._state_for)
    B._event_samples = timed("events_probe", B._event_samples)
    real_graph = bench_mod.graph_replays

    def graph(launches, n):
        replays = timed("capture", real_graph)(launches, n)
        return timed("replays", replays)

    bench_mod.graph_replays = graph
    op_prepare = GemmOp.prepare
    GemmOp.prepare = timed("prepare", op_prepare)
    bench_mod.rel_error = timed("rel_error", bench_mod.rel_error)


def candidates(op, fam: Problem, target, M: int) -> list[Config]:
    p = fam.with_m(M)
    out = [Config(backend="torch"), op.default_config(p, target)]
    for m in (64, 4096):
        c = op.default_config(fam.with_m(m), target)
        if c not in out and op.space(p, target).check(c) is None:
            out.append(c)
    return out


def specializing() -> dict:
    """The dense GEMM kernels as they were before `do_not_specialize` on M: (module, name) -> kernel."""
    import triton

    from autotune.kernels import gemm_tma, gemm_triton

    out = {}
    for mod, name in [(gemm_triton, "gemm_kernel"), (gemm_triton, "gemm_sum_kernel"),
                      (gemm_tma, "gemm_tma_kernel"), (gemm_tma, "gemm_tma_tail_kernel")]:  # fmt: skip
        out[(mod, name)] = triton.jit(getattr(mod, name).fn)
    return out


def ab(op, target, fams, out: Path) -> None:
    """Times configs with the M-specializing kernels and with ours, interleaved, at M values of every
    specialization variant."""
    old = specializing()
    new = {k: getattr(k[0], k[1]) for k in old}

    def use(kernels):
        for (mod, name), k in kernels.items():
            setattr(mod, name, k)

    rows = []
    for fam in fams:
        for M in (1, 3, 16, 24, 40, 64, 72, 200, 256, 1000, 1024, 3000, 4096):
            p = fam.with_m(M)
            for c in candidates(op, fam, target, M)[1:]:
                if c.backend not in ("triton", "triton_tma"):
                    continue
                bn = Benchmarker(ServedTiming(op), target)
                bo = Benchmarker(ServedTiming(op), target)
                bo.share_problem(bn, p)
                tn, to = [], []
                for _ in range(3):
                    use(old)
                    r = bo.run(p, c, full=True)
                    to.append(r.time_us or float("nan"))
                    use(new)
                    r = bn.run(p, c, full=True)
                    tn.append(r.time_us or float("nan"))
                rows.append({"shape": f"{fam.N}x{fam.K}", "M": M, "config": c.short(),
                             "old_us": statistics.median(to), "new_us": statistics.median(tn)})  # fmt: skip
    use(new)
    ratios = [r["old_us"] / r["new_us"] for r in rows]
    import math

    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    worst = sorted(rows, key=lambda r: r["old_us"] / r["new_us"])[:5]
    print(f"A/B specializing/ours time ratio (>1: ours faster): {len(rows)} rows, geomean {gm:.4f}, "
          f"lowest {min(ratios):.4f}, highest {max(ratios):.4f}")  # fmt: skip
    for r in worst:
        print(f"  {r['shape']} M={r['M']} {r['config']}: old {r['old_us']:.2f} new {r['new_us']:.2f}")
    (out / "ab.json").write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("out"))
    ap.add_argument("--max-m", type=int, default=4096)
    ap.add_argument("--ab", action="store_true", help="only the A/B of M specialization")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target = local_target()
    op = GemmOp()
    fams = [Problem("gemm", 1, 6144, 4096), Problem("gemm", 1, 8192, 28672), Problem("gemm", 1, 1280, 8192)]
    if args.ab:
        ab(op, target, fams, args.out)
        return
    instrument()
    ladder = serving_ladder(args.max_m, (1, 16, 64, 256, 1024, 4096))
    modes = {
        "served": BenchSettings(),
        "served_t5ms": BenchSettings(target_time_s=0.005),
    }
    report = {}
    picks: dict[str, dict] = {}
    # compile everything first, so the modes compare timing cost only
    warm = Benchmarker(ServedTiming(op), target, settings=BenchSettings(target_time_s=0.0, min_reps=1))
    t0 = time.perf_counter()
    for fam in fams:
        for M in ladder:
            for c in candidates(op, fam, target, M):
                warm.run(fam.with_m(M), c)
    print(f"compile+warm pass {time.perf_counter() - t0:.1f} s")
    PHASES.clear()
    for name, settings in modes.items():
        PHASES.clear()
        b = Benchmarker(ServedTiming(op), target, settings=settings)
        n = 0
        t0 = time.perf_counter()
        gpu_s = 0.0
        res = {}
        for fam in fams:
            for M in ladder:
                p = fam.with_m(M)
                times = {}
                for c in candidates(op, fam, target, M):
                    r = b.run(p, c)
                    n += 1
                    times[c.short()] = r.time_us
                    if r.timing is not None:
                        gpu_s += r.timing.median_us * 1e-6 * r.timing.runs * 10
                res[f"{fam.N}x{fam.K}@{M}"] = times
        wall = time.perf_counter() - t0
        picks[name] = res
        report[name] = {"timings": n, "wall_s": wall, "ms_per_timing": 1e3 * wall / n,
                        "phases_s": dict(PHASES), "timed_gpu_s_est": gpu_s}  # fmt: skip
        print(name, json.dumps(report[name], indent=1))
    # agreement: the fastest config per point and its ratio to torch
    base = picks["served"]
    for name, res in picks.items():
        agree = 0
        diffs = []
        for k, times in res.items():
            a = min(base[k], key=lambda c: base[k][c] or 1e18)
            b_ = min(times, key=lambda c: times[c] or 1e18)
            agree += a == b_
            ta, tb = base[k]["torch"], times["torch"]
            if ta and tb:
                diffs.append(tb / ta)
        print(f"{name}: same pick at {agree}/{len(res)} points; torch time ratio to 'served' median "
              f"{statistics.median(diffs):.4f}")  # fmt: skip
    (args.out / "probe.json").write_text(json.dumps({"report": report, "picks": picks}, indent=1))


if __name__ == "__main__":
    main()
