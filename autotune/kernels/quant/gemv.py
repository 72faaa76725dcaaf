"""Triton FP8 GEMV for decode: C = (A·a_scale) · (B·b_scale)ᵀ for A of at most 4 rows, without matrix
instructions.

Backend "triton_gemv" of gemm_fp8_rowwise and gemm_fp8_blockwise. As the dense GEMV (`dense.gemv`; both
take their rows' helpers from `common.gemv`): each program reads BLOCK_N rows of B (columns of C) in
BLOCK_K-wide steps and multiplies them by the rows of A in registers, so that many programs stream the
weight where the tiled kernel's 64-column tiles leave SMs idle on narrow layers
(docs/notes/2026-11-22-fp8-decode-ceiling.md). Rows of B past N read row N - 1, so B's loads need no
mask; stores are masked.

- row-wise: one fp32 (BLOCK_N, BLOCK_K) partial per row of A, summed along K at the end and scaled once
  by the row's scale and each column's (a scale stride of 0: one scale for the tensor); with STEP_SUM,
  one fp32 value per (row, column) instead, to which each K step's products are summed. Per-step sums
  cost a cross-lane reduction each step and hold fewer registers: they pay on wide, long layers and lose
  on narrow ones, whose few programs per SM wait on each step's reduction
  (docs/notes/2026-11-22-fp8-decode-ceiling.md), so the tuner picks;
- blockwise: per K step, each 128-wide group's products are summed first, then scaled by the A row's
  scale of the group times the B block's, and added to one fp32 value per (row, column); a step of less
  than 128 lies in one group.

Imported lazily (it imports triton).
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

__all__ = ["gemv_fp8_kernel", "gemv_fp8_launcher"]


@triton.jit
def _a_row(a_ptr, row, k_offs, K, stride_am, stride_ak):
    return tl.load(a_ptr + row * stride_am + k_offs * stride_ak, mask=k_offs < K, other=0.0).to(tl.float32)


@triton.jit
def _block_step(acc, b, a_ptr, as_ptr, row, k_offs, K, stride_am, stride_ak, groups, n_groups,
                stride_asm, stride_ask, b_scales, BLOCK_N: tl.constexpr, G: tl.constexpr,
                GROUP: tl.constexpr):  # fmt: skip
    """acc + Σ_g (Σ_{k in g} B·A[row]) · a_scale[row, g] · b_scale[g] over the step's G groups of GROUP."""
    a = _a_row(a_ptr, row, k_offs, K, stride_am, stride_ak)
    p = tl.sum(tl.reshape(b * a[None, :], (BLOCK_N, G, GROUP)), axis=2)
    a_s = tl.load(as_ptr + row * stride_asm + groups * stride_ask, mask=groups < n_groups, other=0.0)
    return acc + tl.sum(p * (a_s[None, :] * b_scales), axis=1)


@triton.jit
def _rowwise_out(acc, as_ptr, row, stride_asm, b_scales, STEP_SUM: tl.constexpr):
    if not STEP_SUM:
        acc = tl.sum(acc, axis=1)
    return acc * tl.load(as_ptr + row * stride_asm) * b_scales


