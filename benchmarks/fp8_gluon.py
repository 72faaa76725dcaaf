"""The Gluon blockwise FP8 GEMM (backend "gluon", `kernels/gemm_fp8_gluon.py`) on Hopper: correct? how fast?

Prefill, M = 2048, DeepSeek-V3 / Llama-3.1-70B gate_up shapes at TP 8: a handful of Gluon configs (with and
without WARP_SPEC: a loader warp, a partition per consumer warpgroup) next to torch._scaled_mm (cuBLAS
blockwise, where the installed torch runs it; its call includes a copy of C, timed alone as "copy C") and
our pointer Triton kernel at its best known tile (128x128x128, 8 warps, 4 stages). Each Gluon config is
first checked in a subprocess of its own (`--probe`), on the target shapes and on ragged ones (M, N off the
tiles, an odd number of K groups), so that a config that fails to compile, faults or hangs is recorded and
skipped (once a WARP_SPEC config hangs, the other WARP_SPEC configs are skipped unrun). Then every variant
is checked again, before and after timing (max |C - ref| / max |ref| at most 2e-2, NaN fails; ref:
dequantized inputs multiplied in fp32), and timed: CUDA events around each launch, L2 flushed by writing
256 MB before every run, interleaved rounds, medians.

    PYTHONPATH=$PWD python benchmarks/fp8_gluon.py [--quick] [--out DIR]

Prints a short table last; details go to DIR/fp8_gluon.json (DIR: --out, else $OUT if set).
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

from autotune.engine.bench import L2Flush, flushed_event_us

#: (label, N, K): the MLP gate/up projections of DeepSeek-V3 and Llama-3.1-70B at TP 8.
SHAPES = [("deepseek-v3 tp8 gate_up", 4608, 7168), ("llama-3.1-70b tp8 gate_up", 7168, 8192)]
M_PREFILL = 2048
#: Correctness only: (M, N, K) off the tiles, odd and single K group counts.
RAGGED = [(333, 4600, 1152), (2048, 200, 128), (1000, 7168, 7296)]
#: A Gluon config: (BLOCK_M, BLOCK_N, num_warps, num_stages, persistent, A scales M-major, WARP_SPEC).
Cfg = tuple[int, int, int, int, bool, bool, bool]
CONFIGS: list[Cfg] = [
    (128, 128, 8, 4, False, False, False),
    (128, 128, 8, 3, False, False, False),
    (128, 128, 8, 5, False, False, False),
    (128, 128, 8, 4, True, False, False),
    (128, 128, 8, 4, False, True, False),
    (64, 128, 4, 4, False, False, False),
    (64, 128, 4, 3, False, False, False),
    (128, 64, 8, 4, False, False, False),
    *[(128, 128, 8, s, p, False, True) for p in (False, True) for s in (3, 4, 5)],
]
QUICK_CONFIGS = [CONFIGS[0], CONFIGS[5], (128, 128, 8, 4, False, False, True)]
#: Relative error bound (max abs error over max abs reference).
TOLERANCE = 2e-2
#: A probe compiles one config and runs it on five shapes: seconds. Longer is a hang.
PROBE_TIMEOUT_S = 120


def config_name(cfg: Cfg) -> str:
    bm, bn, warps, stages, persistent, mmajor, warp_spec = cfg
    extra = (" persistent" if persistent else "") + (" sa-M" if mmajor else "") + (" ws" if warp_spec else "")
    return f"gluon {bm}x{bn}x128 w{warps} s{stages}{extra}"


def make_inputs(M: int, N: int, K: int, seed: int = 1) -> tuple[Any, Any, Any, Any, Any]:
    """(a, b, a_scale, b_scale, ref) on the GPU: e4m3fn data with 1x128 / 128x128 fp32 scales from our
    quantizer, and the fp32 product of the dequantized inputs."""
    import torch

    from autotune.kernels.quant import dequantize_fp8, quantize_fp8

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=gen)
    w = torch.randn(N, K, device="cuda", generator=gen) * K**-0.5
    fp8 = torch.float8_e4m3fn
    a, sa = quantize_fp8(x, fp8, (1, 128))
    b, sb = quantize_fp8(w, fp8, (128, 128))
    ref = dequantize_fp8(a, sa, (1, 128)) @ dequantize_fp8(b, sb, (128, 128)).t()
    return a, b, sa, sb, ref


def rel_error(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref|; inf where out has a NaN or an infinity."""
    import torch

    o = out.float()
    if not bool(torch.isfinite(o).all()):
        return float("inf")
    return float((o - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}"


def _gluon_launch(cfg: Cfg, a: Any, b: Any, sa: Any, sb: Any, out: Any) -> Any:
    from autotune.kernels.gemm_fp8_gluon import gluon_blockwise_launcher

    bm, bn, warps, stages, persistent, mmajor, warp_spec = cfg
    scale = sa.t().contiguous().t() if mmajor else sa
    # descriptors built once, outside the timed launches
    launcher = gluon_blockwise_launcher(bm, bn, warps, stages, persistent, warp_spec=warp_spec)
    return launcher.bind(a, b, scale, sb, out)


def probe(cfg: Cfg, shapes: list[tuple[int, int, int]]) -> dict[str, Any]:
    """Compiles and runs `cfg` once per shape; the relative error of each (run in a subprocess)."""
    import torch

    errors: dict[str, float] = {}
    t0 = time.perf_counter()
    for M, N, K in shapes:
        a, b, sa, sb, ref = make_inputs(M, N, K)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        _gluon_launch(cfg, a, b, sa, sb, out)()
        torch.cuda.synchronize()
        errors[f"{M}x{N}x{K}"] = rel_error(out, ref)
    return {"errors": errors, "seconds": time.perf_counter() - t0}


def run_probe(cfg: Cfg, shapes: list[tuple[int, int, int]]) -> dict[str, Any]:
    """`probe` in a subprocess (a fault or a hang there cannot take this process with it)."""
    cmd = [sys.executable, __file__, "--probe", json.dumps({"cfg": cfg, "shapes": shapes})]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {PROBE_TIMEOUT_S} s (a hang: barrier phase or wait count?)"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"probe exited {proc.returncode}: {tail[:300]}"}


def bench_shape(
    label: str, N: int, K: int, configs: list[Cfg], probes: dict[str, Any], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Rows of one shape: every variant checked, then timed in interleaved rounds."""
    import torch

    from autotune import Config, Problem
    from autotune.kernels.gemm_fp8_triton import FP8_SCALE_BLOCK, gemm_fp8_kernel, quant_launcher
    from autotune.kernels.gemm_quant_vendor import scaled_mm_launch

    M = M_PREFILL
    problem = Problem.quant("gemm_fp8_blockwise", M, N, K)
    a, b, sa, sb, ref = make_inputs(M, N, K)
    rows: list[dict[str, Any]] = []
    variants: dict[str, Callable[[], Any]] = {}
    outs: dict[str, Any] = {}

    def new_out() -> Any:
        return torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)

    def add(name: str, build: Callable[[Any], Callable[[], Any]]) -> None:
        out = new_out()
        try:
            launch = build(out)
            launch()
            torch.cuda.synchronize()
        except Exception as exc:  # a compile error or a feature this torch / Triton lacks
            rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, error=_short(exc)))
            print(f"  {name}: {rows[-1]['error']}", flush=True)
            return
        variants[name], outs[name] = launch, out

    add("scaled_mm", lambda out: scaled_mm_launch(problem, a, b, sa, sb, out))
    ptr = Config(backend="triton", BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, num_warps=8,
                 num_stages=4)  # fmt: skip
    strides = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))

    def pointer(out: Any) -> Callable[[], Any]:
        run = quant_launcher(gemm_fp8_kernel, ptr, is_amd=False,
                             constexprs=dict(BLOCKWISE=True, SCALE_BLOCK=FP8_SCALE_BLOCK))  # fmt: skip
        return lambda: run(a, b, out, sa, sb, strides, M, N, K, None)

    add(f"triton ptr {ptr.short()}", pointer)
    for cfg in configs:
        name = config_name(cfg)
        if "error" in probes[name]:
            rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, error=probes[name]["error"]))
            continue
        add(name, functools.partial(_gluon_launch, cfg, a, b, sa, sb))
    copy_src = ref.to(torch.bfloat16)
    copy_dst = torch.empty_like(copy_src)

    def copy_c() -> None:
        copy_dst.copy_(copy_src)

    variants["copy C"], outs["copy C"] = copy_c, copy_dst

    errors = {name: rel_error(outs[name], ref) for name in variants}
    flush = L2Flush(256 << 20, "cuda")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, launch in variants.items():
            samples[name].append(flushed_event_us(launch, flush, args.reps))
    for name, ts in samples.items():
        us = statistics.median(ts)
        after = rel_error(outs[name], ref)  # the last timed run's output: a race may show here only
        ok = errors[name] <= TOLERANCE and after <= TOLERANCE
        err = max(errors[name], after)
        rows.append(dict(shape=label, M=M, N=N, K=K, variant=name, us=us, rounds_us=ts,
                         tflops=problem.flops() / us / 1e6, rel_error=err, ok=ok))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one shape, two Gluon configs")
    ap.add_argument("--out", type=Path, default=None, help="directory for fp8_gluon.json (default: $OUT)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per variant and round (default 20)")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args()

    import torch
    import triton

    if args.probe:
        spec = json.loads(args.probe)
        cfg: Cfg = tuple(spec["cfg"])
        shapes_: list[tuple[int, int, int]] = [tuple(s) for s in spec["shapes"]]
        try:
            result = probe(cfg, shapes_)
        except Exception as exc:  # compile errors and faults go back to the parent as text
            result = {"error": _short(exc)}
        print(json.dumps(result), flush=True)
        return 0

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "quick": args.quick}  # fmt: skip
    shapes = SHAPES[:1] if args.quick else SHAPES
    configs = QUICK_CONFIGS if args.quick else CONFIGS
    check = [(M_PREFILL, N, K) for _, N, K in shapes] + RAGGED
    probes: dict[str, Any] = {}
    hung_warp_spec = ""
    for cfg in configs:
        name = config_name(cfg)
        if cfg[6] and hung_warp_spec:  # the same protocol: a hang would cost another PROBE_TIMEOUT_S
            probes[name] = {"error": f"not run: {hung_warp_spec} hung"}
            print(f"probe {name}: {probes[name]}", flush=True)
            continue
        probes[name] = run_probe(cfg, check)
        if cfg[6] and "timed out" in probes[name].get("error", ""):
            hung_warp_spec = name
        bad = {s: e for s, e in probes[name].get("errors", {}).items() if not e <= TOLERANCE}
        if bad:
            probes[name]["error"] = f"wrong results (max rel error) {bad}"
        print(f"probe {name}: {probes[name]}", flush=True)

    rows: list[dict[str, Any]] = []
    for label, N, K in shapes:
        print(f"\n{label}: M {M_PREFILL} N {N} K {K}", flush=True)
        rows += bench_shape(label, N, K, configs, probes, args)

    out_dir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        details = {"meta": meta, "probes": probes, "rows": rows}
        (out_dir / "fp8_gluon.json").write_text(json.dumps(details, indent=2))

    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}")
    for label, _, _ in shapes:
        mine = [r for r in rows if r["shape"] == label]
        mm = next((r["us"] for r in mine if r["variant"] == "scaled_mm" and "us" in r), float("nan"))
        print(f"\n{label}, M {M_PREFILL} (scaled_mm {mm:.1f} µs; ratio = scaled_mm time / time)")
        print(f"  {'variant':<52} {'µs':>8} {'TFLOP/s':>8} {'ratio':>6}")
        for r in sorted((r for r in mine if "us" in r), key=lambda r: r["us"]):
            flag = "" if r["ok"] else f"  WRONG ({r['rel_error']:.2g})"
            print(f"  {r['variant'][:52]:<52} {r['us']:>8.1f} {r['tflops']:>8.0f} {mm / r['us']:>6.2f}{flag}")
        for r in (r for r in mine if "error" in r):
            print(f"  {r['variant'][:52]:<52} failed: {r['error'][:120]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
