"""FP8 block-scaled kernels (GPU): one B scale per tile against a per-column B scale vector, side by side.

With the N tile dividing the 128-wide B scale block, every column of a tile shares one B scale per K
group, so a kernel scales each partial product with a per-row vector in one fused multiply-add. Forcing
the per-column path (a vector of B scales loaded per K group, an outer product, then the multiply-add),
which is what the kernels did before, gives the comparison: `B_SCALE_VECTOR=True` for the dense blockwise
GEMM (`gemm_fp8_kernel`), `moe_triton.PER_TILE_B_SCALE = False` for the fused MoE with FP8 weights.
Both paths run the same configs and inputs in interleaved rounds (CUDA events, L2 flushed before every
run), the dense GEMM next to torch._scaled_mm where the installed torch runs blockwise scaling; every
output is checked against the reference. Prints a short table last; details go to
OUT/fp8_blockwise_epilogue.json.

    python benchmarks/fp8_blockwise_epilogue.py --out results/ [--only gemm|moe]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotune.engine.bench import L2Flush, flushed_event_us

#: (label, N, K): the MLP gate/up projections of DeepSeek-V3 and Llama-3.1-70B at TP 8.
SHAPES = [("deepseek-v3 tp8 gate_up", 4608, 7168), ("llama-3.1-70b tp8 gate_up", 7168, 8192)]
#: (M, [(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K)]): prefill and decode tiles.
CONFIGS = {
    2048: [(128, 128, 128, 8, 4, 1), (128, 128, 128, 4, 4, 1), (64, 128, 128, 4, 4, 1),
           (128, 64, 128, 4, 4, 1), (128, 128, 256, 8, 3, 1), (64, 64, 128, 4, 5, 1)],
    16: [(16, 64, 256, 4, 3, 1), (16, 128, 256, 4, 3, 1), (16, 64, 512, 4, 3, 2), (16, 32, 256, 4, 4, 1)],
}  # fmt: skip
#: (label, E, N, K, topk, Ms): DeepSeek-V3's routed experts at TP 16 and at EP 8, FP8 block-scaled.
MOE_SHAPES = [("moe deepseek-v3 tp16", 256, 128, 7168, 8, (16, 1024)),
              ("moe deepseek-v3 ep8", 32, 2048, 7168, 8, (16, 4096))]  # fmt: skip
#: (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, num_warps, num_stages), besides the heuristic default.
#: Where the inputs live (a CPU check of this script sets "cpu").
DEVICE = "cuda"
MOE_CONFIGS = [(16, 64, 128, 4, 3), (64, 128, 128, 4, 3), (64, 64, 128, 4, 4)]


def _compare(
    label: str, problem: Any, op: Any, variants: dict[str, Any], outs: dict[str, Any], ref: Any,
    flush: Any, args: argparse.Namespace,
) -> list[dict[str, Any]]:  # fmt: skip
    """Checks every variant against `ref`, then times them in interleaved rounds; a row per variant."""
    import torch

    errors = {}
    for name, launch in variants.items():
        launch()
        torch.cuda.synchronize()
        errors[name] = float((outs[name].float() - ref).norm() / ref.norm())
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, launch in variants.items():
            samples[name].append(flushed_event_us(launch, flush, args.reps))
    rows = []
    for name, ts in samples.items():
        us = statistics.median(ts)
        rows.append(dict(shape=label, M=problem.M, N=problem.N, K=problem.K, variant=name, us=us,
                         tflops=problem.flops() / us / 1e6, rel_error=errors[name],
                         ok=errors[name] <= op.tolerance(problem)))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def moe_rows(target: Any, flush: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The fused MoE with FP8 block-scaled weights: per-tile against per-column B scales."""
    from autotune import Config, Problem
    from autotune.kernels import MOE, moe_triton

    rows: list[dict[str, Any]] = []
    for label, E, N, K, topk, ms in MOE_SHAPES:
        for M in ms:
            problem = Problem.moe(M, N, K, E, topk, weights="fp8e4m3")
            inputs = MOE.make_inputs(problem, DEVICE, seed=1)
            ref = MOE.reference(problem, inputs).float()
            configs = [MOE.default_config(problem, target)]
            for bm, bn, bk, warps, stages in MOE_CONFIGS:
                c = Config(backend="triton", BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
                           GROUP_SIZE_M=1, num_warps=warps, num_stages=stages)  # fmt: skip
                if c not in configs and bn <= N:
                    configs.append(c)
            variants: dict[str, Any] = {}
            outs: dict[str, Any] = {}
            for config in configs:
                for per_tile in (True, False):
                    out = MOE.make_output(problem, DEVICE).fill_(float("nan"))
                    launch = MOE.prepare(problem, config, target, inputs, out)
                    name = f"{config.short()} {'one' if per_tile else 'vector'}"
                    outs[name] = out

                    def run(launch: Any = launch, per_tile: bool = per_tile) -> None:
                        moe_triton.PER_TILE_B_SCALE = per_tile
                        launch()

                    variants[name] = run
            rows += _compare(label, problem, MOE, variants, outs, ref, flush, args)
    moe_triton.PER_TILE_B_SCALE = True
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for fp8_blockwise_epilogue.json")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per variant and round (default 30)")
    ap.add_argument("--only", choices=("gemm", "moe"), help="only the dense GEMM or only the fused MoE")
    args = ap.parse_args()

    import torch
    import triton

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    from autotune import Config, Problem
    from autotune.core.target import local_target
    from autotune.kernels import get_op
    from autotune.kernels.gemm_fp8_triton import FP8_SCALE_BLOCK, gemm_fp8_kernel, quant_launcher

    target = local_target(0)
    op = get_op("gemm_fp8_blockwise")
    flush = L2Flush(256 << 20, "cuda")

    rows: list[dict[str, Any]] = []
    for label, N, K in SHAPES if args.only in (None, "gemm") else ():
        for M, tiles in CONFIGS.items():
            problem = Problem.quant("gemm_fp8_blockwise", M, N, K)
            a, b, sa, sb = op.make_inputs(problem, "cuda", seed=1)
            ref = op.reference(problem, (a, b, sa, sb)).float()
            strides = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))
            variants: dict[str, Any] = {}
            outs: dict[str, torch.Tensor] = {}
            for bm, bn, bk, warps, stages, split in tiles:
                config = Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                SPLIT_K=split, num_warps=warps, num_stages=stages)  # fmt: skip
                ws = torch.empty(split * M * N, device="cuda", dtype=torch.float32) if split > 1 else None
                for vector in (False, True):
                    run = quant_launcher(gemm_fp8_kernel, config, is_amd=False, constexprs=dict(
                        BLOCKWISE=True, SCALE_BLOCK=FP8_SCALE_BLOCK, B_SCALE_VECTOR=vector))  # fmt: skip
                    out = op.make_output(problem, "cuda").fill_(float("nan"))
                    name = f"{config.short()} {'vector' if vector else 'one'}"
                    outs[name] = out
                    call = (a, b, out, sa, sb, strides, M, N, K, ws)
                    variants[name] = lambda run=run, call=call: run(*call)
            vendor = Config(backend="torch")
            if vendor in op.space(problem, target):
                out = op.make_output(problem, "cuda").fill_(float("nan"))
                outs["scaled_mm"] = out
                variants["scaled_mm"] = op.prepare(problem, vendor, target, (a, b, sa, sb), out)
            rows += _compare(label, problem, op, variants, outs, ref, flush, args)

    if args.only in (None, "moe"):
        rows += moe_rows(target, flush, args)

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "reps": args.reps}  # fmt: skip
    (args.out / "fp8_blockwise_epilogue.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))

    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}")
    print(f"{'shape':<26} {'M':>5} {'config':<34} {'one µs':>8} {'vector µs':>9} {'speed-up':>8} "
          f"{'TFLOP/s':>8} {'vs mm':>6} {'ok':>3}")  # fmt: skip
    by = {(r["shape"], r["M"], r["variant"]): r for r in rows}
    for (shape, M, name), r in by.items():
        if not name.endswith(" one"):
            continue
        vec = by[(shape, M, name[: -len(" one")] + " vector")]
        mm = by.get((shape, M, "scaled_mm"))
        ratio = f"{mm['us'] / r['us']:.2f}" if mm else "-"
        ok = "yes" if r["ok"] and vec["ok"] else "NO"
        print(f"{shape[:26]:<26} {M:>5} {name[: -len(' one')][:34]:<34} {r['us']:>8.2f} {vec['us']:>9.2f} "
              f"{vec['us'] / r['us']:>8.2f} {r['tflops']:>8.1f} {ratio:>6} {ok:>3}")  # fmt: skip
    for (shape, M, name), r in by.items():
        if name == "scaled_mm":
            print(f"{shape[:26]:<26} {M:>5} torch._scaled_mm {r['us']:.2f} µs, {r['tflops']:.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
