"""Diagnostic (GPU): which kernels the vendor library runs for `torch.mm` on given shapes.

cuBLAS's and hipBLASLt's kernel names carry their tile, cluster and split-K choices; next to each name:
its device time, grid, block, shared memory and registers, from torch.profiler's trace.

    python benchmarks/vendor_kernels.py                          # the dense benchmark's M >= 256 shapes
    python benchmarks/vendor_kernels.py --shapes 256x1280x8192,1024x1280x8192
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

DEFAULT_SHAPES = (
    "256x6144x4096,1024x6144x4096,256x4096x14336,256x1280x8192,1024x1280x8192,4096x1280x8192,"
    "256x7168x8192,4096x7168x8192"
)


def kernels_of(M: int, N: int, K: int, reps: int = 3) -> list[dict]:
    """The kernel launches of one `torch.mm(a, b.t())` with a (M, K) and b (N, K) in bf16."""
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        torch.mm(a, b.t())
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            torch.mm(a, b.t())
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    per_call = events[: max(1, len(events) // reps)]
    return [
        dict(
            name=e["name"],
            us=e["dur"],
            grid=e.get("args", {}).get("grid"),
            block=e.get("args", {}).get("block"),
            smem=e.get("args", {}).get("shared memory"),
            regs=e.get("args", {}).get("registers per thread"),
        )
        for e in per_call
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxNxK (default: %(default)s)")
    ap.add_argument("--out", default=None, help="write the list as JSON into this folder")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/vendor_kernels.py needs a GPU", file=sys.stderr)
        return 2
    try:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
        if any(len(s) != 3 or min(s) <= 0 for s in shapes):
            raise ValueError
    except ValueError:
        print(f"--shapes takes MxNxK,... with positive sizes, got {args.shapes!r}", file=sys.stderr)
        return 2
    found = {f"{M}x{N}x{K}": kernels_of(M, N, K) for M, N, K in shapes}
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "vendor_kernels.json").write_text(json.dumps(found, indent=1))
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    for shape, launches in found.items():
        for k in launches:
            print(
                f"{shape:>16} {k['us']:8.1f}us grid={k['grid']} block={k['block']} smem={k['smem']} "
                f"regs={k['regs']} {k['name'][:110]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
