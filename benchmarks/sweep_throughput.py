"""Sweep throughput (GPU): configs measured per GPU-minute, compiling ahead on every core vs inline.

The same sweep runs twice on GPU 0, each time with a cold Triton cache (its own empty TRITON_CACHE_DIR)
and a fresh database, through the real sweep path (`run_sweep` on a ProcessWorker):

- inline: the worker compiles each config at its first launch, then checks and times it: compiling and
  measuring one after the other;
- ahead: a StaticChecker's CompilePool compiles the strategy's upcoming configs on `--cores` processes
  while the GPU measures, filling the Triton cache the worker then loads from.

Static pruning is off in both, so both measure exactly the same configs (a random sample of each space,
same seed). Throughput = configs measured / wall minutes of the sweep (start-up of the worker and the
compile pool included). Prints a short table last; details go to --out (sweep_throughput.json).

    python benchmarks/sweep_throughput.py --out results/ [--configs 40] [--cores 15]
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

SPECS = {
    # Dense bf16 GEMMs of Llama-3-8B (the QKV/O projection and the MLP's gate/up).
    "gemm": """
name = "throughput-gemm"

[static]
prune = []

[[sweep]]
op = "gemm"
dtype = "bf16"
m = {ms}
nk = [[4096, 4096], [14336, 4096]]
strategy = "random"
trials = {configs}
seed = 7
backends = ["triton"]
""",
    # The routed experts of DeepSeek-V3 with FP8 block-scaled weights (EP8: 32 local experts) and of
    # Mixtral-8x7B (TP2), both MoE GEMMs compiled per config.
    "moe": """
name = "throughput-moe"

[static]
prune = []

[[sweep]]
op = "moe"
dtype = "bf16"
weights = "fp8e4m3"
e = [32]
topk = 8
m = {ms}
nk = [[2048, 7168]]
strategy = "random"
trials = {configs}
seed = 7
backends = ["triton"]

[[sweep]]
op = "moe"
dtype = "bf16"
e = [8]
topk = 2
m = {ms}
nk = [[7168, 4096]]
strategy = "random"
trials = {configs}
seed = 7
backends = ["triton"]
""",
}


class _TimedWorker:
    """The worker, with the wall time of each trial's round trip kept (sending, measuring, answering)."""

    def __init__(self, worker: Any) -> None:
        self.worker, self.name = worker, worker.name
        self.roundtrips: list[float] = []

    @property
    def target(self) -> Any:
        return self.worker.target

    def start(self) -> None:
        self.worker.start()

    def run(self, op: Any, problem: Any, config: Any) -> Any:
        t = time.perf_counter()
        result = self.worker.run(op, problem, config)
        self.roundtrips.append(time.perf_counter() - t)
        return result

    def close(self) -> None:
        self.worker.close()


#: Timing settings: the benchmarker's defaults (what `autotune sweep` uses), or the short screening
#: settings of `model_check.py` (fewer timed runs per config).
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "screening": {"target_time_s": 0.02, "min_reps": 5, "max_reps": 50},
}


