"""Where the blockwise FP8 decode kernel loses time to the row-wise one (GPU): a probe of its scale loads.

The blockwise kernel loads two scales per 128-wide K group inside its K loop (one K tile ahead); the
row-wise kernel loads its scales once, before the loop. This times, per decode row, the blockwise default
as it is, the same launch with the scales' K strides set to 0 (every group reads group 0's scales, so
after the first tile the scale loads hit the L1: the loop's arithmetic and waits unchanged, the scale
loads' latency gone), and the row-wise default on the same shape. The probe computes another product (its
output is only checked to be finite): it measures, it is no kernel.

Timing as `read_ceiling.py`: a CUDA graph of 20 launches cycling over input copies that together exceed
twice the L2, 5 replays, median.

    python benchmarks/scale_probe.py --out results/

Prints a short table last; details go to --out (scale_probe.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

#: (label, M, N, K)
ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168),
    ("deepseek-v3 mlp.gate_up", 64, 4608, 7168),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584),
    ("llama-3.1-70b mlp.down", 64, 8192, 3584),
    ("llama-3.1-70b mlp.gate_up", 16, 7168, 8192),
)


def probe(run: Any, x: Any, out: torch.Tensor, mnk: tuple[int, int, int]) -> Any:
    """The launch `run` of inputs `x` into `out` with the scales' K strides 0: every K group reads group
    0's scales."""
    a, b, sa, sb = x
    strides = (sa.stride(0), 0, sb.stride(0), 0)
    return lambda: run(a, b, out, sa, sb, strides, *mnk, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for scale_probe.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/scale_probe.py needs a GPU", file=sys.stderr)
        return 2
    from gemm_quant import copy_bandwidth_gbps
    from read_ceiling import Layer, time_us

    from autotune import Problem

    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    copy = copy_bandwidth_gbps()
    rows: list[dict[str, Any]] = []
    for label, M, N, K in ROWS:
        p = Problem.quant("gemm_fp8_blockwise", M, N, K)
        layer = Layer(p, l2)
        op, target = layer.op, layer.target
        default = op.default_config(p, target)
        real = layer.time_us(default)
        run = op._launcher(default, target, None)  # type: ignore[attr-defined]

        outs = [op.make_output(p, "cuda") for _ in layer.inputs]
        launches = [probe(run, x, o, (M, N, K)) for x, o in zip(layer.inputs, outs, strict=True)]
        launches[0]()
        torch.cuda.synchronize()
        assert torch.isfinite(outs[0]).all(), "the probe's output is not finite"
        probed = time_us(launches)
        del layer
        rp = Problem.quant("gemm_fp8_rowwise", M, N, K)
        rlayer = Layer(rp, l2)
        rowwise_config = rlayer.op.default_config(rp, rlayer.target)
        rowwise = rlayer.time_us(rowwise_config)
        del rlayer
        pct = 100 * p.min_bytes() / 1e3 / copy
        rows.append(dict(layer=label, M=M, N=N, K=K, config=default.short(), blockwise_us=real,
                         probe_us=probed, rowwise_us=rowwise, rowwise_config=rowwise_config.short(),
                         blockwise_pct=pct / real, probe_pct=pct / probed,
                         rowwise_pct=pct / rowwise))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    info = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d"),
                copy_gbps=copy, rows=rows)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_probe.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} torch {info['torch']} {info['date']}, copy {copy:.0f} GB/s")
    print(f"{'layer':26} {'M':>3} {'blockwise':>9} {'copy%':>5} {'probe':>7} {'copy%':>5} {'rowwise':>7} "
          f"{'copy%':>5}")  # fmt: skip
    for r in rows:
        print(f"{r['layer']:26} {r['M']:3d} {r['blockwise_us']:9.2f} {r['blockwise_pct']:5.0f} "
              f"{r['probe_us']:7.2f} {r['probe_pct']:5.0f} {r['rowwise_us']:7.2f} "
              f"{r['rowwise_pct']:5.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
