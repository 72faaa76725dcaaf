"""Probe (GPU, Hopper): the MLA Gluon kernel's first config timed as the benchmark times it (a flush, a
spin, CUDA events around one launch) and as a served call runs (CUDA-graph replays back to back), with the
host's µs a launch, at 128 heads (batch 32 and 64, 256 tokens to 32K) and 16 heads.

    python benchmarks/mla_timing_probe.py --out results/
"""

from __future__ import annotations

import sys
from typing import Any

import harness

from autotune import Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.gluon_space import gluon_first


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap)
    args = ap.parse_args()
    target = local_target()
    timers = {
        "events": Benchmarker(MLA_DECODE, target),
        "served": Benchmarker(MLA_DECODE, target, settings=BenchSettings().as_served()),
    }
    rows: list[dict[str, Any]] = []
    shapes = [
        (32, 128, 256),
        (32, 128, 4096),
        (32, 128, 8192),
        (32, 128, 32768),
        (64, 128, 4096),
        (32, 16, 4096),
    ]
    for B, H, ctx in shapes:
        p = Problem.of("mla_decode", B, 512, 576, heads=H, context=ctx, kv_dtype="bf16", page_size=64)
        first = gluon_first(p, target)
        assert first is not None
        flops = B * H * ctx * 2 * 1088
        for name, config in {"first": first}.items():
            row: dict[str, Any] = dict(B=B, H=H, ctx=ctx, variant=name, config=config.short())
            for method, timer in timers.items():
                us = timer.run(p, config, full=True).time_us or float("nan")
                row |= {f"{method}_us": us, f"{method}_tflops": flops / us / 1e6}
            launch = MLA_DECODE.prepare(p, config, target, MLA_DECODE.make_inputs(p, "cuda", 0),
                                        MLA_DECODE.make_output(p, "cuda"))  # fmt: skip
            row["host_us"] = min(harness.host_us_per_call({"x": launch}, 5, 50)["x"])
            rows.append(row)
            print(row, flush=True)
    harness.write_json(args.out, "mla_timing_probe", harness.run_info(target, rows=rows))
    for r in rows:
        ev = f"{r['events_us']:7.1f} us {r['events_tflops']:4.0f}"
        sv = f"{r['served_us']:7.1f} us {r['served_tflops']:4.0f}"
        print(
            f"H{r['H']} B{r['B']} ctx {r['ctx']:>5} {r['variant']:<10}: events {ev} TFLOP/s, served {sv} "
            f"TFLOP/s, host {r['host_us']:.0f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
