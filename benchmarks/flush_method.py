"""How the cache flush of the events method changes a timing (GPU): reading vs zeroing the flush buffer.

The Benchmarker's events method evicts the last-level cache before each timed run. It used to write a
buffer twice the cache's size (`zero_()`), which leaves the cache full of dirty lines that the timed
kernel's misses write back while it runs; it now reads the buffer (`autotune.engine.bench.L2Flush`). This
script times the heuristic default config of a few problems three ways, side by side in interleaved
rounds: CUDA-graph replay over rotating inputs (no flush: the reference for short launches), events
after the reading flush, and events after a zeroing flush. Memory-bound decode rows are where the two
flushes should differ; a compute-bound prefill row is the control.

    python benchmarks/flush_method.py --out results/

Prints a short table last; details go to --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from autotune import Problem
from autotune.core.target import Target, local_target
from autotune.engine.bench import Benchmarker, BenchSettings, L2Flush, interleaved_medians
from autotune.kernels import get_op

#: (label, op, M, N, K): decode rows of 58.7 MB (Llama-3.1-70B TP8 gate/up) and 14.7 MB (DeepSeek-V3
#: attn.o) FP8 weights and of the same bf16 layer, and one compute-bound prefill row.
PROBLEMS = [
    ("llama-70b gate/up", "gemm_fp8_blockwise", 16, 7168, 8192),
    ("llama-70b gate/up", "gemm_fp8_rowwise", 16, 7168, 8192),
    ("llama-70b gate/up", "gemm", 16, 7168, 8192),
    ("deepseek-v3 attn.o", "gemm_fp8_blockwise", 16, 7168, 2048),
    ("deepseek-v3 attn.o", "gemm_fp8_rowwise", 1, 7168, 2048),
    ("llama-70b gate/up", "gemm_fp8_blockwise", 4096, 7168, 8192),
]


class ZeroingL2Flush(L2Flush):
    """The flush the Benchmarker had before: a write of the whole buffer."""

    def __call__(self) -> None:
        self.buf.zero_()


class ZeroingFlush(Benchmarker):
    """The Benchmarker with the zeroing flush (same buffer size, same spin after it)."""

    def _flush(self) -> None:
        if self._l2_flush is None:
            self._l2_flush = ZeroingL2Flush(max(2 * self.target.llc_bytes, 64 << 20), self.device)
        super()._flush()


def problem_of(op: str, M: int, N: int, K: int) -> Problem:
    return Problem.gemm(M, N, K, "bf16") if op == "gemm" else Problem.quant(op, M, N, K)


def measure(target: Target, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for label, op_name, M, N, K in PROBLEMS:
        op = get_op(op_name)
        p = problem_of(op_name, M, N, K)
        config = op.default_config(p, target)
        graph = Benchmarker(op, target, settings=BenchSettings(method="graph"))
        events = Benchmarker(op, target, settings=BenchSettings(method="events"))
        zeroing = ZeroingFlush(op, target, settings=BenchSettings(method="events"))
        res = interleaved_medians(
            graph, p, {"graph": config}, rounds,
            others={"events, reading flush": (events, config), "events, zeroing flush": (zeroing, config)},
        )  # fmt: skip
        row: dict[str, Any] = dict(label=label, op=op_name, M=M, N=N, K=K, config=config.short(),
                                   min_mb=p.min_bytes() / 1e6)  # fmt: skip
        for name, (us, status) in res.items():
            row[name] = us
            row.setdefault("status", {})[name] = status
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for the JSON details")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/flush_method.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    rows = measure(target, args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"),
                llc_bytes=target.llc_bytes, rows=rows)  # fmt: skip
    (args.out / "flush_method.json").write_text(json.dumps(info, indent=1, default=str))
    print(f"\n{target.name} {target.toolchain}; µs, median of {args.rounds} interleaved rounds")
    cols = ("graph", "events, reading flush", "events, zeroing flush")
    print(f"{'problem':44} {'MB':>6} " + " ".join(f"{c:>22}" for c in cols))
    for r in rows:
        name = f"{r['op']} {r['label']} M={r['M']}"
        print(f"{name[:44]:44} {r['min_mb']:6.1f} " + " ".join(f"{r[c]:22.2f}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
