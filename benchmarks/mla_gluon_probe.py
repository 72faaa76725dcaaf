"""MLA decode on Hopper: the Gluon kernel (backend "gluon"), both schedules, beside the Triton kernel.

Shapes: H = 128 (--heads), DeepSeek-V3's 512 latent + 64 RoPE dims, a bf16 cache (--kv fp8e4m3: an e4m3
one, per-tensor scale) in pages of 64 tokens, batch 32 / 64 / 128 x context 4096 / 8192 / 32768
(--quick: batch 32 x context 4096, fewer configs).

Rules:
- Every config is checked before it is timed: its output (poisoned with NaN first) against the fp32
  reference `mla.ref.mla_reference` on random inputs (never zeros); printed: max abs error and
  ‖out − ref‖ / ‖ref‖. A NaN or a relative error over 2e-2 (5e-2 with FP8 queries, the op's FP8
  tolerance) fails the config (a FAIL line); so does a compile error. A failing config is skipped and
  the rest go on; the script exits 1 if any Gluon config failed. Each Gluon config is also checked once
  on ragged contexts (0, 1, 63, 64, 65, ... tokens) in pages of 64 and 128 tokens.
- Timing: CUDA graphs of 10 launches, the median of 20 replays, per launch (µs). TFLOP/s = B·H·ctx·2·(576 +
  512) / time. Timed: the Triton kernel's heuristic default (`MLA_DECODE.default_config`), strong Triton
  configs (64 heads x 8 warps, BLOCK_N 32 / 64, splits 1 / 2 / 4, 2 stages) and the Gluon configs: the
  lockstep schedule (SCHEDULE 0: BLOCK_N 32 / 64, stages, splits 1 / 2 / 4 / 8) and the seesaw (SCHEDULE
  1: 64 x 2, 32 x 2 to 4; a bf16 cache only). With an e4m3 cache the Gluon configs run with Q_FP8 0 and 1
  (--q-fp8) and the Triton kernel with its default only. A config outside the op's space is marked "*".
- A kernel that hangs ends the run after --hang-s seconds (with the traceback); a device fault ends it too
  (the CUDA context is lost): the JSON written so far (after each shape) stays.
- Prints one table: per shape the Triton default, the best Triton config, the best config of each Gluon
  schedule (µs, TFLOP/s), lockstep / best Triton and seesaw / lockstep. Details go to --out (default
  $OUT, else ./out): mla_gluon_probe.json.

    python benchmarks/mla_gluon_probe.py [--out DIR] [--quick] [--shapes 32x4096,64x8192] [--splits 1,2]
        [--schedules 0,1] [--rings 0:64:2,1:32:2] [--no-triton] [--heads 16] [--kv fp8e4m3] [--q-fp8 0,1]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.backends import split_workspace
from autotune.kernels.mla.gluon_launch import gluon_launcher
from autotune.kernels.mla.ref import mla_reference, paged_inputs

LATENT, ROPE, PAGE = 512, 64, 64
TOLERANCE = {False: 2e-2, True: 5e-2}  # (FP8 queries)
TRITON = [
    dict(BLOCK_H=64, num_warps=8, BLOCK_N=bn, num_kv_splits=s, num_stages=2)
    for bn in (32, 64)
    for s in (1, 2, 4)
]
#: (SCHEDULE, BLOCK_N, num_stages) of the Gluon configs: each of the shared memory's fits (the seesaw needs
#: 2 stages).
RINGS = (
    (0, 64, 1),
    (0, 64, 2),
    (0, 32, 2),
    (0, 32, 3),
    (0, 32, 4),
    (1, 32, 2),
    (1, 32, 3),
    (1, 32, 4),
    (1, 64, 2),
)
GLUON = [
    dict(BLOCK_N=bn, num_stages=st, num_kv_splits=s, SCHEDULE=sch)
    for sch, bn, st in RINGS
    for s in (1, 2, 4, 8)
]
RAGGED = [0, 1, 63, 64, 65, 1000, 2047, 4096]


def problem_of(B: int, ctx: int, heads: int, kv: str) -> Problem:
    return Problem.of(
        "mla_decode", B, LATENT, LATENT + ROPE, heads=heads, context=ctx, kv_dtype=kv, page_size=PAGE
    )


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs error, ‖out − ref‖ / ‖ref‖), NaN where out has one."""
    diff = out.double() - ref.double()
    return float(diff.abs().max()), float(diff.norm() / ref.double().norm())


def check(name: str, out: torch.Tensor, ref: torch.Tensor, log: dict[str, Any], tolerance: float) -> bool:
    worst, rel = errors(out, ref)
    ok = rel == rel and worst == worst and rel <= tolerance and not bool(out.isnan().any())
    log.update(max_abs=worst, rel=rel, ok=ok)
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: max abs {worst:.3e}, rel {rel:.3e}", flush=True)
    return ok


