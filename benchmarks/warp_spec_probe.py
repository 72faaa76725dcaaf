"""Probe (GPU): does Triton's warp specialization speed up the TMA GEMM on this GPU? Times the best
stored TMA config of some shapes with WARP_SPEC 0 and 1, side by side with the vendor library.

    python benchmarks/warp_spec_probe.py --db bench.db
"""

from __future__ import annotations

import argparse
import sys

from autotune import Config, Problem
from autotune.bench import Benchmarker
from autotune.db import Store
from autotune.kernels import GEMM
from autotune.target import local_target

SHAPES = [(4096, 1280, 8192), (1024, 1280, 8192), (1024, 6144, 4096), (256, 6144, 4096), (4096, 6144, 4096)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    args = ap.parse_args()
    target = local_target()
    bench = Benchmarker(GEMM, target)
    with Store(args.db) as store:
        for m, n, k in SHAPES:
            p = Problem.gemm(m, n, k)
            recs = [r for r in store.best(p, fingerprint=target.fingerprint(), limit=500)
                    if r.config.backend == "triton_tma"][:3]  # fmt: skip
            vendor = bench.run(p, Config(backend="torch"))
            line = [f"{m}x{n}x{k} vendor {vendor.time_us:.2f}"]
            for rec in recs:
                for ws in (0, 1):
                    c = rec.config.replace(WARP_SPEC=ws)
                    r = bench.run(p, c)
                    t = f"{r.time_us:.2f}" if r.ok else r.status.value
                    line.append(f"[{c.short()}] {t}")
            print("\n  ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