@triton.jit
def gemv_fp8_kernel(
    a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, N, K, stride_am, stride_ak, stride_bn, stride_bk, stride_cm,
    stride_cn, stride_asm, stride_ask, stride_bsn, stride_bsk, M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, BLOCKWISE: tl.constexpr, SCALE_BLOCK: tl.constexpr = 128,
    STEP_SUM: tl.constexpr = False,
):  # fmt: skip
    """C[m, n] for the M (1..4) rows of A and BLOCK_N columns of C per program; B is (N, K) at
    b_ptr + n·stride_bn + k·stride_bk."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    clamped = edge_clamped(tl.program_id(0) * BLOCK_N, BLOCK_N, N)
    rk = tl.arange(0, BLOCK_K)
    b_ptrs = b_ptr + clamped[:, None] * stride_bn + rk[None, :] * stride_bk
    if BLOCKWISE:
        G: tl.constexpr = BLOCK_K // SCALE_BLOCK if BLOCK_K > SCALE_BLOCK else 1
        GROUP: tl.constexpr = BLOCK_K // G
        n_groups = tl.cdiv(K, SCALE_BLOCK)
        bs_ptrs = bs_ptr + (clamped // SCALE_BLOCK)[:, None] * stride_bsn
    if BLOCKWISE or STEP_SUM:  # one value per (row, column)
        acc0 = tl.zeros((BLOCK_N,), tl.float32)
    else:
        acc0 = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    acc1 = tl.zeros_like(acc0)
    acc2 = tl.zeros_like(acc0)
    acc3 = tl.zeros_like(acc0)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            b = tl.load(b_ptrs).to(tl.float32)
        else:
            b = tl.load(b_ptrs, mask=(k + rk)[None, :] < K, other=0.0).to(tl.float32)
        if BLOCKWISE:
            groups = k // SCALE_BLOCK + tl.arange(0, G)
            b_s = tl.load(
                bs_ptrs + groups[None, :] * stride_bsk, mask=(groups < n_groups)[None, :], other=0.0
            )
            acc0 = _block_step(acc0, b, a_ptr, as_ptr, 0, k + rk, K, stride_am, stride_ak, groups, n_groups,
                                   stride_asm, stride_ask, b_s, BLOCK_N, G, GROUP)  # fmt: skip
            if M > 1:
                acc1 = _block_step(acc1, b, a_ptr, as_ptr, 1, k + rk, K, stride_am, stride_ak, groups,
                                   n_groups, stride_asm, stride_ask, b_s, BLOCK_N, G, GROUP)  # fmt: skip
            if M > 2:
                acc2 = _block_step(acc2, b, a_ptr, as_ptr, 2, k + rk, K, stride_am, stride_ak, groups,
                                   n_groups, stride_asm, stride_ask, b_s, BLOCK_N, G, GROUP)  # fmt: skip
            if M > 3:
                acc3 = _block_step(acc3, b, a_ptr, as_ptr, 3, k + rk, K, stride_am, stride_ak, groups,
                                   n_groups, stride_asm, stride_ask, b_s, BLOCK_N, G, GROUP)  # fmt: skip
        else:
            acc0, acc1, acc2, acc3 = rows_step(acc0, acc1, acc2, acc3, b, a_ptr, k + rk, K, stride_am,
                                               stride_ak, M, STEP_SUM)  # fmt: skip
        b_ptrs += BLOCK_K * stride_bk
    if not BLOCKWISE:  # one scale per row of A and per column
        b_scales = tl.load(bs_ptr + clamped * stride_bsn)
        acc0 = _rowwise_out(acc0, as_ptr, 0, stride_asm, b_scales, STEP_SUM)
        if M > 1:
            acc1 = _rowwise_out(acc1, as_ptr, 1, stride_asm, b_scales, STEP_SUM)
        if M > 2:
            acc2 = _rowwise_out(acc2, as_ptr, 2, stride_asm, b_scales, STEP_SUM)
        if M > 3:
            acc3 = _rowwise_out(acc3, as_ptr, 3, stride_asm, b_scales, STEP_SUM)
    store_rows(c_ptr, acc0, acc1, acc2, acc3, cols, N, stride_cm, stride_cn, M, False)


def gemv_fp8_launcher(config: Config, *, blockwise: bool, kernel: Any = None) -> Callable[..., None]:
    """A function `launch(a, b, out, a_scale, b_scale, scale_strides, M, N, K[, workspace])` for `config`
    (BLOCK_N, BLOCK_K, num_warps, num_stages; row-wise also STEP_SUM, 0 where absent), the call of
    `quant.kernel.quant_launcher`'s launches; `scale_strides` is (A's along M, along K, B's along N,
    along K), 0 for a broadcast scale. `kernel` replaces `gemv_fp8_kernel` (a Recorder for compile-only
    runs)."""
    bn, bk = int(config["BLOCK_N"]), int(config["BLOCK_K"])
    if blockwise and (bk % 128 if bk > 128 else 128 % bk):
        raise ValueError(f"a blockwise FP8 GEMV's BLOCK_K must divide 128 or be a multiple of it, got {bk}")
    run = pinned(
        kernel or gemv_fp8_kernel,
        BLOCK_N=bn,
        BLOCK_K=bk,
        BLOCKWISE=blockwise,
        STEP_SUM=bool(int(config.get("STEP_SUM", 0))) and not blockwise,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 1)),
        **FP_OPTIONS,
    )

    def launch(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
        scale_strides: tuple[int, ...], M: int, N: int, K: int, workspace: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
        """`workspace` is ignored (the tiled kernel's launch takes one; this kernel splits nothing)."""
        if M > GEMV_ROWS:
            raise ValueError(f"the FP8 GEMV kernel takes at most {GEMV_ROWS} rows of A, got M={M}")
        sa, sb, sc = a.stride(), b.stride(), out.stride()
        run[(cdiv(N, bn),)](
            a, b, out, a_scale, b_scale, N, K, sa[0], sa[1], sb[0], sb[1], sc[0], sc[1], *scale_strides,
            M=M, EVEN_K=K % bk == 0,
        )  # fmt: skip

    return launch
