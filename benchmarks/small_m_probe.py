"""Probe (temporary): variants of the untuned defaults at the decode M where `verify` found them behind
the vendor (FP8 blockwise GEMM, FP8 MoE), timed side by side with the vendor's config by one Benchmarker
(CUDA-graph replay, interleaved rounds, outputs checked first).

    python benchmarks/small_m_probe.py --out results/
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.registry import get_op
from autotune.core.target import local_target
from autotune.db.vllm_rules import fallback_at
from autotune.engine.bench import Benchmarker, BenchSettings

DENSE = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (5120, 5120), (5120, 4096),
         (25600, 5120), (5120, 12800), (1536, 7168), (7168, 2048), (4608, 7168), (7168, 2304)]  # fmt: skip
MOE = [(256, 7168, 256, 8), (2048, 7168, 32, 8), (512, 7168, 256, 8), (384, 4096, 128, 8),
       (768, 2048, 128, 8)]  # fmt: skip
# FP8 MoE layers the rule was not read from: Kimi-K2 TP 8, GLM-4.5-Air TP 1, Qwen3-Coder-480B TP 4,
# Qwen3-30B-A3B TP 2, GLM-4.5 TP 4
HELD_OUT = [(256, 7168, 384, 8), (1408, 4096, 128, 8), (640, 6144, 160, 8), (384, 2048, 128, 8),
            (384, 5120, 160, 8)]  # fmt: skip


def variants_of(default: Config, fields: dict[str, dict[str, Any]]) -> dict[str, Config]:
    out = {"default": default}
    for name, change in fields.items():
        if all(k in default for k in change):
            out[name] = default.replace(**change)
    return out


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for small_m_probe.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--held-out", action="store_true", help="only the held-out MoE layers, new vs old stages")
    ap.add_argument("--blockwise", action="store_true", help="only blockwise FP8, other kernels at decode")
    args = ap.parse_args()
    target = local_target()
    rows: list[dict[str, Any]] = []
    op = get_op("gemm_fp8_blockwise")
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    wide = [(5120, 12800), (4096, 14336), (5120, 5120), (25600, 5120), (7168, 2304)]
    for n, k in [] if args.held_out else wide if args.blockwise else DENSE:
        for m in (4, 8, 16):
            p = Problem.quant("gemm_fp8_blockwise", m, n, k)
            d = op.fallback_config(p, target)
            if args.blockwise:
                from autotune.kernels.quant import space as qs

                v = variants_of(d, {"sk3": {"SPLIT_K": 3, "FUSED_SPLIT": 1}, "w8": {"num_warps": 8},
                                    "bk128s6": {"BLOCK_K": 128, "num_stages": 6}})  # fmt: skip
                tma = qs._tma_default(p, target, swapped=True)
                gluon = qs.gluon_default_config(p, target)
                for name, c in (("tma_swapped", tma), ("gluon", gluon)):
                    if c is not None:
                        v[name] = c
                if gluon is not None:
                    for bn, st, sk in ((64, 6, 1), (128, 6, 2), (64, 8, 2), (128, 6, 1)):
                        try:
                            v[f"gluon_swap{bn}s{st}k{sk}"] = gluon.replace(
                                SWAP_AB=1, BLOCK_M=16, BLOCK_N=bn, num_stages=st, SPLIT_K=sk)
                        except ValueError:
                            pass
                v["vendor"] = Config(backend="torch")
                row = dict(kind="blockwise", N=n, K=k, M=m) | harness.side_by_side(bench, p, v, args.rounds)
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            v = variants_of(d, {
                "bm32": {"BLOCK_M": 32}, "s4": {"num_stages": 4}, "s5": {"num_stages": 5},
                "bk256s4": {"BLOCK_K": 256, "num_stages": 4}, "bk256s5": {"BLOCK_K": 256, "num_stages": 5},
                "sk2": {"SPLIT_K": 2, "FUSED_SPLIT": 1}, "bm32s4": {"BLOCK_M": 32, "num_stages": 4},
            })  # fmt: skip
            v["vendor"] = Config(backend="torch")
            row = dict(kind="blockwise", N=n, K=k, M=m) | harness.side_by_side(bench, p, v, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    op = get_op("moe")
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    for n, k, e, topk in [] if args.blockwise else HELD_OUT + MOE if args.held_out else MOE:
        for m in (1, 2, 4) if args.held_out else (1, 2, 4, 8):
            p = Problem.moe(m, n, k, e, topk, "bf16", "fp8e4m3")
            d = op.default_config(p, target)
            v = variants_of(d, {"s3": {"num_stages": 3}}) if args.held_out else variants_of(d, {
                "bn128": {"BLOCK_SIZE_N": 128}, "s4": {"num_stages": 4}, "s5": {"num_stages": 5},
                "w8": {"num_warps": 8}, "g1": {"GROUP_SIZE_M": 1}, "bk256": {"BLOCK_SIZE_K": 256},
                "unfused128": {"GATE_UP_FUSED": 0, "BLOCK_SIZE_N": 128}, "bm64": {"BLOCK_SIZE_M": 64},
            })  # fmt: skip
            vendor = fallback_at(p, target, m)
            assert vendor is not None
            v["vendor"] = vendor
            row = dict(kind="moe", N=n, K=k, E=e, M=m) | harness.side_by_side(bench, p, v, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    harness.write_json(args.out, "small_m_probe", harness.run_info(target, rows=rows))
    names = sorted({k[:-3] for r in rows for k in r if k.endswith("_us")} - {"vendor"})
    table = []
    for kind in ("blockwise", "moe"):
        for name in names:
            rs = [r["vendor_us"] / r[f"{name}_us"] for r in rows if r["kind"] == kind and f"{name}_us" in r
                  and math.isfinite(r[f"{name}_us"]) and math.isfinite(r["vendor_us"])]  # fmt: skip
            if rs:
                table.append((kind, name, len(rs), harness.geomean(rs), min(rs)))
    harness.print_table(("kind", "variant", "rows", "vendor/variant geomean", "lowest"), table,
                        digits=(0, 0, 0, 3, 3), title=harness.describe(harness.run_info(target)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
