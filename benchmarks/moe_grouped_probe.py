# ruff: noqa
"""Probe (GPU): is the vendor's grouped GEMM (`torch._grouped_mm`) a faster MoE at prefill than the Triton
kernel with vLLM's shipped configs?

Per (layer, M), three calls on the same inputs, each captured in a CUDA graph and replayed, in
interleaved rounds (median of round medians):
- `file`: `autotune.kernels.fused_moe` forced to vLLM's file config at its nearest M key, in vLLM's
  structure (the baseline of `moe.py`);
- `default`: the entry point without a table (our heuristic default);
- `grouped`: the pairs sorted by expert (argsort), the tokens gathered, `torch._grouped_mm` over w1
  (2N columns), SiLU·up, `torch._grouped_mm` over w2, the routing weight, unsorted and summed over top-k.
Each output is checked against the reference first. Also `gemms`: the two grouped GEMMs alone.

    python benchmarks/moe_grouped_probe.py --vllm-configs DIR --out results/
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.db.vllm import VLLM_KEYS, plain_keys
from autotune.dispatch.ranges import imported_pick
from autotune.kernels import fused_moe
from autotune.kernels.moe.op import MOE

LAYERS = {
    "Mixtral TP2": (8, 7168, 4096, 2),
    "Qwen3-30B TP1": (128, 768, 2048, 8),
}
MS = (64, 128, 256, 512, 1024, 2048, 4096)


def grouped_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
                ids: torch.Tensor, gemms_only: bool = False) -> torch.Tensor:  # fmt: skip
    M, K = x.shape
    E, N2, _ = w1.shape
    topk = ids.shape[1]
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, dtype=torch.int32, device=x.device)
    counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    xs = x.index_select(0, order // topk)
    h = torch._grouped_mm(xs, w1.transpose(1, 2), offs=offs)
    a = F.silu(h[:, : N2 // 2]) * h[:, N2 // 2 :]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    if gemms_only:
        return y
    y = y * weights.reshape(-1)[order].unsqueeze(1).to(y.dtype)
    back = torch.empty_like(y)
    back[order] = y
    return back.view(M, topk, K).sum(1)


def graph_of(fn: Any) -> torch.cuda.CUDAGraph:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_graph(g: torch.cuda.CUDAGraph, reps: int) -> float:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


BASES = {
    "u128x256s4": dict(
        BLOCK_SIZE_M=128,
        BLOCK_SIZE_N=256,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=8,
        num_stages=4,
        GATE_UP_FUSED=0,
    ),
    "u128x256s3": dict(
        BLOCK_SIZE_M=128,
        BLOCK_SIZE_N=256,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=8,
        num_stages=3,
        GATE_UP_FUSED=0,
    ),
    "f128x128s4": dict(
        BLOCK_SIZE_M=128,
        BLOCK_SIZE_N=128,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=8,
        num_stages=4,
        GATE_UP_FUSED=1,
    ),
    "f64x128s4": dict(
        BLOCK_SIZE_M=64,
        BLOCK_SIZE_N=128,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=4,
        num_stages=4,
        GATE_UP_FUSED=1,
    ),
    "u64x128s4": dict(
        BLOCK_SIZE_M=64,
        BLOCK_SIZE_N=128,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=4,
        num_stages=4,
        GATE_UP_FUSED=0,
    ),
    "u64x256s4": dict(
        BLOCK_SIZE_M=64,
        BLOCK_SIZE_N=256,
        BLOCK_SIZE_K=64,
        GROUP_SIZE_M=16,
        num_warps=8,
        num_stages=4,
        GATE_UP_FUSED=0,
    ),
}


def persistent_probe(out: Path) -> int:
    rows = []
    for name, (E, N, K, topk) in LAYERS.items():
        for M in (128, 512, 1024, 4096):
            p = Problem.moe(M, N, K, E, topk, dtype="bf16")
            x, w1, w2, weights, ids, _, _ = MOE.make_inputs(p, "cuda", seed=0)
            ref = MOE.reference(p, (x, w1, w2, weights, ids, None, None)).float()
            fns, outs = {}, {}
            for base, c in BASES.items():
                for pers in (0, 1, 2) if c["num_warps"] == 4 else (0, 1):
                    for tma in (0, 1):
                        cfg = Config(backend="triton", **c, SPLIT_K=1, B_TMA=tma, PERSISTENT=pers)
                        key = f"{base}/P{pers}T{tma}"
                        o = outs[key] = torch.empty_like(x)
                        fns[key] = lambda o=o, cfg=cfg: fused_moe(x, w1, w2, weights, ids, out=o, config=cfg)
            graphs, errs = {}, {}
            for k, f in fns.items():
                try:
                    f()
                    torch.cuda.synchronize()
                    errs[k] = float(((outs[k].float() - ref).abs().max() / ref.abs().max()).item())
                    graphs[k] = graph_of(f)
                except Exception as exc:  # a config that does not fit: its row says why
                    errs[k] = str(exc).splitlines()[0][:120]
            med: dict[str, list[float]] = {k: [] for k in graphs}
            keys = list(graphs)
            for r in range(3):
                for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                    med[k].append(time_graph(graphs[k], 20))
            us = {k: statistics.median(v) for k, v in med.items()}
            row = dict(layer=name, M=M, us=us, errs=errs)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del graphs
    (out / "moe_persistent_probe.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'layer':<14} {'M':>5} " + " ".join(f"{b:>22}" for b in BASES))
    print(f"{'':<14} {'':>5} " + " ".join(f"{'P0T0 P1T0/P0 P1T1/P0':>22}" for b in BASES))
    for r in rows:
        cells = []
        for b in BASES:
            u = r["us"]
            base = u.get(f"{b}/P0T0", float("nan"))
            cells.append(
                f"{base:>8.1f} {base / u.get(f'{b}/P1T0', float('nan')):>6.3f} "
                f"{base / u.get(f'{b}/P1T1', float('nan')):>6.3f}"
            )
        best0 = min((v for k, v in r["us"].items() if "/P0" in k), default=float("nan"))
        best1 = min((v for k, v in r["us"].items() if "/P1" in k), default=float("nan"))
        print(
            f"{r['layer']:<14} {r['M']:>5} "
            + " ".join(f"{c:>22}" for c in cells)
            + f"  best P0/P1 {best0 / best1:.3f}"
        )
    return 0


def main() -> int:
    if "--persistent" in sys.argv:
        out = Path(sys.argv[sys.argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        return persistent_probe(out)
    folder = Path(sys.argv[sys.argv.index("--vllm-configs") + 1])
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    target = local_target()
    rows = []
    for name, (E, N, K, topk) in LAYERS.items():
        file = json.loads(
            (folder / f"E={E},N={N},device_name={target.name.replace(' ', '_')}.json").read_text()
        )
        shipped = {int(m): Config(backend="triton", **{k: int(c[k]) for k in VLLM_KEYS}, **plain_keys(target))
                   for m, c in file.items()}  # fmt: skip
        for M in MS:
            p = Problem.moe(M, N, K, E, topk, dtype="bf16")
            x, w1, w2, weights, ids, _, _ = MOE.make_inputs(p, "cuda", seed=0)
            ref = MOE.reference(p, (x, w1, w2, weights, ids, None, None))
            outs = {k: torch.empty_like(x) for k in ("file", "default", "grouped")}
            cfg = imported_pick(shipped, M)
            fns = {
                "file": lambda: fused_moe(x, w1, w2, weights, ids, out=outs["file"], config=cfg),
                "default": lambda: fused_moe(x, w1, w2, weights, ids, out=outs["default"]),
                "grouped": lambda: outs["grouped"].copy_(grouped_moe(x, w1, w2, weights, ids)),
                "gemms": lambda: grouped_moe(x, w1, w2, weights, ids, gemms_only=True),
            }
            errs = {}
            for k in ("file", "default", "grouped"):
                fns[k]()
                torch.cuda.synchronize()
                got = outs[k].float()
                errs[k] = float(((got - ref.float()).abs().max() / ref.float().abs().max()).item())
            graphs = {k: graph_of(f) for k, f in fns.items()}
            med: dict[str, list[float]] = {k: [] for k in graphs}
            for r in range(5):
                for k in list(graphs)[r % 4 :] + list(graphs)[: r % 4]:
                    med[k].append(time_graph(graphs[k], 30))
            row = dict(layer=name, M=M, file_cfg=cfg.short(), errs=errs,
                       **{f"{k}_us": statistics.median(v) for k, v in med.items()})  # fmt: skip
            row["file_over_grouped"] = row["file_us"] / row["grouped_us"]
            row["file_over_default"] = row["file_us"] / row["default_us"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            del graphs
    (out / "moe_grouped_probe.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'layer':<14} {'M':>5} {'file':>9} {'default':>9} {'grouped':>9} {'gemms':>9} "
          f"{'file/grp':>8} {'file/def':>8} err_grp")  # fmt: skip
    for r in rows:
        print(f"{r['layer']:<14} {r['M']:>5} {r['file_us']:>9.1f} {r['default_us']:>9.1f} {r['grouped_us']:>9.1f} "
              f"{r['gemms_us']:>9.1f} {r['file_over_grouped']:>8.3f} {r['file_over_default']:>8.3f} "
              f"{r['errs']['grouped']:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
