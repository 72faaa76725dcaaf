"""How fast can one kernel read a decode layer's bytes? The ceiling of the quantized GEMMs' decode rows.

`benchmarks/gemm_quant.py` gives decode GB/s as a fraction of the device's copy bandwidth, measured with
1 GiB copies; the goal is 80% of it. A decode GEMM is one pass over the weight, so no GEMM of a layer can
beat the fastest single kernel that only reads the layer's bytes. Per FP8 layer of that benchmark
(DeepSeek-V3 and Llama-3.1-70B, TP 8), timed the same way (a CUDA graph of 20 launches cycling over
enough copies of the inputs to miss L2, 5 replays, median µs per launch):
- `read`: a Triton kernel that streams exactly the bytes of the layer's weight and scales (16-byte loads,
  each program a contiguous chunk, one word written per program); the best of a small grid of chunk
  sizes and warps;
- `copy`: `Tensor.copy_` of half those bytes (moving, read plus write, as many bytes);
- our kernels' heuristic defaults of `gemm_fp8_rowwise` and `gemm_fp8_blockwise` at M = 1 and 16.
Each as GB/s of the op's minimum bytes and as a fraction of the 1 GiB copy bandwidth.

    PYTHONPATH=$PWD python benchmarks/read_ceiling.py [--out DIR]

Prints a short table last; details go to DIR/read_ceiling.json (DIR: --out, else $OUT if set).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.bench import graph_replays

#: Launches per graph, and replays timed.
GRAPH_CALLS = 20
REPLAYS = 5
#: (int32 words per program's step, num_warps) tried for the read.
READ_CONFIGS = [(b, w) for b in (1024, 2048, 4096) for w in (4, 8)]
#: Programs per SM of the read (each reads a contiguous chunk).
PROGRAMS_PER_SM = (2, 4, 8)
DECODE_M = (1, 16)


@triton.jit
def read_kernel(x_ptr, out_ptr, n_words, chunk, BLOCK: tl.constexpr):
    """Sums the int32 words [pid * chunk, (pid + 1) * chunk) of x (wrapping) into out[pid]."""
    pid = tl.program_id(0)
    start = pid * chunk
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for off in range(start, start + chunk, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n_words, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def time_us(launches: Sequence[Callable[[], object]]) -> float:
    return statistics.median(graph_replays(launches, GRAPH_CALLS)(REPLAYS))


def copies_for(nbytes: int, l2_bytes: int) -> int:
    """Input copies that together exceed twice the L2, so that each launch reads from HBM."""
    return max(2, -(-2 * l2_bytes // max(nbytes, 1)))


def read_us(nbytes: int, sms: int, l2_bytes: int) -> tuple[float, str]:
    words = -(-nbytes // 4)
    bufs = [torch.randint(0, 16, (words,), dtype=torch.int32, device="cuda")
            for _ in range(copies_for(nbytes, l2_bytes))]  # fmt: skip
    best = (float("inf"), "")
    for per_sm in PROGRAMS_PER_SM:
        programs = sms * per_sm
        for block, warps in READ_CONFIGS:
            chunk = -(-words // programs)
            chunk = -(-chunk // block) * block
            grid = (-(-words // chunk),)
            out = torch.empty(grid[0], dtype=torch.int32, device="cuda")

            def launch(x: torch.Tensor, chunk: int = chunk, grid: tuple[int] = grid, out: Any = out,
                       block: int = block, warps: int = warps) -> None:  # fmt: skip
                read_kernel[grid](x, out, words, chunk, BLOCK=block, num_warps=warps)

            launch(bufs[0])
            torch.cuda.synchronize()
            assert int(out.sum()) == int(bufs[0].sum()), "the read kernel summed the wrong words"
            us = time_us([functools.partial(launch, x) for x in bufs])
            if us < best[0]:
                best = (us, f"{grid[0]} programs, {block} words a step, {warps} warps")
    return best


def copy_us(nbytes: int, l2_bytes: int) -> float:
    half = nbytes // 2
    n = copies_for(nbytes, l2_bytes)
    pairs = [(torch.empty(half, dtype=torch.uint8, device="cuda").random_(0, 255),
              torch.empty(half, dtype=torch.uint8, device="cuda")) for _ in range(n)]  # fmt: skip
    return time_us([functools.partial(d.copy_, s) for s, d in pairs])


def default_us(problem: Any, l2_bytes: int) -> tuple[float, str]:
    from autotune.kernels import get_op
    from autotune.target import local_target

    op = get_op(problem.op)
    target = local_target()
    config = op.default_config(problem, target)
    n = copies_for(int(problem.min_bytes()), l2_bytes)
    first = op.make_inputs(problem, "cuda", seed=0)
    out = op.make_output(problem, "cuda").fill_(float("nan"))
    op.prepare(problem, config, target, first, out)()
    ref = op.reference(problem, first)
    err = float((out.float() - ref).abs().max() / ref.abs().max())
    if not err <= op.tolerance(problem):  # NaN fails too
        raise AssertionError(f"{problem.op} default {config.short()}: relative error {err}")
    launches = []
    for i in range(n):  # copies of the first inputs, each read from HBM in turn
        inputs = first if i == 0 else [None if t is None else t.clone() for t in first]
        launches.append(op.prepare(problem, config, target, inputs, op.make_output(problem, "cuda")))
    return time_us(launches), config.short()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="directory for read_ceiling.json (default: $OUT)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gemm_quant import copy_bandwidth_gbps, shapes

    from autotune import Problem

    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    sms = props.multi_processor_count
    copy_gbps = copy_bandwidth_gbps()
    meta = {"gpu": props.name, "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d"), "copy_gbps_1gib": copy_gbps, "l2_bytes": l2}  # fmt: skip
    rows: list[dict[str, Any]] = []
    for label, N, K in shapes(quick=False, interpret=False):
        for op in ("gemm_fp8_rowwise", "gemm_fp8_blockwise"):
            for M in DECODE_M:
                p = Problem.quant(op, M, N, K)
                nbytes = int(p.min_bytes())
                r_us, r_cfg = read_us(nbytes, sms, l2)
                c_us = copy_us(nbytes, l2)
                d_us, d_cfg = default_us(p, l2)
                row: dict[str, Any] = dict(layer=label, op=op, M=M, N=N, K=K, bytes=nbytes, read_us=r_us,
                                           read_config=r_cfg, copy_us=c_us, default_us=d_us,
                                           default_config=d_cfg)  # fmt: skip
                for name in ("read", "copy", "default"):
                    gbps = nbytes / row[f"{name}_us"] / 1e3
                    row[f"{name}_gbps"], row[f"{name}_frac"] = gbps, gbps / copy_gbps
                rows.append(row)
                print(json.dumps(row), flush=True)
    out_dir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "read_ceiling.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}; 1 GiB copy {copy_gbps:.0f} GB/s")
    print(f"{'layer':<28} {'op':<8} {'M':>3} {'MB':>6} {'read µs':>8} {'read %':>6} {'copy %':>6} "
          f"{'dflt µs':>8} {'dflt %':>6} {'dflt/read':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['layer'][:28]:<28} {r['op'][9:17]:<8} {r['M']:>3} {r['bytes'] / 1e6:>6.1f} "
              f"{r['read_us']:>8.2f} "
              f"{100 * r['read_frac']:>6.0f} {100 * r['copy_frac']:>6.0f} {r['default_us']:>8.2f} "
              f"{100 * r['default_frac']:>6.0f} {r['read_us'] / r['default_us']:>9.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
