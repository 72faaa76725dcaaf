"""Launches one quantized GEMM config a few times, for a profiler (GPU): `ncu` wraps this script.

    ncu -k regex:gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        python benchmarks/profile_decode.py --op gemm_fp8_blockwise --m 16 --n 4608 --k 7168 [--config JSON]

Without --config the op's default config runs. Prints the config and the output's relative error against
the reference, so a profile is never of a wrong kernel.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import rel_error
from autotune.kernels import get_op


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="gemm_fp8_blockwise")
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--config", default="", help="a config as JSON (default: the op's default)")
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/profile_decode.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    op = get_op(args.op)
    problem = Problem.quant(args.op, args.m, args.n, args.k)
    config = Config(**json.loads(args.config)) if args.config else op.default_config(problem, target)
    inputs = op.make_inputs(problem, "cuda", seed=1)
    out = op.make_output(problem, "cuda")
    call = op.prepare(problem, config, target, inputs, out)
    for _ in range(args.launches):
        call()
    torch.cuda.synchronize()
    err = rel_error(out, op.reference(problem, inputs))
    print(f"{args.op} M={args.m} N={args.n} K={args.k} {config.short()} rel_error {err:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
