"""How compiling scales with the number of compile processes on this host (no GPU needed).

A sweep that compiles ahead is bound by the compile pool's throughput once the GPU measures faster than
the pool compiles (the MoE sweep of `sweep_throughput.py`). This script measures that throughput alone:

- the host: cores, affinity, the cgroup CPU limit, the CPU model, and for every run the steal and iowait
  time of /proc/stat (a virtual machine whose cores are shared shows steal);
- a pure-Python busy loop on k processes at once (what k cores give to CPU-bound work);
- the same configs of the throughput sweep's problems compiled for the target (the local GPU's, else
  `--arch`) by pools of k processes (niced, as `CompilePool`'s), each pool on a cold Triton cache,
  unpinned as `CompilePool`'s and pinned to a core each (from core 0 up, and from the last core down):
  configs per second, and each compile's wall and CPU
  seconds (its own and its children's, ptxas): CPU seconds over wall seconds above 1 means the compiler
  ran threads of its own.

Prints a short table last; details go to OUT/compile_scaling.json.

    python benchmarks/compile_scaling.py --out results/ [--op moe] [--configs 60] [--procs 1,4,8,15]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Iterations of the busy loop: about a second of one core in CPython.
BUSY_ITERATIONS = 20_000_000


def _busy(n: int) -> float:
    """CPU seconds of a pure-Python loop of `n` iterations (its own process)."""
    start = time.process_time()
    x = 0
    for i in range(n):
        x ^= i
    return time.process_time() - start


def _timed_compile(op_name: str, problem: Any, config: Any, target: Any) -> dict[str, float]:
    """One compile in a pool process: its wall seconds and CPU seconds (own and children's)."""
    from autotune.engine.compile import _compile_job

    before, t0 = os.times(), time.perf_counter()
    features = _compile_job(None, op_name, problem, config, target)
    after = os.times()
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": after.user - before.user + after.system - before.system,
        "children_cpu_s": after.children_user
        - before.children_user
        + after.children_system
        - before.children_system,
        "ok": float(features.compiled),
        "threads": float(_threads()),
    }


def _threads() -> int:
    """OS threads of this process now (compiler thread pools stay once started)."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status if line.startswith("Threads:")), 0)


def _pinned_init(env: dict[str, str], slots: Any, from_top: bool) -> None:
    """A compile process as CompilePool starts one, then pinned to a core of its own: the first cores up
    (core 0 first), or from the top down."""
    from autotune.engine.compile import _worker_init

    _worker_init(env)
    with slots.get_lock():
        slot = slots.value
        slots.value += 1
    cores = sorted(os.sched_getaffinity(0), reverse=from_top)
    os.sched_setaffinity(0, {cores[slot % len(cores)]})


def _warm() -> int:
    from autotune.engine.compile import _warm_job

    return _warm_job()


def _proc_stat() -> dict[str, float]:
    """Host-wide CPU seconds by state (user, system, idle, iowait, steal) from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {name: int(v) / tick for name, v in zip(names, fields, strict=False)}


def _stat_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 2) for k in before if k in after}


def host_info() -> dict[str, Any]:
    """What limits CPU work on this host."""
    info: dict[str, Any] = {"cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        info["affinity"] = len(os.sched_getaffinity(0))
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        with contextlib.suppress(OSError):
            info[path.rsplit("/", 1)[1]] = Path(path).read_text().strip()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        for key in ("model name", "siblings", "cpu cores", "cpu MHz"):
            values = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith(key)]
            if values:
                info[key] = values[0]
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        mem = [line.split(":", 1)[1].strip() for line in meminfo if line.startswith("MemTotal")]
        info["MemTotal"] = mem[0]
    except (OSError, IndexError):
        pass
    return info


def busy_scaling(procs: list[int]) -> list[dict[str, Any]]:
    """Wall time of k busy loops at once, against one alone."""
    import multiprocessing

    rows = []
    context = multiprocessing.get_context("spawn")
    for k in procs:
        with ProcessPoolExecutor(max_workers=k, mp_context=context) as pool:
            wait([pool.submit(_busy, 1000) for _ in range(k)])  # started
            before, t0 = _proc_stat(), time.perf_counter()
            cpu = [f.result() for f in [pool.submit(_busy, BUSY_ITERATIONS) for _ in range(k)]]
            wall = time.perf_counter() - t0
        rows.append({"procs": k, "wall_s": wall, "cpu_s_median": statistics.median(cpu),
                     "stat": _stat_delta(before, _proc_stat())})  # fmt: skip
    return rows


def sample_configs(op_name: str, count: int, target: Any, seed: int = 7) -> list[tuple[str, Any, Any]]:
    """`count` (op, problem, config) of the throughput sweep's problems, spread over its problems."""
    from sweep_throughput import SPECS

    from autotune.sweeps.spec import parse_spec

    spec = parse_spec(SPECS[op_name].format(ms="[16, 4096]", configs=count))
    rng = random.Random(seed)
    pairs = spec.problems()
    picked: list[tuple[str, Any, Any]] = []
    for i, (entry, problem) in enumerate(pairs):
        op = entry.op_for(problem)
        share = count // len(pairs) + (1 if i < count % len(pairs) else 0)
        configs = list(op.space(problem, target, ["triton"]).configs())
        picked += [(op.name, problem, c) for c in rng.sample(configs, min(share, len(configs)))]
    return picked


