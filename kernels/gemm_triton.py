"""Triton dense GEMM: C = A·Bᵀ (B as N×K) or C = A·B (B as K×N), fp32 accumulation, split-K.

Imported lazily (it imports triton); `autotune.kernels.gemm` is the entry point most code wants.
Knobs: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M (tile swizzle for L2 reuse), SPLIT_K (K split over a second
grid axis; partial sums go to an fp32 workspace and a second kernel reduces them in a fixed order, so the
result is deterministic), NUM_XCDS (program-id remapping so neighbouring tiles share an XCD's L2 on
MI300X/MI355X), num_warps, num_stages, and on AMD matrix_instr_nonkdim, waves_per_eu and kpack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from autotune.config import Config
from autotune.kernels.base import FP_OPTIONS

__all__ = ["AMD_LAUNCH_OPTIONS", "gemm_kernel", "launcher", "splitk_reduce_kernel"]

#: Config parameters passed to Triton as compile options on AMD only.
AMD_LAUNCH_OPTIONS = ("matrix_instr_nonkdim", "waves_per_eu", "kpack")


@triton.jit
def _remap_xcd(pid, num_pids, NUM_XCDS: tl.constexpr):
    """Bijection on [0, num_pids): consecutive output ids land on one XCD (the hardware deals pids
    round-robin over XCDs)."""
    if NUM_XCDS == 1:
        return pid
    xcd = pid % NUM_XCDS
    local = pid // NUM_XCDS
    per_xcd = (num_pids + NUM_XCDS - 1) // NUM_XCDS
    tall = num_pids - (per_xcd - 1) * NUM_XCDS  # XCDs that receive per_xcd pids; the rest get per_xcd - 1
    if xcd < tall:
        new_pid = xcd * per_xcd + local
    else:
        new_pid = tall * per_xcd + (xcd - tall) * (per_xcd - 1) + local
    return new_pid


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cs,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):
    """One (BLOCK_M, BLOCK_N) tile of C over one K slice. With SPLIT_K > 1, c_ptr is the fp32 workspace."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = _remap_xcd(pid, num_pid_m * num_pid_n, NUM_XCDS)
    # Grouped ordering: GROUP_M rows of tiles are walked column by column, so B tiles stay in L2.
    width = GROUP_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % group_size)
    pid_n = (pid % width) // group_size

    # Rows/columns past the edge wrap around (modulo): loads stay in bounds without masks, stores are masked.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    k_span = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    k_start = pid_k * k_span
    offs_k = k_start + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_span, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k_start - k * BLOCK_K
            a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K)[:, None] < k_left, other=0.0)
        if DOT_F32:  # interpreter only: its bf16 dot multiplies raw bits; bf16 products are exact in fp32
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + pid_k * stride_cs + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def splitk_reduce_kernel(w_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """C[i] = sum over s of W[s, i], summed in split order (deterministic), cast to C's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(w_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


REDUCE_BLOCK = 1024


def launcher(
    config: Config, *, is_amd: bool, interpret: bool = False, kernels: tuple[Any, Any] | None = None
) -> Callable[..., None]:
    """A function `launch(a, b_kn_strides, out, M, N, K)` for `config`, with its kwargs built once.

    The returned callable takes ``(a, b, out, stride_bk, stride_bn, M, N, K, workspace)``: `workspace` is
    an fp32 tensor of SPLIT_K·M·N elements when SPLIT_K > 1 (else ignored). `kernels` replaces
    (gemm_kernel, splitk_reduce_kernel), e.g. by recorders that capture the launches for a compile-only run.
    """
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    split_k = int(config.get("SPLIT_K", 1))
    opts: dict[str, Any] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=int(config.get("GROUP_M", 1)),
        SPLIT_K=split_k,
        NUM_XCDS=int(config.get("NUM_XCDS", 1)),
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 2)),
        **FP_OPTIONS,
    )
    if is_amd:
        opts.update({k: int(config[k]) for k in AMD_LAUNCH_OPTIONS if k in config})
    else:
        stray = [k for k in AMD_LAUNCH_OPTIONS if k in config]
        if stray:
            raise ValueError(f"{', '.join(stray)} exist only on AMD targets; config: {config.short()}")
    if interpret:
        opts["DOT_F32"] = True
    kernel, reduce_kernel = kernels or (gemm_kernel, splitk_reduce_kernel)

    def launch(
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        stride_bk: int,
        stride_bn: int,
        M: int,
        N: int,
        K: int,
        workspace: torch.Tensor | None,
    ) -> None:
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), split_k)
        even_k = K % (bk * split_k) == 0
        if split_k == 1:
            kernel[grid](
                a,
                b,
                out,
                M,
                N,
                K,
                a.stride(0),
                a.stride(1),
                stride_bk,
                stride_bn,
                0,
                out.stride(0),
                out.stride(1),
                EVEN_K=even_k,
                **opts,
            )
            return
        assert workspace is not None
        kernel[grid](
            a,
            b,
            workspace,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            stride_bk,
            stride_bn,
            M * N,
            N,
            1,
            EVEN_K=even_k,
            **opts,
        )
        mn = M * N
        reduce_kernel[(triton.cdiv(mn, REDUCE_BLOCK),)](
            workspace, out, mn, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS
        )

    return launch
