"""Gluon for NVIDIA Hopper (sm_90): the GEMM pieces of the package's Gluon kernel (`quant.gluon`).

The grouped order of C tiles; the TMA loads of a K step into a ring of shared-memory slots and the loader
partition that makes all of a program's loads under warp specialization (ready / empty mbarriers, see
`quant.gluon` for the protocol); the epilogue through shared memory and a TMA store. The Triton 3.6 / 3.9
shims, the mbarrier protocol's waits and releases, the wgmma accumulator layout and the host's TMA check
are the shared library's (`autotune.kernels.common.gluon_hopper`). Imported lazily (it imports triton and
Gluon).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from autotune.kernels.common.gluon_hopper import cta_barrier, tma_load, tma_store


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
    tma_load(a_desc, [off_m, group * BLOCK_K], bar, a_bufs.index(slot), pred)
    tma_load(b_desc, [off_n, group * BLOCK_K], bar, b_bufs.index(slot), pred)


@gluon.jit
def _store(c_desc, c_smem, acc, off_m, off_n):
    """acc → C through shared memory and a TMA store (clipped at the edges of C)."""
    tma.store_wait(0)  # the previous tile's store (persistent) has finished reading c_smem ...
    cta_barrier()  # ... as the issuing thread sees it, and every warpgroup is past its last wgmma
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()  # generic-proxy writes → visible to the TMA (async proxy)
    cta_barrier()
    tma_store(c_desc, [off_m, off_n], c_smem)


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
