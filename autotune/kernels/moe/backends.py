"""The fused MoE's backends, one record each: "torch" (a loop over experts with torch matmuls, the
baseline: `moe.baseline`) and "triton" (the fused kernel, vLLM's parameter names: `moe.kernel`). Both are
costed by the MoE's own model (`moe.cost`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from autotune.core.backend import Backend, Backends
from autotune.core.config import Config, Value
from autotune.core.op import Inputs, KernelCall, Launch, Recorder
from autotune.core.problem import Problem
from autotune.core.space import SearchSpace, SubSpace
from autotune.core.target import Target
from autotune.kernels.moe.space import FP8_BLOCK, moe_constraints, moe_default_config, moe_params

if TYPE_CHECKING:
    import torch

__all__ = ["fused_launch", "moe_backends", "moe_space"]


def fused_launch(
    config: Config,
    target: Target,
    inputs: Inputs,
    out: torch.Tensor,
    calls: list[KernelCall] | None = None,
    alignment: tuple[torch.Tensor, torch.Tensor, int] | None = None,
) -> Launch:
    """A launch of the fused kernel on `inputs` (recorded into `calls` if given); `alignment`: the
    routing's block alignment, computed here where not given."""
    import torch

    import autotune.kernels.moe.kernel as moe_triton
    from autotune.kernels.moe.ref import align_block_size

    x, w1, w2, weights, ids, w1s, w2s = inputs
    cfg = dict(config.items())
    cfg.pop("backend", None)
    # The routing's block alignment depends only on the routing and BLOCK_SIZE_M: done once here, as a
    # serving engine does once per batch, so the timed launch reads nothing back from the GPU.
    if alignment is None:
        alignment = align_block_size(ids, int(cfg["BLOCK_SIZE_M"]), w1.shape[0])
    if w1.dtype == torch.uint8:  # MXFP4 weights
        return _mx_launch(cfg, target, inputs, out, calls, alignment)
    block = [FP8_BLOCK, FP8_BLOCK] if w1s is not None else None
    kernels = None
    if calls is not None:
        kernels = tuple(Recorder(fn, calls) for fn in moe_triton.JIT_KERNELS)

    def launch() -> None:
        moe_triton.fused_moe(
            x, w1, w2, weights, ids, cfg, w1_scale=w1s, w2_scale=w2s, block_shape=block,
            is_amd=target.is_amd, interpret=target.interpreter, out=out, kernels=kernels,
            alignment=alignment, num_sms=target.cu_count,
        )  # fmt: skip

    return launch


def _mx_launch(
    cfg: dict[str, Value],
    target: Target,
    inputs: Inputs,
    out: torch.Tensor,
    calls: list[KernelCall] | None,
    alignment: tuple[torch.Tensor, torch.Tensor, int],
) -> Launch:
    """`fused_launch` of MXFP4 weights (`moe.mx`): native where the target has MX instructions."""
    from autotune.kernels.common.target import mx_native
    from autotune.kernels.moe.mx import MX_JIT_KERNELS, fused_moe_mx

    x, w1, w2, weights, ids, w1s, w2s = inputs
    kernels = None if calls is None else tuple(Recorder(fn, calls) for fn in MX_JIT_KERNELS)
    native = mx_native(target)

    def launch() -> None:
        fused_moe_mx(
            x, w1, w2, weights, ids, cfg, w1_scale=w1s, w2_scale=w2s, native=native, is_amd=target.is_amd,
            interpret=target.interpreter, out=out, kernels=kernels, alignment=alignment,
        )  # fmt: skip

    return launch


def _fused(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    return fused_launch(config, target, inputs, out, calls)


def _torch_loop(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.moe.baseline import torch_loop_launch

    x, w1, w2, weights, ids, w1s, w2s = inputs
    return torch_loop_launch(x, w1, w2, weights, ids, w1s, w2s, out)


def _torch_version() -> str:
    import torch

    return f"torch {torch.__version__}"


def _fused_space(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The fused kernel's configs, the heuristic default first."""
    first = default or moe_default_config(problem, target)
    return SubSpace("triton", moe_params(problem, target), moe_constraints(problem, target), (first,))


def moe_backends(zipf: float = 0.0) -> Backends:
    """The MoE's backends for routing skew `zipf`, part of both versions where it is not 0 (timings under
    another routing are other results)."""
    variant = f"zipf={zipf:g}" if zipf else ""
    return Backends(
        "moe",
        (
            Backend(
                "torch",
                _torch_loop,
                library=True,
                modules=("autotune.kernels.moe.baseline",),
                version=_torch_version,
                variant=variant,
                served=False,
            ),
            Backend(
                "triton",
                _fused,
                _fused_space,
                modules=(
                    "autotune.kernels.moe.kernel",
                    "autotune.kernels.moe.mx",
                    "autotune.kernels.moe.ref",
                ),
                variant=variant,
            ),
        ),
    )


def moe_space(
    problem: Problem, target: Target, backends: Backends, names: Sequence[str] | None
) -> SearchSpace:
    """The backends named (all for None; ValueError for another) in their declared order: the torch
    baseline first, then the fused kernel (the heuristic default first)."""
    chosen = backends.chosen(target, names)
    return _space(problem, target, tuple(b for b in backends if b in chosen))


@lru_cache(maxsize=256)
def _space(problem: Problem, target: Target, backends: tuple[Backend, ...]) -> SearchSpace:
    default = moe_default_config(problem, target)
    return SearchSpace([b.space(problem, target, default) for b in backends])
