"""How decode GEMMs split K (GPU): a reduce kernel, a sum in the GEMM's launch, or stream-K.

Decode grids have few tiles (N / BLOCK_N of them), often fewer than the GPU has SMs. Three ways to give
every SM work: SPLIT_K > 1 with the fp32 partials summed by a second kernel (two launches); the same with
FUSED_SPLIT = 1 (the last slice of a tile to finish adds the partials up in slice order, one launch);
STREAM_K = s (s programs per SM, each taking an equal run of the K steps of all tiles, tiles shared by
several programs summed by the last to finish). Per problem, a grid of decode tiles with each mode, no
split at all, the vendor library and our heuristic default, timed by the project's Benchmarker (CUDA-
graph replay for short launches, as the tuner times them) in interleaved rounds; every config passes the
correctness gate first. Problems: bf16 GEMMs of Llama-3.1-8B and -70B (TP 1 and 8) at M 1, 16 and 64, and
FP8 row-wise and blockwise gate/up projections of DeepSeek-V3 and Llama-3.1-70B at M 16, and ("narrow")
Llama-3.1-70B's QKV projection at TP 8 (N 1280) at M 256 and 1024 with prefill tiles. GB/s is the op's
minimum bytes over time, also as a fraction of a device copy measured in the same run.

    python benchmarks/split_modes.py --out results/ [--only dense|fp8|narrow]

Prints a short table last; details go to OUT/split_modes.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: (label, N, K) of the bf16 problems.
DENSE = [("llama-3.1-8b qkv", 6144, 4096), ("llama-3.1-8b down", 4096, 14336),
         ("llama-3.1-70b tp8 gate_up", 7168, 8192), ("llama-3.1-70b tp8 down", 8192, 3584)]  # fmt: skip
DENSE_M = (1, 16, 64)
#: (label, N, K) of the FP8 problems (M 16).
FP8 = [("deepseek-v3 tp8 gate_up", 4608, 7168), ("llama-3.1-70b tp8 gate_up", 7168, 8192)]
#: (label, N, K, Ms) of the narrow prefill problems: few tiles even at M 1024 (80 of 128 x 128).
NARROW = [("llama-3.1-70b tp8 qkv", 1280, 8192, (256, 1024))]
#: Grids: BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_stages (BLOCK_M 0: the narrowest tile covering M;
#: 4 warps, 8 for 128 x 128 tiles and larger).
GRID = {"dense": dict(bm=(0,), bn=(64, 128), bk=(64, 128, 256), split=(1, 2, 4, 8), stages=(4,)),
        "fp8": dict(bm=(0,), bn=(32, 64), bk=(256, 512), split=(1, 2, 4, 8), stages=(3, 4)),
        "narrow": dict(bm=(64, 128), bn=(64, 128), bk=(64,), split=(1, 2), stages=(3, 4))}  # fmt: skip


def _problems(only: str | None) -> list[tuple[str, str, Any]]:
    from autotune import Problem

    out: list[tuple[str, str, Any]] = []
    if only in (None, "dense"):
        out += [("dense", lbl, Problem.gemm(m, n, k, "bf16")) for lbl, n, k in DENSE for m in DENSE_M]
    if only in (None, "fp8"):
        out += [("fp8", lbl, Problem.quant(op, 16, n, k))
                for op in ("gemm_fp8_rowwise", "gemm_fp8_blockwise") for lbl, n, k in FP8]  # fmt: skip
    if only in (None, "narrow"):
        out += [("narrow", lbl, Problem.gemm(m, n, k, "bf16")) for lbl, n, k, ms in NARROW for m in ms]
    return out


def _configs(kind: str, problem: Any, op: Any, target: Any) -> dict[str, Any]:
    from autotune import Config
    from autotune.core.problem import next_pow2

    space = op.space(problem, target)
    configs: dict[str, Any] = {}
    for bm, bn, bk, split, stages in itertools.product(*GRID[kind].values()):
        bm = bm or max(16, next_pow2(problem.M))
        warps = 8 if bm * bn >= 128 * 128 else 4
        group = 1 if bm >= problem.M else 8
        # (FUSED_SPLIT, STREAM_K): reduce kernel or fused with split-K; none or stream-K without
        modes = [(0, 0), (1, 0)] if split > 1 else [(0, 0), (0, 1), (0, 2)]
        for fused, stream in modes:
            c = Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group,
                       SPLIT_K=split, FUSED_SPLIT=fused, STREAM_K=stream, num_warps=warps,
                       num_stages=stages)  # fmt: skip
            if c in space:
                configs[c.short()] = c
    configs["vendor"] = Config(backend="torch")
    configs["default"] = op.default_config(problem, target)
    return configs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for split_modes.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--only", choices=("dense", "fp8", "narrow"))
    args = ap.parse_args()

    import torch
    import triton

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    from gemm_quant import copy_bandwidth_gbps

    from autotune.core.target import local_target
    from autotune.engine.bench import Benchmarker, interleaved_medians
    from autotune.kernels import get_op

    target = local_target(0)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds}  # fmt: skip
    copy_gbps = copy_bandwidth_gbps()
    rows: list[dict[str, Any]] = []
    for kind, label, problem in _problems(args.only):
        op = get_op(problem.op)
        configs = _configs(kind, problem, op, target)
        t0 = time.perf_counter()
        res = interleaved_medians(Benchmarker(op, target), problem, configs, args.rounds)
        print(f"{problem.op} {label} M={problem.M}: {len(configs)} configs, {time.perf_counter() - t0:.0f} s",
              flush=True)  # fmt: skip
        for key, (us, status) in res.items():
            c = configs[key]
            gbps = problem.min_bytes() / us / 1e3 if us == us else float("nan")
            rows.append(dict(op=problem.op, shape=label, M=problem.M, N=problem.N, K=problem.K, variant=key,
                             us=us, gbps=gbps, copy_frac=gbps / copy_gbps, status=status,
                             split=int(c.get("SPLIT_K", 1)), fused=int(c.get("FUSED_SPLIT", 0)),
                             stream=int(c.get("STREAM_K", 0))))  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows}
    (args.out / "split_modes.json").write_text(json.dumps(doc, indent=2))

    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, copy {copy_gbps:.0f} GB/s")
    print(f"{'op':<10} {'shape':<26} {'M':>3} {'vendor':>7} {'default':>7} {'no split':>8} {'reduce':>7} "
          f"{'fused':>7} {'stream':>7} {'best/vendor':>11} {'copy%':>5}  best config")  # fmt: skip
    for group in dict.fromkeys((r["op"], r["shape"], r["M"]) for r in rows):
        sel = [r for r in rows if (r["op"], r["shape"], r["M"]) == group and r["us"] == r["us"]]

        def best(pick: Any, sel: list[dict[str, Any]] = sel) -> dict[str, Any] | None:
            return min((r for r in sel if pick(r)), key=lambda r: r["us"], default=None)

        picks = [best(lambda r: r["variant"] == "vendor"), best(lambda r: r["variant"] == "default"),
                 best(lambda r: r["split"] == 1 and not r["stream"] and r["variant"].startswith("triton")),
                 best(lambda r: r["split"] > 1 and not r["fused"] and r["variant"] != "default"),
                 best(lambda r: r["fused"] == 1 and r["variant"] != "default"),
                 best(lambda r: r["stream"] > 0 and r["variant"] != "default")]  # fmt: skip
        ours = min((p for p in picks[2:] if p), key=lambda r: r["us"], default=None)
        cells = [f"{p['us']:.2f}" if p else "-" for p in picks]
        ratio = f"{picks[0]['us'] / ours['us']:.3f}" if ours and picks[0] else "-"
        frac = f"{ours['copy_frac'] * 100:.0f}" if ours else "-"
        name = ours["variant"] if ours else ""
        op_name = group[0].replace("gemm_", "")[:10]
        print(f"{op_name:<10} {group[1][:26]:<26} {group[2]:>3} {cells[0]:>7} {cells[1]:>7} {cells[2]:>8} "
              f"{cells[3]:>7} {cells[4]:>7} {cells[5]:>7} {ratio:>11} {frac:>5}  {name}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
