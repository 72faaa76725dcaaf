"""Triton FP8 GEMMs: C = (A·a_scale) · (B·b_scale)ᵀ, A (M, K) and B (N, K) in e4m3, fp32 accumulation.

Imported lazily (it imports triton). Two scaling modes, one kernel:

- row-wise (BLOCKWISE False): fp32 scales per row of A and of B, or per tensor (a scale stride of 0),
  applied once in the epilogue;
- blockwise (BLOCKWISE True): A scales per 1x128 group (M, K/128), B scales per 128x128 block
  (cdiv(N, 128), K/128); each K sub-tile of at most 128 lies in one group, and its partial product is
  scaled before it joins the accumulator (one fused multiply-add; with BLOCK_N dividing 128 the B scale
  of a sub-tile is one number, so the scale is a per-row vector). A BLOCK_K over 128 runs several
  sub-tiles per iteration, so decode shapes still get wide K tiles. Swapped (SWAP_AB), the kernel's A is
  the weight: A_GROUPED reads its scales per 128 rows and B's (the activations') per row.

Knobs as in the dense GEMM (`dense.kernel`): BLOCK_M/N/K, GROUP_M, SPLIT_K (fp32 workspace and the same
deterministic reduce kernel, `common.splitk`), FUSED_SPLIT and STREAM_K (K parts summed in the GEMM's own
launch, by `gemm_fp8_sum_kernel`), SWAP_AB (the kernel run on C^T = B . A^T), NUM_XCDS, num_warps,
num_stages, and on AMD matrix_instr_nonkdim, waves_per_eu and kpack. `quant_launcher` builds the launch
of either quantized kernel (FP8 and MX).
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

try:  # programmatic dependent launch (NVIDIA sm_90+): PDL
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - a Triton without them never compiles PDL
    gdc_launch_dependents = gdc_wait = None

__all__ = ["FP8_SCALE_BLOCK", "gemm_fp8_kernel", "gemm_fp8_sum_kernel", "quant_launcher", "swap_operands"]

#: The K extent (and B row extent) of one blockwise scale.
FP8_SCALE_BLOCK = 128


@triton.jit
def _sub_scales(ptrs, rows, k, K, stride_k, SCALE_BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """The blockwise scale of the K sub-tile at k: one number, or a vector over the rows (ROWS: `ptrs` a
    vector of row pointers, `rows` the row offsets of the same shape); 0 for a sub-tile past K."""
    group = k // SCALE_BLOCK
    if ROWS:
        scales = tl.load(ptrs + group * stride_k, mask=rows * 0 + k < K, other=0.0)
    else:
        scales = tl.load(ptrs + group * stride_k, mask=k < K, other=0.0)
    return scales


@triton.jit
def _tile_scales(ptrs, rows, k0, K, stride_k, SUB: tl.constexpr, SCALE_BLOCK: tl.constexpr, G: tl.constexpr,
                 ROWS: tl.constexpr):  # fmt: skip
    """The scales of the G (at most 4) sub-tiles of the K tile at k0, as four values (those past G repeat
    the first). Separate values, not one [rows, G] tile: each loads straight into the layout that scales
    the product, where picking a column out of a tile would cost a shared-memory exchange per sub-tile."""
    tl.static_assert(G <= 4, "SCALES_AHEAD holds at most 4 sub-tiles (BLOCK_K <= 4 scale groups)")
    s0 = _sub_scales(ptrs, rows, k0, K, stride_k, SCALE_BLOCK, ROWS)
    s1 = s0
    s2 = s0
    s3 = s0
    if G > 1:
        s1 = _sub_scales(ptrs, rows, k0 + SUB, K, stride_k, SCALE_BLOCK, ROWS)
    if G > 2:
        s2 = _sub_scales(ptrs, rows, k0 + 2 * SUB, K, stride_k, SCALE_BLOCK, ROWS)
    if G > 3:
        s3 = _sub_scales(ptrs, rows, k0 + 3 * SUB, K, stride_k, SCALE_BLOCK, ROWS)
    return s0, s1, s2, s3


@triton.jit
def _nth(s0, s1, s2, s3, j: tl.constexpr):
    """Sub-tile j's value of `_tile_scales`."""
    if j == 0:
        picked = s0
    elif j == 1:
        picked = s1
    elif j == 2:
        picked = s2
    else:
        picked = s3
    return picked