def run_mode(mode: str, spec_text: str, cores: int, root: Path, settings: str = "default") -> dict[str, Any]:
    """One sweep in `mode` ("inline", "ahead", or "ahead-full": ahead, every config timed fully, neither
    raced nor stopped at the precision target) with a cold Triton cache; returns its numbers."""
    root = root / spec_text.split('"')[1]  # the spec's name
    cache = root / f"triton-cache-{mode}"
    cache.mkdir(parents=True)
    os.environ["TRITON_CACHE_DIR"] = str(cache)  # inherited by the worker and the compile pool

    from autotune.core.target import local_target
    from autotune.db import Store
    from autotune.engine.checker import StaticChecker
    from autotune.engine.workers import ProcessWorker, device_env, visible_devices
    from autotune.sweeps import run_sweep
    from autotune.sweeps.spec import parse_spec

    spec = parse_spec(spec_text)
    target = local_target(0)
    from autotune.engine.bench import BenchSettings

    bench_settings = BenchSettings(**SETTINGS[settings])
    if mode == "ahead-full":
        bench_settings = dataclasses.replace(bench_settings, race=None, precision=None)
    worker = ProcessWorker(
        settings=bench_settings,
        name="gpu0",
        env=device_env(visible_devices()[0]),
        timeout_s=600,
        log_path=root / f"{mode}.worker.log",
    )
    checker = StaticChecker(target, spec.static, workers=cores) if mode.startswith("ahead") else None
    store = Store(str(root / f"{mode}.db"))
    timed = _TimedWorker(worker)
    stamps: list[float] = []
    compiles: list[list[float]] = []  # [queued at, done at, compile s in the pool process] per compile
    t0 = time.perf_counter()
    if checker is not None:
        _record_compiles(checker, compiles, t0)
    try:
        report = run_sweep(
            spec,
            store,
            target,
            workers=[timed],
            checker=checker,
            on_trial=lambda *_: stamps.append(time.perf_counter()),
        )
    finally:
        wall = time.perf_counter() - t0
        worker.close()
        if checker is not None:
            checker.close()
    trials = store.trials()
    store.close()
    measured = [t for t in trials if t.status.value not in ("pruned",)]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    ok = [t for t in measured if t.ok]
    first_launch = [t.compile_s for t in measured]
    return {
        "mode": mode,
        "wall_s": wall,
        "configs": len(measured),
        "ok": len(ok),
        "failed": len(measured) - len(ok),
        "configs_per_min": len(measured) / (wall / 60.0),
        "first_launch_s_median": statistics.median(first_launch) if first_launch else None,
        "first_launch_s_sum": sum(first_launch),
        "measure_s_sum": sum(t.measure_s for t in measured),
        "cache_files": sum(1 for _ in cache.rglob("*") if _.is_file()),
        "problems": len(report.problems),
        "first_trial_s": stamps[0] - t0 if stamps else None,
        "gap_s_median": statistics.median(gaps) if gaps else None,
        "worker_roundtrip_s_median": statistics.median(timed.roundtrips) if timed.roundtrips else None,
        "trial_ends_s": [round(t - t0, 4) for t in stamps],
        "roundtrips_s": [round(t, 4) for t in timed.roundtrips],
        "problem_wall_s": [round(p.wall_s, 3) for p in report.problems],
        "worker_start_s": worker.start_s,
        "first_trial": {"compile_s": measured[0].compile_s, "measure_s": measured[0].measure_s}
        if measured
        else None,
        "raced": sum(1 for t in ok if "raced" in t.extra),
        "compiles": compiles,
        "compile_s_sum": sum(c[2] for c in compiles),
        "measure_s_median": statistics.median(t.measure_s for t in ok) if ok else None,
        "best": {
            p.problem.key(): {
                "us": p.best.time_us,
                "config": p.best.config.short(),
            }
            for p in report.problems
            if p.best is not None
        },
        "statuses": {
            s: sum(1 for t in measured if t.status.value == s) for s in {t.status.value for t in measured}
        },
    }


def _record_compiles(checker: Any, out: list[list[float]], t0: float) -> None:
    """Keeps, per compile the pool runs, when it was queued and done (s from `t0`) and how long the
    compile itself took in its process."""
    pool = checker.pool
    submit = pool.submit

    def recorded(*args: Any) -> Any:
        queued = time.perf_counter() - t0
        future = submit(*args)

        def done(f: Any) -> None:
            spent = f.result().compile_s if f.exception() is None else float("nan")
            out.append([round(queued, 3), round(time.perf_counter() - t0, 3), round(spent, 3)])

        future.add_done_callback(done)
        return future

    pool.submit = recorded


