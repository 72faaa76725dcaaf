"""Probe (GPU, Hopper): where the MLA Gluon kernel's time goes beside its tiles at batch 32 — the split
parts (fp32 against bf16), the reduce launch, and the fixed cost of a program — timed as the benchmark
times a call over 151 MB: a flush, then CUDA events around the launch.

    python benchmarks/mla_split_probe.py --out results/

Prints one line per (heads, context, config, variant): µs and TFLOP/s; details to OUT/mla_split_probe.json.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import harness
import torch

from autotune import Config
from autotune.kernels.mla.backends import split_workspace
from autotune.kernels.mla.gluon_launch import gluon_launcher, jit_kernels

LATENT, K, PAGE = 512, 576, 64


class _NoReduce:
    """A stand-in for the reduce launch: nothing (times the split kernel alone)."""

    def __getitem__(self, grid: Any) -> Any:
        return lambda *a, **k: None


def _inputs(B: int, H: int, ctx: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(0)
    pages = B * ctx // PAGE
    q = torch.randn(B, H, K, device="cuda", dtype=torch.bfloat16, generator=g)
    kv = torch.randn(pages, PAGE, K, device="cuda", dtype=torch.bfloat16, generator=g)
    table = torch.randperm(pages, device="cuda", generator=g).to(torch.int32).view(B, -1)
    lens = torch.full((B,), ctx, device="cuda", dtype=torch.int32)
    return q, kv, table, lens


def _time(call: Any, flush: torch.Tensor, reps: int = 30) -> float:
    for _ in range(3):
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))[reps // 2]


def probe(B: int, H: int, ctx: int, params: dict[str, int], flush: torch.Tensor) -> list[dict[str, Any]]:
    q, kv, table, lens = _inputs(B, H, ctx)
    out = torch.empty(B, H, LATENT, device="cuda", dtype=torch.bfloat16)
    splits = params["num_kv_splits"]
    flops = B * H * ctx * 2 * (K + LATENT)
    rows = []
    ref = None
    for variant, dtype, kernels in (
        ("fp32 parts", torch.float32, None),
        ("bf16 parts", torch.bfloat16, None),
        ("split kernel alone", torch.bfloat16, (jit_kernels(params["SCHEDULE"])[0], _NoReduce())),
    ):
        if (splits == 1 or params["SCHEDULE"] == 2) and variant != "bf16 parts":
            continue
        run = gluon_launcher(params, kernels=kernels)
        part, lse = split_workspace(Config(backend="gluon", **params), B, H, LATENT, "cuda")
        if part is not None and dtype == torch.float32:
            part = part.float()

        def call(run: Any = run, part: Any = part, lse: Any = lse) -> None:
            run(q, kv, table, lens, out, part, lse, K**-0.5, 1.0)

        call()
        torch.cuda.synchronize()
        if kernels is None:
            ref = out.float().clone() if ref is None else ref
            err = (out.float() - ref).abs().max().item()
        else:
            err = float("nan")
        us = _time(call, flush)
        row = dict(B=B, H=H, ctx=ctx, **params, variant=variant, us=us, tflops=flops / us / 1e6, vs_first=err)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap)
    args = ap.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    seesaw = dict(SCHEDULE=1, BLOCK_N=32, num_stages=4)
    rows = []
    combine = dict(seesaw, SCHEDULE=2)
    for ctx in (64, 4096, 8192, 32768):
        for splits in (1, 2, 4):
            rows += probe(32, 128, ctx, dict(seesaw, num_kv_splits=splits), flush)
            if splits > 1:
                rows += probe(32, 128, ctx, dict(combine, num_kv_splits=splits), flush)
    lockstep = dict(SCHEDULE=0, BLOCK_N=64, num_stages=2)
    for splits in (2, 4, 8):
        for params in (seesaw, combine, lockstep):
            rows += probe(32, 16, 4096, dict(params, num_kv_splits=splits), flush)
    harness.write_json(args.out, "mla_split_probe", harness.run_info(rows=rows))
    for r in rows:
        print(
            f"H{r['H']} ctx {r['ctx']:>5} sched {r['SCHEDULE']} {r['BLOCK_N']}x{r['num_stages']} "
            f"splits {r['num_kv_splits']}: {r['variant']:<19} {r['us']:8.1f} us {r['tflops']:6.0f} TFLOP/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
