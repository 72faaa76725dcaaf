"""Every op's heuristic default through the compile-only static checks (CPU only: Triton cross-compiles).

The grid: each op (the dense GEMM, the five quantized GEMMs, the fused MoE) x gfx942, gfx950 and sm_90 x
each layer of the specs that ship with the package (their GEMM shapes for every GEMM op, their MoE shapes
for the MoE) x every M of the serving ladder up to the layer's largest M in its spec. For each problem,
"before" is the op's first candidate (its rule's pick, the default before verdicts) and "after" the first
candidate whose binary passes the checks (`autotune.engine.verdicts`). A binary is compiled once: problems
whose default compiles to one binary (many M and layers share one) are one default of the counts. A
default passes when it compiles without spills, within the target's LDS and at or above the occupancy
floor; the columns count the defaults that spill, overflow LDS or fall under the floor.

    python benchmarks/defaults_grid.py [--sample] [--arch ARCH ...] [--op OP ...] [--workers N]
                                       [--cache DIR] [--out DIR]

--sample: M of 1, 2, 16, 64, 128, 256, 1024 and 4096 only, on the layers of the smoke, quant-smoke,
llama3-8b, moe-mixtral-8x7b and moe-deepseek-v3 specs. Prints a short table last; details (each
default: its config, static features, findings, and the layers and M it serves) go to --out
(defaults_grid.json).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import harness

ARCHS = ("gfx942", "gfx950", "sm_90")
GEMM_OPS = (
    "gemm",
    "gemm_fp8_rowwise",
    "gemm_fp8_blockwise",
    "gemm_mxfp8",
    "gemm_mxfp4",
    "gemm_mxfp4_bf16a",
)
OPS = (*GEMM_OPS, "moe")
SAMPLE_M = (1, 2, 16, 64, 128, 256, 1024, 4096)
SAMPLE_SPECS = ("smoke", "quant-smoke", "llama3-8b", "moe-mixtral-8x7b", "moe-deepseek-v3")
#: The findings a default is counted under (a default may have several).
KINDS = ("spills", "lds", "occupancy", "compile")


@dataclass(frozen=True)
class Layer:
    """One shape family of a shipped spec: a GEMM (N, K) or a MoE (N, K, E, topk, weights), its label and
    the M values of its serving ladder."""

    label: str
    moe: bool
    N: int
    K: int
    E: int
    topk: int
    weights: str | None
    ms: tuple[int, ...]


def layers(sample: bool) -> list[Layer]:
    """The distinct layers of the shipped specs (GEMM shapes once each, whatever their op or dtype in the
    spec), each with the serving ladder up to its largest M (its spec's M values included)."""
    from autotune.core.ladder import serving_ladder
    from autotune.kernels.moe.params import experts
    from autotune.sweeps import load_spec
    from autotune.sweeps.spec import EMBEDDED, embedded_specs

    found: dict[tuple[Any, ...], tuple[str, set[int]]] = {}
    for name in embedded_specs():
        if sample and name not in SAMPLE_SPECS:
            continue
        spec = load_spec(EMBEDDED / f"{name}.toml")  # by path: a name with dots is no file name by itself
        labels = spec.layers()
        for _, p in spec.problems():
            moe = p.op == "moe"
            e, topk = experts(p) if moe else (0, 0)
            key = (moe, p.N, p.K, e, topk, p.dtype_b if moe else None)
            shape = f"{p.N}x{p.K}" + (f" E{e} top{topk}" if moe else "")
            label = f"{name}: {labels.get(p, shape)}"
            found.setdefault(key, (label, set()))[1].add(p.M)
    out = []
    for (moe, n, k, e, topk, wdtype), (label, ms) in found.items():
        ladder = serving_ladder(max(ms), sorted(ms))
        if sample:
            ladder = tuple(m for m in SAMPLE_M if m <= max(ms)) or (min(ms),)
        weights = wdtype if moe and wdtype != "bf16" else None
        out.append(Layer(label, moe, n, k, e, topk, weights, ladder))
    return out


def _problem(op: str, layer: Layer, m: int) -> Any:
    from autotune.core.problem import Problem

    if op == "moe":
        return Problem.of("moe", m, layer.N, layer.K, "bf16", layer.weights, E=layer.E, topk=layer.topk)
    if op == "gemm":
        return Problem.of("gemm", m, layer.N, layer.K)
    return Problem.quant(op, m, layer.N, layer.K)


def run_cell(arch: str, op_name: str, grid: list[Layer], cache: str | None) -> dict[str, Any]:
    """One (target, op) of the grid, in a process of its own (no interpreter: the kernels are JIT
    functions): every problem's default before and after, grouped by binary."""
    os.environ.pop("TRITON_INTERPRET", None)
    if cache:
        os.environ["AUTOTUNE_VERDICT_CACHE"] = cache
    from autotune.core.registry import get_op
    from autotune.core.static import check_features
    from autotune.core.target import Target
    from autotune.engine.verdicts import verdicts

    target, op, v = Target.for_arch(arch), get_op(op_name), verdicts()
    start, compiled = time.perf_counter(), v.compiled
    groups: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"before": {}, "after": {}}
    problems = skipped = not_in_space = moved = 0
    for layer in grid:
        if layer.moe != (op_name == "moe"):
            continue
        for m in layer.ms:
            try:
                problem = _problem(op_name, layer, m)
                candidates = op.default_candidates(problem, target)
            except ValueError:  # the op does not take this shape (K not a multiple of its blocks, ...)
                skipped += 1
                continue
            problems += 1
            after = op.default_config(problem, target)
            moved += after != candidates[0]
            if op.space(problem, target).check(after) is not None:
                not_in_space += 1
            for when, config in (("before", candidates[0]), ("after", after)):
                key = v.key(op, problem, config, target) or "no launch"
                group = groups[when].get((config.canonical(), key))
                if group is None:
                    features = v.features(op, problem, config, target)
                    found = check_features(features, config, target, min_occupancy=v.policy.min_occupancy)
                    group = groups[when][(config.canonical(), key)] = {
                        "config": config.short(),
                        "candidate": candidates.index(config),
                        "features": features.summary(),
                        "findings": sorted({f.check for f in found}),
                        "serves": defaultdict(list),
                    }
                group["serves"][layer.label].append(m)
    counts: dict[str, dict[str, int]] = {}
    for when, found_groups in groups.items():
        c = {"defaults": len(found_groups), "pass": 0, **dict.fromkeys(KINDS, 0)}
        for g in found_groups.values():
            c["pass"] += not g["findings"]
            for kind in g["findings"]:
                c[kind] = c.get(kind, 0) + 1
        counts[when] = c
    return {
        "target": arch,
        "op": op_name,
        "problems": problems,
        "skipped": skipped,
        "moved": moved,
        "not_in_space": not_in_space,
        "compiled": v.compiled - compiled,
        "seconds": round(time.perf_counter() - start, 1),
        "counts": counts,
        "defaults": {
            when: [{**g, "serves": dict(g["serves"])} for g in found_groups.values()]
            for when, found_groups in groups.items()
        },
    }


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--sample", action="store_true", help="a few layers and M per regime (see above)")
    ap.add_argument("--arch", nargs="+", choices=ARCHS, default=list(ARCHS), help="targets (default: all)")
    ap.add_argument("--op", nargs="+", choices=OPS, default=list(OPS), help="ops (default: all)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: cores)")
    ap.add_argument(
        "--cache",
        metavar="DIR",
        help="the verdict cache's folder (default: $AUTOTUNE_VERDICT_CACHE, else the user cache folder); "
        "an empty folder measures the compiles from scratch",
    )
    harness.add_out(ap)
    args = ap.parse_args()
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    grid = layers(args.sample)
    cells = [(arch, op) for arch in args.arch for op in args.op]
    import multiprocessing

    results: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")  # fresh processes: no interpreter, no forked Triton
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
            futures = [pool.submit(run_cell, arch, op, grid, args.cache) for arch, op in cells]
            for future in as_completed(futures):
                r = future.result()
                results.append(r)
                print(f"{r['target']} {r['op']}: {r['problems']} problems, {r['compiled']} compiles, "
                      f"{r['seconds']:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    results.sort(key=lambda r: (ARCHS.index(r["target"]), OPS.index(r["op"])))
    info = harness.run_info(
        mode="sample" if args.sample else "full",
        layers=[vars(layer) | {"ms": list(layer.ms)} for layer in grid],
        note="compile-only, no GPU",
    )
    from autotune.core.target import toolchain_versions

    info["toolchain"] = toolchain_versions()
    path = harness.write_json(args.out, "defaults_grid", {"run": info, "cells": results})
    print(f"details: {path}")
    rows = []
    for r in results:
        b, a = r["counts"]["before"], r["counts"]["after"]
        rows.append((
            r["target"], r["op"], r["problems"],
            f"{b['pass']}/{b['defaults']}", b["spills"], b["lds"], b["occupancy"],
            f"{a['pass']}/{a['defaults']}", a["spills"], a["lds"], a["occupancy"], r["moved"],
        ))  # fmt: skip
    harness.print_table(
        ("target", "op", "problems", "before ok", "spill", "lds", "occ", "after ok", "spill", "lds", "occ",
         "moved"),
        rows,
        title=f"defaults passing the static checks ({'sample' if args.sample else 'full grid'}; defaults "
        "counted once per binary; moved: problems whose default is not the rule's pick)",
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
