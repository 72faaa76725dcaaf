"""The dense GEMM's backends, one record each: torch.mm (the vendor library) and our three Triton kernels.

A Triton backend's launch is a `KernelLaunch`: its kernel module's launcher for a config, which both
`GemmOp.prepare` and the run-time entry point (`api._plan`, cached per config) call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from autotune.core.backend import GEMV, LIBRARY, TILED, TILED_TMA, Backend, Backends
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch, Recorder
from autotune.core.problem import Problem
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.common.geometry import GEMV_ROWS
from autotune.kernels.common.target import has_tma
from autotune.kernels.dense.space import (
    gemm_default_config,
    gemv_subspace,
    tma_subspace,
    triton_subspace,
)

if TYPE_CHECKING:
    import torch

__all__ = ["GEMM_BACKENDS", "KernelLaunch", "gemm_space"]

#: A kernel module's launcher of one config, with its JIT functions replaced by recorders into `calls`.
Launcher = Callable[[Config, Target, "list[KernelCall] | None"], Callable[..., None]]


@dataclass(frozen=True)
class KernelLaunch:
    """How one Triton kernel of the dense GEMM launches: `launcher(config, target, calls)` builds the
    kernel module's launch function, which takes (a, b, c, B's K and N strides, M, N, K, workspace), or
    (a, b, c, B is K x N, M, N, K, workspace) where `descriptors` (TMA: descriptors built per call).
    `workspace` is fp32, `slices(config)` times M·N (None for one slice)."""

    launcher: Launcher
    descriptors: bool = False

    @staticmethod
    def slices(config: Config) -> int:
        """The K slices a config's launch reduces from a workspace (1: none; FUSED_SPLIT sums them in
        its own launch)."""
        return 1 if config.get("FUSED_SPLIT", 0) else int(config.get("SPLIT_K", 1))

    def __call__(
        self,
        problem: Problem,
        config: Config,
        target: Target,
        inputs: Inputs,
        out: torch.Tensor,
        calls: list[KernelCall] | None = None,
    ) -> Launch:
        a, b = inputs
        M, N, K = problem.M, problem.N, problem.K
        workspace = _workspace(config, out)
        run = self.launcher(config, target, calls)
        args: tuple[Any, ...]
        if self.descriptors:
            args = (a, b, out, problem.layout == "kn", M, N, K, workspace)
        else:
            strides = (b.stride(1), b.stride(0)) if problem.layout == "nk" else (b.stride(0), b.stride(1))
            args = (a, b, out, *strides, M, N, K, workspace)

        def launch() -> None:
            run(*args)

        return launch


def _workspace(config: Config, out: torch.Tensor) -> torch.Tensor | None:
    """The fp32 split-K workspace of `config` for C = `out` (None without split-K, or with the slices
    summed in the GEMM's own launch)."""
    import torch

    slices = KernelLaunch.slices(config)
    if slices == 1:
        return None
    if not out.is_contiguous():
        raise ValueError(
            f"SPLIT_K={slices} reduces into C as a contiguous (M, N) array; got strides {out.stride()}"
        )
    return torch.empty(slices * out.numel(), device=out.device, dtype=torch.float32)


def _recorders(calls: list[KernelCall] | None, *fns: Any) -> tuple[Any, ...] | None:
    return None if calls is None else tuple(Recorder(fn, calls) for fn in fns)


def _pointer(config: Config, target: Target, calls: list[KernelCall] | None) -> Callable[..., None]:
    from autotune.kernels.common.splitk import splitk_reduce_kernel
    from autotune.kernels.dense.kernel import gemm_kernel, gemm_sum_kernel, launcher

    kernels = _recorders(calls, gemm_kernel, splitk_reduce_kernel, gemm_sum_kernel)
    return launcher(
        config, is_amd=target.is_amd, interpret=target.interpreter, kernels=kernels, num_sms=target.cu_count
    )


def _gemv(config: Config, target: Target, calls: list[KernelCall] | None) -> Callable[..., None]:
    from autotune.kernels.dense.gemv import gemv_kernel, gemv_launcher

    kernel = None if calls is None else Recorder(gemv_kernel, calls)
    return gemv_launcher(config, kernel=kernel)


def _tma(config: Config, target: Target, calls: list[KernelCall] | None) -> Callable[..., None]:
    from autotune.kernels.common.splitk import splitk_reduce_kernel
    from autotune.kernels.dense.tma import gemm_tma_kernel, gemm_tma_tail_kernel, tma_launcher

    kernels = _recorders(calls, gemm_tma_kernel, splitk_reduce_kernel, gemm_tma_tail_kernel)
    return tma_launcher(config, num_sms=target.cu_count, interpret=target.interpreter, kernels=kernels)


def _torch_launch(
    problem: Problem,
    config: Config,
    target: Target,
    inputs: Inputs,
    out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:
    import torch

    a, b = inputs
    bb = b.t() if problem.layout == "nk" else b

    def launch() -> None:
        torch.mm(a, bb, out=out)

    return launch


def _torch_version() -> str:
    import torch

    return f"torch.mm {torch.__version__}"


def _tunableop_launch(
    problem: Problem,
    config: Config,
    target: Target,
    inputs: Inputs,
    out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:
    """TunableOp tunes this GEMM (here, untimed: a sweep's worker prepares before it times) and the launch
    replays its pick; the pin rides on the launch (`extra`), which the trial stores."""
    from autotune.kernels.dense import tunableop

    a, b = inputs
    bt = b.t() if problem.layout == "nk" else b
    pin = tunableop.tune(a, bt, out)
    shape = tunableop.pin_key(problem.M, problem.N, problem.K, problem.dtype_a, problem.layout)

    def launch() -> None:
        tunableop.run_pinned(a, bt, out)

    row = [pin["op_signature"], pin["param_signature"], pin["solution"], pin["ms"], *shape]
    launch.extra = {"tunableop": {**pin, "shape": list(shape), "row": row}}  # type: ignore[attr-defined]
    return launch


def _tunableop_version() -> str:
    import torch

    return f"torch.mm through TunableOp {torch.__version__}"


def _gpu(target: Target) -> bool:
    return not target.interpreter


def _module(name: str) -> tuple[str, ...]:
    return (f"autotune.kernels.dense.{name}",)


#: The dense GEMM's backends: torch.mm (cuBLAS or hipBLASLt), torch.mm with the vendor solution TunableOp
#: picked pinned (searched where a sweep names it), the tiled kernel (split-K, stream-K), the GEMV kernel
#: (A of at most GEMV_ROWS rows) and on Hopper and newer the TMA kernel.
GEMM_BACKENDS = Backends(
    "gemm",
    (
        Backend("torch", _torch_launch, library=True, version=_torch_version, cost=LIBRARY),
        Backend(
            "tunableop",
            _tunableop_launch,
            library=True,
            version=_tunableop_version,
            cost=LIBRARY,
            runs_on=_gpu,
            opt_in=True,
            pins=True,
        ),
        Backend("triton", KernelLaunch(_pointer), triton_subspace, modules=_module("kernel"), cost=TILED),
        Backend(
            "triton_gemv",
            KernelLaunch(_gemv),
            gemv_subspace,
            modules=_module("gemv"),
            cost=GEMV,
            max_m=GEMV_ROWS,
        ),
        Backend(
            "triton_tma",
            KernelLaunch(_tma, descriptors=True),
            tma_subspace,
            modules=_module("tma"),
            cost=TILED_TMA,
            runs_on=has_tma,
        ),
    ),
)


@lru_cache(maxsize=256)
def gemm_space(problem: Problem, target: Target, backends: tuple[str, ...] | None = None) -> SearchSpace:
    """The vendor library (one config) and the Triton kernels (heuristic default first) for `problem`:
    the backends in the order given (all of `target`'s for None), the heuristic default's right after the
    vendor library. Cached: a space is immutable, and planning, tuning and reporting ask for the same one.
    """
    default = gemm_default_config(problem, target)
    chosen = GEMM_BACKENDS.chosen(target, backends)
    vendor = next((r for r in chosen if r.library), None)
    own = next((r for r in chosen if r.name == default.backend), None)
    if vendor is not None and own is not None:
        chosen.remove(own)
        chosen.insert(chosen.index(vendor) + 1, own)
    return SearchSpace([r.space(problem, target, default) for r in chosen])
