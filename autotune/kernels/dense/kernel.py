"""Triton dense GEMM: C = A·Bᵀ (B as N×K) or C = A·B (B as K×N), fp32 accumulation, split-K.

Imported lazily (it imports triton); `autotune.kernels.gemm` is the entry point most code wants.
Knobs: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M (tile swizzle for L2 reuse), SPLIT_K (K split over a second
grid axis; partial sums go to an fp32 workspace and a second kernel reduces them in a fixed order, so the
result is deterministic), FUSED_SPLIT (the same sum in the GEMM's own launch: the last slice of a tile to
finish adds the slices up in order, `common.splitk.store_tile`), NUM_XCDS (program-id remapping so
neighbouring tiles share an XCD's L2 on MI300X/MI355X), num_warps, num_stages, and on AMD
matrix_instr_nonkdim, waves_per_eu and kpack.
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
from autotune.kernels.common.grid import split_coords, stream_range, stream_segment, tile_rows_cols
from autotune.kernels.common.knobs import AMD_LAUNCH_OPTIONS
from autotune.kernels.common.splitk import (
    REDUCE_BLOCK,
    splitk_reduce_kernel,
    store_tile,
    stream_store,
    summed_launch,
)
from autotune.kernels.common.tile import edge_clamped
from autotune.kernels.launch import pinned

__all__ = ["gemm_kernel", "gemm_sum_kernel", "launcher"]


@triton.jit
def _partial(
    a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, k_start, n_iters,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    DOT_F32: tl.constexpr,
):  # fmt: skip
    """The fp32 sum of one C tile over K tiles k_start, k_start + BLOCK_K, ... (n_iters of them)."""
    offs_m = edge_clamped(pid_m * BLOCK_M, BLOCK_M, M)
    offs_n = edge_clamped(pid_n * BLOCK_N, BLOCK_N, N)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, n_iters):
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
    return acc


@triton.jit(do_not_specialize=("M",))
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
    """One (BLOCK_M, BLOCK_N) tile of C over one K slice. With SPLIT_K > 1, c_ptr is the fp32 workspace
    (slice `pid_k` at stride_cs) that `splitk_reduce_kernel` sums."""
    pid_m, pid_n, pid_k, k_start, n_iters, num_pid_n = split_coords(
        M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, NUM_XCDS
    )
    acc = _partial(
        a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, k_start, n_iters,
        BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_F32,
    )  # fmt: skip
    store_tile(
        acc, c_ptr, c_ptr, c_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N, stride_cs, stride_cm, stride_cn,
        BLOCK_M, BLOCK_N, SPLIT_K, False,
    )  # fmt: skip


@triton.jit(do_not_specialize=("M",))
def gemm_sum_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    ws_ptr,
    count_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    PER,
    MAX_PARTS,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr,
    STREAM: tl.constexpr,
    DOT_F32: tl.constexpr = False,
):
    """`gemm_kernel` with the K parts of a tile summed in this launch (kept apart from it so that a plain
    launch binds no extra arguments). SPLIT_K > 1 without STREAM: one K slice per program, summed by the
    last slice to finish (`store_tile`). STREAM: program p takes the flat K steps [p·PER, (p + 1)·PER) of
    all tiles in order (`stream_store`); MAX_PARTS bounds the programs that share one tile."""
    if STREAM:
        num_pid_m, num_pid_n, iters, lo, hi = stream_range(M, N, K, PER, BLOCK_M, BLOCK_N, BLOCK_K)
        while lo < hi:
            tile, k0, k1 = stream_segment(lo, hi, iters)
            pid_m, pid_n = tile_rows_cols(tile, num_pid_m, num_pid_n, GROUP_M)
            acc = _partial(
                a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n,
                k0 * BLOCK_K, k1 - k0, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_F32,
            )  # fmt: skip
            stream_store(
                acc, c_ptr, ws_ptr, count_ptr, tile, k0, k1, iters, PER, pid_m, pid_n, M, N, stride_cm,
                stride_cn, MAX_PARTS, BLOCK_M, BLOCK_N,
            )  # fmt: skip
            lo += k1 - k0
    else:
        pid_m, pid_n, pid_k, k_start, n_iters, num_pid_n = split_coords(
            M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, NUM_XCDS
        )
        acc = _partial(
            a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, k_start,
            n_iters, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_F32,
        )  # fmt: skip
        store_tile(
            acc, c_ptr, ws_ptr, count_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N, 0, stride_cm, stride_cn,
            BLOCK_M, BLOCK_N, SPLIT_K, True,
        )  # fmt: skip


def launcher(
    config: Config,
    *,
    is_amd: bool,
    interpret: bool = False,
    kernels: tuple[Any, ...] | None = None,
    num_sms: int = 0,
) -> Callable[..., None]:
    """A function `launch(a, b_kn_strides, out, M, N, K)` for `config`, with its kwargs built once.

    The returned callable takes ``(a, b, out, stride_bk, stride_bn, M, N, K, workspace)``: `workspace` is
    an fp32 tensor of SPLIT_K·M·N elements when SPLIT_K > 1 and a reduce kernel sums the slices (else
    ignored). FUSED_SPLIT sums them in the GEMM's launch (`gemm_sum_kernel`), with scratch per device and
    stream; STREAM_K = s runs s programs per SM (`num_sms` of them) that share the K steps of all tiles
    evenly. `kernels` replaces (gemm_kernel, splitk_reduce_kernel, gemm_sum_kernel), e.g. by recorders
    that capture the launches for a compile-only run.
    """
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    split_k = int(config.get("SPLIT_K", 1))
    fused = bool(config.get("FUSED_SPLIT", 0)) and split_k > 1
    stream = int(config.get("STREAM_K", 0))
    if stream and (split_k > 1 or num_sms <= 0):
        raise ValueError(f"STREAM_K needs SPLIT_K 1 and the SM count; config: {config.short()}")
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
    kernel, reduce_kernel, sum_kernel = (*kernels, None)[:3] if kernels else (gemm_kernel, None, None)
    main = pinned(kernel, **opts)
    reduce = pinned(reduce_kernel or splitk_reduce_kernel, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS)
    summed = pinned(sum_kernel or gemm_sum_kernel, **opts)

    def launch_summed(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, stride_bk: int, stride_bn: int, M: int, N: int,
        K: int,
    ) -> None:  # fmt: skip
        grid, args, (ws, counts) = summed_launch(out, M, N, K, bm, bn, bk, split_k, stream, num_sms)
        summed[grid](
            a, b, out, ws, counts, M, N, K, a.stride(0), a.stride(1), stride_bk, stride_bn, out.stride(0),
            out.stride(1), **args,
        )  # fmt: skip

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
        if fused or stream:
            launch_summed(a, b, out, stride_bk, stride_bn, M, N, K)
            return
        grid = (cdiv(M, bm) * cdiv(N, bn), split_k)
        even_k = K % (bk * split_k) == 0
        if split_k == 1:
            main[grid](
                a, b, out, M, N, K, a.stride(0), a.stride(1), stride_bk, stride_bn, 0, out.stride(0),
                out.stride(1), EVEN_K=even_k,
            )  # fmt: skip
            return
        assert workspace is not None, "SPLIT_K > 1 needs an fp32 workspace of SPLIT_K * M * N"
        main[grid](
            a, b, workspace, M, N, K, a.stride(0), a.stride(1), stride_bk, stride_bn, M * N, N, 1,
            EVEN_K=even_k,
        )  # fmt: skip
        mn = M * N
        if out.is_contiguous():
            reduce[(cdiv(mn, REDUCE_BLOCK),)](workspace, out, mn)
        else:  # the reduce kernel stores a dense C
            c = torch.empty((M, N), device=out.device, dtype=out.dtype)
            reduce[(cdiv(mn, REDUCE_BLOCK),)](workspace, c, mn)
            out.copy_(c)

    return launch
