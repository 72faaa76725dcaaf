"""The "gluon" backend of the dense GEMM: C = A · Bᵀ in bf16 or fp16 for NVIDIA Hopper (sm_90), in Gluon.

A (M, K) and B (N, K) (nn.Linear's weight layout), fp32 accumulation in the wgmma registers, C in the
inputs' dtype.

Why: the plain Triton TMA kernel (`gemm_tma`) lets every warp both issue loads and compute, with a CTA
barrier per K step; on the prefill rows of `benchmarks/gemm.py` it stays at 0.80-0.99x of cuBLAS. Here
the work is split as in the blockwise FP8 kernel's WARP_SPEC mode (`gemm_fp8_gluon`, whose ring protocol
this kernel shares through `gluon_hopper`): one loader warp makes every TMA load into a ring of STAGES
slots (ready / empty mbarriers), and num_warps / 4 consumer warpgroups, each in a partition of its own,
compute BLOCK_M / (num_warps / 4) rows of every tile: per K step, wait for the slot, issue the wgmma
asynchronously on the accumulator, wait until one wgmma is left in flight, and release the slot the
retired one read. No CTA barrier in the K loop. Each consumer stores its rows of C through shared memory
and a TMA store.

Knobs (the dense op's space, `gemm_space.gluon_params`): BLOCK_M, BLOCK_N, BLOCK_K, num_warps (the
consumer warps: 4 or 8), num_stages (the ring's depth), PERSISTENT (one program per SM walking the tiles
in grouped order) and GROUP_M. Edges of M, N and K are the TMA's (loads fill zeros, stores clip). Gluon
has no interpreter: the kernel runs on Hopper only; `compile_for_target` cross-compiles it without a GPU.
Imported lazily (it imports triton and Gluon).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from autotune.config import Config
from autotune.kernels.base import FP_OPTIONS
from autotune.kernels.gemm_tma import tma_ready
from autotune.kernels.gluon_hopper import (
    _CONSUMER_REGS,
    _GL_OUT,
    _LOADER_REGS,
    _cta_barrier,
    _load_all,
    _mma_layout,
    _origin,
    _release,
    _release_count,
    _store,
    _wait_ready,
)
from autotune.kernels.launch import pinned

__all__ = ["CONFIG_KEYS", "compile_for_target", "gluon_gemm_kernel", "gluon_gemm_launcher"]

#: The knobs of a dense "gluon" config, all required.
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "PERSISTENT", "GROUP_M", "C_SMEM")


@gluon.jit
def _mma(bars, a_bufs, b_bufs, it, acc, STAGES: gl.constexpr, ROW0: gl.constexpr, ROWS: gl.constexpr):
    """Waits for load `it`, then issues acc += A_k · B_kᵀ (rows ROW0 .. ROW0 + ROWS of the A tile)
    asynchronously."""
    slot = it % STAGES
    _wait_ready(bars.index(slot), (it // STAGES) & 1, True)
    a = a_bufs.index(slot)
    if a_bufs.shape[1] > ROWS:  # one consumer warpgroup's rows
        a = a.slice(ROW0, ROWS)
    return warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), acc, is_async=True)


@gluon.jit
def _tile(bars, empty, a_bufs, b_bufs, base, k_tiles, mma_layout: gl.constexpr, STAGES: gl.constexpr,
          ROW0: gl.constexpr, ROWS: gl.constexpr):  # fmt: skip
    """The fp32 rows ROW0 .. ROW0 + ROWS of one C tile, from loads base .. base + k_tiles - 1 (the ring's
    slots and phases continue across the tiles of a persistent program)."""
    BLOCK_N: gl.constexpr = b_bufs.shape[1]
    acc = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout)
    acc = _mma(bars, a_bufs, b_bufs, base, acc, STAGES, ROW0, ROWS)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))  # (the one wgmma in flight: no stall)
    for k in range(1, k_tiles):
        acc = _mma(bars, a_bufs, b_bufs, base + k, acc, STAGES, ROW0, ROWS)
        # one wgmma (k's) left in flight: k - 1's has finished, its shared-memory reads included
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        _release(empty.index((base + k - 1) % STAGES))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _release(empty.index((base + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def _epilogue(c_desc, c_ptr, stride_cm, c_smem, acc, off_m, off_n, M, N, C_SMEM: gl.constexpr,
              mma_layout: gl.constexpr):  # fmt: skip
    """acc → C at (off_m, off_n): through shared memory and a TMA store (C_SMEM), or stored from the
    registers (masked), which leaves the shared memory of a C tile to the ring."""
    if C_SMEM:
        _store(c_desc, c_smem, acc, off_m, off_n)
    else:
        ROWS: gl.constexpr = acc.shape[0]
        BLOCK_N: gl.constexpr = acc.shape[1]
        rows = off_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma_layout))
        cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :]
        gl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@gluon.jit
def _consume(a_desc, b_desc, c_desc, c_ptr, stride_cm, bars, empty, a_bufs, b_bufs, c_smem, M, N, K,
             GROUP_M: gl.constexpr, STAGES: gl.constexpr, PERSISTENT: gl.constexpr, CONSUMER: gl.constexpr,
             C_SMEM: gl.constexpr, mma_layout: gl.constexpr):  # fmt: skip
    """Consumer warpgroup CONSUMER's rows (c_desc's block) of the program's tiles: one, or
    (PERSISTENT) pid, pid + programs, ..."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    ROW0: gl.constexpr = CONSUMER * ROWS
    k_tiles = gl.cdiv(K, BLOCK_K)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        base = 0
        for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            off_m, off_n = _origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _tile(bars, empty, a_bufs, b_bufs, base, k_tiles, mma_layout, STAGES, ROW0, ROWS)
            base += k_tiles
            _epilogue(c_desc, c_ptr, stride_cm, c_smem, acc, off_m + ROW0, off_n, M, N, C_SMEM, mma_layout)
    else:
        off_m, off_n = _origin(gl.program_id(0), num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile(bars, empty, a_bufs, b_bufs, 0, k_tiles, mma_layout, STAGES, ROW0, ROWS)
        _epilogue(c_desc, c_ptr, stride_cm, c_smem, acc, off_m + ROW0, off_n, M, N, C_SMEM, mma_layout)
    tma.store_wait(0)


@gluon.jit
def gluon_gemm_kernel(
    a_desc, b_desc, c_desc, c_ptr, stride_cm, M, N, K, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    PERSISTENT: gl.constexpr, CONSUMERS: gl.constexpr, C_SMEM: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """C tiles of A · Bᵀ: one per program, or (PERSISTENT) pid, pid + programs, ... CONSUMERS (1 or 2)
    warpgroup partitions compute the rows of c_desc's block each (num_warps, the default partition's, is
    4), and a loader warp makes every TMA load."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    gl.static_assert(STAGES >= 2, "the ring needs a slot for the wgmma in flight and one being refilled")
    gl.static_assert(c_desc.block_type.shape[0] * CONSUMERS == BLOCK_M, "C blocks: one per consumer")
    gl.static_assert(num_warps == 4, "one warpgroup per consumer partition")
    mma_layout: gl.constexpr = _mma_layout(BLOCK_M // CONSUMERS, BLOCK_N, num_warps, 16)

    # (constexpr lists concatenate inside @gluon.jit; starred unpacking does not)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)  # noqa: RUF005
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    if C_SMEM:
        c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    else:  # (not used)
        c_smem = b_bufs
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)  # one arrival (the expect) plus the TMA bytes
        mbarrier.init(empty.index(i), count=_release_count(CONSUMERS * num_warps))
    loads = (a_desc, b_desc, bars, empty, a_bufs, b_bufs, M, N, K, GROUP_M, STAGES, PERSISTENT)
    if CONSUMERS == 1:
        fence_async_shared()
        _cta_barrier()
        gl.warp_specialize(
            [
                (_consume, (a_desc, b_desc, c_desc, c_ptr, stride_cm, bars, empty, a_bufs, b_bufs, c_smem, M,
                            N, K, GROUP_M, STAGES, PERSISTENT, 0, C_SMEM, mma_layout)),
                (_load_all, loads),
            ],
            [1],
            [_LOADER_REGS],
        )  # fmt: skip
    else:
        if C_SMEM:
            c_smem1 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
        else:
            c_smem1 = b_bufs
        fence_async_shared()
        _cta_barrier()
        gl.warp_specialize(
            [
                (_consume, (a_desc, b_desc, c_desc, c_ptr, stride_cm, bars, empty, a_bufs, b_bufs, c_smem, M,
                            N, K, GROUP_M, STAGES, PERSISTENT, 0, C_SMEM, mma_layout)),
                (_consume, (a_desc, b_desc, c_desc, c_ptr, stride_cm, bars, empty, a_bufs, b_bufs, c_smem1, M,
                            N, K, GROUP_M, STAGES, PERSISTENT, 1, C_SMEM, mma_layout)),
                (_load_all, loads),
            ],
            [num_warps, 1],
            [_CONSUMER_REGS, _LOADER_REGS],
        )  # fmt: skip


#: Rows of C one consumer warpgroup can compute: a wgmma is 64 rows; two of them per K step at 128.
CONSUMER_ROWS = (64, 128)


def check_config(block_m: int, block_n: int, block_k: int, num_warps: int, num_stages: int) -> None:
    """ValueError for a tile, warp count or ring depth the kernel cannot run."""
    if num_warps not in (4, 8):
        raise ValueError(
            f"num_warps counts the consumer warps, one or two warpgroups: 4 or 8, got {num_warps}"
        )
    rows = block_m // (num_warps // 4)
    if block_m % (num_warps // 4) or rows not in CONSUMER_ROWS:
        raise ValueError(
            f"BLOCK_M {block_m} on {num_warps} warps gives each consumer warpgroup "
            f"{block_m / (num_warps // 4)} "
            f"rows; it takes {' or '.join(map(str, CONSUMER_ROWS))}"
        )
    if block_n % 16 or not 16 <= block_n <= 256:
        raise ValueError(f"BLOCK_N must be a multiple of 16 from 16 to 256 (one wgmma's N), got {block_n}")
    if block_k not in (32, 64, 128):
        raise ValueError(f"BLOCK_K must be 32, 64 or 128, got {block_k}")
    if num_stages < 2:
        raise ValueError(f"num_stages must be at least 2, got {num_stages}")


@cache
def _layouts(block_m: int, block_n: int, block_k: int, dtype: torch.dtype, c_rows: int) -> tuple[Any, ...]:
    """The shared-memory layouts of the A, B and C tiles (the TMA boxes; C's of c_rows rows)."""
    if dtype not in _GL_OUT:
        raise ValueError(f"the gluon backend takes bf16 or fp16, not {dtype}")
    el = _GL_OUT[dtype]
    return (
        gl.NVMMASharedLayout.get_default_for([block_m, block_k], el),
        gl.NVMMASharedLayout.get_default_for([block_n, block_k], el),
        gl.NVMMASharedLayout.get_default_for([c_rows, block_n], el),
    )


class GluonGemmLauncher:
    """`launch(a, b, out)`: a (M, K) and b (N, K), out (M, N), one dtype (bf16 or fp16), on one Hopper GPU.
    Inputs whose rows are not dense and 16-byte aligned are copied first (`gemm_tma.tma_ready`), and C
    goes through a dense temporary where `out` is not; descriptors are built per call. ValueError at
    construction for a config the kernel cannot run, at launch for K or N whose rows cannot be 16-byte
    aligned. `kernel` stands in for the JIT function (a `Recorder` to capture launches)."""

    def __init__(self, config: Config, num_sms: int, kernel: Any = None) -> None:
        missing = [k for k in CONFIG_KEYS if k not in config]
        unknown = sorted(set(config) - {*CONFIG_KEYS, "backend"})
        if missing or unknown:
            raise ValueError(
                f"a dense gluon config has {', '.join(CONFIG_KEYS)}; {config.short()} "
                + (f"lacks {', '.join(missing)}" if missing else f"has unknown {', '.join(unknown)}")
            )
        bm, bn, bk, warps, stages, persistent, group_m, c_smem = (int(config[k]) for k in CONFIG_KEYS)
        check_config(bm, bn, bk, warps, stages)
        self.block_m, self.block_n, self.block_k = bm, bn, bk
        self.consumers = warps // 4
        self.persistent, self.num_sms = bool(persistent), num_sms
        self.kernel = pinned(
            gluon_gemm_kernel if kernel is None else kernel, GROUP_M=group_m, STAGES=stages,
            PERSISTENT=self.persistent, CONSUMERS=self.consumers, C_SMEM=bool(c_smem), num_warps=4,
            **FP_OPTIONS,
        )  # fmt: skip

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        M, K = a.shape
        N = b.shape[0]
        elem = a.element_size()
        if (K * elem) % 16 or (N * elem) % 16:
            raise ValueError(
                f"the gluon backend moves A, B and C by TMA: rows of K={K} and N={N} elements of {a.dtype} "
                "must be multiples of 16 bytes"
            )
        a, b = tma_ready(a), tma_ready(b)
        c = out
        if not out.is_contiguous() or out.data_ptr() % 16:
            c = torch.empty((M, N), device=out.device, dtype=out.dtype)
        bm, bn, bk, rows = self.block_m, self.block_n, self.block_k, self.block_m // self.consumers
        a_layout, b_layout, c_layout = _layouts(bm, bn, bk, a.dtype, rows)
        args = (
            TensorDescriptor.from_tensor(a, [bm, bk], a_layout),
            TensorDescriptor.from_tensor(b, [bn, bk], b_layout),
            TensorDescriptor.from_tensor(c, [rows, bn], c_layout),
            c,
            N,
            M,
            N,
            K,
        )
        programs = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        if self.persistent:
            programs = min(
                programs, self.num_sms or torch.cuda.get_device_properties(out.device).multi_processor_count
            )
        self.kernel.launch((programs,), args, {})
        if c is not out:
            out.copy_(c)


def gluon_gemm_launcher(config: Config, *, num_sms: int, kernel: Any = None) -> Callable[..., None]:
    """The launch `run(a, b, out)` of one dense "gluon" config (see GluonGemmLauncher); ValueError naming
    what is wrong with a config the kernel cannot run. `num_sms`: the persistent grid (0: the device's SM
    count)."""
    return GluonGemmLauncher(config, num_sms, kernel)


def compile_for_target(
    config: Config, *, M: int = 4096, N: int = 1280, K: int = 8192, dtype: torch.dtype = torch.bfloat16,
    arch: int = 90,
) -> Any:  # fmt: skip
    """The kernel of `config` compiled for CUDA sm_`arch` without a GPU (a CompiledKernel: .asm["ptx"],
    ["cubin"]), specialized as a launch on (M, N, K) with contiguous inputs would be."""
    from dataclasses import replace

    from autotune.compile import compile_call
    from autotune.kernels.base import KernelCall, Recorder
    from autotune.target import Target

    calls: list[KernelCall] = []
    run = GluonGemmLauncher(config, 132, Recorder(gluon_gemm_kernel, calls))
    a = torch.empty(M, K, dtype=dtype, device="meta")
    b = torch.empty(N, K, dtype=dtype, device="meta")
    run(a, b, torch.empty(M, N, dtype=dtype, device="meta"))
    return compile_call(calls[0], replace(Target.for_arch("sm_90"), arch=f"sm_{arch}"))
