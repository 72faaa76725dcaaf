"""Quantized-GEMM benchmark (GPU): tune each quantized op on real model shapes, then time side by side.

Shapes: dense GEMMs of one layer of DeepSeek-V3 and Llama-3.1-70B (TP 8, from `autotune.sweeps.catalog`),
at decode (M 1, 16, 64) and prefill (M 1024, 4096) token counts. Per (op, shape, M): our tuned winner
(the best of our Triton kernel, for the FP8 ops at M <= 4 the GEMV kernel and, for FP8 blockwise on
Hopper, the Gluon one), our heuristic default,
torch._scaled_mm where the installed torch runs that scaling mode (probed), and bf16 torch.matmul of the
same shape, in µs, TFLOP/s and GB/s (the op's minimum bytes: packed data and scales). Decode rows also
give GB/s as a fraction of a measured device copy bandwidth. All variants of a problem are timed in
interleaved rounds by one Benchmarker (same method for all). Each search ends with a final round
(--final-rounds, default 3 on a GPU): its two fastest configs timed again head to head, the faster of
which is the tuned winner (where the round holds the fastest measured config), so that one lucky timing
does not pick it. MX ops on a GPU without MX instructions
(H100, MI300X) are emulated (tiles dequantized to bf16 in the kernel): their rows say so.

    python benchmarks/gemm_quant.py --db quant.db --out results/                    # resumable tuning
    python benchmarks/gemm_quant.py --quick --out quant-quick.json                  # a few minutes
    python benchmarks/gemm_quant.py --phase measure --db quant.db --out ...         # from a tuned database
    python benchmarks/gemm_quant.py --interpret --out /tmp/q.json                   # CPU, tiny, no GPU
    python benchmarks/gemm_quant.py --ops gemm_fp8_blockwise --m 16,64 --method graph \
        --backends gluon --strategy exhaustive --trials 100 --out dec.json  # decode, one backend, graphs
    python benchmarks/gemm_quant.py --ops gemm_mxfp8 --trials 12 --seconds 15 --stop-after 540 \
        --prune compile,lds --db quant.db --out mx.json  # a bounded step of a long run; run it again to go on

With --stop-after, the run starts no problem (and no trial) past that many seconds: the tuning resumes from
the database when run again, and the measurement's --out holds the rows measured so far (it is rewritten
after every row).

Prints a short table last; details go to --out (OUT/gemm_quant.json, or the .json file named).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import tuned_config

from autotune import Config, Problem
from autotune.core.static import CHECKS, DEFAULT_CHECKS
from autotune.core.target import Target, local_target
from autotune.db import Store
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.engine.runner import Runner
from autotune.engine.strategies import Budget
from autotune.kernels import GEMM, get_op
from autotune.kernels.common.target import mx_native
from autotune.kernels.quant.problem import QUANT_OPS

#: (model, TP) whose dense layers are benchmarked, and the layers (catalog labels) of each.
MODELS = [("deepseek-v3", 8), ("llama-3.1-70b", 8)]
LAYERS = {"deepseek-v3": ("attn.q_a", "attn.o", "mlp.gate_up", "mlp.down"),
          "llama-3.1-70b": ("attn.qkv", "mlp.gate_up", "mlp.down")}  # fmt: skip
QUICK_LAYERS = {"deepseek-v3": ("mlp.gate_up",), "llama-3.1-70b": ("mlp.gate_up",)}
DECODE_M = (1, 16, 64)
PREFILL_M = (1024, 4096)
QUICK_M = (16, 2048)


def shapes(quick: bool, interpret: bool) -> list[tuple[str, int, int]]:
    """(label, N, K) of the benchmarked layers."""
    if interpret:
        return [("tiny", 64, 256)]
    from autotune.sweeps.catalog import layer_shapes

    layers = QUICK_LAYERS if quick else LAYERS
    out = []
    for model, tp in MODELS:
        for s in layer_shapes(model, tp=tp):
            if s.op == "gemm" and s.label in layers[model]:
                out.append((f"{model} tp{tp} {s.label}", s.N, s.K))
    return out


def problems(args: argparse.Namespace) -> list[tuple[str, Problem]]:
    ms = args.m or ((4,) if args.interpret else QUICK_M if args.quick else DECODE_M + PREFILL_M)
    ops = args.ops.split(",") if args.ops else list(QUANT_OPS)
    out = []
    for op in ops:
        for label, n, k in shapes(args.quick, args.interpret):
            if args.layers and not any(x in label for x in args.layers):
                continue
            for m in ms:
                try:
                    out.append((label, Problem.quant(op, m, n, k)))
                except ValueError as exc:  # K not a multiple of the op's scale block
                    print(f"skip {op} {label}: {exc}", file=sys.stderr)
    return out


def _ours(op: Any, target: Target, only: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Our kernels' backends of `op` on `target` (Triton, and Gluon for FP8 blockwise on Hopper), those of
    `only` where given: the vendor libraries are timed beside them, not tuned."""
    return tuple(b for b in op.backends(target) if b not in ("torch", "aiter") and (not only or b in only))