def graph_us(launch: Any, per_graph: int = 10, replays: int = 20) -> float:
    """µs a launch: the median of `replays` replays of a CUDA graph of `per_graph` launches."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        launch()  # warm: compiled and bound outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(per_graph):
            launch()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_graph)
    return sorted(times)[len(times) // 2]


def ragged_check(params: dict[str, Any], log: dict[str, Any], heads: int, kv_dtype: torch.dtype) -> bool:
    """A Gluon config on ragged contexts (RAGGED, with 0), in pages of 64 and 128 tokens."""
    ok = True
    tolerance = TOLERANCE[bool(params.get("Q_FP8", 0))]
    for page in (64, 128):
        q, kv, table, lens, kv_scale = paged_inputs(
            heads, LATENT, ROPE, page, RAGGED, kv_dtype=kv_dtype, device="cuda", seed=page
        )
        out = torch.full((len(RAGGED), heads, LATENT), float("nan"), device="cuda", dtype=torch.bfloat16)
        part, lse = split_workspace(Config(backend="gluon", **params), len(RAGGED), heads, LATENT, q.device)
        gluon_launcher(params)(q, kv, table, lens, out, part, lse, 0.1, kv_scale or 1.0)
        torch.cuda.synchronize()
        entry: dict[str, Any] = {}
        ref = mla_reference(q, kv, table, lens, 0.1, LATENT, kv_scale)
        ok &= check(f"ragged, page {page}", out, ref, entry, tolerance)
        log[f"ragged_p{page}"] = entry
    return ok


def run_config(
    p: Problem, config: Config, inputs: Any, ref: torch.Tensor, log: dict[str, Any]
) -> float | None:
    """The config's µs a launch on `p` once its output is right; None (and why, in `log`) if it fails."""
    target = local_target()
    try:
        out = MLA_DECODE.make_output(p, "cuda").fill_(float("nan"))
        launch = MLA_DECODE.prepare(p, config, target, inputs, out)
        launch()
        torch.cuda.synchronize()
        if not check(config.short(), out, ref, log, TOLERANCE[bool(config.get("Q_FP8", 0))]):
            return None
        us = graph_us(launch)
    except Exception as exc:  # a compile error, a launch the kernel refuses: this config only
        log.update(ok=False, error=f"{type(exc).__name__}: {exc}"[-3000:])
        print(f"  FAIL {config.short()}: {log['error'][:500]}", flush=True)
        traceback.print_exc(limit=3)
        return None
    log.update(us=us, tflops=p.flops() / us / 1e6)
    return us


