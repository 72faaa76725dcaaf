"""Does where the inputs land in memory change a decode GEMM's time? A probe (GPU).

Per row, for each of several paddings allocated first (so the inputs land at other addresses), fresh
input copies (enough to miss L2) are made and the op's default is timed beside a second config, as the
benchmarks time them (CUDA-graph replay of 20 launches cycling over the copies, 5 replays, median; each
config's result checked against the reference first). A kernel whose time depends on the inputs' placement
shows a spread across paddings that the other config does not.

    PYTHONPATH=$PWD python benchmarks/placement_probe.py --other '{"backend": "gluon", ...}' [--out DIR]

Prints µs per padding and config last; details go to DIR/placement_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.kernels import get_op

#: Bytes allocated before the inputs: none, odd megabytes, and a few gigabytes apart.
PADDINGS_MB = (0, 1, 3, 17, 100, 1000, 2049, 4099)


def time_configs(
    op_name: str, mnk: tuple[int, int, int], configs: dict[str, Config], pad_mb: int
) -> dict[str, float]:
    """µs of each config over inputs allocated after `pad_mb` MB of padding."""
    from read_ceiling import Layer

    pad = torch.empty(pad_mb << 20, dtype=torch.uint8, device="cuda") if pad_mb else None
    layer = Layer(Problem.quant(op_name, *mnk), torch.cuda.get_device_properties(0).L2_cache_size)
    out = {name: layer.time_us(config) for name, config in configs.items()}  # each checked first
    del pad, layer
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="gemm_fp8_blockwise")
    ap.add_argument("--rows", nargs="+", default=["16,4608,7168"], metavar="M,N,K")
    ap.add_argument("--other", default="", help="a second config as JSON (default: the default only)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/placement_probe.py needs a GPU", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    target = local_target()
    results: list[dict[str, Any]] = []
    for spec in args.rows:
        m, n, k = map(int, spec.split(","))
        mnk = (m, n, k)
        configs = {"default": get_op(args.op).default_config(Problem.quant(args.op, m, n, k), target)}
        if args.other:
            configs["other"] = Config.from_json(args.other)
        for pad_mb in PADDINGS_MB:
            times = time_configs(args.op, mnk, configs, pad_mb)
            results.append(dict(row=spec, pad_mb=pad_mb, **times))
            print(json.dumps(results[-1]), flush=True)
            torch.cuda.empty_cache()
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), op=args.op,
                configs={k: v.short() for k, v in configs.items()}, results=results)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "placement_probe.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}; {info['configs']}")
    for r in results:
        print(f"{r['row']} pad {r['pad_mb']:5d} MB: " + ", ".join(f"{k} {r[k]:.2f} µs" for k in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
