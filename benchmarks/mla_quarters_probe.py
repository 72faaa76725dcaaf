"""Probe: the MLA default at 64-head tiles on an FP8 cache (sm_90), quartered with FP8 queries (2 or 3
stages) against the unquartered bf16-query default it replaces, side by side, outputs checked first."""

import json
import math
import sys
from pathlib import Path

import harness

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import MLA_DECODE

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
target = local_target()
bench = Benchmarker(MLA_DECODE, target)
grid = [(128, b, c) for c in (1024, 4096, 8192, 32768) for b in (1, 4, 32, 64, 128, 256)]
grid += [(64, b, c) for c in (4096, 32768) for b in (4, 64, 256)]
rows = []
for h, b, c in grid:
    p = Problem.of("mla_decode", b, 512, 576, heads=h, context=c, kv_dtype="fp8e4m3", page_size=64)
    new = MLA_DECODE.default_config(p, target)
    variants: dict[str, Config] = {
        "new": new,
        "new_s3": new.replace(num_stages=3),
        "old": new.replace(QUARTERS=0, Q_FP8=0, num_stages=2),
    }
    row = dict(H=h, B=b, context=c) | harness.side_by_side(bench, p, variants, 3)
    rows.append(row)
    print(json.dumps(row), flush=True)
(out / "mla_quarters.json").write_text(json.dumps(rows, indent=1))


def g(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


for h in (128, 64):
    rs = [r for r in rows if r["H"] == h]
    on = [r["old_us"] / r["new_us"] for r in rs]
    o3 = [r["old_us"] / r["new_s3_us"] for r in rs]
    s2 = sum(a >= b for a, b in zip(on, o3, strict=True))
    print(
        f"H={h}: {len(rs)} rows; old/new geomean {g(on):.3f} (min {min(on):.3f}, max {max(on):.3f}); "
        f"old/new_s3 {g(o3):.3f} (min {min(o3):.3f}); s2 faster at {s2}"
    )