def _compile_once(jobs: list[tuple[str, Any, Any]], target: Any, root: Path) -> None:
    import multiprocessing

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-warm-", dir=root)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        wait([pool.submit(_timed_compile, name, p, c, target) for name, p, c in jobs])


def compile_scaling(
    jobs: list[tuple[str, Any, Any]], target: Any, procs: list[int], root: Path, single_max: int
) -> list[dict[str, Any]]:
    """Configs per second of pools of k processes, each on a cold cache; the first and last k also
    pinned to a core each (where there are cores to go round), from core 0 up ("low") and from the last
    core down ("high")."""
    from autotune.engine.compile import _pool_context, start_processes

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    ends = sorted({procs[0], procs[-1]})
    runs = [(k, "") for k in procs] + [(k, pin) for k in ends for pin in ("low", "high") if k < cores]
    rows = []
    _compile_once(jobs[:2], target, root)  # the compiler's files in the page cache: no run pays for it
    for k, pinned in runs:
        subset = jobs[:single_max] if k == 1 else jobs
        cache = Path(tempfile.mkdtemp(prefix=f"cache-{k}-{pinned or 'no'}-", dir=root))
        os.environ["TRITON_CACHE_DIR"] = str(cache)  # handed to the pool's processes
        context = _pool_context()
        slots = context.Value("i", 0)
        pin = pinned
        if pin:  # as CompilePool starts its processes, then pinned
            pool, _ = start_processes(k, context, _pinned_init, (slots, pin == "high"))
        else:
            pool, _ = start_processes(k, context)
        with pool:
            wait([pool.submit(_warm) for _ in range(k)])  # every process up and imported
            before, t0 = _proc_stat(), time.perf_counter()
            futures = [pool.submit(_timed_compile, name, p, c, target) for name, p, c in subset]
            results = [f.result() for f in futures]
            wall = time.perf_counter() - t0
        rows.append({
            "procs": k,
            "pinned": pin,
            "configs": len(subset),
            "ok": int(sum(r["ok"] for r in results)),
            "wall_s": wall,
            "configs_per_s": len(subset) / wall,
            "compile_wall_s_median": statistics.median(r["wall_s"] for r in results),
            "compile_cpu_s_median": statistics.median(r["cpu_s"] for r in results),
            "compile_children_cpu_s_median": statistics.median(r["children_cpu_s"] for r in results),
            "compile_wall_s_sum": sum(r["wall_s"] for r in results),
            "compile_cpu_s_sum": sum(r["cpu_s"] + r["children_cpu_s"] for r in results),
            "threads_max": max(int(r["threads"]) for r in results),
            "stat": _stat_delta(before, _proc_stat()),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="directory for compile_scaling.json")
    parser.add_argument("--op", choices=("gemm", "moe"), default="moe", help="whose configs (default moe)")
    parser.add_argument("--configs", type=int, default=60, help="configs compiled per pool (default 60)")
    parser.add_argument("--single", type=int, default=16, help="configs compiled by the 1-process pool")
    parser.add_argument("--procs", default="1,4,8,15", help="pool sizes, ascending (default 1,4,8,15)")
    parser.add_argument("--arch", default="sm_90", help="target without a local GPU (default sm_90)")
    args = parser.parse_args()
    procs = sorted({int(p) for p in args.procs.split(",")})
    if not procs or procs[0] < 1:
        parser.error("--procs: positive integers")

    import triton

    from autotune.core.target import Target, local_target

    try:
        target = local_target(0)
    except Exception:  # no GPU here: cross-compile
        target = Target.for_arch(args.arch)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"host": host_info(), "target": target.arch, "triton": triton.__version__,
            "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"), "op": args.op}  # fmt: skip
    print(json.dumps(meta), flush=True)
    busy = busy_scaling(procs)
    print(json.dumps(busy), flush=True)
    jobs = sample_configs(args.op, args.configs, target)
    with tempfile.TemporaryDirectory(prefix="autotune-compile-scaling-") as tmp:
        compiles = compile_scaling(jobs, target, procs, Path(tmp), args.single)
    dump = {"meta": meta, "busy": busy, "compile": compiles}
    (out / "compile_scaling.json").write_text(json.dumps(dump, indent=2))

    one = busy[0]["wall_s"] / busy[0]["procs"]
    print(f"\n{meta['host'].get('model name', '?')}, {meta['host']['cpu_count']} cores, target {target.arch}")
    print(f"{'procs':>5} {'busy speed-up':>13} {'steal s':>7}")
    for row in busy:
        speedup = row["procs"] * one / row["wall_s"]
        print(f"{row['procs']:>5} {speedup:>13.2f} {row['stat'].get('steal', 0):>7.1f}")
    base = compiles[0]["configs_per_s"]
    print(f"{'procs':>5} {'pinned':>6} {'configs':>7} {'cfg/s':>6} {'speed-up':>8} {'wall/compile':>12} "
          f"{'cpu/compile':>11} {'steal s':>7} {'iowait s':>8}")  # fmt: skip
    for row in compiles:
        print(
            f"{row['procs']:>5} {row['pinned'] or 'no':>6} {row['configs']:>7} {row['configs_per_s']:>6.2f} "
            f"{row['configs_per_s'] / base:>8.2f} {row['compile_wall_s_median']:>12.2f} "
            f"{row['compile_cpu_s_median'] + row['compile_children_cpu_s_median']:>11.2f} "
            f"{row['stat'].get('steal', 0):>7.1f} {row['stat'].get('iowait', 0):>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
