"""Probe (temporary): the M = 64 bucket's tuned winners at M between 64 and 256, as they are and with their
M tile widened to cover M, beside cuBLAS (one Benchmarker, CUDA-graph replay, interleaved rounds, outputs
checked first). Configs: benchmarks/m64_winners.json (the final-round winners of serve_every_m.toml at
M = 64 on an H200).

    python benchmarks/stretch_probe.py --out results/
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.registry import get_op
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings

MS = (72, 96, 128, 160, 192)


def fit(op: Any, p: Problem, target: Any, c: Config) -> Config | None:
    """`c`, or the same with fewer stages (and 8 warps) until its backend's checks pass."""
    backend = op.backend(c.backend)
    for warps in sorted({int(c["num_warps"]), 8}):
        for stages in range(int(c["num_stages"]), 1, -1):
            x = c.replace(num_warps=warps, num_stages=stages)
            if x.get("GROUP_M") is not None and backend.check(p, target, x, search_only=False) is not None:
                x = x.replace(GROUP_M=1)
            if backend.check(p, target, x, search_only=False) is None:
                return x
    return None


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for stretch_probe.json")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    target = local_target()
    op = get_op("gemm")
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    winners = json.loads((Path(__file__).parent / "m64_winners.json").read_text())
    rows: list[dict[str, Any]] = []
    for w in winners:
        base = Config(w["config"])
        for m in MS:
            p = Problem.gemm(m, w["N"], w["K"])
            v = {"vendor": Config(backend="torch"), "m64": base}
            for bm in (128, 256):
                if bm >= m and int(base["BLOCK_M"]) < bm:
                    fitted = fit(op, p, target, base.replace(BLOCK_M=bm))
                    if fitted is not None:
                        v[f"bm{bm}"] = fitted
                    break
            row = dict(N=w["N"], K=w["K"], M=m) | harness.side_by_side(bench, p, v, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    harness.write_json(args.out, "stretch_probe", harness.run_info(target, rows=rows))
    table = []
    for m in MS:
        for name in ("m64", "bm128", "bm256"):
            rs = [r["vendor_us"] / r[f"{name}_us"] for r in rows if r["M"] == m and f"{name}_us" in r
                  and math.isfinite(r[f"{name}_us"])]  # fmt: skip
            if rs:
                table.append((m, name, len(rs), harness.geomean(rs), min(rs), max(rs), sum(x >= 1.05 for x in rs)))
    harness.print_table(("M", "variant", "rows", "vendor/variant geomean", "lowest", "highest", ">= 1.05"), table,
                        digits=(0, 0, 0, 3, 3, 3, 0), title=harness.describe(harness.run_info(target)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
