"""Probe (GPU, Hopper): the MLA Gluon kernel's first config timed as the benchmark times it (a flush, a
spin, CUDA events around one launch) and as a served call runs (CUDA-graph replays back to back), with
the host's µs per launch, at 128 heads (batch 32 and 64, 4K-32K) and 16 heads.

    python benchmarks/mla_timing_probe.py --out results/
"""

from __future__ import annotations

import sys

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
    events = Benchmarker(MLA_DECODE, target)
    served = Benchmarker(MLA_DECODE, target, settings=BenchSettings().as_served())
    rows = []
    shapes = [(32, 128, 4096), (32, 128, 8192), (32, 128, 32768), (64, 128, 4096), (32, 16, 4096)]
    for B, H, ctx in shapes:
        p = Problem.of("mla_decode", B, 512, 576, heads=H, context=ctx, kv_dtype="bf16", page_size=64)
        config = gluon_first(p, target)
        assert config is not None
        ev, sv = (b.run(p, config, full=True) for b in (events, served))
        inputs = MLA_DECODE.make_inputs(p, "cuda", 0)
        launch = MLA_DECODE.prepare(p, config, target, inputs, MLA_DECODE.make_output(p, "cuda"))
        flops = B * H * ctx * 2 * 1088
        row = dict(B=B, H=H, ctx=ctx, config=config.short(), events_us=ev.time_us, served_us=sv.time_us)
        row |= dict(events_tflops=flops / ev.time_us / 1e6, served_tflops=flops / sv.time_us / 1e6)
        row["host_us"] = min(harness.host_us_per_call({"x": launch}, 5, 50)["x"])
        rows.append(row)
        print(row, flush=True)
    harness.write_json(args.out, "mla_timing_probe", harness.run_info(target, rows=rows))
    for r in rows:
        ev, sv = (
            f"{r['events_us']:7.1f} us {r['events_tflops']:4.0f}",
            f"{r['served_us']:7.1f} us {r['served_tflops']:4.0f}",
        )
        print(
            f"H{r['H']} B{r['B']} ctx {r['ctx']:>5}: events {ev} TFLOP/s, served {sv} TFLOP/s, "
            f"host {r['host_us']:.0f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
