"""Gluon for NVIDIA Hopper (sm_90): the pieces the package's Gluon kernels share.

Shims for the Gluon calls Triton 3.6 and 3.9 spell differently; the wgmma accumulator layout of a tile;
the grouped order of C tiles; the TMA loads of a K step into a ring of shared-memory slots and the loader
partition that makes all of a program's loads under warp specialization (ready / empty mbarriers, see
`quant.gluon` for the protocol); the epilogue through shared memory and a TMA store; and the host's
check that a tensor can back a tensor descriptor. Imported lazily (it imports triton and Gluon).
"""

from __future__ import annotations

from typing import Any

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

# -- Triton 3.6 / 3.9 shims (module globals bound to Gluon builtins are legal inside @gluon.jit) ----------
# TMA copies: 3.9 renamed async_copy_global_to_shared / async_copy_shared_to_global to async_load /
# async_store (the old names still exist there, but raise).
_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
_tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global
# The CTA-wide barrier (bar.sync): `thread_barrier` in 3.6, `barrier` in 3.9.
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
# The ring's mbarriers under WARP_SPEC. Gluon's `mbarrier.arrive` is one arrival by one thread after a
# bar.sync of its partition's warps, and Triton puts a bar.sync before every `mbarrier.wait` that follows
# another wait in a partition of several warps (3.6 and 3.9 alike). 3.9's `gl.inline_asm` takes an
# mbarrier's address: there the consumers wait and arrive in PTX of their own, lane 0 of every warp
# arriving, and no bar.sync is left in the K loop. 3.6 keeps Gluon's calls (bar.syncs of one warpgroup).
_ASM_MBARRIER = gl.constexpr(hasattr(gl, "inline_asm"))
_WAIT_ASM = gl.constexpr(
    "{\n.reg .pred done;\nwait_again:\nmbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
    "@!done bra.uni wait_again;\n}"
)
_ARRIVE_ASM = gl.constexpr(
    "{\n.reg .pred first;\n.reg .b32 lane;\nmov.u32 lane, %laneid;\nsetp.eq.u32 first, lane, 0;\n"
    "@first mbarrier.arrive.shared::cta.b64 _, [$0];\n}"
)
#: Registers a thread of the loader warp (WARP_SPEC; setmaxnreg's least is 24) and of the second
#: consumer warpgroup get; the first (the default partition) gets what is left of the 64K.
_LOADER_REGS = gl.constexpr(24)
_CONSUMER_REGS = gl.constexpr(240)

_GL_OUT = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@gluon.constexpr_function
def _mma_layout(block_m: int, block_n: int, num_warps: int) -> Any:
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
def _origin(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """Where `tile` starts in C (row, column), in grouped order: GROUP_M rows of tiles column by column."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % group_size
    pid_n = (tile % width) // group_size
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _load(a_desc, b_desc, bars, a_bufs, b_bufs, off_m, off_n, group, it, pred, STAGES: gl.constexpr):
    """TMA loads of K group `group` (load number `it` of this program) into ring slot it % STAGES."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    slot = it % STAGES
    bar = bars.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred)
    _tma_load(a_desc, [off_m, group * BLOCK_K], bar, a_bufs.index(slot), pred)
    _tma_load(b_desc, [off_n, group * BLOCK_K], bar, b_bufs.index(slot), pred)


@gluon.jit
def _wait_ready(bar, phase, WARP_SPEC: gl.constexpr):
    """Waits for the completion of `bar`'s phase of parity `phase` (WARP_SPEC on 3.9: in PTX of our own,
    without the bar.sync Triton puts before a wait)."""
    if WARP_SPEC and _ASM_MBARRIER:
        gl.inline_asm(_WAIT_ASM, "r,r", [bar, phase])
    else:
        mbarrier.wait(bar, phase)


@gluon.jit
def _release(bar):
    """This warp's part of releasing a ring slot (WARP_SPEC): one arrival per warp on 3.9, where the
    slot's barrier counts every consumer warp; on 3.6 one per warpgroup partition (Gluon's arrive)."""
    if _ASM_MBARRIER:
        gl.inline_asm(_ARRIVE_ASM, "r", [bar])
    else:
        mbarrier.arrive(bar, count=1)


@gluon.constexpr_function
def _release_count(consumer_warps: int) -> int:
    """The arrivals that release a ring slot under WARP_SPEC (see _release)."""
    return consumer_warps if _ASM_MBARRIER.value else consumer_warps // 4


@gluon.jit
def _store(c_desc, c_smem, acc, off_m, off_n):
    """acc → C through shared memory and a TMA store (clipped at the edges of C)."""
    tma.store_wait(0)  # the previous tile's store (persistent) has finished reading c_smem ...
    _cta_barrier()  # ... as the issuing thread sees it, and every warpgroup is past its last wgmma
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()  # generic-proxy writes → visible to the TMA (async proxy)
    _cta_barrier()
    _tma_store(c_desc, [off_m, off_n], c_smem)


@gluon.jit
def _k_slice(K, BLOCK_K: gl.constexpr, SPLIT_K: gl.constexpr):
    """(first K group, number of K groups) of this program's K slice: all of K, or (SPLIT_K > 1) slice
    program_id(1) of SPLIT_K, cdiv(groups, SPLIT_K) groups each and the rest in the last (the launcher
    refuses a split that leaves a slice empty)."""
    k_tiles = gl.cdiv(K, BLOCK_K)
    if SPLIT_K == 1:
        k0 = 0
        n = k_tiles
    else:
        per = gl.cdiv(k_tiles, SPLIT_K)
        k0 = gl.program_id(1) * per
        n = gl.minimum(per, k_tiles - k0)
    return k0, n


@gluon.jit
def _load_all(a_desc, b_desc, bars, empty, a_bufs, b_bufs, M, N, K, GROUP_M: gl.constexpr,
              STAGES: gl.constexpr, PERSISTENT: gl.constexpr, SPLIT_K: gl.constexpr):  # fmt: skip
    """The loader partition (WARP_SPEC, one warp): every load of the program's tiles (over its K slice),
    in the consumers' order, each into the next ring slot once the consumers have released it."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    k0, k_tiles = _k_slice(K, BLOCK_K, SPLIT_K)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        stop = num_pid_m * num_pid_n
        step = gl.num_programs(0)
    else:
        stop = gl.program_id(0) + 1
        step = 1
    it = 0
    for tile in range(gl.program_id(0), stop, step):
        off_m, off_n = _origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        for group in range(k_tiles):
            # Load `it` is use it // STAGES of its slot; it needs use it // STAGES - 1 released, i.e. the
            # empty barrier's phase of that parity complete. A fresh mbarrier counts the phase before its
            # first (parity 1) as complete: the first use of every slot does not wait.
            mbarrier.wait(empty.index(it % STAGES), ((it // STAGES) & 1) ^ 1)
            _load(a_desc, b_desc, bars, a_bufs, b_bufs, off_m, off_n, k0 + group, it, True, STAGES)
            it += 1


def _check_tma(name: str, t: torch.Tensor) -> None:
    """ValueError unless `t` (2-D) can back a TMA descriptor: unit column stride, 16-byte aligned rows
    and start."""
    rows = t.stride(0) * t.element_size()
    if t.stride(1) != 1 or rows % 16 or t.data_ptr() % 16:
        raise ValueError(
            f"the gluon backend moves {name} by TMA: it needs a unit column stride and 16-byte aligned rows "
            f"and start; got strides {tuple(t.stride())} of {t.dtype} at offset {t.data_ptr() % 16} mod 16"
        )
