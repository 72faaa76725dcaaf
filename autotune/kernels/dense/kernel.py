"""Triton dense GEMM: C = A·Bᵀ (B as N×K) or C = A·B (B as K×N), fp32 accumulation, split-K.

Imported lazily (it imports triton); `autotune.kernels.gemm` is the entry point most code wants.
Knobs: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M (tile swizzle for L2 reuse), SPLIT_K (K split over a second
grid axis; partial sums go to an fp32 workspace and a second kernel reduces them in a fixed order, so the
result is deterministic), FUSED_SPLIT (the same sum in the GEMM's own launch: the last slice of a tile to
finish adds the slices up in order, see `store_tile`), NUM_XCDS (program-id remapping so neighbouring
tiles share an XCD's L2 on MI300X/MI355X), num_warps, num_stages, and on AMD matrix_instr_nonkdim,
waves_per_eu and kpack.
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
from autotune.kernels.launch import pinned
from autotune.kernels.scratch import split_scratch

__all__ = [
    "AMD_LAUNCH_OPTIONS",
    "arrives_last",
    "column_halves",
    "edge_clamped",
    "gemm_kernel",
    "gemm_sum_kernel",
    "launcher",
    "publish_part",
    "release_tile",
    "split_coords",
    "splitk_reduce_kernel",
    "store_tile",
    "stream_plan",
    "stream_range",
    "stream_segment",
    "stream_store",
    "sum_parts",
    "summed_launch",
    "tile_rows_cols",
]

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
def edge_clamped(start, BLOCK: tl.constexpr, limit):
    """Offsets start .. start + BLOCK - 1, those past `limit` clamped to limit - 1: a tile's loads stay in
    bounds without masks (the stores are masked). One min per offset, where a wrap (offs % limit) costs
    a division each: on sm_90 the FP8 decode kernel's prologue took 340 instructions before its first
    load with the wrap, against 88 for the same tile without it."""
    return tl.minimum(start + tl.arange(0, BLOCK), limit - 1)


@triton.jit
def tile_rows_cols(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of `tile` in grouped order: GROUP_M rows of tiles are walked column by column, so
    B tiles stay in L2."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    return first_m + ((tile % width) % group_size), (tile % width) // group_size


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


@triton.jit
def column_halves(x):
    """x (R, W) as its two column halves (R, W / 2): (x[:, :W / 2], x[:, W / 2:])."""
    return x.reshape(x.shape[0], 2, x.shape[1] // 2).permute(0, 2, 1).split()


@triton.jit
def publish_part(acc, ws_tile, slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Writes the fp32 part `acc` to slot `slot` of a tile's workspace `ws_tile`."""
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_tile + slot * (BLOCK_M * BLOCK_N) + offs, acc)


@triton.jit
def arrives_last(count_ptr, tile, parts):
    """Bumps `tile`'s counter once every thread's parts are written: True for the last of `parts`."""
    tl.debug_barrier()  # every thread's part is written before the counter says so
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    return arrived == parts - 1


