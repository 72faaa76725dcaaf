"""The dense GEMM op: inputs, reference, tolerance, search space and launches for each backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.core.backend import Backend
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch
from autotune.core.problem import Problem, ProblemRules
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.dense.backends import GEMM_BACKENDS, gemm_space
from autotune.kernels.dense.space import gemm_default_candidates, gemm_default_config

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


#: Up to this M an untuned gemm on an NVIDIA GPU would run the heuristic default (the GEMV kernel), above it
#: torch.mm. None: timed as served (CUDA-graph replays back to back), the GEMV default lost to cuBLAS on
#: some layers at M = 1 (docs/notes/2026-11-27-serve-every-m-rules.md) and at M = 2: not safe untuned.
FALLBACK_GEMV_ROWS = 0


class GemmOp(ProblemRules):
    """Dense GEMM, C (M, N) = A (M, K) · Bᵀ with B (N, K) [layout "nk"], or A · B with B (K, N) [layout "kn"].

    Backends (`backends.GEMM_BACKENDS`): "triton" (our kernel), "triton_gemv" (A of at most 4 rows),
    "triton_tma" (Hopper and newer) and "torch" (torch.mm: cuBLAS or hipBLASLt). bf16 or fp16 inputs,
    fp32 accumulation, output in the input dtype. Stateless and thread-safe.
    """

    name = "gemm"
    layer = "linear"

    def backends(self, target: Target) -> tuple[str, ...]:
        return GEMM_BACKENDS.names(target)

    def backend(self, name: str) -> Backend:
        return GEMM_BACKENDS[name]

    def source_hash(self, backend: str) -> str:
        return GEMM_BACKENDS[backend].source_hash()

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        return gemm_space(problem, target, None if backends is None else tuple(backends))

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        return gemm_default_candidates(problem, target)

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

    #: The module of the op's run-time entry point, whose `entry_launch` launches its own call
    #: (`autotune.kernels.served_launch`); named, not imported, so that the op needs no torch.
    entry_module = "autotune.kernels.dense.api"
    #: The module of the op's parts of other projects' files (aiter's bf16 table, TunableOp's GEMM
    #: results): named, not imported (it imports the database).
    format_modules = ("autotune.kernels.dense.formats",)

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        return self.backend(config.backend).launch(problem, config, target, inputs, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        import torch

        record = self.backend(config.backend)
        if record.library:
            return []
        self.check_problem(problem)
        dtype = torch_dtype(problem.dtype_a)
        a = torch.empty(problem.M, problem.K, device="meta", dtype=dtype)
        shape = (problem.N, problem.K) if problem.layout == "nk" else (problem.K, problem.N)
        b = torch.empty(*shape, device="meta", dtype=dtype)
        out = torch.empty(problem.M, problem.N, device="meta", dtype=torch_dtype(problem.dtype_out))
        calls: list[KernelCall] = []
        record.launch(problem, config, target, (a, b), out, calls)()
        return calls


GEMM = GemmOp()
