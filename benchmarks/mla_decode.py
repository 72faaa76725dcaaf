"""MLA decode (GPU): the tuned split-KV kernel against a fixed default of splits and tiles and the PyTorch
baseline, and the KV-cache read bandwidth it reaches against a copy's, measured in the same run.

Grid (default): batch 1, 4, 32, 64, 128, 256 x context 1K, 4K, 8K, 32K x H = 16 and 128 x bf16 and FP8
caches, DeepSeek-V3's 512 latent + 64 RoPE dims, pages of --page-sizes tokens (several: each is tuned and
the fastest reported per shape). Phase `sweep` tunes the grid: `autotune sweep` of OUT/mla.toml (the Triton
kernel, --trials a problem, no M profile), then on Hopper of OUT/mla-gluon.toml (the Gluon kernel, on the
grid's bf16 and e4m3 problems, --trials a problem), into one database. Phase `measure` times, per problem,
in interleaved rounds on the same inputs: `tuned` (the sweep's winner over both kernels), `triton` (the
winner among the Triton kernel's configs alone), `fixed` (FIXED: 8 splits, 16 heads x 32 tokens a tile,
whatever the shape) and `torch` (the gathered baseline). Each output is checked against the reference first.
KV GB/s is the cache bytes a call must read over the tuned time; "of copy" divides it by the bandwidth of a
1 GiB device copy (read + write bytes over its time); TFLOP/s counts both dots, B·H·context·2·(576 + 512)
over the tuned time. Every time above is a launch after a cache flush and an idle spin (CUDA events);
`served` times the tuned config again as a decode step runs it, in CUDA-graph replays back to back over
rotating inputs (`BenchSettings.as_served`), in the same rounds.

    python benchmarks/mla_decode.py --out results/                  # sweep, then measure
    python benchmarks/mla_decode.py --phase measure --out results/

Prints a short table last; every row goes to --out (mla_decode.json).
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
from autotune.core.target import Target, local_target
from autotune.db import Store
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels import MLA_DECODE

LATENT, K = 512, 576
GLUON = "gluon"
#: The fixed default the tuned kernel is compared with (AMD adds its two knobs; an FP8 cache bf16 queries
#: and, where the space has the knobs, bf16 tiles, unswapped).
FIXED = dict(num_kv_splits=8, BLOCK_H=16, BLOCK_N=32, num_warps=4, num_stages=2)


def fixed(problem: Problem, target: Target) -> Config:
    extra: dict[str, int] = dict(waves_per_eu=0, matrix_instr_nonkdim=16) if target.is_amd else {}
    if dict(problem.extra)["kv_dtype"] != "bf16":
        extra["Q_FP8"] = 0
        params = MLA_DECODE.space(problem, target).subspace("triton").params
        extra |= {knob: 0 for knob in ("F16_TILES", "SWAP") if knob in params}
    return Config(backend="triton", **FIXED, **extra)


def grid(args: Any) -> list[Problem]:
    return [
        Problem.of("mla_decode", b, LATENT, K, heads=h, context=c, kv_dtype=kv, page_size=page)
        for kv in args.kv for h in args.heads for c in args.contexts for b in args.batches
        for page in args.page_sizes
    ]  # fmt: skip


def spec_text(args: Any, backend: str = "triton") -> str:
    """The sweep of one kernel: the Triton kernel on the whole grid, the Gluon one on its bf16 and e4m3
    problems ("" where the grid has none)."""
    heads, kv = args.heads, args.kv
    if backend == GLUON:
        kv = [k for k in kv if k in ("bf16", "fp8e4m3")]
        if not kv:
            return ""
    return (
        f'name = "mla-decode-bench-{backend}"\n[[sweep]]\nop = "mla_decode"\nnk = [[{LATENT}, {K}]]\n'
        f"m = {args.batches}\nheads = {heads}\ncontext = {args.contexts}\n"
        f'kv_dtype = {json.dumps(kv)}\npage_size = {args.page_sizes}\nbackends = ["{backend}"]\n'
        f'strategy = "optuna"\ntrials = {args.trials}\nprofile_m = false\n'
    )


def sweep(args: Any, db: Path) -> None:
    from autotune.kernels.mla.gluon_space import gluon_runs

    backends = ["triton", *([GLUON] if gluon_runs(local_target()) else [])]
    for backend in backends:
        text = spec_text(args, backend)
        if not text:
            continue
        spec = args.out / ("mla.toml" if backend == "triton" else f"mla-{backend}.toml")
        spec.write_text(text, encoding="utf-8")
        cmd = [*harness.CLI, "sweep", str(spec), "--db", str(db), "--no-progress", "--log-dir", "none"]
        code, _ = harness.run_logged(cmd, args.out / f"sweep-{backend}.log")
        if code != 0:
            raise SystemExit(f"the {backend} sweep failed with exit code {code} (see sweep-{backend}.log)")


def measure(args: Any, db: Path) -> tuple[list[dict[str, Any]], float]:
    target = local_target()
    copy = harness.copy_gbps()
    print(f"copy bandwidth {copy:.0f} GB/s", flush=True)
    bench = Benchmarker(MLA_DECODE, target)
    served = Benchmarker(MLA_DECODE, target, settings=BenchSettings().as_served())
    rows = []
    with Store(str(db)) as store:
        for p in grid(args):
            tuned = harness.tuned_config(store, p, target.fingerprint(), ("triton", GLUON))
            triton = harness.tuned_config(store, p, target.fingerprint(), ("triton",))
            default = MLA_DECODE.default_config(p, target)
            variants = {"tuned": tuned or default, "triton": triton or default, "fixed": fixed(p, target),
                        "torch": Config(backend="torch")}  # fmt: skip
            own = dict(p.extra)
            row: dict[str, Any] = dict(B=p.M, context=own["context"], H=own["heads"], kv=own["kv_dtype"],
                                       page=own["page_size"], tuned_from="sweep" if tuned else "default",
                                       splits=variants["tuned"]["num_kv_splits"])  # fmt: skip
            row |= harness.side_by_side(
                bench, p, variants, args.rounds, {"served": (served, variants["tuned"])}
            )
            cache = p.M * int(own["context"]) * K * (1 if own["kv_dtype"] != "bf16" else 2)
            flops = p.M * int(own["heads"]) * int(own["context"]) * 2 * (K + LATENT)
            row |= dict(cache_mb=cache / 1e6, kv_gbps=cache / row["tuned_us"] / 1e3,
                        tflops=flops / row["tuned_us"] / 1e6, served_tflops=flops / row["served_us"] / 1e6,
                        backend=variants["tuned"].backend)  # fmt: skip
            row["of_copy"] = row["kv_gbps"] / copy
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows, copy


def _span(xs: list[float]) -> str:
    return f"{min(xs, default=math.nan):.0f}-{max(xs, default=math.nan):.0f}"


def report(rows: list[dict[str, Any]]) -> None:
    """Per (H, cache dtype): geomean of triton / tuned, fixed / tuned and torch / tuned, the lowest
    triton / tuned, the lowest fraction of the copy bandwidth where the cache is >= 64 MB, and the TFLOP/s
    of the rows with batch >= 32 and context >= 4K; then the picks per (batch, context)."""
    table = []
    for key in sorted({(r["H"], r["kv"]) for r in rows}):
        rs = [r for r in rows if (r["H"], r["kv"]) == key]
        big = [r["of_copy"] for r in rs if r["cache_mb"] >= 64 and r["of_copy"] > 0]
        large = [r["tflops"] for r in rs if r["B"] >= 32 and r["context"] >= 4096 and r["tflops"] > 0]
        large_served = [r["served_tflops"] for r in rs if r["B"] >= 32 and r["context"] >= 4096]
        gain = [r["triton_us"] / r["tuned_us"] for r in rs]
        table.append([f"H{key[0]} {key[1]}", len(rs), harness.geomean(gain), min(gain, default=math.nan),
                      harness.geomean(r["fixed_us"] / r["tuned_us"] for r in rs),
                      harness.geomean(r["torch_us"] / r["tuned_us"] for r in rs),
                      min(big, default=math.nan),
                      _span(large), _span(large_served)])  # fmt: skip
    print("\npicks (H kv: B x context -> the tuned config's splits, if swapped, the fastest page size):")
    shapes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        shapes.setdefault((r["H"], r["kv"], r["B"], r["context"]), []).append(r)
    for (h, kv, b, c), rs in shapes.items():
        best = min(rs, key=lambda r: r["tuned_us"] if r["tuned_us"] > 0 else math.inf)
        tuned = str(best["configs"].get("tuned", ""))
        kind = ", swapped" if "SWAP1" in tuned.split() else ""
        gain = best["triton_us"] / best["tuned_us"]
        print(
            f"  H{h} {kv}: {b} x {c} -> {best['backend']}, {best['splits']} splits{kind}, "
            f"page {best['page']}, {best['tflops']:.0f} TFLOP/s ({best['served_tflops']:.0f} served), "
            f"triton/tuned {gain:.2f}"
        )
    cols = ("shapes", "rows", "triton/tuned", "lowest", "fixed/tuned", "torch/tuned",
            "min of copy (>= 64 MB)", "TFLOP/s (B >= 32, ctx >= 4K)", "served")  # fmt: skip
    title = "MLA decode: speedups (geomean) and bandwidth"
    harness.print_table(cols, table, digits=(0, 0, 2, 2, 2, 2, 2, 0, 0), title=title)


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--phase", choices=("all", "sweep", "measure"), default="all")
    ap.add_argument("--db", type=Path, help="the database (default OUT/mla.db)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 32, 64, 128, 256])
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192, 32768])
    ap.add_argument("--heads", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--kv", nargs="+", default=["bf16", "fp8e4m3"])
    ap.add_argument(
        "--page-sizes", type=int, nargs="+", default=[64], help="several: the fastest is reported"
    )
    ap.add_argument("--trials", type=int, default=24, help="sweep trials a problem")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    harness.add_out(ap, "results folder")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.db or args.out / "mla.db"
    t0 = time.perf_counter()
    if args.phase in ("all", "sweep"):
        sweep(args, db)
    if args.phase in ("all", "measure"):
        rows, copy = measure(args, db)
        info = harness.run_info(local_target(), args=vars(args), copy_gbps=copy, rows=rows)
        harness.write_json(args.out, "mla_decode", info)
        report(rows)
    print(f"{args.phase}: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
