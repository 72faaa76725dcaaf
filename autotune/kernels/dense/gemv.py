"""Triton GEMV for decode: C = A·Bᵀ (or A·B) for A of at most 4 rows, without matrix instructions.

Backend "triton_gemv". With one to four rows of A, a matrix instruction spends most of its tile on rows
that are not there, and the GEMM is a stream of B from memory. Here each program reads BLOCK_N rows of B
(columns of C) in BLOCK_K-wide steps, multiplies them by the A rows in registers and keeps one fp32
(BLOCK_N, BLOCK_K) partial per row of A, summed along K once at the end; no shared memory, no split-K
(the grid is N / BLOCK_N programs, already many). Rows past N read row N - 1 (`edge_clamped`) so that
loads need no mask; stores are masked. Imported lazily (it imports triton).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.core.config import Config
from autotune.core.op import FP_OPTIONS
from autotune.core.problem import cdiv
from autotune.kernels.common.gemv import rows_step, store_rows
from autotune.kernels.common.geometry import GEMV_ROWS
from autotune.kernels.common.tile import edge_clamped
from autotune.kernels.launch import pinned

__all__ = ["gemv_kernel", "gemv_launcher"]


@triton.jit
def gemv_kernel(
    a_ptr, b_ptr, c_ptr, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):  # fmt: skip
    """C[m, n] = Σ_k A[m, k]·B[k, n] for the M (1..4) rows of A and BLOCK_N columns of C per program;
    B[k, n] at b_ptr + k·stride_bk + n·stride_bn (either layout). DOT_F32 is unused (the products are
    fp32 already); it is accepted so that every dense launcher passes the same options."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows = edge_clamped(tl.program_id(0) * BLOCK_N, BLOCK_N, N)
    b_ptrs = b_ptr + rows[:, None] * stride_bn + rk[None, :] * stride_bk
    acc0 = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    acc1 = tl.zeros_like(acc0)
    acc2 = tl.zeros_like(acc0)
    acc3 = tl.zeros_like(acc0)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            b = tl.load(b_ptrs).to(tl.float32)
        else:
            b = tl.load(b_ptrs, mask=(k + rk)[None, :] < K, other=0.0).to(tl.float32)
        acc0, acc1, acc2, acc3 = rows_step(
            acc0, acc1, acc2, acc3, b, a_ptr, k + rk, K, stride_am, stride_ak, M, False
        )
        b_ptrs += BLOCK_K * stride_bk
    store_rows(c_ptr, acc0, acc1, acc2, acc3, cols, N, stride_cm, stride_cn, M, True)


def gemv_launcher(config: Config, *, kernel: Any = None) -> Callable[..., None]:
    """A function `launch(a, b, out, stride_bk, stride_bn, M, N, K[, workspace])` for `config` (BLOCK_N,
    BLOCK_K, num_warps, num_stages); `kernel` replaces `gemv_kernel` (a Recorder for compile-only runs)."""
    bn, bk = int(config["BLOCK_N"]), int(config["BLOCK_K"])
    run = pinned(
        kernel or gemv_kernel,
        BLOCK_N=bn,
        BLOCK_K=bk,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 1)),
        **FP_OPTIONS,
    )

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, stride_bk: int, stride_bn: int, M: int, N: int,
        K: int, workspace: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
        """`workspace` is ignored (the pointer kernel's launch takes one; this kernel splits nothing)."""
        if M > GEMV_ROWS:
            raise ValueError(f"the GEMV kernel takes at most {GEMV_ROWS} rows of A, got M={M}")
        sa, sc = a.stride(), out.stride()
        run[(cdiv(N, bn),)](
            a, b, out, N, K, sa[0], sa[1], stride_bk, stride_bn, sc[0], sc[1], M=M, EVEN_K=K % bk == 0
        )

    return launch