@triton.jit
def sum_parts(ws_tile, first, stride, parts, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The sum of slots first, first + stride, … (`parts` of them) of `ws_tile`, in slot order."""
    tl.debug_barrier()
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for sl in range(parts):
        total += tl.load(ws_tile + (first + sl * stride) * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
    return total


@triton.jit
def release_tile(count_ptr, tile):
    """Resets `tile`'s counter to 0 for the next launch (by the part that summed it)."""
    tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def _add_up(
    acc, ws_tile, slot, parts, count_ptr, tile, c_ptrs, mask, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    """One of `parts` fp32 parts of `tile`: written to slot `slot` of its workspace `ws_tile`, then the
    tile's counter is bumped; the last part to arrive sums the slots in order (deterministic, no waiting),
    stores C at `c_ptrs` and resets the counter to 0 for the next launch."""
    publish_part(acc, ws_tile, slot, BLOCK_M, BLOCK_N)
    if arrives_last(count_ptr, tile, parts):
        total = sum_parts(ws_tile, 0, 1, parts, BLOCK_M, BLOCK_N)
        tl.store(c_ptrs, total.to(c_ptrs.dtype.element_ty), mask=mask)
        release_tile(count_ptr, tile)


@triton.jit
def store_tile(
    acc, c_ptr, ws_ptr, count_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N,
    stride_cs, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, FUSED_SPLIT: tl.constexpr,
):  # fmt: skip
    """Store one K slice's fp32 tile. Without FUSED_SPLIT: into C (SPLIT_K 1) or the workspace slice
    `pid_k` that the reduce kernel sums. With FUSED_SPLIT the slices are summed in this launch
    (`_add_up`; `ws_ptr` holds SPLIT_K tiles per tile of C)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K == 1 or not FUSED_SPLIT:
        c_ptrs = c_ptr + pid_k * stride_cs + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tile = pid_m * num_pid_n + pid_n
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        ws_tile = ws_ptr + tile * (SPLIT_K * BLOCK_M * BLOCK_N)
        _add_up(acc, ws_tile, pid_k, SPLIT_K, count_ptr, tile, c_ptrs, mask, BLOCK_M, BLOCK_N)


@triton.jit
def split_coords(
    M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, NUM_XCDS: tl.constexpr,
):  # fmt: skip
    """This program's (pid_m, pid_n, pid_k, first K element, K steps, tiles per row) in a one-program-per-
    (tile, K slice) grid: tiles in grouped order after the XCD remap, K split in SPLIT_K slices."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = _remap_xcd(tl.program_id(0), num_pid_m * num_pid_n, NUM_XCDS)
    pid_m, pid_n = tile_rows_cols(pid, num_pid_m, num_pid_n, GROUP_M)
    pid_k = tl.program_id(1)
    k_span = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    return pid_m, pid_n, pid_k, pid_k * k_span, tl.cdiv(k_span, BLOCK_K), num_pid_n


@triton.jit
def stream_range(M, N, K, PER, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """(tiles per column, tiles per row, K steps per tile, first and end flat K step) of this program in a
    stream launch: program p owns the flat K steps [p·PER, (p + 1)·PER) of all tiles in order."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    lo = tl.program_id(0) * PER
    return num_pid_m, num_pid_n, iters, lo, min(lo + PER, num_pid_m * num_pid_n * iters)


@triton.jit
def stream_segment(lo, hi, iters):
    """(tile, first K step, end K step) of the next run of this program's flat K steps [lo, hi)."""
    tile = lo // iters
    k0 = lo - tile * iters
    return tile, k0, min(iters, k0 + hi - lo)


@triton.jit
def stream_store(
    acc, c_ptr, ws_ptr, count_ptr, tile, k0, k1, iters, per, pid_m, pid_n, M, N, stride_cm, stride_cn,
    MAX_PARTS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Store the part of `tile` over K steps k0 .. k1 - 1 that this program computed, where program p owns
    the flat K steps [p·per, (p + 1)·per) of all tiles in order. A whole tile goes straight to C; the
    programs that share a tile add up their parts (`_add_up`; MAX_PARTS slots per tile, in program
    order)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    if k0 == 0 and k1 == iters:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        first = (tile * iters) // per
        parts = ((tile + 1) * iters - 1) // per - first + 1
        ws_tile = ws_ptr + tile * MAX_PARTS * BLOCK_M * BLOCK_N
        slot = tl.program_id(0) - first
        _add_up(acc, ws_tile, slot, parts, count_ptr, tile, c_ptrs, mask, BLOCK_M, BLOCK_N)


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


def summed_launch(
    out: torch.Tensor, M: int, N: int, K: int, bm: int, bn: int, bk: int, split_k: int, stream: int,
    num_sms: int,
) -> tuple[tuple[int, int], dict[str, Any], tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """(grid, the PER, MAX_PARTS, EVEN_K and STREAM arguments, (workspace, counters)) of a launch of a
    sum kernel: `stream` (STREAM_K) programs per SM over the K steps of all tiles, or else one program per
    (tile, K slice) of SPLIT_K."""
    tiles = cdiv(M, bm) * cdiv(N, bn)
    if stream:
        programs, per, parts = stream_plan(tiles, cdiv(K, bk), stream * num_sms)
        grid, even_k = (programs, 1), K % bk == 0
    else:
        grid, per, parts, even_k = (tiles, split_k), 0, split_k, K % (bk * split_k) == 0
    args = dict(PER=per, MAX_PARTS=parts, EVEN_K=even_k, STREAM=bool(stream))
    return grid, args, split_scratch(out.device, tiles * parts * bm * bn, tiles)


def stream_plan(tiles: int, iters: int, programs: int) -> tuple[int, int, int]:
    """(programs, K steps per program, most programs sharing one tile) of a stream launch that deals the
    `iters` K steps of each of `tiles` tiles over at most `programs` programs."""
    total = tiles * iters
    per = -(-total // max(1, min(programs, total)))
    return -(-total // per), per, -(-iters // per) + 1


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
