"""How fast can a decode GEMM read its weight (GPU)? A probe: the read bandwidth of a plain reduction over
the weight, and the Triton GEMV of `autotune.kernels.gemv_triton` (no `tl.dot`: products summed along K in
registers; the probe's own copy of it, when BENCHMARKS.md's table was taken) for M = 1, 2 and 4,
next to cuBLAS (`torch.mm`) and the dense op's heuristic default, on the decode shapes of
`benchmarks/gemm.py`. CUDA-graph replay of 20 launches over 4 rotating weights (so L2 never holds one),
3 interleaved rounds, median; every GEMV result is checked against an fp32 reference first.

    python benchmarks/gemv_probe.py --out results/
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import triton

from autotune import Problem
from autotune.core.op import FP_OPTIONS
from autotune.engine.bench import graph_replays
from autotune.kernels import GEMM
from autotune.kernels.gemv_triton import gemv_kernel

SHAPES = (("llama-3.1-8b qkv", 6144, 4096), ("llama-3.1-8b down", 4096, 14336),
          ("llama-3.1-70b tp8 qkv", 1280, 8192), ("llama-3.1-70b tp8 gate_up", 7168, 8192))  # fmt: skip
ROTATE = 4


def graph_us(fns: list[Callable[[], Any]], reps: int = 20) -> float:
    """µs per call of `fns` (cycled), replayed as one CUDA graph of `reps` calls: median of 10 replays."""
    return statistics.median(graph_replays(fns, reps)(10))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gemv_probe.py needs a GPU", file=sys.stderr)
        return 2
    from autotune.core.target import local_target
    from autotune.kernels import launch_config

    target = local_target()
    torch.manual_seed(0)
    results: list[dict[str, Any]] = []
    lines = []
    for (name, N, K), M in itertools.product(SHAPES, (1, 2, 4)):
        ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(ROTATE)]
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ ws[0].float().T
        sums = [torch.empty(N, device="cuda") for _ in ws]
        outs = [torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for _ in ws]
        default = GEMM.default_config(Problem.gemm(M, N, K), target)
        pairs = list(zip(ws, sums, outs, strict=True))
        variants: dict[str, list[Callable[[], Any]]] = {
            "read (sum over K)": [
                partial(torch.sum, w, dim=1, dtype=torch.float32, out=s) for w, s, _ in pairs
            ],
            "cuBLAS": [partial(torch.mm, a, w.t(), out=o) for w, _, o in pairs],
            "default": [partial(launch_config, default, a, w, target=target) for w in ws],
        }
        for bn, bk, warps, stages in itertools.product((4, 8, 16), (256, 512, 1024), (4, 8), (1, 3)):
            if bn * bk > 16384:
                continue
            kernel = gemv_kernel[(triton.cdiv(N, bn),)]
            kw = dict(M=M, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=K % bk == 0, num_warps=warps, num_stages=stages,
                      **FP_OPTIONS)  # fmt: skip
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                kernel(a, ws[0], out, N, K, a.stride(0), 1, 1, ws[0].stride(0), out.stride(0), 1, **kw)
                torch.cuda.synchronize()
            except Exception as exc:  # a probe: record and go on
                results.append(dict(N=N, K=K, M=M, gemv=(bn, bk, warps, stages), error=str(exc)[:200]))
                continue
            err = float((out.float() - ref).norm() / ref.norm())
            if not err < 1e-2:
                results.append(dict(N=N, K=K, M=M, gemv=(bn, bk, warps, stages), error=f"wrong: {err}"))
                continue
            variants[f"gemv n{bn} k{bk} w{warps} s{stages}"] = [
                partial(kernel, a, w, o, N, K, a.stride(0), 1, 1, w.stride(0), o.stride(0), 1, **kw)
                for w, o in zip(ws, outs, strict=True)
            ]
        rounds: dict[str, list[float]] = {}
        for _ in range(3):
            for key, fns in variants.items():
                rounds.setdefault(key, []).append(graph_us(fns))
        med = {k: statistics.median(v) for k, v in rounds.items()}
        gemvs = {k: v for k, v in med.items() if k.startswith("gemv")}
        best = min(gemvs, key=gemvs.__getitem__) if gemvs else ""
        gb = (N * K * 2) / 1e3
        results.append(dict(name=name, N=N, K=K, M=M, us=med))
        lines.append(
            f"| {name} | {M} | {med['read (sum over K)']:.2f} ({gb / med['read (sum over K)']:.0f}) | "
            f"{med['cuBLAS']:.2f} ({gb / med['cuBLAS']:.0f}) | {med['default']:.2f} | "
            f"{gemvs.get(best, float('nan')):.2f} ({gb / gemvs.get(best, float('nan')):.0f}) | {best} |"
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gemv_probe.json").write_text(json.dumps(dict(gpu=target.name, rows=results), indent=1))
    print(f"{target.name} {target.toolchain}; µs (GB/s of the weight read)")
    print("| shape | M | read µs | cuBLAS µs | default µs | best GEMV µs | GEMV config |")
    print("|---|--:|--:|--:|--:|--:|---|")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