@triton.jit
def _prefetch_l2(ptr, row0, n_rows, stride_row, k0, K, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Asks L2 for COLS columns from k0 of ROWS rows from row0 (`edge_clamped`) of a row-major byte operand
    whose K stride is 1, a 128-byte line at a time (`prefetch.global.L2`: no registers, nothing waits)."""
    rows = edge_clamped(row0, ROWS, n_rows)
    cols = tl.minimum(k0 + tl.arange(0, COLS // 128) * 128, K - 1)
    ptrs = ptr + rows[:, None] * stride_row + cols[None, :]
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _fp8_partial(
    a_ptr, b_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
    stride_asm, stride_ask, stride_bsn, stride_bsk, pid_m, pid_n, k_start, n_iters,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCKWISE: tl.constexpr, SCALE_BLOCK: tl.constexpr, DOT_F32: tl.constexpr, B_SCALE_VECTOR: tl.constexpr,
    A_GROUPED: tl.constexpr, SCALES_AHEAD: tl.constexpr,
):  # fmt: skip
    """The scaled fp32 sum of one C tile over K tiles k_start, k_start + BLOCK_K, ... (n_iters of them).
    Blockwise, A_GROUPED trades the scale layouts: A's scales per SCALE_BLOCK rows, B's per row (SWAP_AB);
    SCALES_AHEAD loads the scales of K tile k + 1 while tile k runs (their latency off the loop's path)."""
    offs_m = edge_clamped(pid_m * BLOCK_M, BLOCK_M, M)
    offs_n = edge_clamped(pid_n * BLOCK_N, BLOCK_N, N)
    # Blockwise: sub-tiles of at most one scale group along K.
    SUB: tl.constexpr = BLOCK_K if not BLOCKWISE or BLOCK_K <= SCALE_BLOCK else SCALE_BLOCK
    offs_k = tl.arange(0, SUB)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :] * stride_bn + (k_start + offs_k)[:, None] * stride_bk
    # Blockwise with the grouped operand's tile inside one scale block (BLOCK_N, or BLOCK_M where
    # A_GROUPED, dividing it): the tile shares one grouped scale per K group, so each partial product is
    # scaled by one vector in a single fused multiply-add.
    ONE_B: tl.constexpr = SCALE_BLOCK % BLOCK_N == 0 and not B_SCALE_VECTOR and not A_GROUPED
    ONE_A: tl.constexpr = SCALE_BLOCK % BLOCK_M == 0 and A_GROUPED
    if BLOCKWISE:
        if A_GROUPED:
            bs_ptrs = bs_ptr + offs_n * stride_bsn
            if ONE_A:
                as_ptrs = as_ptr + (pid_m * BLOCK_M // SCALE_BLOCK) * stride_asm
            else:
                as_ptrs = as_ptr + (offs_m // SCALE_BLOCK) * stride_asm
        else:
            as_ptrs = as_ptr + offs_m * stride_asm
            if ONE_B:
                bs_ptrs = bs_ptr + (pid_n * BLOCK_N // SCALE_BLOCK) * stride_bsn
            else:
                bs_ptrs = bs_ptr + (offs_n // SCALE_BLOCK) * stride_bsn

    if not BLOCKWISE:  # per row (stride 1) or per tensor (stride 0), loaded before the K loop hides them
        a_row = tl.load(as_ptr + offs_m * stride_asm)
        b_col = tl.load(bs_ptr + offs_n * stride_bsn)

    G: tl.constexpr = BLOCK_K // SUB
    A_ROWS: tl.constexpr = not ONE_A  # the A scales of a sub-tile: a vector over its rows, or one number
    B_ROWS: tl.constexpr = not ONE_B
    if BLOCKWISE and SCALES_AHEAD:  # the scales of the first K tile
        kn = k_start
        an0, an1, an2, an3 = _tile_scales(as_ptrs, offs_m, kn, K, stride_ask, SUB, SCALE_BLOCK, G, A_ROWS)
        bn0, bn1, bn2, bn3 = _tile_scales(bs_ptrs, offs_n, kn, K, stride_bsk, SUB, SCALE_BLOCK, G, B_ROWS)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, n_iters):
        if BLOCKWISE and SCALES_AHEAD:  # this tile's scales; the next tile's load goes out now
            a0, a1, a2, a3 = an0, an1, an2, an3
            b0, b1, b2, b3 = bn0, bn1, bn2, bn3
            kn = k_start + (k + 1) * BLOCK_K
            an0, an1, an2, an3 = _tile_scales(as_ptrs, offs_m, kn, K, stride_ask, SUB, SCALE_BLOCK, G, A_ROWS)
            bn0, bn1, bn2, bn3 = _tile_scales(bs_ptrs, offs_n, kn, K, stride_bsk, SUB, SCALE_BLOCK, G, B_ROWS)
        for j in tl.static_range(G):
            kk = k * BLOCK_K + j * SUB
            if EVEN_K:
                a = tl.load(a_ptrs + kk * stride_ak)
                b = tl.load(b_ptrs + kk * stride_bk)
            else:
                k_left = K - k_start - kk
                a = tl.load(a_ptrs + kk * stride_ak, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs + kk * stride_bk, mask=offs_k[:, None] < k_left, other=0.0)
            if DOT_F32:  # interpreter only: its fp8 dots are unreliable; the products are exact in fp32
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            if BLOCKWISE:
                if SCALES_AHEAD:
                    a_s = _nth(a0, a1, a2, a3, j)
                    b_s = _nth(b0, b1, b2, b3, j)
                else:  # a sub-tile past K (the last K slice) reads no scale
                    a_s = _sub_scales(as_ptrs, offs_m, k_start + kk, K, stride_ask, SCALE_BLOCK, A_ROWS)
                    b_s = _sub_scales(bs_ptrs, offs_n, k_start + kk, K, stride_bsk, SCALE_BLOCK, B_ROWS)
                if ONE_A:
                    acc = tl.fma(tl.dot(a, b), (a_s * b_s)[None, :], acc)
                elif ONE_B:
                    acc = tl.fma(tl.dot(a, b), (a_s * b_s)[:, None], acc)
                else:
                    acc = tl.fma(tl.dot(a, b), a_s[:, None] * b_s[None, :], acc)
            else:
                acc = tl.dot(a, b, acc)

    if not BLOCKWISE:
        acc = acc * a_row[:, None] * b_col[None, :]
    return acc


@triton.jit
def gemm_fp8_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    as_ptr,
    bs_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cs,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCKWISE: tl.constexpr,
    SCALE_BLOCK: tl.constexpr = 128,
    DOT_F32: tl.constexpr = False,
    B_SCALE_VECTOR: tl.constexpr = False,
    A_GROUPED: tl.constexpr = False,
    SCALES_AHEAD: tl.constexpr = False,
    PDL: tl.constexpr = False,
    PREFETCH_K: tl.constexpr = 0,
    WEIGHT_A: tl.constexpr = False,
):
    """One (BLOCK_M, BLOCK_N) tile of C over one K slice. With SPLIT_K > 1, c_ptr is the fp32 workspace.
    B_SCALE_VECTOR forces the per-column B scale path (benchmarks compare the two paths with it). PDL
    (launched as a programmatic dependent launch): the next launch may start at once, and this one asks
    L2 for PREFETCH_K columns of its weight tile (A where WEIGHT_A, else B) before it waits for the
    previous kernel's memory; nothing else is read or written before the wait."""
    pid_m, pid_n, pid_k, k_start, n_iters, num_pid_n = split_coords(
        M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, NUM_XCDS
    )
    if PDL:
        gdc_launch_dependents()
        if PREFETCH_K > 0:
            if WEIGHT_A:
                _prefetch_l2(a_ptr, pid_m * BLOCK_M, M, stride_am, k_start, K, BLOCK_M, PREFETCH_K)
            else:
                _prefetch_l2(b_ptr, pid_n * BLOCK_N, N, stride_bn, k_start, K, BLOCK_N, PREFETCH_K)
        gdc_wait()
    acc = _fp8_partial(
        a_ptr, b_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
        stride_asm, stride_ask, stride_bsn, stride_bsk, pid_m, pid_n, k_start, n_iters,
        BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, BLOCKWISE, SCALE_BLOCK, DOT_F32, B_SCALE_VECTOR, A_GROUPED,
        SCALES_AHEAD,
    )  # fmt: skip
    store_tile(
        acc, c_ptr, c_ptr, c_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N, stride_cs, stride_cm, stride_cn,
        BLOCK_M, BLOCK_N, SPLIT_K, False,
    )  # fmt: skip


@triton.jit
def gemm_fp8_sum_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    as_ptr,
    bs_ptr,
    ws_ptr,
    count_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    PER,
    MAX_PARTS,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    NUM_XCDS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCKWISE: tl.constexpr,
    STREAM: tl.constexpr,
    SCALE_BLOCK: tl.constexpr = 128,
    DOT_F32: tl.constexpr = False,
    B_SCALE_VECTOR: tl.constexpr = False,
    A_GROUPED: tl.constexpr = False,
    SCALES_AHEAD: tl.constexpr = False,
):
    """`gemm_fp8_kernel` with the K parts of a tile summed in this launch, as `dense.kernel.gemm_sum_kernel`:
    SPLIT_K slices summed by the last to finish, or (STREAM) program p taking the flat K steps
    [p·PER, (p + 1)·PER) of all tiles."""
    if STREAM:
        num_pid_m, num_pid_n, iters, lo, hi = stream_range(M, N, K, PER, BLOCK_M, BLOCK_N, BLOCK_K)
        while lo < hi:
            tile, k0, k1 = stream_segment(lo, hi, iters)
            pid_m, pid_n = tile_rows_cols(tile, num_pid_m, num_pid_n, GROUP_M)
            acc = _fp8_partial(
                a_ptr, b_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
                stride_asm, stride_ask, stride_bsn, stride_bsk, pid_m, pid_n, k0 * BLOCK_K, k1 - k0,
                BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, BLOCKWISE, SCALE_BLOCK, DOT_F32, B_SCALE_VECTOR, A_GROUPED,
                SCALES_AHEAD,
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
        acc = _fp8_partial(
            a_ptr, b_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
            stride_asm, stride_ask, stride_bsn, stride_bsk, pid_m, pid_n, k_start, n_iters,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, BLOCKWISE, SCALE_BLOCK, DOT_F32, B_SCALE_VECTOR, A_GROUPED,
            SCALES_AHEAD,
        )  # fmt: skip
        store_tile(
            acc, c_ptr, ws_ptr, count_ptr, pid_m, pid_n, pid_k, num_pid_n, M, N, 0, stride_cm, stride_cn,
            BLOCK_M, BLOCK_N, SPLIT_K, True,
        )  # fmt: skip


def _options(config: Config, is_amd: bool) -> dict[str, Any]:
    opts: dict[str, Any] = dict(
        BLOCK_M=int(config["BLOCK_M"]),
        BLOCK_N=int(config["BLOCK_N"]),
        BLOCK_K=int(config["BLOCK_K"]),
        GROUP_M=int(config.get("GROUP_M", 1)),
        SPLIT_K=int(config.get("SPLIT_K", 1)),
        NUM_XCDS=int(config.get("NUM_XCDS", 1)),
        num_warps=int(config.get("num_warps", 4)),
        num_stages=int(config.get("num_stages", 2)),
        **FP_OPTIONS,
    )
    stray = [k for k in AMD_LAUNCH_OPTIONS if k in config]
    if is_amd:
        opts.update({k: int(config[k]) for k in stray})
    elif stray:
        raise ValueError(f"{', '.join(stray)} exist only on AMD targets; config: {config.short()}")
    return opts


def swap_operands(
    a: torch.Tensor, b: torch.Tensor, a_scale: Any, b_scale: Any, scale_strides: tuple[int, int, int, int],
    M: int, N: int,
) -> tuple[Any, ...]:  # fmt: skip
    """The launch arguments (a, b, a_scale, b_scale, scale_strides, M, N) of C^T = B . A^T (SWAP_AB): the
    operands, their scales and the sizes trade places. Row-wise scales are symmetric in A and B; blockwise
    ones are not, so the blockwise kernel also trades its scale layouts (A_GROUPED)."""
    s = scale_strides
    return b, a, b_scale, a_scale, (s[2], s[3], s[0], s[1]), N, M


def quant_launcher(
    kernel: Any,
    config: Config,
    *,
    is_amd: bool,
    constexprs: dict[str, Any],
    reduce_kernel: Any = None,
    sum_kernel: Any = None,
    num_sms: int = 0,
) -> Callable[..., None]:
    """`launch(a, b, out, a_scale, b_scale, scale_strides, M, N, K, workspace)` of a quantized kernel.

    `kernel` is `gemm_fp8_kernel` or `gemm_mx_kernel` (or a recorder standing in for it); `constexprs`
    its mode (BLOCKWISE, formats, DOT_F32 ...). `scale_strides` is (stride_asm, stride_ask, stride_bsn,
    stride_bsk). `workspace`: fp32, SPLIT_K·M·N elements when SPLIT_K > 1 and the slices go through the
    reduce kernel (else ignored). The FP8 kernel also sums K parts in its own launch (`sum_kernel`, default
    `gemm_fp8_sum_kernel`, with scratch per device and stream): FUSED_SPLIT sums the SPLIT_K slices there,
    STREAM_K = s runs s programs per SM (`num_sms`) that share the K steps of all tiles evenly. SWAP_AB
    (FP8 only) launches the kernel on C^T = B . A^T, the config's BLOCK_M still tiling M and BLOCK_N
    tiling N: a decode tile of few rows becomes the N side of the matrix instruction, whose M side is at
    least 64 rows for Hopper's wgmma. Blockwise, the kernel then reads its A scales per 128 rows and its
    B scales per row (A_GROUPED). HW_FP4_CVT (gemm_mxfp4_bf16a) quantizes A with gfx950's conversion
    instruction (`quant.mx`); A must then be contiguous along K, rows 4-byte aligned (ValueError).
    """
    opts = {**_options(config, is_amd), **constexprs}
    swap = bool(config.get("SWAP_AB", 0))
    if swap:  # the kernel computes C^T = B . A^T: its M tile runs along N, its N tile along M
        opts["BLOCK_M"], opts["BLOCK_N"] = opts["BLOCK_N"], opts["BLOCK_M"]
    if swap and "BLOCKWISE" not in constexprs:
        raise ValueError(f"SWAP_AB exists for the FP8 kernel only: {config.short()}")
    if swap and constexprs["BLOCKWISE"]:  # swapped, the kernel's A is B: its scales per 128 rows
        opts["A_GROUPED"] = True
    if int(config.get("SCALES_AHEAD", 0)):
        if not constexprs.get("BLOCKWISE"):
            raise ValueError(f"SCALES_AHEAD exists for the FP8 blockwise kernel only: {config.short()}")
        opts["SCALES_AHEAD"] = True
    hw_cvt = bool(int(config.get("HW_FP4_CVT", 0)))
    if hw_cvt:
        if constexprs.get("A_FMT") != "bf16":
            raise ValueError(
                f"HW_FP4_CVT exists for bf16 activations (gemm_mxfp4_bf16a) only: {config.short()}"
            )
        opts["HW_FP4_CVT"] = True
    pdl: dict[str, Any] = {}  # the plain kernel's only (a probe: docs/notes/2026-11-26-pdl.md)
    if int(config.get("PDL", 0)):
        if is_amd or constexprs.get("DOT_F32") or "BLOCKWISE" not in constexprs:
            raise ValueError(f"PDL exists for the FP8 kernel on NVIDIA only: {config.short()}")
        if int(config.get("SPLIT_K", 1)) > 1 or int(config.get("STREAM_K", 0)):
            raise ValueError(f"PDL exists for the unsplit kernel only: {config.short()}")
        pdl = dict(PDL=True, PREFETCH_K=int(config.get("PREFETCH_K", 0)), WEIGHT_A=swap, launch_pdl=True)
    prefetch = pdl.get("PREFETCH_K", 0) > 0
    bm, bn, bk, split_k = opts["BLOCK_M"], opts["BLOCK_N"], opts["BLOCK_K"], opts["SPLIT_K"]
    main = pinned(kernel, **opts, **pdl)
    reduce = pinned(reduce_kernel or splitk_reduce_kernel, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK, **FP_OPTIONS)
    summer = pinned(sum_kernel or gemm_fp8_sum_kernel, **opts)
    fused = bool(config.get("FUSED_SPLIT", 0)) and split_k > 1
    stream = int(config.get("STREAM_K", 0))
    if (fused or stream) and "BLOCKWISE" not in constexprs:
        raise ValueError(f"FUSED_SPLIT and STREAM_K exist for the FP8 kernel only: {config.short()}")
    if stream and (split_k > 1 or num_sms <= 0):
        raise ValueError(f"STREAM_K needs SPLIT_K 1 and the SM count: {config.short()}")
    if swap and split_k > 1 and not fused:
        raise ValueError(f"SWAP_AB with SPLIT_K > 1 needs FUSED_SPLIT (the reduce kernel writes C "
                         f"row-major): {config.short()}")  # fmt: skip

    def launch_summed(
        a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, a_scale: torch.Tensor | None,
        b_scale: torch.Tensor, scale_strides: tuple[int, int, int, int], M: int, N: int, K: int,
    ) -> None:  # fmt: skip
        grid, args, (ws, counts) = summed_launch(out, M, N, K, bm, bn, bk, split_k, stream, num_sms)
        summer[grid](
            a, b, out, a_scale, b_scale, ws, counts, M, N, K, a.stride(0), a.stride(1), b.stride(0),
            b.stride(1), out.stride(0), out.stride(1), *scale_strides, **args,
        )  # fmt: skip

    def launch(
        a: torch.Tensor,
        b: torch.Tensor,
        out: torch.Tensor,
        a_scale: torch.Tensor | None,
        b_scale: torch.Tensor,
        scale_strides: tuple[int, int, int, int],
        M: int,
        N: int,
        K: int,
        workspace: torch.Tensor | None,
    ) -> None:
        if swap:  # C^T through C's strides swapped
            swapped = swap_operands(a, b, a_scale, b_scale, scale_strides, M, N)
            a, b, a_scale, b_scale, scale_strides, M, N = swapped
            out = out.t()
        if prefetch and (a if swap else b).stride(1) != 1:  # the prefetch walks the weight's rows bytewise
            raise ValueError(f"PREFETCH_K needs the weight's K stride 1: {config.short()}")
        if hw_cvt and (a.stride(1) != 1 or a.stride(0) % 2 or a.data_ptr() % 4):
            raise ValueError(f"HW_FP4_CVT reads A as 32-bit words: it needs K stride 1, an even row stride "
                             f"and 4-byte alignment, got strides {a.stride()}: {config.short()}")  # fmt: skip
        if fused or stream:
            launch_summed(a, b, out, a_scale, b_scale, scale_strides, M, N, K)
            return
        grid = (cdiv(M, bm) * cdiv(N, bn), split_k)
        even_k = K % (bk * split_k) == 0
        c, strides = (out, (0, out.stride(0), out.stride(1))) if split_k == 1 else (workspace, (M * N, N, 1))
        assert c is not None, "SPLIT_K > 1 needs a workspace"
        main[grid](
            a, b, c, a_scale, b_scale, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            *strides, *scale_strides, EVEN_K=even_k,
        )  # fmt: skip
        if split_k > 1:
            mn = M * N
            reduce[(cdiv(mn, REDUCE_BLOCK),)](workspace, out, mn)

    return launch
