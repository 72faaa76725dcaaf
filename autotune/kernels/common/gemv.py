"""Triton helpers of the GEMV kernels (A of at most `GEMV_ROWS` rows, no matrix instructions).

Each of the M rows of A keeps its own fp32 accumulator in registers (four, those past M untouched), and
C's rows are stored one by one. Shared by the ops' GEMV kernels; imported lazily (it imports triton).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["row_step", "rows_step", "store_rows"]


@triton.jit
def row_step(acc, b, a_ptr, row, k_offs, K, stride_am, stride_ak, STEP_SUM: tl.constexpr):
    """acc + B tile · (row `row` of A at K offsets k_offs): elementwise (summed along K at the end), or
    (STEP_SUM) summed along K now, into one value per column."""
    a = tl.load(a_ptr + row * stride_am + k_offs * stride_ak, mask=k_offs < K, other=0.0)
    if STEP_SUM:
        acc = acc + tl.sum(b * a.to(tl.float32)[None, :], axis=1)
    else:
        acc = acc + b * a.to(tl.float32)[None, :]
    return acc


@triton.jit
def _store_row(c_ptr, value, row, cols, N, stride_cm, stride_cn, SUM: tl.constexpr):
    if SUM:
        value = tl.sum(value, axis=1)
    tl.store(c_ptr + row * stride_cm + cols * stride_cn, value.to(c_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def rows_step(acc0, acc1, acc2, acc3, b, a_ptr, k_offs, K, stride_am, stride_ak, M: tl.constexpr,
              STEP_SUM: tl.constexpr):  # fmt: skip
    """`row_step` for each of the M (1 to 4) rows of A: the four accumulators, those past M untouched."""
    acc0 = row_step(acc0, b, a_ptr, 0, k_offs, K, stride_am, stride_ak, STEP_SUM)
    if M > 1:
        acc1 = row_step(acc1, b, a_ptr, 1, k_offs, K, stride_am, stride_ak, STEP_SUM)
    if M > 2:
        acc2 = row_step(acc2, b, a_ptr, 2, k_offs, K, stride_am, stride_ak, STEP_SUM)
    if M > 3:
        acc3 = row_step(acc3, b, a_ptr, 3, k_offs, K, stride_am, stride_ak, STEP_SUM)
    return acc0, acc1, acc2, acc3


@triton.jit
def store_rows(c_ptr, v0, v1, v2, v3, cols, N, stride_cm, stride_cn, M: tl.constexpr, SUM: tl.constexpr):
    """Rows 0 .. M - 1 of C at columns `cols` (masked at N): v0 .. v3, one value per column each, or
    (SUM) one (columns, K) partial each, summed along K."""
    _store_row(c_ptr, v0, 0, cols, N, stride_cm, stride_cn, SUM)
    if M > 1:
        _store_row(c_ptr, v1, 1, cols, N, stride_cm, stride_cn, SUM)
    if M > 2:
        _store_row(c_ptr, v2, 2, cols, N, stride_cm, stride_cn, SUM)
    if M > 3:
        _store_row(c_ptr, v3, 3, cols, N, stride_cm, stride_cn, SUM)
