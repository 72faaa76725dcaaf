"""PDL after another kernel (GPU): an FP8 decode GEMM behind the kernel that writes its activations.

`config_grid.py` times PDL configs in a graph of the same GEMM launched 20 times, where every launch lets
the next start at once: the best case. In a model the GEMM follows another kernel, one that writes its
activations (a norm, an activation quantization). This times pairs [writer, GEMM]: the writer copies
fresh activations into the GEMM's input and lets the next launch start at once (as a PDL-aware producer
does), then the op's default runs without PDL, with PDL, and with PDL and 512 weight columns asked of L2
before its wait. The GEMM's share is a pair's time minus the writer's alone. Each variant's output is
checked against the reference of the activations the writer wrote.

Timing: a CUDA graph of 20 pairs cycling over input copies that together exceed twice the L2, 5 replays,
median (`read_ceiling.py`'s method).

    python benchmarks/pdl_chain.py --out results/

Prints a short table last; details go to --out (pdl_chain.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from autotune import Problem
from autotune.core.target import local_target
from autotune.engine.bench import graph_replays
from autotune.kernels import get_op

#: (label, M, N, K)
ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168),
    ("deepseek-v3 mlp.down", 16, 7168, 2304),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584),
    ("llama-3.1-70b mlp.gate_up", 16, 7168, 8192),
)
OPS = ("gemm_fp8_blockwise", "gemm_fp8_rowwise")
#: The GEMM's variants: knobs replacing the default's (None: the writer alone).
VARIANTS: dict[str, dict[str, int] | None] = {
    "writer alone": None,
    "GEMM": {},
    "GEMM with PDL": {"PDL": 1, "PREFETCH_K": 0},
    "GEMM with PDL, prefetch 512": {"PDL": 1, "PREFETCH_K": 512},
}
BLOCK = 4096


@triton.jit
def write_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[:n] = src[:n] (bytes); lets the next launch start at once, as a PDL-aware producer does."""
    gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def writer(src: torch.Tensor, dst: torch.Tensor) -> Any:
    """A launch copying `src` into `dst` (same shape and dtype) byte for byte."""
    s, d = src.view(torch.uint8).reshape(-1), dst.view(torch.uint8).reshape(-1)
    n = s.numel()
    grid = (triton.cdiv(n, BLOCK),)
    return lambda: write_kernel[grid](s, d, n, BLOCK=BLOCK, num_warps=4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for pdl_chain.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/pdl_chain.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    rows: list[dict[str, Any]] = []
    for op_name in OPS:
        op = get_op(op_name)
        for label, m, n, k in ROWS:
            p = Problem.quant(op_name, m, n, k)
            copies = max(2, -(-2 * l2 // int(p.min_bytes())))
            sets = [op.make_inputs(p, "cuda", seed=s) for s in range(copies)]
            fresh = [op.make_inputs(p, "cuda", seed=100 + s)[0] for s in range(copies)]  # the writer's source
            live = [x[0].clone() for x in sets]
            outs = [op.make_output(p, "cuda") for _ in sets]
            writes = [writer(f, a) for f, a in zip(fresh, live, strict=True)]
            ref = op.reference(p, (fresh[0], *sets[0][1:]))
            default = op.default_config(p, target)
            times: dict[str, float] = {}
            for name, knobs in VARIANTS.items():
                if knobs is None:
                    pairs = writes
                else:
                    config = default.replace(**knobs)
                    gemms = [op.prepare(p, config, target, (a, *x[1:]), o)
                             for a, x, o in zip(live, sets, outs, strict=True)]  # fmt: skip
                    pairs = [(lambda w=w, g=g: (w(), g())) for w, g in zip(writes, gemms, strict=True)]
                    live[0].zero_()
                    outs[0].fill_(float("nan"))
                    pairs[0]()
                    torch.cuda.synchronize()
                    err = float((outs[0].double() - ref.double()).norm() / ref.double().norm())
                    assert err < op.tolerance(p), f"{op_name} {label} {name}: relative error {err}"
                times[name] = statistics.median(graph_replays(pairs, 20)(5))
            w = times["writer alone"]
            gemm_us = {name: t - w for name, t in times.items() if name != "writer alone"}
            row = dict(op=op_name, layer=label, M=m, N=n, K=k, default=default.short(), times=times,
                       gemm_us=gemm_us)  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), rows=rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdl_chain.json").write_text(json.dumps(info, indent=1))
    print(
        f"\n{info['gpu']} {info['toolchain']} {info['date']}: a pair's µs; the GEMM's share (pair - writer)"
    )
    for r in rows:
        g = r["gemm_us"]
        print(
            f"{r['op'][9:]:10} {r['layer']:26} writer {r['times']['writer alone']:5.2f}  "
            + "  ".join(
                f"{name[5:] or 'plain'}: {r['times'][name]:6.2f} ({us:6.2f})" for name, us in g.items()
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
