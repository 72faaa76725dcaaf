"""Probe: the fused MoE's grouped GEMMs with the weight tiles (and, for the down GEMM, the activation rows)
loaded through tensor descriptors (TMA on sm_90), against the pointer-loaded kernel, config by config.

GEMM 1 (vLLM's structure): x rows gathered by sorted pair id @ w1[e]ᵀ → (pairs, 2N).
GEMM 2: intermediate @ w2[e]ᵀ, times the routing weight → (pairs, K).
Variants: `ptr` (autotune.kernels.moe.kernel.moe_gemm_kernel), `tma_b` (B through a 2-D descriptor over
(E·rows, K)), and for GEMM 2 `tma_ab` (the intermediate stored in sorted-row order, so its row blocks are
contiguous and load through a descriptor too). Prints the best time of each variant per shape and GEMM.

    python benchmarks/moe_tma_probe.py --out DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from autotune.kernels.moe.kernel import _row_block, moe_gemm_kernel
from autotune.kernels.moe.ref import align_block_size

SHAPES = {  # name: (E, N, K, topk)
    "mixtral_tp2": (8, 7168, 4096, 2),
    "qwen3_tp1": (128, 768, 2048, 8),
}
MS = {"mixtral_tp2": (128, 512, 2048, 4096), "qwen3_tp1": (512, 2048, 4096)}


@triton.jit
def tma_kernel(
    a_ptr, a_desc, b_desc, c_ptr, weights_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded, num_valid, N, K,
    B_ROWS, stride_am, stride_cm,
    A_ROW_DIV: tl.constexpr, A_TMA: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _row_block(tl.program_id(0), num_padded, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    expert = tl.load(expert_ids_ptr + pid_m)
    if expert < 0:
        return
    ids = tl.load(sorted_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    row_mask = ids < num_valid
    chunk = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (ids // A_ROW_DIV)[:, None] * stride_am + chunk[None, :]
    b_row = expert * B_ROWS + pid_n * BLOCK_SIZE_N
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if A_TMA:
            a = a_desc.load([pid_m * BLOCK_SIZE_M, k * BLOCK_SIZE_K])
        else:
            a = tl.load(a_ptrs, mask=row_mask[:, None], other=0.0)
            a_ptrs += BLOCK_SIZE_K
        b = b_desc.load([b_row, k * BLOCK_SIZE_K])
        acc = tl.dot(a, b.T, acc)
    if MUL_ROUTED_WEIGHT:
        w = tl.load(weights_ptr + ids, mask=row_mask, other=0.0)
        acc = acc * w[:, None]
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = row_mask[:, None] & (cols[None, :] < N)
    tl.store(c_ptr + ids[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def run_ptr(a, b, c, weights, sorted_ids, expert_ids, num_padded, num_valid, n, k, row_div, mul, cfg):
    tiles = triton.cdiv(num_padded, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"])
    moe_gemm_kernel[(tiles,)](
        a, b, c, weights, weights, weights, sorted_ids, expert_ids, num_padded, num_valid, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        0, 0, 0, 0, 0, A_ROW_DIV=row_div, SWIGLU=False, MUL_ROUTED_WEIGHT=mul, FP8=False, SCALE_GROUP=128,
        EVEN_K=k % cfg["BLOCK_SIZE_K"] == 0, **cfg,
    )  # fmt: skip


def run_tma(a, b, c, weights, sorted_ids, expert_ids, num_padded, num_valid, n, k, row_div, mul, cfg, a_tma):
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    rows = b.shape[1]
    b_desc = TensorDescriptor(b, [b.shape[0] * rows, k], [k, 1], [bn, bk])
    a_desc = TensorDescriptor(a, [a.shape[0], k], [a.stride(0), 1], [bm, bk]) if a_tma else b_desc
    tiles = triton.cdiv(num_padded, bm) * triton.cdiv(n, bn)
    tma_kernel[(tiles,)](
        a, a_desc, b_desc, c, weights, sorted_ids, expert_ids, num_padded, num_valid, n, k, rows,
        a.stride(0), c.stride(0), A_ROW_DIV=row_div, A_TMA=a_tma, MUL_ROUTED_WEIGHT=mul, **cfg,
    )  # fmt: skip


def configs():
    for bm, bn, w, s in itertools.product((64, 128), (128, 256), (4, 8), (3, 4)):
        yield dict(
            BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=64, GROUP_SIZE_M=16, num_warps=w, num_stages=s
        )


def bench(fn) -> float:
    try:
        fn()
        torch.cuda.synchronize()
        return triton.testing.do_bench_cudagraph(fn, rep=40) * 1000
    except Exception as e:  # out of shared memory and the like
        print("  skip:", type(e).__name__, str(e)[:80])
        return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    torch.manual_seed(0)
    rows_out = []
    for name, (E, N, K, topk) in SHAPES.items():
        w1 = torch.randn(E, 2 * N, K, device="cuda", dtype=torch.bfloat16) * 0.02
        w2 = torch.randn(E, K, N, device="cuda", dtype=torch.bfloat16) * 0.02
        for M in MS[name]:
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            ids = torch.stack([torch.randperm(E, device="cuda")[:topk] for _ in range(M)]).to(torch.int32)
            weights = torch.rand(M * topk, device="cuda", dtype=torch.float32)
            for cfg in configs():
                sorted_ids, expert_ids, num_padded = align_block_size(ids, cfg["BLOCK_SIZE_M"], E)
                nv = M * topk
                g1 = torch.empty(nv, 2 * N, device="cuda", dtype=torch.bfloat16)
                inter = torch.randn(nv, N, device="cuda", dtype=torch.bfloat16)
                inter_s = torch.randn(num_padded, N, device="cuda", dtype=torch.bfloat16)
                down = torch.empty(nv, K, device="cuda", dtype=torch.bfloat16)
                common = (weights, sorted_ids, expert_ids, num_padded, nv)
                # right answers first: every variant against the pointer kernel
                run_ptr(x, w1, g1, *common, 2 * N, K, topk, False, cfg)
                ref1 = g1.clone()
                try:
                    run_tma(x, w1, g1, *common, 2 * N, K, topk, False, cfg, False)
                    ok1 = torch.equal(g1, ref1)
                    inter_s.zero_()
                    pos = torch.nonzero(sorted_ids < nv).squeeze(1)
                    inter_s[pos] = inter[sorted_ids[pos].long()]
                    run_ptr(inter, w2, down, *common, K, N, 1, True, cfg)
                    ref2 = down.clone()
                    run_tma(inter, w2, down, *common, K, N, 1, True, cfg, False)
                    ok2 = torch.equal(down, ref2)
                    down.zero_()
                    run_tma(inter_s, w2, down, *common, K, N, 1, True, cfg, True)
                    ok3 = torch.allclose(down.float(), ref2.float(), atol=1e-2, rtol=1e-2)
                except Exception as e:
                    print(name, M, cfg, "fails:", type(e).__name__, str(e)[:80])
                    continue
                t = {}
                for _round in range(2):
                    for key, fn in (
                        ("g1_ptr", partial(run_ptr, x, w1, g1, *common, 2 * N, K, topk, False, cfg)),
                        ("g1_tma_b", partial(run_tma, x, w1, g1, *common, 2 * N, K, topk, False, cfg, False)),
                        ("g2_ptr", partial(run_ptr, inter, w2, down, *common, K, N, 1, True, cfg)),
                        ("g2_tma_b", partial(run_tma, inter, w2, down, *common, K, N, 1, True, cfg, False)),
                        ("g2_tma_ab", partial(run_tma, inter_s, w2, down, *common, K, N, 1, True, cfg, True)),
                    ):
                        v = bench(fn)
                        t[key] = min(t.get(key, v), v)
                row = dict(shape=name, M=M, **cfg, ok=[ok1, ok2, ok3], **t)
                rows_out.append(row)
                print(json.dumps(row), flush=True)
    (args.out / "moe_tma_probe.json").write_text(json.dumps(rows_out, indent=1))
    print("\nshape M | best g1 ptr / tma_b | best g2 ptr / tma_b / tma_ab (µs)")
    for name in SHAPES:
        for M in MS[name]:
            rs = [r for r in rows_out if r["shape"] == name and r["M"] == M]
            best = {
                k: min((r[k] for r in rs if r[k] == r[k]), default=float("nan"))
                for k in ("g1_ptr", "g1_tma_b", "g2_ptr", "g2_tma_b", "g2_tma_ab")
            }
            print(
                f"{name} {M} | {best['g1_ptr']:.1f} / {best['g1_tma_b']:.1f} | "
                f"{best['g2_ptr']:.1f} / {best['g2_tma_b']:.1f} / {best['g2_tma_ab']:.1f}"
            )


if __name__ == "__main__":
    main()
