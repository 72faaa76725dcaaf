"""Probe (GPU): MLA decode tile shapes the space leaves out (64 heads a program, wgmma on sm_90) against
the sweep's picks, at H = 128 and 16, bf16 and FP8 caches. Prints one line a (shape, config)."""

from __future__ import annotations

import json
import sys

import harness

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import MLA_DECODE

K = 576


def cfg(bh: int, bn: int, w: int, s: int, splits: int = 1, q8: int | None = None) -> Config:
    extra = {} if q8 is None else {"Q_FP8": q8}
    return Config(backend="triton", num_kv_splits=splits, BLOCK_H=bh, BLOCK_N=bn, num_warps=w, num_stages=s,
                  **extra)  # fmt: skip


def main() -> int:
    target = local_target()
    bench = Benchmarker(MLA_DECODE, target)
    cases = []
    for kv in ("bf16", "fp8e4m3"):
        q8s = (None,) if kv == "bf16" else (0, 1)
        for B, ctx in ((64, 4096), (256, 8192), (32, 32768)):
            vs = {}
            for q8 in q8s:
                for bh, bn, w, s in (
                    (32, 64, 8, 2),
                    (32, 32, 8, 2),
                    (64, 16, 8, 2),
                    (64, 32, 8, 2),
                    (64, 16, 8, 3),
                    (64, 32, 8, 3),
                    (64, 64, 8, 2),
                    (64, 16, 4, 2),
                ):
                    vs[f"{bh}/{bn}/w{w}/s{s}/q{q8}"] = cfg(bh, bn, w, s, q8=q8)
            cases.append(
                (Problem.of("mla_decode", B, 512, K, heads=128, context=ctx, kv_dtype=kv, page_size=64), vs)
            )
        for B, ctx in ((256, 32768), (64, 4096)):
            vs = {}
            for q8 in q8s:
                for bh, bn, w, s in (
                    (16, 32, 4, 2),
                    (16, 64, 4, 2),
                    (16, 64, 8, 2),
                    (16, 32, 4, 3),
                    (16, 16, 4, 3),
                    (16, 128, 8, 2),
                    (16, 64, 4, 3),
                ):
                    vs[f"{bh}/{bn}/w{w}/s{s}/q{q8}"] = cfg(bh, bn, w, s, splits=1 if B == 256 else 4, q8=q8)
            cases.append(
                (Problem.of("mla_decode", B, 512, K, heads=16, context=ctx, kv_dtype=kv, page_size=64), vs)
            )
    for p, vs in cases:
        row = harness.side_by_side(bench, p, vs, 3)
        own = dict(p.extra)
        cache = p.M * int(own["context"]) * K * (1 if own["kv_dtype"] != "bf16" else 2)
        out = {k[:-3]: round(cache / v / 1e3) for k, v in row.items() if k.endswith("_us") and v == v}
        bad = {k: s for k, s in row["status"].items() if s != "ok"}
        print(json.dumps(dict(B=p.M, ctx=own["context"], H=own["heads"], kv=own["kv_dtype"], gbps=out,
                              failed={k: s[:80] for k, s in bad.items()})), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
