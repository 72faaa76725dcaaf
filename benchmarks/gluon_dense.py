"""The dense Gluon GEMM (backend "gluon", `kernels/gemm_gluon.py`) on Hopper: correct? how fast?

The bf16 shapes of `benchmarks/gemm.py` at M = 256, 1024 and 4096: cuBLAS (`torch.mm`), our heuristic
default (the Triton TMA kernel at these M) and a set of warp-specialized Gluon configs, side by side. Each
Gluon config is first checked in a subprocess of its own (`--probe`) on every shape and on ragged ones, so
that a config that fails to compile, faults or hangs is recorded and skipped. Every variant is checked
again before and after timing (max |C - ref| / max |ref| at most 1e-2, NaN fails; ref: fp32 product) and
timed with CUDA events around each launch, L2 flushed by writing 256 MB before every run, in interleaved
rounds; medians.

    PYTHONPATH=$PWD python benchmarks/gluon_dense.py [--quick] [--out DIR]

Prints a short table last; details go to DIR/gluon_dense.json (DIR: --out, else $OUT if set).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.bench import flushed_event_us

#: (label, N, K): as benchmarks/gemm.py.
SHAPES = [
    ("llama-3.1-8b qkv", 6144, 4096),
    ("llama-3.1-8b down", 4096, 14336),
    ("llama-3.1-70b tp8 qkv", 1280, 8192),
    ("llama-3.1-70b tp8 gate_up", 7168, 8192),
]
ROWS_M = (256, 1024, 4096)
#: Correctness only: (M, N, K) off the tiles, K not a multiple of the K step, one K step.
RAGGED = [(333, 1000, 1048), (1000, 4096, 64), (77, 200, 4104)]
#: A Gluon config: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, PERSISTENT, C_SMEM).
Cfg = tuple[int, int, int, int, int, int, int]
CONFIGS: list[Cfg] = [
    (128, 128, 64, 8, 6, 0, 1),
    (128, 128, 64, 8, 7, 0, 0),
    (128, 128, 64, 8, 7, 1, 0),
    (128, 256, 64, 8, 3, 0, 1),
    (128, 256, 64, 8, 4, 0, 0),
    (128, 256, 64, 8, 4, 1, 0),
    (256, 128, 64, 8, 4, 0, 0),
    (128, 128, 128, 8, 3, 0, 0),
    (128, 256, 128, 8, 2, 0, 0),
    (128, 128, 64, 4, 7, 0, 0),
    (64, 256, 64, 4, 5, 0, 0),
    (64, 128, 64, 4, 8, 0, 0),
]
QUICK_CONFIGS = [CONFIGS[0], CONFIGS[1], CONFIGS[4]]
TOLERANCE = 1e-2
PROBE_TIMEOUT_S = 180


def config_of(cfg: Cfg) -> Any:
    from autotune import Config

    bm, bn, bk, warps, stages, persistent, c_smem = cfg
    return Config(backend="gluon", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                  PERSISTENT=persistent, GROUP_M=8, C_SMEM=c_smem)  # fmt: skip


def config_name(cfg: Cfg) -> str:
    bm, bn, bk, warps, stages, persistent, c_smem = cfg
    return (
        f"gluon {bm}x{bn}x{bk} w{warps} s{stages}"
        + (" persistent" if persistent else "")
        + ("" if c_smem else " direct C")
    )


def make_inputs(M: int, N: int, K: int, seed: int = 1) -> tuple[Any, Any, Any]:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
    b = (torch.randn(N, K, device="cuda", generator=gen) * K**-0.5).to(torch.bfloat16)
    return a, b, a.float() @ b.float().t()


def rel_error(out: Any, ref: Any) -> float:
    import torch

    o = out.float()
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    return float((o - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}"


def probe(cfg: Cfg, shapes: list[tuple[int, int, int]]) -> dict[str, Any]:
    import torch

    from autotune.kernels.gemm_gluon import gluon_gemm_launcher

    run = gluon_gemm_launcher(config_of(cfg), num_sms=0)
    errors: dict[str, float] = {}
    t0 = time.perf_counter()
    for M, N, K in shapes:
        a, b, ref = make_inputs(M, N, K)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        run(a, b, out)
        torch.cuda.synchronize()
        errors[f"{M}x{N}x{K}"] = rel_error(out, ref)
        first = out.clone()
        for _ in range(5):  # the same bits every time (a race shows here)
            run(a, b, out)
        torch.cuda.synchronize()
        if not torch.equal(first, out):
            errors[f"{M}x{N}x{K} repeat"] = float("inf")
    return {"errors": errors, "seconds": time.perf_counter() - t0}


def run_probe(cfg: Cfg, shapes: list[tuple[int, int, int]]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--probe", json.dumps({"cfg": cfg, "shapes": shapes})]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {PROBE_TIMEOUT_S} s (a hang?)"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"probe exited {proc.returncode}: {tail[:300]}"}


def _bound(run: Callable[..., None], a: Any, b: Any, out: Any) -> Callable[[], None]:
    return lambda: run(a, b, out)


def bench_shape(
    label: str, M: int, N: int, K: int, configs: list[Cfg], probes: dict[str, Any], args: argparse.Namespace
) -> list[dict[str, Any]]:
    import torch

    from autotune import Problem
    from autotune.kernels import GEMM, launch_config
    from autotune.kernels.gemm_gluon import gluon_gemm_launcher
    from autotune.target import local_target

    target = local_target()
    problem = Problem.gemm(M, N, K, "bf16")
    a, b, ref = make_inputs(M, N, K)
    rows: list[dict[str, Any]] = []
    variants: dict[str, Callable[[], Any]] = {}
    outs: dict[str, Any] = {}

    def add(name: str, build: Callable[[Any], Callable[[], Any]]) -> None:
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        try:
            launch = build(out)
            launch()
            torch.cuda.synchronize()
        except Exception as exc:
            rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, error=_short(exc)))
            print(f"  {name}: {rows[-1]['error']}", flush=True)
            return
        variants[name], outs[name] = launch, out

    bt = b.t()
    add("cuBLAS", lambda out: lambda: torch.mm(a, bt, out=out))
    default = GEMM.default_config(problem, target)
    add(f"default {default.backend} {default.short()}",
        lambda out: lambda: launch_config(default, a, b, target=target, out=out))  # fmt: skip
    for cfg in configs:
        name = config_name(cfg)
        if "error" in probes[name]:
            rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, error=probes[name]["error"]))
            continue
        add(name, functools.partial(_bound, gluon_gemm_launcher(config_of(cfg), num_sms=0), a, b))

    errors = {name: rel_error(outs[name], ref) for name in variants}
    flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, launch in variants.items():
            samples[name].append(flushed_event_us(launch, flush_buf.zero_, args.reps))
    for name, ts in samples.items():
        us = statistics.median(ts)
        after = rel_error(outs[name], ref)
        ok = errors[name] <= TOLERANCE and after <= TOLERANCE
        rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, us=us, rounds_us=ts,
                         tflops=problem.flops() / us / 1e6, rel_error=max(errors[name], after),
                         ok=ok))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two shapes, three Gluon configs")
    ap.add_argument("--out", type=Path, default=None, help="directory for gluon_dense.json (default: $OUT)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per variant and round (default 20)")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args()

    import torch
    import triton

    if args.probe:
        spec = json.loads(args.probe)
        try:
            result = probe(tuple(spec["cfg"]), [tuple(s) for s in spec["shapes"]])
        except Exception as exc:
            result = {"error": _short(exc)}
        print(json.dumps(result), flush=True)
        return 0

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "quick": args.quick}  # fmt: skip
    shapes = [(f"{label}", M, N, K) for label, N, K in SHAPES for M in ROWS_M]
    if args.quick:
        shapes = [s for s in shapes if s[0] == "llama-3.1-70b tp8 qkv" and s[1] > 256]
    configs = QUICK_CONFIGS if args.quick else CONFIGS
    check = [(M, N, K) for _, M, N, K in shapes if M == 1024] + RAGGED
    probes: dict[str, Any] = {}
    for cfg in configs:
        name = config_name(cfg)
        probes[name] = run_probe(cfg, check)
        bad = {s: e for s, e in probes[name].get("errors", {}).items() if not e <= TOLERANCE}
        if bad:
            probes[name]["error"] = f"wrong results (max rel error) {bad}"
        print(f"probe {name}: {probes[name]}", flush=True)

    rows: list[dict[str, Any]] = []
    for label, M, N, K in shapes:
        print(f"\n{label}: M {M} N {N} K {K}", flush=True)
        rows += bench_shape(label, M, N, K, configs, probes, args)

    out_dir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "gluon_dense.json").write_text(
            json.dumps({"meta": meta, "probes": probes, "rows": rows}, indent=2)
        )

    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}; ratio = cuBLAS µs / µs")
    print(
        f"{'shape':<28} {'M':>5} {'cuBLAS':>8} {'default':>8} {'best gluon':>10} {'ratio':>6} {'dflt':>6}"
        "  config"
    )
    for label, M, _, _ in shapes:
        mine = [r for r in rows if r["shape"] == label and r["M"] == M and "us" in r]
        cub = next((r["us"] for r in mine if r["variant"] == "cuBLAS"), float("nan"))
        dflt = next((r["us"] for r in mine if r["variant"].startswith("default")), float("nan"))
        gl = [r for r in mine if r["variant"].startswith("gluon") and r["ok"]]
        best = min(gl, key=lambda r: r["us"]) if gl else None
        bus = best["us"] if best else float("nan")
        print(f"{label:<28} {M:>5} {cub:>8.2f} {dflt:>8.2f} {bus:>10.2f} {cub / bus:>6.3f} "
              f"{cub / dflt:>6.3f}  "
              f"{best['variant'] if best else '-'}")  # fmt: skip
    wrong = [r for r in rows if "us" in r and not r["ok"]]
    print(f"wrong results: {len(wrong)}; failed: {sum('error' in r for r in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
