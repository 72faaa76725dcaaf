"""Triton dense GEMM through tensor descriptors (TMA on Hopper): data-parallel, persistent or tail-split.

Backend "triton_tma", for NVIDIA sm_90 and newer. The tile loads and the C store go through host-built
tensor descriptors, which handle the ragged edges (no masks, no wrap-around). With PERSISTENT = 1 the grid
is one program per SM and each program walks the tiles with a stride of the grid; with PERSISTENT = 0 there
is one program per tile. With SPLIT_K > 1 each (tile, K slice) is a work item and the partial sums go
through a 3-D descriptor into an fp32 workspace that the split-K reduce kernel (`common.splitk`) sums in a
fixed order. TAIL_SPLIT = 1 runs whole waves of tiles persistently and splits the tiles of the last,
partly filled wave along K over the SMs that wave would leave idle (see `gemm_tma_tail_kernel` and
`tail_split_schedule`). BLOCK_N need not be a power of two: a 96-wide tile runs as a 64- and a 32-wide part
that share each A tile (`tile_parts`), so that the grid can come to as many tiles as the GPU has SMs,
as the vendor library's tiles do. Imported lazily (it imports triton).
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
from autotune.kernels.common.geometry import c_store_cols, tail_split_schedule, tile_parts
from autotune.kernels.common.splitk import (
    REDUCE_BLOCK,
    arrives_last,
    publish_part,
    release_tile,
    splitk_reduce_kernel,
    sum_parts,
)
from autotune.kernels.common.tile import column_halves
from autotune.kernels.common.tma import tile_origin, tile_part_sums, tma_ready, work_item
from autotune.kernels.launch import descriptor, pinned
from autotune.kernels.scratch import split_scratch

__all__ = ["gemm_tma_kernel", "gemm_tma_tail_kernel", "tma_launcher"]


@triton.jit
def gemm_tma_tail_kernel(
    a_desc, b_desc, c_desc, ws_ptr, count_ptr,
    M, N, K, NUM_PROGRAMS, DP_TILES, SPLITS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    B_KN: tl.constexpr, DOT_F32: tl.constexpr, EPI_N: tl.constexpr = 0,
):  # fmt: skip
    """Whole waves, then a split tail. Tiles 0 .. DP_TILES - 1 (whole waves of NUM_PROGRAMS) go whole to
    programs pid, pid + NUM_PROGRAMS, ...; the tiles left over are each split along K into SPLITS slices,
    one (tile, slice) per program, slice-major, so that the programs at one K offset share their A and B
    tiles through L2. The last slice of a tile to finish adds the slices up (a per-tile counter, no
    waiting): each writes its fp32 partial to `ws_ptr`, and the last one sums them in slice order
    (deterministic), stores C and resets the counter to 0 for the next launch."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, DP_TILES, NUM_PROGRAMS, flatten=True):
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_part_sums(
            a_desc, b_desc, None, None, off_m, off_n, 0, iters, BLOCK_M, BLOCK_N, 0, 0, BLOCK_K, B_KN, DOT_F32
        )[0]
        _store_c(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, EPI_N)
    tail = num_pid_m * num_pid_n - DP_TILES
    if pid < tail * SPLITS:
        ts = pid % tail
        per = tl.cdiv(iters, SPLITS)
        k_lo = (pid // tail) * per
        k_hi = min(k_lo + per, iters)
        off_m, off_n = tile_origin(DP_TILES + ts, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_part_sums(
            a_desc,
            b_desc,
            None,
            None,
            off_m,
            off_n,
            k_lo,
            k_hi,
            BLOCK_M,
            BLOCK_N,
            0,
            0,
            BLOCK_K,
            B_KN,
            DOT_F32,
        )[0]
        if SPLITS == 1:
            _store_c(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, EPI_N)
        else:
            # slot of (slice, tail tile) = slice * tail + ts: a tile's slices are `tail` slots apart
            publish_part(acc, ws_ptr, pid, BLOCK_M, BLOCK_N)
            if arrives_last(count_ptr, ts, SPLITS):
                acc = sum_parts(ws_ptr, ts, tail, SPLITS, BLOCK_M, BLOCK_N)
                _store_c(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, EPI_N)
                release_tile(count_ptr, ts)


@triton.jit
def gemm_tma_kernel(
    a_desc, b_desc, c_desc,
    M, N, K, NUM_PROGRAMS,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, B_KN: tl.constexpr, DOT_F32: tl.constexpr,
    BN2: tl.constexpr = 0, BN3: tl.constexpr = 0, b2_desc=None, b3_desc=None, c2_desc=None, c3_desc=None,
    EPI_N: tl.constexpr = 0,
):  # fmt: skip
    """Work items pid, pid + NUM_PROGRAMS, ... (a C tile and a K slice) in grouped order; B is (N, K)
    unless B_KN. With SPLIT_K > 1, c_desc describes the (SPLIT_K, M, N) fp32 workspace. A tile is
    BLOCK_N + BN2 + BN3 columns wide: parts 2 and 3 (when not 0 wide) load and store through their own
    descriptors (b2_desc, c2_desc, ...), whose blocks are BN2 and BN3 wide. EPI_N > 0 stores each part of C
    in column slices at most EPI_N wide (`_store_c`), so the C descriptors' blocks are that narrow."""
    WIDTH: tl.constexpr = BLOCK_N + BN2 + BN3
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, WIDTH)
    k_tiles_all = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles_all, SPLIT_K)
    num_tiles = num_pid_m * num_pid_n
    for item in tl.range(tl.program_id(0), num_tiles * SPLIT_K, NUM_PROGRAMS, flatten=True):
        tile, split, k_first, k_last = work_item(item, num_tiles, k_per_split, k_tiles_all)
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, WIDTH, GROUP_M)
        acc, acc2, acc3 = tile_part_sums(
            a_desc, b_desc, b2_desc, b3_desc, off_m, off_n, k_first, k_last,
            BLOCK_M, BLOCK_N, BN2, BN3, BLOCK_K, B_KN, DOT_F32,
        )  # fmt: skip
        _store_part(c_desc, acc, split, off_m, off_n, BLOCK_M, BLOCK_N, SPLIT_K, EPI_N)
        if BN2 > 0:
            _store_part(c2_desc, acc2, split, off_m, off_n + BLOCK_N, BLOCK_M, BN2, SPLIT_K, EPI_N)
        if BN3 > 0:
            _store_part(c3_desc, acc3, split, off_m, off_n + BLOCK_N + BN2, BLOCK_M, BN3, SPLIT_K, EPI_N)


