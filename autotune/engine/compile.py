"""Compile a config for a target without launching it, and read its static features off the binary.

Triton cross-compiles: `compile_features(op, problem, config, Target.for_arch("gfx950"))` works on a
machine with no GPU at all. The kernel launches are captured from the op's own launcher with inputs on
torch's meta device and specialized the way Triton's runtime specializes real arguments, so the binary
(and Triton's cache key) is the one a real launch would compile.

Compiling needs real JIT functions: under TRITON_INTERPRET=1 they are interpreter objects, so
`CompilePool` compiles in worker processes started without that variable.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from autotune.core.config import Config
from autotune.core.op import KernelCall, TunableOp
from autotune.core.problem import Problem
from autotune.core.result import root_cause
from autotune.core.static import StaticFeatures
from autotune.core.target import Target, TargetError, toolchain_versions
from autotune.engine.isa import amd_mix, ptx_mix
from autotune.engine.lifeline import PARENT_ENV, start_from_main

__all__ = [
    "CompilePool",
    "amd_features",
    "check_compilable",
    "compile_call",
    "compile_features",
    "cubin_sass",
    "gpu_target",
    "launch_key",
    "nvidia_features",
    "occupancy_amd",
    "occupancy_nvidia",
]

#: Waves one SIMD can hold on CDNA3/CDNA4, and SIMDs per CU.
AMD_MAX_WAVES_PER_SIMD = 8
AMD_SIMDS_PER_CU = 4
#: Unified VGPR+AGPR file per lane on gfx90a and newer, and its allocation granule.
AMD_VGPRS_PER_LANE = 512
AMD_VGPR_GRANULE = 8
#: Hopper SM limits: registers, register allocation granule (per warp), warps, blocks, shared memory.
NV_REGS_PER_SM = 65536
NV_REG_GRANULE = 256
NV_MAX_WARPS_PER_SM = 64
NV_MAX_BLOCKS_PER_SM = 32
NV_SMEM_PER_SM = 228 * 1024
NV_SMEM_RESERVED_PER_BLOCK = 1024


def gpu_target(target: Target) -> Any:
    """Triton's GPUTarget for `target`; TargetError for the interpreter or an arch Triton cannot build."""
    from triton.backends.compiler import GPUTarget

    if target.is_amd and target.arch.startswith("gfx"):
        return GPUTarget("hip", target.arch, target.wave_size or 64)
    if target.sm:
        return GPUTarget("cuda", target.sm, 32)
    raise TargetError(f"cannot compile for {target.arch}: compile-only work needs a gfx* or sm_* target")


def check_compilable(target: Target) -> None:
    """TargetError, with the reason, when the installed Triton has no backend for `target`."""
    try:
        from triton.backends import backends
    except ImportError as exc:
        raise TargetError(
            f"compiling for {target.arch} needs triton: on a CPU-only machine install this package with "
            "its triton extra (pip install '.[triton]' in a checkout); on CUDA and ROCm PyTorch brings its "
            "own"
        ) from exc
    want = "amd" if target.is_amd else "nvidia"
    gpu_target(target)
    if want not in backends:
        raise TargetError(
            f"the installed Triton has no {want} backend, so it cannot compile for {target.arch} "
            f"(backends: {', '.join(sorted(backends)) or 'none'})"
        )


def compile_call(call: KernelCall, target: Target) -> Any:
    """Compile one captured launch for `target` exactly as Triton's runtime would; the CompiledKernel.

    Uses Triton's binder and argument packing (the same calls `JITFunction.run` makes), so the
    specialization of every argument (divisibility by 16, integers equal to 1, pointer ranges on AMD)
    matches a real launch. A Gluon kernel (`triton.experimental.gluon.jit`) compiles from a GluonASTSource,
    as its `run` does.
    """
    from triton.compiler import compile

    src, triton_target, options = _bind(call, target)
    return compile(src, target=triton_target, options=options)


