"""The launch of the MLA decode's Gluon kernels (backend "gluon") by the SCHEDULE knob: 0 the lockstep
kernel (`mla.gluon_kernel`), 1 the seesaw (`mla.gluon_seesaw`), 2 the swapped kernel (`mla.gluon_swapped`:
tokens on the MMA's M, at most 32 heads, an e4m3 cache), each followed by the Triton reduce of several
splits (`mla.kernel.mla_reduce_kernel`). Imported lazily (it imports triton and Gluon)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from triton.experimental.gluon import language as gl

from autotune.core.op import FP_OPTIONS
from autotune.kernels.common.gluon_hopper import check_tma
from autotune.kernels.launch import pinned
from autotune.kernels.mla.gluon_kernel import BLOCK_H, CHUNK, JIT_KERNELS, LATENT, NUM_WARPS, ROPE
from autotune.kernels.mla.gluon_seesaw import mla_seesaw_kernel
from autotune.kernels.mla.gluon_space import SWAPPED_BLOCK_N, SWAPPED_MAX_HEADS, swapped_columns
from autotune.kernels.mla.gluon_swapped import mla_swapped_kernel
from autotune.kernels.mla.kernel import launch_reduce, mla_reduce_kernel

__all__ = ["SCHEDULES", "gluon_launcher", "jit_kernels"]

_LOG2E = 1.4426950408889634

#: The schedules (the SCHEDULE knob): 0 the lockstep kernel, 1 the seesaw (`mla.gluon_seesaw`), 2 the
#: swapped kernel (`mla.gluon_swapped`).
SCHEDULES = (0, 1, 2)


def jit_kernels(schedule: int) -> tuple[Any, Any]:
    """The JIT functions of a launch of `schedule` (the split kernel, the reduce), in order."""
    if schedule == 0:
        return JIT_KERNELS
    if schedule == 1:
        return (mla_seesaw_kernel, mla_reduce_kernel)
    if schedule == 2:
        return (mla_swapped_kernel, mla_reduce_kernel)
    raise ValueError(f"the gluon backend's SCHEDULE is one of {SCHEDULES}, not {schedule}")


def _cache_rows(kv: torch.Tensor) -> torch.Tensor:
    """The cache as 2-D (pages · page_size, K), a view of its rows; ValueError where its pages are not
    evenly strided rows or a row index would not fit TMA's int32 coordinates."""
    pages, page, K = kv.shape
    if kv.stride(2) != 1 or (pages > 1 and kv.stride(0) != page * kv.stride(1)):
        raise ValueError(
            f"the gluon backend reads the cache as rows of pages x page_size: strides {tuple(kv.stride())} "
            f"of a {tuple(kv.shape)} cache are not"
        )
    if pages * page >= 2**31:
        raise ValueError(f"the gluon backend's TMA takes int32 rows: {pages} pages x {page} is too many")
    rows = kv.as_strided((pages * page, K), (kv.stride(1), 1))
    check_tma("kv_cache", rows)
    return rows


