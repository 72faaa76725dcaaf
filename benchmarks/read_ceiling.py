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
- our kernels' heuristic defaults of `gemm_fp8_rowwise` and `gemm_fp8_blockwise` at M = 1, 2, 4 and 16,
  and where the default is not the tiled Triton kernel (the GEMV at M = 1 on NVIDIA) that kernel's;
- at M <= 4, every config of the FP8 GEMV kernel (`triton_gemv`), each checked against the reference
  first: the best, and the one named by --gemv (a candidate default).
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

from autotune.engine.bench import graph_replays

#: Launches per graph, and replays timed.
GRAPH_CALLS = 20
REPLAYS = 5
#: (int32 words per program's step, num_warps) tried for the read.
READ_CONFIGS = [(b, w) for b in (1024, 2048, 4096) for w in (4, 8)]
#: Programs per SM of the read (each reads a contiguous chunk).
PROGRAMS_PER_SM = (2, 4, 8)
DECODE_M = (1, 2, 4, 16)


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


class Layer:
    """One problem's inputs (copies enough to miss L2) and reference, built once for all its configs."""

    def __init__(self, problem: Any, l2_bytes: int) -> None:
        from autotune.core.target import local_target
        from autotune.kernels import get_op

        self.problem, self.op, self.target = problem, get_op(problem.op), local_target()
        first = self.op.make_inputs(problem, "cuda", seed=0)
        self.ref = self.op.reference(problem, first)
        n = copies_for(int(problem.min_bytes()), l2_bytes)
        self.inputs = [first] + [[None if t is None else t.clone() for t in first] for _ in range(n - 1)]

    def time_us(self, config: Any) -> float:
        """µs per launch of `config`, after checking its result (NaN fails)."""
        op, problem, target = self.op, self.problem, self.target
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        op.prepare(problem, config, target, self.inputs[0], out)()
        err = float((out.float() - self.ref).abs().max() / self.ref.abs().max())
        if not err <= op.tolerance(problem):
            raise AssertionError(f"{problem.op} {config.short()}: relative error {err}")
        return time_us([op.prepare(problem, config, target, x, op.make_output(problem, "cuda"))
                        for x in self.inputs])  # fmt: skip


def candidate_config(spec: dict[str, Any], M: int) -> Any:
    """The --gemv candidate at M: its knobs, with "warps" a number or a map from M to one."""
    from autotune import Config

    warps = spec.get("warps", 4)
    values = {k: v for k, v in spec.items() if k != "warps"}
    values["num_warps"] = int(warps[str(M)]) if isinstance(warps, dict) else int(warps)
    return Config(values, backend="triton_gemv")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="directory for read_ceiling.json (default: $OUT)")
    ap.add_argument("--only", default="", help="the layers whose label contains this text")
    ap.add_argument(
        "--gemv",
        default="",
        help="a candidate GEMV default to time at M <= 4, as JSON: "
        '{"BLOCK_N": 4, "BLOCK_K": 1024, "num_stages": 3, "warps": {"1": 8, "2": 4, "4": 4}}',
    )
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
    out_dir = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    candidate = dict(json.loads(args.gemv)) if args.gemv else None
    rows: list[dict[str, Any]] = []
    for label, N, K in shapes(quick=False, interpret=False):
        if args.only not in label:
            continue
        for op in ("gemm_fp8_rowwise", "gemm_fp8_blockwise"):
            ceiling: dict[str, Any] = {}
            for M in DECODE_M:
                p = Problem.quant(op, M, N, K)
                nbytes = int(p.min_bytes())
                if not ceiling:  # the bytes of M = 1; more rows add a few KB
                    ceiling["read_us"], ceiling["read_config"] = read_us(nbytes, sms, l2)
                    ceiling["copy_us"] = copy_us(nbytes, l2)
                layer = Layer(p, l2)
                target = layer.target
                default = layer.op.default_config(p, target)
                row: dict[str, Any] = dict(layer=label, op=op, M=M, N=N, K=K, bytes=nbytes, **ceiling,
                                           default_us=layer.time_us(default),
                                           default_config=default.short())  # fmt: skip
                if default.backend != "triton":  # the tiled kernel's default beside it
                    from autotune.kernels.gemm_quant_space import _triton_default

                    tiled = _triton_default(p, target)
                    row.update(tiled_us=layer.time_us(tiled), tiled_config=tiled.short())
                if M <= 4:
                    gemv = {c.short(): layer.time_us(c)
                            for c in layer.op.space(p, target, ("triton_gemv",)).configs()}  # fmt: skip
                    best = min(gemv, key=lambda k: gemv[k])
                    row.update(gemv_us=gemv[best], gemv_config=best, gemv_all=gemv)
                    if candidate is not None:
                        cand = candidate_config(candidate, M)
                        row.update(candidate_us=layer.time_us(cand), candidate_config=cand.short())
                for name in ("read", "copy", "default", "tiled", "gemv", "candidate"):
                    if f"{name}_us" in row:
                        gbps = nbytes / row[f"{name}_us"] / 1e3
                        row[f"{name}_gbps"], row[f"{name}_frac"] = gbps, gbps / copy_gbps
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "gemv_all"}), flush=True)
                del layer
                if out_dir is not None:  # as it goes: a run cut short keeps its rows
                    out_dir.mkdir(parents=True, exist_ok=True)
                    text = json.dumps({"meta": meta, "rows": rows}, indent=1)
                    (
                        out_dir / f"read_ceiling{args.only and '-' + args.only.replace(' ', '_')}.json"
                    ).write_text(text)
    print(f"\n{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}; 1 GiB copy {copy_gbps:.0f} GB/s")
    print(f"{'layer':<28} {'op':<8} {'M':>3} {'MB':>6} {'read µs':>8} {'read %':>6} {'copy %':>6} "
          f"{'dflt µs':>8} {'dflt %':>6} {'tiled µs':>8} {'gemv µs':>8} {'gemv %':>6} {'cand µs':>8}"
          "  best GEMV")  # fmt: skip
    nan = float("nan")
    for r in rows:
        print(f"{r['layer'][:28]:<28} {r['op'][9:17]:<8} {r['M']:>3} {r['bytes'] / 1e6:>6.1f} "
              f"{r['read_us']:>8.2f} {100 * r['read_frac']:>6.0f} {100 * r['copy_frac']:>6.0f} "
              f"{r['default_us']:>8.2f} {100 * r['default_frac']:>6.0f} {r.get('tiled_us', nan):>8.2f} "
              f"{r.get('gemv_us', nan):>8.2f} "
              f"{100 * r.get('gemv_frac', nan):>6.0f} {r.get('candidate_us', nan):>8.2f}  "
              f"{r.get('gemv_config', '')}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