def launch_key(call: KernelCall, target: Target) -> str:
    """What Triton's cache keys the binary of one captured launch on `target` by (the kernel's source and
    its dependencies, the specialization of every argument, the constexprs and the compile options), as a
    hex digest, computed without compiling: two launches with one key compile to one binary."""
    from triton.compiler import make_backend

    src, triton_target, options = _bind(call, target)
    backend = make_backend(triton_target)
    parsed = backend.parse_options(dict(options, **src.parse_options()))
    text = f"{src.hash()}-{backend.hash()}-{parsed.hash()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _bind(call: KernelCall, target: Target) -> tuple[Any, Any, dict[str, Any]]:
    """(source, Triton's GPUTarget, options) of one captured launch, bound as `JITFunction.run` binds it."""
    from triton import knobs
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = call.fn
    if not isinstance(fn, JITFunction):
        raise RuntimeError(
            f"{getattr(fn, '__name__', fn)} is not a JIT function (TRITON_INTERPRET is set?); "
            "compile in a CompilePool, whose workers run without the interpreter"
        )
    kwargs = dict(call.kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # what run() adds, per version
        if hasattr(knobs.compilation, name):
            kwargs[name] = getattr(knobs.compilation, name)
    triton_target = gpu_target(target)
    backend = make_backend(triton_target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*call.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound_args, specialization, options
    )
    if getattr(fn, "is_gluon", lambda: False)():  # Triton before 3.5 has no Gluon
        from triton.experimental.gluon._runtime import GluonASTSource  # the same place in 3.6 and 3.9

        src: Any = GluonASTSource(fn, signature, constexprs, attrs)
    else:
        src = ASTSource(fn, signature, constexprs, attrs)
    return src, triton_target, options.__dict__


def failure_text(exc: BaseException) -> str:
    """`exc` as text, its root cause (`root_cause`) first."""
    root = root_cause(exc)
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if root is exc else f"{type(root).__name__}: {root}\n(raised at) {text}"


def compile_features(op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures:
    """The static features of `config`'s main kernel on `target`; a compile error becomes
    `StaticFeatures.failed`, never an exception. Vendor backends (nothing to compile) give None-like
    features with `compiled` True and zero counts."""
    start = time.perf_counter()
    try:
        calls = op.kernel_calls(problem, config, target)
        if not calls:
            return StaticFeatures(arch=target.arch, occupancy_unit="", toolchain=toolchain_versions())
        kernel = compile_call(calls[0], target)
        for extra in calls[1:]:
            compile_call(extra, target)  # e.g. the split-K reduce: must compile too
    except Exception as exc:  # any compiler failure is a per-config finding
        message = failure_text(exc)
        return replace(
            StaticFeatures.failed(target.arch, message[:4000], time.perf_counter() - start),
            toolchain=toolchain_versions(),
        )
    elapsed = time.perf_counter() - start
    num_warps = int(calls[0].kwargs.get("num_warps", 4))
    if target.is_amd:
        features = amd_features(kernel.asm["amdgcn"], int(kernel.metadata.shared), target, num_warps)
    else:  # a warp-specialized kernel (gluon WARP_SPEC) runs more warps than its num_warps: count those
        features = nvidia_features(kernel, target, int(getattr(kernel.metadata, "num_warps", num_warps)))
    return replace(features, compile_s=elapsed, toolchain=toolchain_versions())


# -- AMD ----------------------------------------------------------------------------------------------

_AMD_WIDTH = {
    "ubyte": 8,
    "sbyte": 8,
    "byte": 8,
    "ushort": 16,
    "sshort": 16,
    "short": 16,
    "short_d16": 16,
    "short_d16_hi": 16,
    "ubyte_d16": 8,
    "dword": 32,
    "dwordx2": 64,
    "dwordx3": 96,
    "dwordx4": 128,
    "b8": 8,
    "b16": 16,
    "b32": 32,
    "b64": 64,
    "b96": 96,
    "b128": 128,
}
_AMD_MEM = re.compile(r"^\s*(?:global|buffer)_(load|store)(?:_lds)?_(\w+)")
_AMD_META = re.compile(r"^\s*\.(vgpr_count|agpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count|"
                       r"private_segment_fixed_size):\s+(\d+)")  # fmt: skip
_AMD_COMMENT = re.compile(r"^\s*; (NumVgprs|NumAgprs|TotalNumVgprs|NumSgprs|ScratchSize|Occupancy): (\d+)")


def amd_features(asm: str, lds_bytes: int, target: Target, num_warps: int) -> StaticFeatures:
    """Static features from AMDGPU assembly (its kernel descriptor metadata and instructions, and their
    mix: `autotune.engine.isa.amd_mix`)."""
    meta: dict[str, int] = {}
    comments: dict[str, int] = {}
    mfma: set[str] = set()
    loads: set[int] = set()
    stores: set[int] = set()
    for line in asm.splitlines():
        if m := _AMD_META.match(line):
            meta.setdefault(m.group(1), int(m.group(2)))
        elif m := _AMD_COMMENT.match(line):
            comments.setdefault(m.group(1), int(m.group(2)))
        elif m := _AMD_MEM.match(line):
            width = _AMD_WIDTH.get(m.group(2))
            if width:
                (loads if m.group(1) == "load" else stores).add(width)
        else:
            stripped = line.lstrip()
            if stripped.startswith("v_mfma"):
                mfma.add(stripped.split()[0])
    vgprs = meta.get("vgpr_count", comments.get("NumVgprs", 0))
    agprs = meta.get("agpr_count", comments.get("NumAgprs", 0))
    total = comments.get("TotalNumVgprs", vgprs + agprs)
    spills = meta.get("vgpr_spill_count", 0) + meta.get("sgpr_spill_count", 0)
    scratch = meta.get("private_segment_fixed_size", comments.get("ScratchSize", 0))
    return StaticFeatures(
        arch=target.arch,
        vgprs=vgprs,
        agprs=agprs,
        sgprs=meta.get("sgpr_count", comments.get("NumSgprs", 0)),
        spills=spills,
        scratch_bytes=scratch,
        lds_bytes=lds_bytes,
        occupancy=occupancy_amd(total, lds_bytes, num_warps, target),
        occupancy_unit="waves/SIMD",
        mma=tuple(sorted(mfma)),
        load_bits=tuple(sorted(loads)),
        store_bits=tuple(sorted(stores)),
        mix=StaticFeatures.mix_of(amd_mix(asm)),
    )


def occupancy_amd(total_vgprs: int, lds_bytes: int, num_warps: int, target: Target) -> int:
    """Waves per SIMD a CDNA CU holds for this kernel: the least of the wave slots, the unified register
    file (allocated in granules) and the LDS shared by the workgroups resident on the CU."""
    by_regs = AMD_MAX_WAVES_PER_SIMD
    if total_vgprs > 0:
        granules = math.ceil(total_vgprs / AMD_VGPR_GRANULE) * AMD_VGPR_GRANULE
        by_regs = AMD_VGPRS_PER_LANE // granules
    by_lds = AMD_MAX_WAVES_PER_SIMD
    if lds_bytes > 0:
        groups = target.lds_bytes // lds_bytes
        by_lds = (groups * max(num_warps, 1)) // AMD_SIMDS_PER_CU if groups else 0
    return max(0, min(AMD_MAX_WAVES_PER_SIMD, by_regs, by_lds))


# -- NVIDIA -------------------------------------------------------------------------------------------

_PTX_PRED = r"^\s*(?:@!?%\w+\s+)?"
_PTX_MEM = re.compile(
    _PTX_PRED + r"(ld|st)\.global(?:\.[a-z0-9_:]+)*?(?:\.v(\d))?\.(b|u|s|f)(8|16|32|64|128)\b"
)
_PTX_CP_ASYNC = re.compile(
    _PTX_PRED + r"cp\.async\.c[ag]\.shared\.global\s*\[[^]]*\],\s*\[[^]]*\],\s*(0x[0-9a-f]+|\d+)"
)
# loads name their destination shared::cta (newer Triton) or shared::cluster (3.6); stores global.shared::cta
_PTX_TMA = re.compile(
    _PTX_PRED + r"cp\.async\.bulk\.tensor\.\w+\.(shared::(?:cta|cluster)\.global|global\.shared)"
)
_PTX_MMA = re.compile(_PTX_PRED + r"((?:wgmma\.mma_async|mma)\.[\w.]+)")
_CUOBJDUMP_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
_SASS_SPILL = re.compile(r"\bSTL(\.\w+)*\s")  # a store of registers to local memory (the stack frame)


def nvidia_features(kernel: Any, target: Target, num_warps: int) -> StaticFeatures:
    """Static features of an NVIDIA CompiledKernel: resources from cuobjdump, instructions (and their mix:
    `autotune.engine.isa.ptx_mix`) from its PTX."""
    regs, stack, static_smem, local = _cubin_usage(kernel.asm["cubin"])
    loads: set[int] = set()
    stores: set[int] = set()
    mma: set[str] = set()
    tma: set[str] = set()
    for line in kernel.asm["ptx"].splitlines():
        if m := _PTX_MEM.match(line):
            width = int(m.group(2) or 1) * int(m.group(4))
            (loads if m.group(1) == "ld" else stores).add(width)
        elif m := _PTX_CP_ASYNC.match(line):
            loads.add(int(m.group(1), 0) * 8)
        elif m := _PTX_TMA.match(line):
            tma.add("load" if m.group(1).startswith("shared") else "store")
        elif m := _PTX_MMA.match(line):
            mma.add(m.group(1))
    smem = max(int(kernel.metadata.shared), static_smem)
    del stack  # counted in `local` where registers are stored to it (spills); else a reserved frame
    return StaticFeatures(
        arch=target.arch,
        vgprs=regs,
        spills=math.ceil(local / 4),
        scratch_bytes=local,
        lds_bytes=smem,
        occupancy=occupancy_nvidia(regs, smem, num_warps),
        occupancy_unit="blocks/SM",
        mma=tuple(sorted(mma)),
        load_bits=tuple(sorted(loads)),
        store_bits=tuple(sorted(stores)),
        tma=tuple(sorted(tma)),
        mix=StaticFeatures.mix_of(ptx_mix(kernel.asm["ptx"])),
    )


def occupancy_nvidia(regs_per_thread: int, smem_bytes: int, num_warps: int) -> int:
    """Blocks per Hopper SM: the least of the block and warp slots, registers and shared memory."""
    warps = max(num_warps, 1)
    by_warps = NV_MAX_WARPS_PER_SM // warps
    by_regs = NV_MAX_BLOCKS_PER_SM
    if regs_per_thread > 0:
        per_warp = math.ceil(regs_per_thread * 32 / NV_REG_GRANULE) * NV_REG_GRANULE
        by_regs = (NV_REGS_PER_SM // per_warp) // warps
    by_smem = NV_SMEM_PER_SM // (smem_bytes + NV_SMEM_RESERVED_PER_BLOCK)
    return max(0, min(NV_MAX_BLOCKS_PER_SM, by_warps, by_regs, by_smem))


def cubin_sass(cubin: bytes) -> str:
    """The SASS of `cubin`, by `cuobjdump -sass`."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run(
            [knobs.nvidia.cuobjdump.path, "-sass", path], capture_output=True, text=True, check=True
        ).stdout


def _cubin_usage(cubin: bytes) -> tuple[int, int, int, int]:
    """(registers, stack, static shared, local) bytes of the one kernel in `cubin`, by cuobjdump. Local
    counts the stack frame too where the code stores registers to it (`STL`): ptxas puts spills there,
    and reserves a few stack bytes without any spill."""
    from triton import knobs

    tool = knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run(
            [tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True
        )
        m = _CUOBJDUMP_USAGE.search(out.stdout)
        if not m:
            raise RuntimeError(f"cuobjdump printed no resource usage: {out.stdout[-500:]}")
        regs, stack, shared, local = (int(g) for g in m.groups())
    if stack and _SASS_SPILL.search(cubin_sass(cubin)):
        local += stack
    return regs, stack, shared, local


# -- parallel compilation -----------------------------------------------------------------------------


#: How much lower the compile processes run than the sweep: compiling ahead is background work, and a
#: GPU worker starved of CPU time (building inputs, launching, checking) would idle its GPU.
COMPILE_NICENESS = 10


#: What the fork server imports once (Linux), so that a compile process starts as a fork of it instead
#: of importing torch and Triton itself: a pool of 15 is up in about the time one import takes.
PRELOAD = (
    "autotune.engine.fork_server",  # first: it dies with the sweep even while the rest is imported
    "torch",
    "triton",
    "autotune.engine.compile",
    "autotune.engine.compile_preload",
)


def _pool_context() -> Any:
    """A fork server preloaded with PRELOAD where the platform has one, else spawn."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # applies when the server starts (in _start)
    return context


def _worker_init(env: dict[str, str] | None = None, forked: bool = True) -> None:
    """Each compile process takes the sweep's environment as it was when the pool started (a fork
    server's children would inherit the server's), without TRITON_INTERPRET, and runs niced: compiling
    ahead is background work. It is not pinned to a core: a compile runs some threads of its own, which
    one core serializes (docs/notes/2026-11-22-compile-ahead.md). It dies with its parent
    (`autotune.engine.lifeline`): the fork server, `forked`, which dies with the sweep; else the sweep,
    watched from a thread (a spawned child's parent is the thread that happened to start it)."""
    from autotune.engine.lifeline import die_with_parent, watch_parent

    if forked:
        die_with_parent()
    else:
        watch_parent()
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    os.environ.pop("TRITON_INTERPRET", None)
    with contextlib.suppress(AttributeError, OSError):  # no nice() here: the same priority
        os.nice(COMPILE_NICENESS)


def start_processes(
    workers: int, context: Any, initializer: Any = _worker_init, initargs: tuple[Any, ...] = ()
) -> tuple[ProcessPoolExecutor, Any]:
    """A pool of compile processes and the context it uses: `context`, or spawn where its fork server
    cannot start. `initializer` gets the environment of now (without TRITON_INTERPRET) first, then
    whether the processes are forks of the fork server, then `initargs`."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        if context.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            # Started here, without TRITON_INTERPRET: the kernels it preloads must be JIT functions; from a
            # thread that lives as long as this process, told to die with it (`lifeline`).
            os.environ[PARENT_ENV] = str(os.getpid())
            try:
                start_from_main(forkserver.ensure_running)
            except OSError:  # no fork server here (e.g. no Unix sockets): each process imports itself
                import multiprocessing

                context = multiprocessing.get_context("spawn")
            finally:
                os.environ.pop(PARENT_ENV, None)
        forked = context.get_start_method() == "forkserver"
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=initializer,
            initargs=(dict(os.environ), forked, *initargs),
        )
        return pool, context
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def _warm_job() -> int:
    """Imports what a compile needs, so that the first real compile does not pay for it."""
    import triton  # noqa: F401

    from autotune.core.registry import load_plugins

    load_plugins()
    return os.getpid()


def _compile_job(op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures:
    return compile_features(op, problem, config, target)


class CompilePool:
    """Compiles configs for one target on worker processes (one per CPU core unless told otherwise).

    Workers start without TRITON_INTERPRET (forks of a preloaded fork server on Linux, else spawned), so
    this works inside an interpreter session too.
    `submit` returns a Future of StaticFeatures; `map` yields (config, features) in completion order.
    Compiling for the local GPU also fills Triton's on-disk cache, so the launch that follows in the
    measuring process loads the binary instead of compiling it.
    """

    def __init__(self, target: Target, workers: int | None = None) -> None:
        check_compilable(target)
        self.target = target
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._context = _pool_context()
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        pool, self._context = start_processes(self.workers, self._context)
        return pool

    def warm_up(self) -> None:
        """Starts every worker process now (they import torch and triton), without waiting: a sweep
        calls this first, so the pool is ready by the time its GPU worker is."""
        for _ in range(self.workers):
            self._pool.submit(_warm_job)

    def submit(self, op: TunableOp, problem: Problem, config: Config) -> Future[StaticFeatures]:
        """Queue one compile. A pool broken by a worker that died (a compiler crash takes the config it
        was compiling with it, as a failed compile) is replaced, so the compiles after it go on."""
        from concurrent.futures.process import BrokenProcessPool

        try:  # the op travels pickled (an op instance's own setting, as the MoE's routing skew, with it)
            return self._pool.submit(_compile_job, op, problem, config, self.target)
        except BrokenProcessPool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._start()
            return self._pool.submit(_compile_job, op, problem, config, self.target)

    def map(
        self, op: TunableOp, problem: Problem, configs: Iterable[Config]
    ) -> Iterator[tuple[Config, StaticFeatures]]:
        from concurrent.futures import as_completed

        futures = {self.submit(op, problem, c): c for c in configs}
        for future in as_completed(futures):
            yield futures[future], _result(future, self.target)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _result(future: Future[StaticFeatures], target: Target) -> StaticFeatures:
    """The features of a finished job; a worker that died is a failed compile, not an exception."""
    try:
        return future.result()
    except Exception as exc:  # BrokenProcessPool and friends: the compiler crashed
        return StaticFeatures.failed(target.arch, f"compiler worker failed: {type(exc).__name__}: {exc}")
