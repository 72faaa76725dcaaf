"""Probe (GPU): MLA decode at H = 16 with swapped dots (SWAP: tokens on the MMAs' M side, warpgroup MMAs
on sm_90) against the unswapped kernel, per (batch, context, cache dtype), same inputs, interleaved rounds.

    python benchmarks/mla_swap.py --out results/
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import harness

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.space import default_splits

LATENT, K = 512, 576


def variants(p: Problem, target: Any, kv: str) -> dict[str, Config]:
    """The default, then swapped tiles with FP8 scores and P·V in bf16 (d0) or fp16 (d1)."""
    out = {"default": MLA_DECODE.default_config(p, target)}
    shapes = ((64, 4, 2), (64, 4, 3), (128, 8, 2))
    for bn, warps, stages in shapes:
        s = default_splits(p, target, 16, bn)
        for splits in sorted({s, max(1, s // 2), min(64, 2 * s)}):
            for i, f16 in enumerate((0, 1)):
                if f16 == 0 and (bn, stages) != (64, 2):
                    continue
                name = f"swap bn{bn} w{warps} st{stages} s{splits} d{i}"
                out[name] = Config(backend="triton", num_kv_splits=splits, BLOCK_H=16, BLOCK_N=bn,
                                   num_warps=warps, num_stages=stages, SWAP=1, Q_FP8=1, F16_TILES=f16)
    return out


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 32, 128, 256])
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    ap.add_argument("--kv", nargs="+", default=["fp8e4m3"])
    ap.add_argument("--rounds", type=int, default=3)
    harness.add_out(ap)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target = local_target()
    copy = harness.copy_gbps()
    print(f"copy {copy:.0f} GB/s", flush=True)
    bench = Benchmarker(MLA_DECODE, target)
    rows, t0 = [], time.perf_counter()
    for kv in args.kv:
        for c in args.contexts:
            for b in args.batches:
                p = Problem.of("mla_decode", b, LATENT, K, heads=16, context=c, kv_dtype=kv, page_size=64)
                row: dict[str, Any] = dict(B=b, context=c, kv=kv)
                row |= harness.side_by_side(bench, p, variants(p, target, kv), args.rounds)
                cache = b * c * K * (1 if kv != "bf16" else 2)
                times = {k[:-3]: v for k, v in row.items() if k.endswith("_us") and v == v and v > 0}
                best_swap = min((v, k) for k, v in times.items() if k.endswith("d1"))
                best_plain = min((v, k) for k, v in times.items() if not k.endswith("d1"))
                row |= dict(
                    cache_mb=cache / 1e6,
                    best_swap=best_swap,
                    best_plain=best_plain,
                    swap_of_copy=cache / best_swap[0] / 1e3 / copy,
                    plain_of_copy=cache / best_plain[0] / 1e3 / copy,
                )
                rows.append(row)
                print(
                    json.dumps(
                        {
                            k: row[k]
                            for k in (
                                "B",
                                "context",
                                "kv",
                                "best_swap",
                                "best_plain",
                                "swap_of_copy",
                                "plain_of_copy",
                            )
                        }
                    ),
                    flush=True,
                )
    harness.write_json(args.out, "mla_swap", harness.run_info(target, copy_gbps=copy, rows=rows))
    table = [[f"{r['kv']} B{r['B']} {r['context']}", r["best_plain"][0], r["best_swap"][0],
              r["best_plain"][0] / r["best_swap"][0], r["plain_of_copy"], r["swap_of_copy"],
              r["best_swap"][1]] for r in rows]  # fmt: skip
    harness.print_table(
        ("shape", "plain us", "swap us", "gain", "plain copy", "swap copy", "swap config"),
        table,
        digits=(0, 1, 1, 3, 2, 2, 0),
        title="MLA H16: swapped dots",
    )
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