def _settings(target: Target, args: argparse.Namespace) -> BenchSettings:
    """The Benchmarker's settings: the interpreter's, or the GPU's with the timing method of --method."""
    return BenchSettings.for_interpreter() if target.interpreter else BenchSettings(method=args.method)


def _past(args: argparse.Namespace) -> bool:
    """Whether the run is past --stop-after."""
    return args.deadline is not None and time.monotonic() > args.deadline


def tune(store: Store, target: Target, todo: list[tuple[str, Problem]], args: argparse.Namespace) -> None:
    """Tunes each problem's kernels of ours (static checks compile ahead on every core on a GPU), until
    --stop-after; a run again resumes from the database."""
    from contextlib import ExitStack

    from autotune.engine.runner import SweepStopped

    settings = _settings(target, args)
    with ExitStack() as stack:
        checker = None
        if not target.interpreter and args.prune:
            from autotune.core.static import StaticPolicy
            from autotune.engine.checker import StaticChecker

            policy = StaticPolicy(prune=args.prune)
            checker = stack.enter_context(StaticChecker(target, policy, store=store))
        for i, (label, p) in enumerate(todo):
            op = get_op(p.op)
            runner = Runner(store, target, Benchmarker(op, target, settings=settings), checker=checker,
                            should_stop=lambda: _past(args), final_rounds=args.final_rounds)  # fmt: skip
            t0 = time.perf_counter()
            try:
                rep = runner.tune(op, p, strategy=args.strategy,
                                  budget=Budget(trials=args.trials, seconds=args.seconds),
                                  backends=_ours(op, target, args.backends))  # fmt: skip
            except SweepStopped:
                print(f"[tune] stopped at --stop-after, {len(todo) - i} problem(s) left: run again to go on")
                return
            best = rep.best.time_us if rep.best else math.nan
            pruned = sum(rep.static_pruned.values())
            print(f"[tune {i + 1}/{len(todo)}] {p.op} {label} M={p.M}: space {rep.space_size}, "
                  f"ran {rep.ran}, cached {rep.cached}, failed {rep.failed}, static-pruned {pruned}, "
                  f"best {best:.2f} µs, {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip


def measure(
    store: Store, target: Target, todo: list[tuple[str, Problem]], args: argparse.Namespace, copy_gbps: float
) -> list[dict[str, Any]]:
    """Times every problem's variants side by side, until --stop-after; --out is rewritten after each."""
    settings = _settings(target, args)
    bf16_bench = Benchmarker(GEMM, target, settings=settings)
    rows: list[dict[str, Any]] = []
    for i, (label, p) in enumerate(todo):
        if _past(args):
            print(f"[measure] stopped at --stop-after, {len(todo) - i} row(s) not measured", flush=True)
            break
        op = get_op(p.op)
        bench = Benchmarker(op, target, settings=settings)
        fingerprint = target.fingerprint()
        ours = _ours(op, target)
        tuned = tuned_config(store, p, fingerprint, ours)
        space = op.space(p, target)
        variants: dict[str, Config] = {"default": op.default_config(p, target)}
        if variants["default"].backend != "triton" and "triton" in ours:  # our Triton kernel's default too
            from autotune.kernels.quant.space import triton_default

            variants["triton_default"] = triton_default(p, target)
        if tuned is not None:
            variants["tuned"] = tuned
        vendor = Config(backend="torch")
        vendor_reason = "" if vendor in space else (space.check(vendor) or "")
        if not vendor_reason:
            variants["scaled_mm"] = vendor
        res = interleaved_medians(bench, p, variants, args.rounds)
        dense = Problem.of("gemm", p.M, p.N, p.K, "bf16")
        res |= {
            "bf16": interleaved_medians(bf16_bench, dense, {"bf16": Config(backend="torch")}, args.rounds)[
                "bf16"
            ]
        }
        emulated = p.op in ("gemm_mxfp8", "gemm_mxfp4", "gemm_mxfp4_bf16a") and not mx_native(target)
        row: dict[str, Any] = dict(op=p.op, shape=label, M=p.M, N=p.N, K=p.K, problem=p.key(),
                                   regime="decode" if p.M <= 64 else "prefill", emulated_mx=emulated,
                                   method=bench.method_for(p),
                                   scaled_mm=vendor_reason or "supported")  # fmt: skip
        row["configs"] = {k: c.short() for k, c in variants.items()}
        for name, (us, status) in res.items():
            prob = dense if name == "bf16" else p
            row[f"{name}_us"] = us
            row[f"{name}_tflops"] = prob.flops() / us / 1e6 if us == us else math.nan
            row[f"{name}_gbps"] = prob.min_bytes() / us / 1e3 if us == us else math.nan
            if copy_gbps > 0 and p.M <= 64:
                row[f"{name}_copy_frac"] = row[f"{name}_gbps"] / copy_gbps
            row.setdefault("status", {})[name] = status
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_details(args, target, copy_gbps, rows)
    return rows


def write_details(
    args: argparse.Namespace, target: Target, copy_gbps: float, rows: list[dict[str, Any]]
) -> Path:
    """--out: the run's settings, versions and rows."""
    details = harness.run_info(target, copy_gbps=copy_gbps, interpret=args.interpret,
                               args={k: str(v) for k, v in vars(args).items()}, rows=rows)  # fmt: skip
    return harness.write_json(args.out, "gemm_quant", details)


def report(rows: list[dict[str, Any]], copy_gbps: float) -> None:
    """The short table: per row, the tuned winner against scaled_mm and bf16, with speed-ups."""
    if copy_gbps > 0:
        print(f"\ndevice copy bandwidth: {copy_gbps:.0f} GB/s (decode GB/s also as a fraction of it)")
    table = []
    for r in rows:
        best = r.get("tuned_us", math.nan)
        best = r["default_us"] if math.isnan(best) else best
        mm, bf = r.get("scaled_mm_us", math.nan), r["bf16_us"]
        copy = r.get("tuned_copy_frac", r.get("default_copy_frac", math.nan))
        tflops = r.get("tuned_tflops", r["default_tflops"])
        gbps = r.get("tuned_gbps", r["default_gbps"])
        name = r["op"] + ("*" if r["emulated_mx"] else "")
        table.append(
            (name, r["shape"][:30], r["M"], best, tflops, gbps, 100 * copy, mm, bf, mm / best, bf / best)
        )
    cols = ("op", "shape", "M", "tuned µs", "TFLOP/s", "GB/s", "copy%", "scaled_mm µs", "bf16 µs", "vs mm",
            "vs bf16")  # fmt: skip
    harness.print_table(cols, table, digits=(0, 0, 0, 2, 1, 0, 0, 2, 2, 2, 2))
    if any(r["emulated_mx"] for r in rows):
        print("* MX emulated: this GPU has no MX instructions; the kernel dequantizes tiles to bf16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = harness.parser(__doc__)
    ap.add_argument("--phase", choices=("tune", "measure", "all"), default="all")
    ap.add_argument("--db", help="database of the tuning (resumable); default quant_bench.db (a temporary "
                    "file with --interpret)")  # fmt: skip
    harness.add_out(ap, "folder for gemm_quant.json, or a .json file")
    ap.add_argument("--ops", help=f"comma-separated ops (default all: {','.join(QUANT_OPS)})")
    ap.add_argument("--trials", type=int, help="tuning trials per problem (default 60; 8 with --quick)")
    ap.add_argument("--seconds", type=float, help="tuning wall seconds per problem (default: no limit)")
    ap.add_argument("--stop-after", type=float, metavar="SECONDS",
                    help="start no problem or trial after this many seconds of the run (default: no "
                    "limit)")  # fmt: skip
    ap.add_argument("--prune", default=",".join(DEFAULT_CHECKS),
                    help="static checks that prune a config before it runs, comma-separated, or 'none' "
                    f"(default all: {','.join(DEFAULT_CHECKS)})")  # fmt: skip
    ap.add_argument("--m", help="comma-separated token counts M (default decode 1, 16, 64 and prefill "
                    "1024, 4096)")  # fmt: skip
    ap.add_argument("--layers", help="comma-separated layers to run, each matching part of a label such as "
                    "'deepseek-v3 tp8 mlp.gate_up' (default every layer)")  # fmt: skip
    ap.add_argument("--backends", help="comma-separated backends of ours to tune (default all; the "
                    "measurement takes the best tuned of any of ours in the database)")  # fmt: skip
    ap.add_argument("--strategy", default="optuna", choices=("optuna", "random", "exhaustive"))
    ap.add_argument("--final-rounds", type=int, help="rounds of each search's final head-to-head of its two "
                    "fastest configs, whose fastest is then the tuned winner (default 3 on a GPU, 0 with "
                    "--interpret; 0: none)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    ap.add_argument("--method", default="auto", choices=("auto", "graph", "events"),
                    help="timing method of every problem (default auto: CUDA-graph replay where the first "
                    "config timed takes under 40 µs, else events)")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="one layer per model, M 16 and 2048, 8 trials")
    ap.add_argument("--interpret", action="store_true",
                    help="Triton's CPU interpreter on one tiny shape: checks the script, "
                    "times nothing real")  # fmt: skip
    args = ap.parse_args(argv)
    unknown = [o for o in (args.ops or "").split(",") if o and o not in QUANT_OPS]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(QUANT_OPS)}")
    try:
        args.m = tuple(int(m) for m in args.m.split(",")) if args.m else ()
    except ValueError:
        ap.error(f"--m takes comma-separated integers, not {args.m!r}")
    if any(m < 1 for m in args.m):
        ap.error(f"--m must be positive, not {args.m}")
    args.backends = tuple(b for b in (args.backends or "").split(",") if b)
    args.layers = tuple(x.strip() for x in (args.layers or "").split(",") if x.strip())
    labels = [label for label, _, _ in shapes(args.quick, args.interpret)]
    missing = [x for x in args.layers if not any(x in label for label in labels)]
    if missing:
        ap.error(f"--layers: no layer matches {', '.join(map(repr, missing))}; known: {'; '.join(labels)}")
    args.prune = () if args.prune == "none" else tuple(c for c in args.prune.split(",") if c)
    bad = [c for c in args.prune if c not in CHECKS]
    if bad:
        ap.error(f"unknown static check(s) {', '.join(bad)}; known: {', '.join(CHECKS)} or 'none'")
    for name in ("seconds", "stop_after"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    args.deadline = None if args.stop_after is None else time.monotonic() + args.stop_after
    if args.trials is None:
        args.trials = 2 if args.interpret else 8 if args.quick else 60
    if args.final_rounds is None:
        args.final_rounds = 0 if args.interpret else 3
    if args.interpret:
        args.rounds = 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.interpret:
        import os

        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
        target = Target.interpreter_target()
    else:
        target = local_target()
    todo = problems(args)
    db = args.db or (str(Path(tempfile.mkdtemp()) / "quant.db") if args.interpret else "quant_bench.db")
    copy_gbps = 0.0 if target.interpreter else harness.copy_gbps()
    rows: list[dict[str, Any]] = []
    with Store(db) as store:
        if args.phase in ("tune", "all"):
            tune(store, target, todo, args)
        if args.phase in ("measure", "all"):
            rows = measure(store, target, todo, args, copy_gbps)
    path = write_details(args, target, copy_gbps, rows)
    if rows:
        report(rows, copy_gbps)
    print(f"details: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
