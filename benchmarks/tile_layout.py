"""Does the weight's layout in memory limit the decode GEMM? A probe (GPU).

A decode GEMM streams its weight once, tile by tile: each program reads BLOCK_N rows x BLOCK_K bytes per
K step, and in the row-major (N, K) layout those are BLOCK_N runs of BLOCK_K bytes, K bytes apart. A
pre-shuffled weight stores each (BLOCK_N x BLOCK_K) tile as one contiguous run instead. This script times
one minimal row-wise-style FP8 kernel (swapped: C^T tile = W tile . A^T, wgmma 64 x M, fp32 accumulator,
one scale per row and column at the end) on the same bytes in both layouts, with the same grid, tiles,
stages and split, next to a pure read of the bytes and our row-wise default:

    PYTHONPATH=$PWD python benchmarks/tile_layout.py [--out DIR]

Every probe result is checked against a torch reference first. CUDA-graph replay of 20 launches cycling
over weight copies that exceed twice the L2, 5 replays, median. Prints a table last; details go to
DIR/tile_layout.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from autotune import Problem
from autotune.core.target import local_target
from autotune.kernels import get_op

#: (M, N, K) rows: DeepSeek-V3 gate/up and Llama-3.1-70B down at TP 8.
ROWS = [(16, 4608, 7168), (64, 4608, 7168), (16, 8192, 3584), (64, 8192, 3584)]
#: (BLOCK_N, BLOCK_K, num_stages, SPLIT_K) of the probe.
#: Shared memory a probe's ring may take (the H100 allows 227 KB a block).
SHARED_BYTES = 220 * 1024
TILES = [(64, 256, 5, 1), (64, 512, 3, 1), (64, 512, 4, 1), (64, 256, 4, 2), (128, 256, 4, 1)]


@triton.jit
def probe_kernel(a_ptr, w_ptr, sa_ptr, sw_ptr, c_ptr, part_ptr, M, N, K, SHUFFLED: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SPLIT_K: tl.constexpr):  # fmt: skip
    """C (M, N) = sa[:, None] * sw[None, :] * (A . Wᵀ), A (M, K) and W (N, K) fp8. SHUFFLED: W is stored
    as (N / BLOCK_N, K / BLOCK_K, BLOCK_N, BLOCK_K), each tile contiguous. SPLIT_K > 1: each slice's fp32
    part goes to part_ptr (SPLIT_K, M, N), summed by torch (the probe times the read, not the sum)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    k_steps = K // BLOCK_K // SPLIT_K
    offs_m = tl.arange(0, BLOCK_M)
    rows = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for i in range(k_steps):
        step = pid_k * k_steps + i
        a = tl.load(a_ptr + offs_m[:, None] * K + (step * BLOCK_K + offs_k)[None, :],
                    mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
        if SHUFFLED:
            base = (pid_n * (K // BLOCK_K) + step).to(tl.int64) * (BLOCK_N * BLOCK_K)
            w = tl.load(w_ptr + base + rows[:, None] * BLOCK_K + offs_k[None, :])
        else:
            n = (pid_n * BLOCK_N + rows).to(tl.int64)
            w = tl.load(w_ptr + n[:, None] * K + (step * BLOCK_K + offs_k)[None, :])
        acc = tl.dot(w, tl.trans(a), acc)
    n_out = pid_n * BLOCK_N + rows
    if SPLIT_K == 1:
        sa = tl.load(sa_ptr + offs_m, mask=offs_m < M, other=0.0)
        sw = tl.load(sw_ptr + n_out)
        out = acc * sw[:, None] * sa[None, :]
        tl.store(c_ptr + offs_m[None, :] * N + n_out[:, None], out.to(tl.bfloat16), mask=offs_m[None, :] < M)
    else:
        dst = part_ptr + pid_k * M * N + offs_m[None, :] * N + n_out[:, None]
        tl.store(dst, acc, mask=offs_m[None, :] < M)


def shuffle(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    """W (N, K) stored tile by tile: (N / bn, K / bk, bn, bk), contiguous."""
    n, k = w.shape
    return w.view(n // bn, bn, k // bk, bk).permute(0, 2, 1, 3).contiguous()


def run_row(m: int, n: int, k: int, copy_gbps: float, quick: bool) -> list[dict[str, Any]]:
    from read_ceiling import Layer, copies_for, read_us, time_us

    props = torch.cuda.get_device_properties(0)
    l2, sms = props.L2_cache_size, props.multi_processor_count
    fp8 = torch.float8_e4m3fn
    gen = torch.Generator(device="cuda").manual_seed(0)
    copies = copies_for(n * k, l2)
    acts = [(torch.randn(m, k, device="cuda", generator=gen) * 0.5).to(fp8) for _ in range(copies)]
    a = acts[0]
    sa = torch.rand(m, device="cuda", generator=gen) + 0.5
    sw = torch.rand(n, device="cuda", generator=gen) + 0.5
    ws = [(torch.randn(n, k, device="cuda", generator=gen) * 0.5).to(fp8) for _ in range(copies)]
    ref = (a.float() @ ws[0].float().T) * sa[:, None] * sw[None, :]
    pct = 100 * (n * k + m * k) / 1e3 / copy_gbps  # copy % = this / µs
    out: list[dict[str, Any]] = []

    def record(kind: str, us: float, **more: Any) -> None:
        out.append(dict(M=m, N=n, K=k, kind=kind, us=us, copy_pct=pct / us, **more))
        print(json.dumps(out[-1]), flush=True)

    record("read", read_us(n * k + m * k, sms, l2)[0])
    for bn, bk, want, split in TILES[:1] if quick else TILES:
        stages = min(want, SHARED_BYTES // ((max(16, m) + bn) * bk))  # what fits (M = 64 takes more)
        for shuffled in (0,) if quick else (0, 1):
            bufs = [shuffle(w, bn, bk) if shuffled else w for w in ws]
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            part = torch.empty(split, m, n, device="cuda", dtype=torch.float32)

            knobs = dict(SHUFFLED=shuffled, BLOCK_M=max(16, m), BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split,
                         num_warps=4, num_stages=stages)  # fmt: skip

            def launch(w: torch.Tensor, x: torch.Tensor = a, c: Any = c, part: Any = part,
                       grid: Any = (n // bn, split), knobs: Any = knobs) -> None:  # fmt: skip
                probe_kernel[grid](x, w, sa, sw, c, part, m, n, k, **knobs)

            launch(bufs[0])
            torch.cuda.synchronize()
            got = c.float() if split == 1 else part.sum(0) * sa[:, None] * sw[None, :]
            err = float((got - ref).abs().max() / ref.abs().max())
            if not err <= 2e-2:
                raise AssertionError(f"probe {knobs}: error {err}")
            record("probe", time_us([functools.partial(launch, w) for w in bufs]), BLOCK_N=bn, BLOCK_K=bk,
                   stages=want, ran_stages=stages, split=split, shuffled=shuffled)  # fmt: skip
            if not shuffled:  # each launch with its own activations, as the op's benchmarks time it
                rotated = [functools.partial(launch, w, x) for w, x in zip(bufs, acts, strict=True)]
                record("probe, activations rotated", time_us(rotated), BLOCK_N=bn, BLOCK_K=bk, stages=want,
                       ran_stages=stages, split=split, shuffled=0)  # fmt: skip
                outs = [torch.empty_like(c) for _ in bufs]  # each launch its own output too, as the op's
                if split == 1:
                    own = [
                        functools.partial(launch, w, x, o) for w, x, o in zip(bufs, acts, outs, strict=True)
                    ]
                    record("probe, activations and outputs rotated", time_us(own), BLOCK_N=bn, BLOCK_K=bk,
                           stages=want, ran_stages=stages, split=split, shuffled=0)  # fmt: skip
    p = Problem.quant("gemm_fp8_rowwise", m, n, k)
    layer = Layer(p, l2)  # the default's inputs in copies, and its correctness check
    op, target, inputs = layer.op, layer.target, layer.inputs
    cfg = op.default_config(p, target)
    record("rowwise default", layer.time_us(cfg), config=cfg.short())
    # The activations and their scales of the first copy in every launch (the weight still rotates):
    # what a model's layer sees right after the kernel that wrote them, which leaves them in L2.
    shared = [[inputs[0][0], x[1], inputs[0][2], x[3]] for x in inputs]
    calls = [op.prepare(p, cfg, target, x, op.make_output(p, "cuda")) for x in shared]
    record("rowwise default, activations shared", time_us(calls), config=cfg.short())
    one = op.make_output(p, "cuda")
    calls = [op.prepare(p, cfg, target, x, one) for x in shared]
    record("rowwise default, activations and output shared", time_us(calls), config=cfg.short())
    return out


def profile_launches(m: int, n: int, k: int) -> None:
    """The first tile's probe and the row-wise default, 3 launches each, over fresh inputs."""
    fp8 = torch.float8_e4m3fn
    a = torch.randn(m, k, device="cuda").to(fp8)
    w = torch.randn(n, k, device="cuda").to(fp8)
    sa, sw = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    bn, bk, stages, _ = TILES[0]
    knobs = dict(BLOCK_M=max(16, m), BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=1, num_warps=4, num_stages=stages)
    op, p, target = get_op("gemm_fp8_rowwise"), Problem.quant("gemm_fp8_rowwise", m, n, k), local_target()
    call = op.prepare(
        p, op.default_config(p, target), target, op.make_inputs(p, "cuda", 0), op.make_output(p, "cuda")
    )
    for _ in range(3):
        probe_kernel[(n // bn, 1)](a, w, sa, sw, c, c, m, n, k, SHUFFLED=0, **knobs)
        call()
    torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    ap.add_argument("--quick", action="store_true", help="the first tile only, row-major only")
    ap.add_argument("--profile", default="", metavar="M,N,K",
                    help="no timing: launch the first tile's probe and the row-wise default 3 times each on "
                    "one row, for a profiler (ncu -k regex:'probe|gemm_fp8')")  # fmt: skip
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/tile_layout.py needs a GPU", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gemm_quant import copy_bandwidth_gbps

    if args.profile:
        profile_launches(*map(int, args.profile.split(",")))
        return 0
    copy = copy_bandwidth_gbps()
    results = [r for row in ROWS for r in run_row(*row, copy, args.quick)]
    target = local_target()
    info = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"), copy_gbps=copy,
                results=results)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tile_layout.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}, copy {copy:.0f} GB/s")
    for m, n, k in ROWS:
        print(f"M={m} N={n} K={k}")
        for r in results:
            if (r["M"], r["N"], r["K"]) == (m, n, k):
                tile = (
                    f" {r['BLOCK_N']}x{r['BLOCK_K']} s{r['stages']} split {r['split']}"
                    if "BLOCK_N" in r
                    else ""
                )
                layout = " shuffled" if r.get("shuffled") else ""
                print(f"  {r['kind']}{tile}{layout}: {r['us']:.2f} µs ({r['copy_pct']:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
