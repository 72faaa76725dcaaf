"""The dense GEMM op: inputs, reference, tolerance, search space and launches for each backend."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from autotune.core.codehash import modules_hash
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch, Recorder
from autotune.core.problem import Problem, ProblemRules
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.dense.space import gemm_backends, gemm_default_config, gemm_space

if TYPE_CHECKING:
    import torch

__all__ = ["GEMM", "TORCH_DTYPES", "GemmOp"]


#: The vendor backend's one config (torch.mm: cuBLAS or hipBLASLt).
_VENDOR = Config(backend="torch")

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-4}


def torch_dtype(name: str) -> torch.dtype:
    import torch

    try:
        return getattr(torch, TORCH_DTYPES[name])
    except KeyError:
        raise ValueError(f"gemm supports bf16 and fp16 inputs, not {name}") from None


#: Each Triton backend's kernel module: its version is the hash of that module's code and of every module
#: of the kernels package it imports (`modules_hash`).
_KERNEL_MODULES = {
    "triton": "autotune.kernels.dense.kernel",
    "triton_tma": "autotune.kernels.dense.tma",
    "triton_gemv": "autotune.kernels.dense.gemv",
}


@cache
def _kernel_hash(backend: str) -> str:
    return modules_hash(_KERNEL_MODULES[backend], within="autotune.kernels")


#: Up to this M an untuned gemm on an NVIDIA GPU would run the heuristic default (the GEMV kernel), above it
#: torch.mm. None: timed as served (CUDA-graph replays back to back), the GEMV default lost to cuBLAS on
#: some layers at M = 1 (docs/notes/2026-11-27-serve-every-m-rules.md) and at M = 2: not safe untuned.
FALLBACK_GEMV_ROWS = 0


class GemmOp(ProblemRules):
    """Dense GEMM, C (M, N) = A (M, K) · Bᵀ with B (N, K) [layout "nk"], or A · B with B (K, N) [layout "kn"].

    Backends: "triton" (our kernel), "triton_gemv" (A of at most 4 rows), "triton_tma" (Hopper and newer)
    and "torch" (torch.mm: cuBLAS or hipBLASLt). bf16 or fp16 inputs,
    fp32 accumulation, output in the input dtype. Stateless and thread-safe.
    """

    name = "gemm"

    def backends(self, target: Target) -> tuple[str, ...]:
        return gemm_backends(target)

    def source_hash(self, backend: str) -> str:
        if backend in _KERNEL_MODULES:
            return _kernel_hash(backend)
        if backend == "torch":
            import torch

            return hashlib.sha256(f"torch.mm {torch.__version__}".encode()).hexdigest()[:16]
        raise ValueError(f"unknown gemm backend {backend!r}")

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        return gemm_space(problem, target, tuple(self.backends(target) if backends is None else backends))

    def default_config(self, problem: Problem, target: Target) -> Config:
        return gemm_default_config(problem, target)

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        """torch.mm, except on NVIDIA GPUs at M <= FALLBACK_GEMV_ROWS: there the heuristic default (the
        GEMV kernel). AMD and the interpreter: torch.mm at every M."""
        if target.is_nvidia and not target.interpreter and problem.M <= FALLBACK_GEMV_ROWS:
            return gemm_default_config(problem, target)
        return _VENDOR

    def check_problem(self, problem: Problem) -> None:
        if problem.op != "gemm":
            raise ValueError(f"GemmOp got a {problem.op} problem")
        if not (problem.dtype_a == problem.dtype_b == problem.dtype_out):
            raise ValueError(f"gemm needs one dtype for A, B and C, got {problem}")
        torch_dtype(problem.dtype_a)

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        import torch

        self.check_problem(problem)
        # drawn where they are used: a weight of 10^9 values takes seconds on the CPU, milliseconds on a GPU
        gen = torch.Generator(device=device).manual_seed(seed)
        dtype = torch_dtype(problem.dtype_a)
        a = torch.randn(problem.M, problem.K, generator=gen, device=device).to(dtype)
        shape = (problem.N, problem.K) if problem.layout == "nk" else (problem.K, problem.N)
        b = torch.randn(*shape, generator=gen, device=device).to(dtype)
        return (a, b)

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        import torch

        return torch.empty(problem.M, problem.N, device=device, dtype=torch_dtype(problem.dtype_out))

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        a, b = inputs
        bf = b.float().t() if problem.layout == "nk" else b.float()
        return a.float() @ bf

    def tolerance(self, problem: Problem) -> float:
        return _TOLERANCE[problem.dtype_out]

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        a, b = inputs
        if config.backend == "torch":
            return _torch_launch(a, b, out, problem.layout)
        if config.backend == "triton_tma":
            return _tma_launch(problem, config, target, a, b, out)
        if config.backend == "triton_gemv":
            return _gemv_launch(problem, config, a, b, out)
        if config.backend != "triton":
            raise ValueError(f"unknown gemm backend {config.backend!r}")
        return _triton_launch(problem, config, target, a, b, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        import torch

        if config.backend == "torch":
            return []
        self.check_problem(problem)
        dtype = torch_dtype(problem.dtype_a)
        a = torch.empty(problem.M, problem.K, device="meta", dtype=dtype)
        shape = (problem.N, problem.K) if problem.layout == "nk" else (problem.K, problem.N)
        b = torch.empty(*shape, device="meta", dtype=dtype)
        out = torch.empty(problem.M, problem.N, device="meta", dtype=torch_dtype(problem.dtype_out))
        calls: list[KernelCall] = []
        if config.backend == "triton_tma":
            from autotune.kernels.dense.kernel import splitk_reduce_kernel
            from autotune.kernels.dense.tma import gemm_tma_kernel, gemm_tma_tail_kernel

            tma_recorders = (
                Recorder(gemm_tma_kernel, calls),
                Recorder(splitk_reduce_kernel, calls),
                Recorder(gemm_tma_tail_kernel, calls),
            )
            _tma_launch(problem, config, target, a, b, out, tma_recorders)()
        elif config.backend == "triton_gemv":
            from autotune.kernels.dense.gemv import gemv_kernel

            _gemv_launch(problem, config, a, b, out, Recorder(gemv_kernel, calls))()
        elif config.backend == "triton":
            from autotune.kernels.dense.kernel import gemm_kernel, gemm_sum_kernel, splitk_reduce_kernel

            recorders = (
                Recorder(gemm_kernel, calls),
                Recorder(splitk_reduce_kernel, calls),
                Recorder(gemm_sum_kernel, calls),
            )
            _triton_launch(problem, config, target, a, b, out, recorders)()
        else:
            raise ValueError(f"unknown gemm backend {config.backend!r}")
        return calls


def _torch_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, layout: str) -> Launch:
    import torch

    bb = b.t() if layout == "nk" else b

    def launch() -> None:
        torch.mm(a, bb, out=out)

    return launch


def _workspace(config: Config, out: torch.Tensor) -> torch.Tensor | None:
    """The fp32 split-K workspace of `config` for C = `out` (None without split-K, or with the slices
    summed in the GEMM's own launch)."""
    import torch

    split_k = int(config.get("SPLIT_K", 1))
    if split_k == 1 or config.get("FUSED_SPLIT", 0):
        return None
    if not out.is_contiguous():
        raise ValueError(
            f"SPLIT_K={split_k} reduces into C as a contiguous (M, N) array; got strides {out.stride()}"
        )
    return torch.empty(split_k * out.numel(), device=out.device, dtype=torch.float32)


def _triton_launch(
    problem: Problem,
    config: Config,
    target: Target,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    kernels: tuple[Any, ...] | None = None,
) -> Launch:

    from autotune.kernels.dense.kernel import launcher

    M, N, K = problem.M, problem.N, problem.K
    stride_bk, stride_bn = (
        (b.stride(1), b.stride(0)) if problem.layout == "nk" else (b.stride(0), b.stride(1))
    )
    workspace = _workspace(config, out)
    run = launcher(
        config, is_amd=target.is_amd, interpret=target.interpreter, kernels=kernels, num_sms=target.cu_count
    )
    args: tuple[Any, ...] = (a, b, out, stride_bk, stride_bn, M, N, K, workspace)

    def launch() -> None:
        run(*args)

    return launch


def _gemv_launch(
    problem: Problem,
    config: Config,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    kernel: Any = None,
) -> Launch:
    from autotune.kernels.dense.gemv import gemv_launcher

    M, N, K = problem.M, problem.N, problem.K
    stride_bk, stride_bn = (
        (b.stride(1), b.stride(0)) if problem.layout == "nk" else (b.stride(0), b.stride(1))
    )
    run = gemv_launcher(config, kernel=kernel)

    def launch() -> None:
        run(a, b, out, stride_bk, stride_bn, M, N, K)

    return launch


def _tma_launch(
    problem: Problem,
    config: Config,
    target: Target,
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    kernels: tuple[Any, ...] | None = None,
) -> Launch:

    from autotune.kernels.dense.tma import tma_launcher

    M, N, K = problem.M, problem.N, problem.K
    workspace = _workspace(config, out)
    run = tma_launcher(config, num_sms=target.cu_count, interpret=target.interpreter, kernels=kernels)
    args: tuple[Any, ...] = (a, b, out, problem.layout == "kn", M, N, K, workspace)

    def launch() -> None:
        run(*args)

    return launch


GEMM = GemmOp()