@triton.jit
def _store_pair(c_desc, acc, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPI_N: tl.constexpr):
    """Stores a (BLOCK_M, BLOCK_N) tile of C, BLOCK_N at most 2 * EPI_N, in stores at most EPI_N wide."""
    if BLOCK_N <= EPI_N:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        left, right = column_halves(acc)
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))


@triton.jit
def _store_c(c_desc, acc, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPI_N: tl.constexpr):
    """Stores a (BLOCK_M, BLOCK_N) tile of C through `c_desc`: whole (EPI_N = 0), or in column slices EPI_N
    wide (up to 4), so that the shared-memory buffer of a C store is a slice, not the tile; `c_desc`'s block
    is (BLOCK_M, min(BLOCK_N, EPI_N or BLOCK_N))."""
    if EPI_N == 0:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    elif BLOCK_N <= 2 * EPI_N:
        _store_pair(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, EPI_N)
    else:
        tl.static_assert(BLOCK_N <= 4 * EPI_N, "EPILOGUE_N: at most 4 C stores per tile part")
        left, right = column_halves(acc)
        _store_pair(c_desc, left, off_m, off_n, BLOCK_M, BLOCK_N // 2, EPI_N)
        _store_pair(c_desc, right, off_m, off_n + BLOCK_N // 2, BLOCK_M, BLOCK_N // 2, EPI_N)


@triton.jit
def _store_part(
    c_desc, acc, split, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    EPI_N: tl.constexpr = 0,
):  # fmt: skip
    """Stores one fp32 (BLOCK_M, BLOCK_N) part at (off_m, off_n): into C (in slices EPI_N wide, see
    `_store_c`), or with SPLIT_K > 1 into slice `split` of the fp32 workspace."""
    if SPLIT_K == 1:
        _store_c(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, EPI_N)
    else:
        c_desc.store([split, off_m, off_n], acc.reshape(1, BLOCK_M, BLOCK_N))


def tma_launcher(
    config: Config, *, num_sms: int, interpret: bool = False, kernels: tuple[Any, ...] | None = None
) -> Callable[..., None]:
    """A function `launch(a, b, out, b_kn, M, N, K, workspace)` for `config`, with A (M, K), B (N, K) or
    (K, N) for `b_kn`, and `out` (M, N); descriptors are built per call (`launch.descriptor`), from dense
    copies of inputs whose rows are not dense and 16-byte aligned, and through a dense temporary C where
    `out` is not (copied into `out`). `workspace` is an fp32 tensor of SPLIT_K·M·N
    elements when SPLIT_K > 1 (else ignored); TAIL_SPLIT keeps its own scratch per device and stream.
    `kernels` replaces (gemm_tma_kernel, splitk_reduce_kernel, gemm_tma_tail_kernel), as in
    `dense.kernel.launcher`."""
    bm, width, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    bn, bn2, bn3 = tile_parts(width)
    persistent = bool(config.get("PERSISTENT", 0))
    split_k = int(config.get("SPLIT_K", 1))
    tail_split = int(config.get("TAIL_SPLIT", 0))
    epi = int(config.get("EPILOGUE_N", 0))
    if tail_split and split_k > 1:
        raise ValueError(f"TAIL_SPLIT and SPLIT_K > 1 exclude each other; config: {config.short()}")
    if tail_split and bn2:
        raise ValueError(f"TAIL_SPLIT needs a power-of-two BLOCK_N; config: {config.short()}")
    opts: dict[str, Any] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=int(config.get("GROUP_M", 1)),
        DOT_F32=interpret,
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 3)),
        **({"EPI_N": epi} if epi else {}),
        **FP_OPTIONS,
    )

    def c_block(n: int) -> list[int]:
        """The block of a C descriptor for a tile part n wide: the slice each store writes."""
        return [bm, c_store_cols(n, epi)]

    kernel, reduce_kernel, tail_kernel = kernels or (
        gemm_tma_kernel,
        splitk_reduce_kernel,
        gemm_tma_tail_kernel,
    )
    parts = {"BN2": bn2, "BN3": bn3} if bn2 else {}
    main = pinned(kernel, SPLIT_K=split_k, **{**opts, "BLOCK_N": bn}, **parts)
    tail = pinned(tail_kernel, **opts)
    reduce = pinned(reduce_kernel, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS)

    def launch_tail_split(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_kn: bool, M: int, N: int, K: int
    ) -> None:
        tiles = cdiv(M, bm) * cdiv(N, bn)
        programs, dp_tiles, splits = tail_split_schedule(tiles, cdiv(K, bk), num_sms)
        ws, counts = split_scratch(out.device, programs * bm * bn if splits > 1 else 1, tiles - dp_tiles + 1)
        a_desc = descriptor(a, [M, K], [K, 1], [bm, bk])
        b_desc = b_descriptor(b, b_kn, N, K, bn)
        c_desc = c_descriptor(out, M, N, bn)  # SPLIT_K is 1 with TAIL_SPLIT
        tail[(programs,)](a_desc, b_desc, c_desc, ws, counts, M, N, K, programs, dp_tiles, splits, B_KN=b_kn)

    def launch(
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        b_kn: bool,
        M: int,
        N: int,
        K: int,
        workspace: torch.Tensor | None = None,
    ) -> None:
        a, b = tma_ready(a), tma_ready(b)
        # C goes through a descriptor too (or, split along K, through the reduce kernel's dense store)
        c = out
        if not out.is_contiguous() or (split_k == 1 and out.data_ptr() % 16):
            c = torch.empty((M, N), device=out.device, dtype=out.dtype)
        if tail_split:
            launch_tail_split(a, b, c, b_kn, M, N, K)
        else:
            launch_items(a, b, c, b_kn, M, N, K, workspace)
        if c is not out:
            out.copy_(c)

    def launch_items(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, b_kn: bool, M: int, N: int, K: int,
        workspace: torch.Tensor | None,
    ) -> None:  # fmt: skip
        items = cdiv(M, bm) * cdiv(N, width) * split_k
        programs = min(items, num_sms) if persistent else items
        a_desc = descriptor(a, [M, K], [K, 1], [bm, bk])
        c_base = out
        if split_k > 1:
            assert workspace is not None, "SPLIT_K > 1 needs an fp32 workspace of SPLIT_K * M * N"
            c_base = workspace
        # the launch key: with the options, these fix every argument's specialization (the descriptors'
        # fields follow from M, N, K, b_kn and the dtypes; `descriptor` checks each base's alignment)
        key = (M, N, K, programs, b_kn, a.dtype, b.dtype, c_base.dtype)
        if bn2:
            launch_parts(a_desc, b, c_base, b_kn, M, N, K, programs, key)
        else:
            args = (
                a_desc,
                b_descriptor(b, b_kn, N, K, bn),
                c_descriptor(c_base, M, N, bn),
                M,
                N,
                K,
                programs,
            )
            main.launch_keyed((programs,), key, args, {"B_KN": b_kn})
        if split_k > 1:
            mn = M * N
            reduce[(cdiv(mn, REDUCE_BLOCK),)](workspace, out, mn)

    def b_descriptor(b: torch.Tensor, b_kn: bool, N: int, K: int, n: int) -> Any:
        """The descriptor of dense B, (K, N) for `b_kn` else (N, K), for a tile part n wide."""
        return descriptor(b, [K, N], [N, 1], [bk, n]) if b_kn else descriptor(b, [N, K], [K, 1], [n, bk])

    def c_descriptor(c_base: torch.Tensor, M: int, N: int, n: int) -> Any:
        """The descriptor of dense C, or (SPLIT_K > 1) of the fp32 workspace, for a tile part n wide."""
        if split_k == 1:
            return descriptor(c_base, [M, N], [N, 1], c_block(n))
        return descriptor(c_base, [split_k, M, N], [M * N, N, 1], [1, bm, n])

    def launch_parts(
        a_desc: Any, b: torch.Tensor, c_base: torch.Tensor, b_kn: bool, M: int, N: int, K: int, programs: int,
        key: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """A tile of two or three column parts: a B and a C (or workspace) descriptor per part."""
        widths = [n for n in (bn, bn2, bn3) if n]
        b_descs = [b_descriptor(b, b_kn, N, K, n) for n in widths]
        c_descs = [c_descriptor(c_base, M, N, n) for n in widths]
        more = {"B_KN": b_kn, "b2_desc": b_descs[1], "c2_desc": c_descs[1]}
        if bn3:
            more.update(b3_desc=b_descs[2], c3_desc=c_descs[2])
        main.launch_keyed((programs,), key, (a_desc, b_descs[0], c_descs[0], M, N, K, programs), more)

    return launch
