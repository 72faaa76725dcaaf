"""Which tile of C, and which of its K steps, a program of a tiled GEMM works on.

Triton helpers (and the host-side plan of a stream launch) shared by the ops' kernels: the XCD remap,
grouped tile order, one program per (tile, K slice), and stream-K's even share of all tiles' K steps.
Imported lazily (it imports triton).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["remap_xcd", "split_coords", "stream_plan", "stream_range", "stream_segment", "tile_rows_cols"]


@triton.jit
def remap_xcd(pid, num_pids, NUM_XCDS: tl.constexpr):
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
def tile_rows_cols(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of `tile` in grouped order: GROUP_M rows of tiles are walked column by column, so
    B tiles stay in L2."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    return first_m + ((tile % width) % group_size), (tile % width) // group_size


@triton.jit
def split_coords(
    M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, NUM_XCDS: tl.constexpr,
):  # fmt: skip
    """This program's (pid_m, pid_n, pid_k, first K element, K steps, tiles per row) in a one-program-per-
    (tile, K slice) grid: tiles in grouped order after the XCD remap, K split in SPLIT_K slices."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = remap_xcd(tl.program_id(0), num_pid_m * num_pid_n, NUM_XCDS)
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


def stream_plan(tiles: int, iters: int, programs: int) -> tuple[int, int, int]:
    """(programs, K steps per program, most programs sharing one tile) of a stream launch that deals the
    `iters` K steps of each of `tiles` tiles over at most `programs` programs."""
    total = tiles * iters
    per = -(-total // max(1, min(programs, total)))
    return -(-total // per), per, -(-iters // per) + 1
