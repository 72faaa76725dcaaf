"""How much of a decode GEMM's fixed cost per launch a programmatic dependent launch could hide (GPU).

A decode GEMM streams a weight that no earlier kernel writes, and waits only for its activations. With a
programmatic dependent launch (PDL: `launch_pdl`, `gdc_launch_dependents`, `gdc_wait`) the next kernel's
programs start while the previous kernel drains, may read what does not depend on it, and wait for the
previous kernel's memory only where they must. This probe streams a layer's bytes with a read kernel (as
`read_ceiling.py`) launched back to back, without PDL and with it, where each program reads PRE of its
steps before `gdc_wait` (0: only the launch overlaps; a few: a GEMM's pipeline prologue of weight tiles)
and stores its sum after it. Each launch's sum is checked. Timed as CUDA-graph replays (20 launches a
graph, over input copies that together exceed twice the L2) and as plain stream launches.

    python benchmarks/pdl_probe.py --out results/

Prints a short table last; details go to --out (pdl_probe.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from autotune.engine.bench import graph_replays

#: (label, bytes): the FP8 weight bytes of decode layers.
LAYERS = (("deepseek-v3 mlp.gate_up", 4608 * 7168), ("llama-3.1-70b mlp.down", 8192 * 3584))
#: Steps read before gdc_wait, per PDL variant (None: no PDL).
PRES = (None, 0, 2, 4)
BLOCK, WARPS, PER_SM = 2048, 8, 2
LAUNCHES = 20


@triton.jit
def read_pdl_kernel(x_ptr, out_ptr, n_words, chunk, PRE, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Sums the int32 words [pid * chunk, (pid + 1) * chunk) of x into out[pid]; with PDL, lets the next
    launch start at once and waits for the previous one after its first PRE steps (before the store)."""
    if PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    start = pid * chunk
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    step = 0
    for off in range(start, start + chunk, BLOCK):
        if PDL and step == PRE:
            gdc_wait()
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n_words, other=0)
        step += 1
    if PDL and step <= PRE:
        gdc_wait()
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def reader(
    x: torch.Tensor, out: torch.Tensor, words: int, chunk: int, grid: tuple[int], pre: int | None
) -> Any:
    """One launch of the read kernel over `x` into `out`; `pre` None: without PDL."""
    pdl = pre is not None
    kernel = read_pdl_kernel[grid]
    return lambda: kernel(x, out, words, chunk, pre or 0, BLOCK=BLOCK, PDL=pdl, num_warps=WARPS,
                          launch_pdl=pdl)  # fmt: skip


def stream_us(launches: list[Any], reps: int = 5) -> float:
    """µs per launch of LAUNCHES back-to-back stream launches (cycling `launches`), median of `reps`."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(LAUNCHES):
            launches[i % len(launches)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / LAUNCHES)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for pdl_probe.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/pdl_probe.py needs a GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    rows: list[dict[str, Any]] = []
    for label, nbytes in LAYERS:
        words = nbytes // 4
        copies = max(2, -(-2 * l2 // nbytes))
        bufs = [torch.randint(0, 16, (words,), dtype=torch.int32, device="cuda") for _ in range(copies)]
        sums = [int(b.sum()) for b in bufs]
        programs = props.multi_processor_count * PER_SM
        per_program = -(-words // programs)
        chunk = -(-per_program // BLOCK) * BLOCK
        grid = (-(-words // chunk),)
        outs = [torch.empty(grid[0], dtype=torch.int32, device="cuda") for _ in bufs]
        for pre in PRES:
            pdl = pre is not None

            launches = [reader(x, out, words, chunk, grid, pre) for x, out in zip(bufs, outs, strict=True)]
            for f in launches:
                f()
            torch.cuda.synchronize()
            assert [int(o.sum()) for o in outs] == sums, "the read kernel summed the wrong words"
            graph = statistics.median(graph_replays(launches, LAUNCHES)(5))
            stream = stream_us(launches)
            assert [int(o.sum()) for o in outs] == sums, "a launch summed the wrong words"
            name = "no PDL" if not pdl else f"PDL, {pre} steps before the wait"
            rows.append(dict(layer=label, bytes=nbytes, variant=name, graph_us=graph, stream_us=stream,
                             steps=chunk // BLOCK, programs=grid[0]))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    info = dict(gpu=props.name, torch=torch.__version__, triton=triton.__version__,
                date=time.strftime("%Y-%m-%d"), rows=rows)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdl_probe.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} torch {info['torch']} triton {info['triton']} {info['date']}")
    for r in rows:
        print(f"{r['layer']:26} {r['variant']:32} graph {r['graph_us']:7.2f} µs  "
              f"stream {r['stream_us']:7.2f} µs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
