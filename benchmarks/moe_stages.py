"""Where a fused-MoE call spends its GPU time (GPU): device time per kernel of one call, by name.

Per problem of `benchmarks/moe.py` and per config (our default, plus any given with --config), the call
runs under torch's profiler; the table sums the device time of each kernel the call launched, over
--reps calls, and sets the total beside the bytes floor (the weights of the busy experts read once, at
the bandwidth of a 1 GiB device copy).

    python benchmarks/moe_stages.py --out results/ [--only deepseek] [--config '{"BLOCK_SIZE_M": 16, ...}']
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from autotune import Config
from autotune.core.target import local_target
from autotune.kernels.moe_op import MoeOp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_quant import copy_bandwidth_gbps
from moe import problems


def busy_weight_bytes(inputs: Any) -> int:
    """Bytes of the expert weights the routing touches (each busy expert's w1 and w2 read once)."""
    _, w1, w2, _, ids, _, _ = inputs
    busy = int(torch.unique(ids).numel())
    per_expert = (w1[0].numel() + w2[0].numel()) * w1.element_size()
    return busy * per_expert


def stages(op: MoeOp, problem: Any, config: Config, inputs: Any, reps: int) -> dict[str, float]:
    """µs of device time per kernel name, per call (mean over `reps` calls)."""
    target = local_target()
    out = op.make_output(problem, "cuda")
    launch = op.prepare(problem, config, target, inputs, out)
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            launch()
        torch.cuda.synchronize()
    per_name: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_name[event.name[:60]] += event.device_time / reps
    return dict(per_name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only models whose name contains this")
    ap.add_argument("--m", type=int, nargs="*", help="only these token counts")
    ap.add_argument("--config", action="append", default=[], help="a Triton config as JSON (repeatable)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    op = MoeOp()
    target = local_target()
    bandwidth = copy_bandwidth_gbps() * 1e9  # bytes per second
    rows = []
    for label, p in problems(False):
        if (args.only and args.only not in label) or (args.m and p.M not in args.m):
            continue
        inputs = op.make_inputs(p, "cuda", seed=0)
        floor_us = busy_weight_bytes(inputs) / bandwidth * 1e6
        configs = {"default": op.default_config(p, target)}
        configs |= {f"given{i}": Config(backend="triton", **json.loads(c)) for i, c in enumerate(args.config)}
        for name, config in configs.items():
            per = stages(op, p, config, inputs, args.reps)
            row = dict(model=label, M=p.M, config=name, short=config.short(), floor_us=floor_us, stages=per)
            rows.append(row)
            total = sum(per.values())
            parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]))
            print(f"{label} M={p.M} {name}: {total:.1f} µs (floor {floor_us:.1f}) = {parts}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "moe_stages.json").write_text(json.dumps(rows, indent=2))
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    print(f"{'model':22s} {'M':>5s} {'config':8s} {'total µs':>9s} {'floor µs':>9s} {'top kernel':40s}")
    for r in rows:
        per_kernel: dict[str, float] = r["stages"]  # type: ignore[assignment]
        top = max(per_kernel.items(), key=lambda kv: kv[1])
        print(f"{r['model']:22s} {r['M']:5d} {r['config']:8s} {sum(per_kernel.values()):9.1f} "
              f"{r['floor_us']:9.1f} {top[0][:32]:32s} {top[1]:7.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
