"""FP8 blockwise prefill kernel variants (GPU), side by side in one run.

Blockwise, M = 2048: the pointer kernel (`gemm_fp8_kernel`) at its best earlier tiles against
the tensor-descriptor prototype (`fp8_tma_kernel.py`), one program per tile or persistent, with and without
Triton's warp specialization, A scales row-major (M, K/128) or M-major; next to torch._scaled_mm (cuBLAS
blockwise; its call includes a copy of C, timed alone as "copy C"). Events around each launch, L2 flushed
before every run, interleaved rounds; every output checked against the reference.

    python benchmarks/fp8_variants.py --out results/

Prints a short table last; details go to OUT/fp8_variants.json.
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

#: (label, N, K): the MLP gate/up projections of DeepSeek-V3 and Llama-3.1-70B at TP 8.
SHAPES = [("deepseek-v3 tp8 gate_up", 4608, 7168), ("llama-3.1-70b tp8 gate_up", 7168, 8192)]
#: Pointer-kernel prefill tiles: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages).
POINTER = [(128, 128, 128, 8, 4), (64, 128, 128, 4, 4), (128, 128, 256, 8, 3)]
#: Descriptor-kernel prefill tiles: (BLOCK_M, BLOCK_N, num_warps, num_stages).
TMA = [(64, 128, 4, 4), (64, 128, 4, 5), (128, 128, 8, 4), (128, 128, 4, 4), (128, 256, 8, 3),
       (64, 256, 4, 3)]  # fmt: skip
#: Stands for the output tensor in a call's arguments.
OUT = object()


def _runs(variants: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The variants that compile and run once, and the errors of those that do not."""
    import torch

    ok, failed = {}, {}
    for name, launch in variants.items():
        try:
            launch()
            torch.cuda.synchronize()
            ok[name] = launch
        except Exception as e:  # a compile error or an unsupported feature of this Triton
            failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e) else ''}"
            print(f"  {name}: {failed[name]}", flush=True)
    return ok, failed


def _prefill_shape(
    label: str, N: int, K: int, target: Any, sms: int, flush: Any, args: argparse.Namespace
) -> list[dict[str, Any]]:
    import torch
    from fp8_blockwise_epilogue import _compare
    from fp8_tma_kernel import fp8_tma_launcher

    from autotune import Config, Problem
    from autotune.kernels import get_op
    from autotune.kernels.gemm_fp8_triton import FP8_SCALE_BLOCK, gemm_fp8_kernel, quant_launcher

    op = get_op("gemm_fp8_blockwise")
    M = 2048
    problem = Problem.quant("gemm_fp8_blockwise", M, N, K)
    a, b, sa, sb = op.make_inputs(problem, "cuda", seed=1)
    sa_mmajor = sa.t().contiguous().t()
    ref = op.reference(problem, (a, b, sa, sb)).float()
    variants: dict[str, Any] = {}
    outs: dict[str, torch.Tensor] = {}

    def add(name: str, run: Any, call: tuple[Any, ...]) -> None:
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        outs[name] = out
        variants[name] = lambda: run(*(out if x is OUT else x for x in call))

    for bm, bn, bk, warps, stages in POINTER:
        config = Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1,
                        num_warps=warps, num_stages=stages)  # fmt: skip
        run = quant_launcher(gemm_fp8_kernel, config, is_amd=False,
                             constexprs=dict(BLOCKWISE=True, SCALE_BLOCK=FP8_SCALE_BLOCK))  # fmt: skip
        strides = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))
        add(f"ptr {config.short()}", run, (a, b, OUT, sa, sb, strides, M, N, K, None))
    kinds = itertools.product(TMA, (0, 1), (0, 1), (False, True))
    for (bm, bn, warps, stages), persistent, ws, mmajor in kinds:
        if persistent and ws:
            continue
        config = Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_M=8,
                        PERSISTENT=persistent, WARP_SPEC=ws, num_warps=warps, num_stages=stages)  # fmt: skip
        scale = sa_mmajor if mmajor else sa
        strides = (scale.stride(0), scale.stride(1), sb.stride(0), sb.stride(1))
        run = fp8_tma_launcher(config, blockwise=True, num_sms=sms)
        add(f"tma {config.short()}{' sa-M' if mmajor else ''}", run, (a, b, OUT, scale, sb, strides, M, N, K))
    vendor = Config(backend="torch")
    if vendor in op.space(problem, target):
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        outs["scaled_mm"] = out
        variants["scaled_mm"] = op.prepare(problem, vendor, target, (a, b, sa, sb), out)
    ok, failed = _runs(variants)
    copy_src = ref.to(torch.bfloat16)
    copy_dst = torch.empty_like(copy_src)
    ok["copy C"] = lambda: copy_dst.copy_(copy_src)
    outs["copy C"] = copy_dst
    rows = _compare(label, problem, op, ok, outs, ref, flush, args)
    return rows + [dict(shape=label, M=M, N=N, K=K, variant=k, error=v) for k, v in failed.items()]


def prefill(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from autotune.core.target import local_target

    target = local_target(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows: list[dict[str, Any]] = []
    for label, N, K in SHAPES:
        rows += _prefill_shape(label, N, K, target, sms, flush_buf.zero_, args)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for fp8_variants.json")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per variant and round (default 20)")
    args = ap.parse_args()

    import torch
    import triton

    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    pre = prefill(args)
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"meta": meta, "prefill": pre}
    (args.out / "fp8_variants.json").write_text(json.dumps(out, indent=2))

    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}")
    for shape in {r["shape"] for r in pre}:
        timed = sorted((r for r in pre if r["shape"] == shape and "us" in r), key=lambda r: r["us"])
        mm = next((r["us"] for r in timed if r["variant"] == "scaled_mm"), float("nan"))
        print(f"\nprefill {shape}, M 2048 (scaled_mm {mm:.1f} µs)")
        for r in timed[:12]:
            print(f"  {r['variant'][:70]:<70} {r['us']:>8.1f} µs {r['tflops']:>7.0f} TF "
                  f"{mm / r['us']:>5.2f}x {'ok' if r['ok'] else 'WRONG'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