def gluon_launcher(params: dict[str, Any], *, kernels: tuple[Any, Any] | None = None) -> Callable[..., None]:
    """The launch of one config's knobs (`params`: num_kv_splits, BLOCK_N, num_stages, SCHEDULE: 0 where
    absent, as stored before it existed) as `run(q,
    kv_cache, page_table, context_lens, out, part, lse, sm_scale, kv_scale)`, the Triton kernel's
    contract (`mla.kernel.launcher`): `part` and `lse` are the split workspace (None with one split).
    `kernels`: stand-ins of `jit_kernels(SCHEDULE)` (recorders) in their order. ValueError, when run, for a
    problem the kernel does not take (other dims than 512 + 64, a page size BLOCK_N does not divide, a
    cache that is not rows, a cache neither bf16 nor e4m3, an FP8 cache with the seesaw, the swapped
    kernel on anything but an e4m3 cache with Q_FP8 1, at most 32 heads and 64-token tiles). An FP8
    cache's `kv_scale` goes into the scores' scale and, as `v_scale`, onto the output; `Q_FP8` 1 (FP8
    caches) scores it with FP8 queries. Heads come in programs of 64 (the swapped kernel: all of a
    sequence's, as 16 or 32 columns): the rows past H are zeros, computed and not stored."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    splits, block_n, stages = (int(params[k]) for k in ("num_kv_splits", "BLOCK_N", "num_stages"))
    schedule = int(params.get("SCHEDULE", 0))
    q_fp8 = int(params.get("Q_FP8", 0))
    split_fn, reduce_fn = kernels if kernels is not None else jit_kernels(schedule)
    # (the seesaw: the loader's warpgroup, its consumers are workers; the swapped kernel: one warpgroup)
    num_warps = NUM_WARPS if schedule == 0 else 4
    recorded = kernels is not None
    # the TMA box of each cache dtype's bits: CHUNK columns a swizzle row, as the kernel's ring
    layouts = {
        bits: gl.NVMMASharedLayout(swizzle_byte_width=CHUNK * bits // 8, element_bitwidth=bits, rank=2)
        for bits in (8, 16)
    }

    def run(
        q: torch.Tensor, kv: torch.Tensor, page_table: torch.Tensor, lens: torch.Tensor, out: torch.Tensor,
        part: torch.Tensor | None, lse: torch.Tensor | None, sm_scale: float, kv_scale: float,
    ) -> None:  # fmt: skip
        B, H, K = q.shape
        latent, page = out.shape[2], kv.shape[1]
        if kv.dtype not in (torch.bfloat16, torch.float8_e4m3fn) or q.dtype != torch.bfloat16:
            raise ValueError(
                f"the gluon backend takes bf16 queries and a bf16 or e4m3 cache, got {q.dtype}, {kv.dtype}"
            )
        fp8 = kv.dtype == torch.float8_e4m3fn
        if fp8 and schedule == 1:
            raise ValueError(f"the gluon backend's SCHEDULE {schedule} reads a bf16 cache, not {kv.dtype}")
        if schedule == 2 and not (fp8 and q_fp8 and H <= SWAPPED_MAX_HEADS and block_n == SWAPPED_BLOCK_N):
            raise ValueError(
                f"the gluon backend's SCHEDULE 2 takes an e4m3 cache with Q_FP8 1, at most "
                f"{SWAPPED_MAX_HEADS} heads and BLOCK_N {SWAPPED_BLOCK_N}, not {kv.dtype}, Q_FP8 {q_fp8}, "
                f"{H} heads, BLOCK_N {block_n}"
            )
        if q_fp8 and not fp8:
            raise ValueError(f"the gluon backend's Q_FP8 1 scores an FP8 cache, not {kv.dtype}")
        if (latent, K - latent) != (LATENT, ROPE):
            raise ValueError(f"the gluon backend takes {LATENT} + {ROPE} dims, got {latent} + {K - latent}")
        if page % block_n:
            raise ValueError(f"the gluon backend's tiles of {block_n} tokens must divide a page ({page})")
        desc = TensorDescriptor.from_tensor(_cache_rows(kv), [block_n, CHUNK], layouts[kv.element_size() * 8])
        v_scale = kv_scale if fp8 else 1.0
        consts = dict(LATENT=LATENT, ROPE=ROPE, PAGE=page, BLOCK_N=block_n, SPLITS=splits, STAGES=stages)
        if schedule == 0:
            consts["Q_FP8"] = q_fp8
        grid: tuple[int, ...] = (-(-H // BLOCK_H), B, splits)
        if schedule == 2:
            consts["HEADS"] = swapped_columns(H)
            grid = (B, splits)
        opts = dict(num_warps=num_warps, **FP_OPTIONS)
        fn = split_fn if recorded else pinned(split_fn, **consts, **opts)
        extra = dict(**consts, **opts) if recorded else {}
        ws_part = out if part is None else part
        ws_lse = lens if lse is None else lse
        fn[grid](
            q, desc, page_table, lens, out, ws_part, ws_lse, sm_scale * _LOG2E * v_scale, v_scale, H,
            q.stride(0), q.stride(1), page_table.stride(0), out.stride(0), out.stride(1), **extra,
        )  # fmt: skip
        if splits > 1:
            launch_reduce(reduce_fn, recorded, part, lse, out, splits)

    return run
