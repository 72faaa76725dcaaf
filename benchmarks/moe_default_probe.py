"""Probe (GPU): candidates for the MoE default on the layers of `moe_untuned.toml`, side by side.

bf16 weights at M = 16, 64, 256, 1024, 4096: the default against it with B_TMA 1 (where the GPU has TMA).
FP8 weights at M = 1, 2, 4, 8: the default (16-row fused tiles) against vLLM's fallback config and
against 16-row tiles in vLLM's structure (128 columns, unfused). One Benchmarker (CUDA-graph replay,
the routing aligned beforehand), 3 interleaved rounds, every config checked first.

    python benchmarks/moe_default_probe.py --out results/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import harness

from autotune.core.target import local_target
from autotune.db.vllm import fallback_at
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels.moe.op import MoeOp
from autotune.sweeps import load_spec
from autotune.sweeps.profile import family_of

SPEC = Path(__file__).with_name("moe_untuned.toml")


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for moe_default_probe.json")
    args = ap.parse_args()
    op, target = MoeOp(), local_target()
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    families = {family_of(p) for e in load_spec(SPEC).entries for _, p in e.labeled_problems()}
    rows: list[dict[str, Any]] = []
    for fam in sorted(families, key=str):
        fp8 = fam.dtype_b.startswith("fp8")
        for m in (1, 2, 4, 8) if fp8 else (16, 64, 256, 1024, 4096):
            problem = fam.with_m(m)
            default = op.default_config(problem, target)
            variants = {"default": default}
            if fp8:
                vllm = fallback_at(problem, target, m)
                assert vllm is not None
                variants["vllm"] = vllm
                variants["rows16_vllm"] = vllm.replace(BLOCK_SIZE_M=16)
            elif "B_TMA" in default:
                variants["b_tma"] = default.replace(B_TMA=1)
            row = dict(family=str(fam), M=m) | harness.side_by_side(bench, problem, variants, 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    harness.write_json(args.out, "moe_default_probe", harness.run_info(target, rows=rows))
    for r in rows:
        base = r["default_us"]
        others = {k[:-3]: base / v for k, v in r.items() if k.endswith("_us") and k != "default_us"}
        text = " ".join(f"{k} {v:.3f}x" for k, v in others.items())  # its speed-up over the default
        print(f"{r['family'][:52]:52} M={r['M']:<5} default {base:8.1f} µs  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