def _ints(text: str) -> set[int]:
    return {int(v) for v in text.split(",") if v}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"), help="folder of the JSON details")
    ap.add_argument("--quick", action="store_true", help="batch 32 x context 4096 and fewer configs")
    ap.add_argument("--shapes", default="", help="BxCONTEXT,... instead of the default grid")
    ap.add_argument("--splits", default="", help="the Gluon configs' num_kv_splits (all: 1,2,4,8)")
    ap.add_argument("--schedules", default="0,1", help="the Gluon schedules timed")
    ap.add_argument("--rings", default="", help="SCHEDULE:BLOCK_N:stages,... of RINGS (all by default)")
    ap.add_argument("--no-triton", action="store_true", help="the Gluon configs only")
    ap.add_argument("--heads", type=int, default=128, help="query heads (default 128)")
    ap.add_argument("--kv", choices=("bf16", "fp8e4m3"), default="bf16", help="the cache's dtype")
    ap.add_argument("--q-fp8", default="0,1", help="the Gluon configs' Q_FP8 with an e4m3 cache")
    ap.add_argument(
        "--hang-s", type=float, default=300.0, help="seconds a config may take before the run ends"
    )
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    shapes = [(b, c) for c in (4096, 8192, 32768) for b in (32, 64, 128)]
    if args.quick:
        shapes = [(32, 4096)]
    if args.shapes:
        shapes = [(int(b), int(c)) for b, c in (x.split("x") for x in args.shapes.split(","))]
    splits = _ints(args.splits) or ({1, 2, 4} if args.quick else {1, 2, 4, 8})
    schedules = _ints(args.schedules)
    rings = {tuple(int(v) for v in r.split(":")) for r in args.rings.split(",") if r} or set(RINGS)
    fp8 = args.kv != "bf16"
    gluon = [
        g
        for g in GLUON
        if g["num_kv_splits"] in splits
        and g["SCHEDULE"] in schedules
        and (g["SCHEDULE"], g["BLOCK_N"], g["num_stages"]) in rings
        and not (fp8 and g["SCHEDULE"])  # the seesaw reads bf16
    ]
    if fp8:
        gluon = [g | dict(Q_FP8=q) for g in gluon for q in sorted(_ints(args.q_fp8))]
    kv_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    target = local_target()
    info = dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__("triton").__version__,
        heads=args.heads, kv=args.kv,
    )  # fmt: skip
    print(f"{info['device']}, torch {info['torch']}, triton {info['triton']}", flush=True)
    report: dict[str, Any] = dict(info=info, ragged={}, shapes=[])
    failed = False

    print("ragged contexts (Gluon configs):", flush=True)
    for params in gluon:
        name = Config(backend="gluon", **params).short()
        print(f" {name}", flush=True)
        entry: dict[str, Any] = {}
        faulthandler.dump_traceback_later(args.hang_s, exit=True)
        try:
            ok = ragged_check(params, entry, args.heads, kv_dtype)
        except Exception as exc:
            ok = False
            entry["error"] = f"{type(exc).__name__}: {exc}"[-3000:]
            print(f"  FAIL {name}: {entry['error'][:500]}", flush=True)
        faulthandler.cancel_dump_traceback_later()
        failed |= not ok
        report["ragged"][name] = entry

    kinds = ("triton-default", "triton", "gluon", "seesaw")
    rows = []
    for B, ctx in shapes:
        p = problem_of(B, ctx, args.heads, args.kv)
        print(f"\nB={B} ctx={ctx}: {MLA_DECODE.describe_problem(p)}", flush=True)
        inputs = MLA_DECODE.make_inputs(p, "cuda", seed=B + ctx)
        ref = MLA_DECODE.reference(p, inputs)
        space = MLA_DECODE.space(p, target)
        candidates = []
        if not args.no_triton:
            try:
                default = MLA_DECODE.default_config(p, target)
            except Exception:  # the static checks need the compiler's tools: the rule's pick then
                default = MLA_DECODE.default_candidates(p, target)[0]
            candidates += [("triton-default", default)]
            if not fp8:  # (the strong configs are bf16 ones; an FP8 cache's default is its strong one)
                candidates += [("triton", Config(backend="triton", **c)) for c in TRITON]
        candidates += [("seesaw" if g["SCHEDULE"] else "gluon", Config(backend="gluon", **g)) for g in gluon]
        shape: dict[str, Any] = dict(B=B, context=ctx, flops=p.flops(), configs=[])
        best: dict[str, tuple[float, str] | None] = dict.fromkeys(kinds)
        for kind, config in candidates:
            why = space.check(config)
            log: dict[str, Any] = dict(kind=kind, config=config.short(), space=why)
            faulthandler.dump_traceback_later(args.hang_s, exit=True)
            us = run_config(p, config, inputs, ref, log)
            faulthandler.cancel_dump_traceback_later()
            shape["configs"].append(log)
            if us is None:
                failed |= kind in ("gluon", "seesaw")
                continue
            print(f"    {us:9.1f} us {p.flops() / us / 1e6:6.1f} TFLOP/s", flush=True)
            name = config.short() + ("" if why is None else " *")
            for k in {kind, "triton"} if kind == "triton-default" else {kind}:
                if best[k] is None or us < best[k][0]:  # type: ignore[index]
                    best[k] = (us, name)
        shape["best"] = best
        report["shapes"].append(shape)
        rows.append((B, ctx, p.flops(), best))
        (out_dir / "mla_gluon_probe.json").write_text(json.dumps(report, indent=1))
        del inputs, ref
        torch.cuda.empty_cache()

    def ratio(num: tuple[float, str] | None, den: tuple[float, str] | None) -> str:
        return f"{num[0] / den[0]:6.2f}x" if num and den else f"{'-':>7}"

    heads = ("triton default", "best triton", "best lockstep", "best seesaw")
    print(
        "\n  B    ctx | "
        + " | ".join(f"{h:18}" for h in heads)
        + " | lock/tri | see/lock | best lockstep config | best seesaw config (* outside the space)"
    )
    for B, ctx, flops, best in rows:
        cells = [
            f"{best[k][0]:7.1f} us {flops / best[k][0] / 1e6:5.0f} TF" if best[k] else f"{'-':>18}"  # type: ignore[index]
            for k in kinds
        ]
        lock, see = best["gluon"], best["seesaw"]
        print(
            f"{B:>4} {ctx:>6} | {' | '.join(cells)} |  {ratio(best['triton'], lock)} |  {ratio(lock, see)} | "
            f"{lock[1] if lock else '-'} | {see[1] if see else '-'}"
        )
    (out_dir / "mla_gluon_probe.json").write_text(json.dumps(report, indent=1))
    print(
        f"\ndetails: {out_dir / 'mla_gluon_probe.json'}"
        + ("\nFAILED: a Gluon config was wrong or did not run" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