def main() -> int:
    parser = harness.parser(__doc__)
    harness.add_out(parser, "folder for sweep_throughput.json")
    parser.add_argument("--configs", type=int, default=40, help="configs per problem (default 40)")
    parser.add_argument("--ms", default="16,4096", help="M values, comma-separated (default 16,4096)")
    parser.add_argument(
        "--cores",
        type=int,
        default=max(1, (os.cpu_count() or 2) - 1),
        help="compile processes in 'ahead' mode (default: cores - 1)",
    )
    parser.add_argument("--modes", default="inline,ahead", help="which modes, in this order")
    parser.add_argument("--ops", default="gemm,moe", help="which sweeps: gemm, moe (default both)")
    parser.add_argument("--settings", choices=sorted(SETTINGS), default="default", help="timing settings")
    args = parser.parse_args()

    import torch
    import triton

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    ms = [int(m) for m in args.ms.split(",")]
    ops = args.ops.split(",")
    unknown = set(ops) - set(SPECS)
    if unknown:
        parser.error(f"unknown --ops {sorted(unknown)}; known: {', '.join(SPECS)}")
    results: list[dict[str, Any]] = []
    meta = harness.run_info(
        gpu=torch.cuda.get_device_name(0),
        cpu_cores=os.cpu_count(),
        compile_processes=args.cores,
        torch=torch.__version__,
        triton=triton.__version__,
        ms=ms,
        configs_per_problem=args.configs,
        settings={"name": args.settings, **SETTINGS[args.settings]},
        specs={op: SPECS[op].format(ms=json.dumps(ms), configs=args.configs) for op in ops},
    )
    with tempfile.TemporaryDirectory(prefix="autotune-throughput-") as tmp:
        for op in ops:
            spec_text = SPECS[op].format(ms=json.dumps(ms), configs=args.configs)
            for mode in args.modes.split(","):
                results.append({"op": op, **run_mode(mode, spec_text, args.cores, Path(tmp), args.settings)})
                brief = {k: v for k, v in results[-1].items() if k not in ("trial_ends_s", "roundtrips_s")}
                print(json.dumps(brief), flush=True)
                # Written after every sweep: a run cut off by a time limit keeps what it measured.
                harness.write_json(args.out, "sweep_throughput", {"meta": meta, "results": results})
    keys = ("first_launch_s_median", "first_trial_s", "gap_s_median", "worker_roundtrip_s_median")
    table = [
        (r["op"], r["mode"], r["configs"], r["ok"], r["wall_s"], r["configs_per_min"],
         *(math.nan if r[k] is None else r[k] for k in keys), r["raced"],
         math.nan if r["worker_start_s"] is None else r["worker_start_s"])
        for r in results
    ]  # fmt: skip
    cols = ("op", "mode", "configs", "ok", "wall s", "cfg/min", "1st launch s", "to 1st trial s",
            "per trial s", "in worker s", "raced", "worker up s")  # fmt: skip
    title = f"{meta['gpu']}, {meta['cpu_cores']} CPU cores, torch {meta['torch']}, triton {meta['triton']}"
    harness.print_table(cols, table, digits=(0, 0, 0, 0, 1, 1, 3, 3, 3, 3, 0, 3), title=title)
    for op in ops:
        by_mode = {r["mode"]: r for r in results if r["op"] == op}
        if {"ahead", "ahead-full"} <= set(by_mode):  # did racing cost a winner?
            for key, full in by_mode["ahead-full"]["best"].items():
                raced = by_mode["ahead"]["best"].get(key)
                if raced is not None:
                    same = "same config" if raced["config"] == full["config"] else "another config"
                    print(f"{op} {key}: best with racing {raced['us']:.2f} us, without "
                          f"{full['us']:.2f} us ({same})")  # fmt: skip
        if {"inline", "ahead"} <= set(by_mode):
            inline, ahead = by_mode["inline"], by_mode["ahead"]
            gaps = inline["gap_s_median"], ahead["gap_s_median"]
            steady = gaps[0] / gaps[1] if gaps[1] else float("nan")
            print(
                f"{op}: ahead / inline {ahead['configs_per_min'] / inline['configs_per_min']:.2f}x "
                "end to end, "
                f"{steady:.2f}x per trial once started"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
