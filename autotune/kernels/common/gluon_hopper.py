"""Gluon for NVIDIA Hopper (sm_90): what the ops' Gluon kernels share.

- Shims for the Gluon calls that Triton 3.6 and 3.9 spell differently (module globals bound to Gluon
  builtins are legal inside `@gluon.jit`): `tma_load` and `tma_store` (3.9 renamed the TMA copies
  `async_copy_global_to_shared` / `async_copy_shared_to_global` to `async_load` / `async_store`; the old
  names still exist there, but raise) and `cta_barrier` (the CTA-wide bar.sync: `thread_barrier` in 3.6,
  `barrier` in 3.9).
- The mbarrier protocol of a ring of shared-memory slots under warp specialization (`wait_ready`,
  `release`, `release_count`, `ASM_MBARRIER`): Gluon's `mbarrier.arrive` is one arrival by one thread
  after a bar.sync of its partition's warps, and Triton puts a bar.sync before every `mbarrier.wait` that
  follows another wait in a partition of several warps (3.6 and 3.9 alike). 3.9's `gl.inline_asm` takes
  an mbarrier's address: there consumers wait and arrive in PTX of their own, lane 0 of every warp
  arriving, so no bar.sync is left in their loops; 3.6 keeps Gluon's calls (bar.syncs of one warpgroup).
- `LOADER_REGS` / `CONSUMER_REGS`: registers a thread of a loader warp and of a second consumer
  warpgroup get under `gl.warp_specialize` (setmaxnreg); the default partition gets what is left.
- `wgmma_layout`: the wgmma accumulator layout of a tile with warps stacked along M.
- `check_tma`: the host's check that a 2-D tensor can back a tensor descriptor.

Imported lazily (it imports torch, triton and Gluon).
"""

from __future__ import annotations

from typing import Any

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

__all__ = [
    "ASM_MBARRIER",
    "CONSUMER_REGS",
    "GL_DTYPES",
    "LOADER_REGS",
    "check_tma",
    "cta_barrier",
    "release",
    "release_count",
    "tma_load",
    "tma_store",
    "wait_ready",
    "wgmma_layout",
]

#: TMA copies global → shared (`tma_load(desc, coord, bar, dst, pred=True)`) and shared → global
#: (`tma_store(desc, coord, src)`), in whichever spelling the installed Triton has.
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global
#: The CTA-wide barrier (bar.sync of every warp of the partition that calls it).
cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
#: Whether consumers wait and arrive on mbarriers in PTX of their own (Triton 3.9: `gl.inline_asm`).
ASM_MBARRIER = gl.constexpr(hasattr(gl, "inline_asm"))
_WAIT_ASM = gl.constexpr(
    "{\n.reg .pred done;\nwait_again:\nmbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
    "@!done bra.uni wait_again;\n}"
)
_ARRIVE_ASM = gl.constexpr(
    "{\n.reg .pred first;\n.reg .b32 lane;\nmov.u32 lane, %laneid;\nsetp.eq.u32 first, lane, 0;\n"
    "@first mbarrier.arrive.shared::cta.b64 _, [$0];\n}"
)
#: Registers a thread of a loader warp (setmaxnreg's least is 24) and of a second consumer warpgroup get.
LOADER_REGS = gl.constexpr(24)
CONSUMER_REGS = gl.constexpr(240)

#: Gluon's dtype of each 16-bit torch dtype a kernel writes.
GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@gluon.constexpr_function
def wgmma_layout(block_m: int, block_n: int, num_warps: int) -> Any:
    """The wgmma accumulator layout of a (block_m, block_n) tile: warps along M (16 rows each, a
    warpgroup at least), the rest along N; the widest wgmma N (a multiple of 8, at most 256) that tiles
    a warp's columns; K 32, FP8's."""
    warps_m = 4
    while warps_m < num_warps and block_m > 16 * warps_m:
        warps_m *= 2
    warps_n = num_warps // warps_m
    cols = block_n // warps_n
    inst_n = min(256, cols) // 8 * 8
    while cols % inst_n:
        inst_n -= 8
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps_m, warps_n], instr_shape=[16, inst_n, 32]
    )


@gluon.jit
def wait_ready(bar, phase, WARP_SPEC: gl.constexpr):
    """Waits for the completion of `bar`'s phase of parity `phase` (WARP_SPEC on 3.9: in PTX of our own,
    without the bar.sync Triton puts before a wait)."""
    if WARP_SPEC and ASM_MBARRIER:
        gl.inline_asm(_WAIT_ASM, "r,r", [bar, phase])
    else:
        mbarrier.wait(bar, phase)


@gluon.jit
def release(bar):
    """This warp's part of releasing a ring slot (warp specialization): one arrival per warp on 3.9, where
    the slot's barrier counts every consumer warp; on 3.6 one per warpgroup partition (Gluon's arrive)."""
    if ASM_MBARRIER:
        gl.inline_asm(_ARRIVE_ASM, "r", [bar])
    else:
        mbarrier.arrive(bar, count=1)


@gluon.constexpr_function
def release_count(consumer_warps: int) -> int:
    """The arrivals that release a ring slot (the count of its "empty" mbarrier; see `release`)."""
    return consumer_warps if ASM_MBARRIER.value else consumer_warps // 4


def check_tma(name: str, t: torch.Tensor, backend: str = "gluon") -> None:
    """ValueError unless `t` (2-D) can back a TMA descriptor: unit column stride, 16-byte aligned rows
    and start."""
    rows = t.stride(0) * t.element_size()
    if t.stride(1) != 1 or rows % 16 or t.data_ptr() % 16:
        raise ValueError(
            f"the {backend} backend moves {name} by TMA: it needs a unit column stride and 16-byte aligned "
            f"rows and start; got strides {tuple(t.stride())} of {t.dtype} at offset {t.data_ptr() % 16} "
            "mod 16"
        )
