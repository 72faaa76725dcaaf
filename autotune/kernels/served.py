"""The run-time entry points' own calls as launches: `served_launch(op, problem, target, inputs, out)`
runs exactly what a serving process gets for `problem` (lookup and fallback included, on every call), so
that a benchmark or `autotune verify` times the served call itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.config import Config
from autotune.core.op import Inputs, Launch, TunableOp
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.kernels.common.target import launch_target
from autotune.kernels.dense.api import _check, _check_out, gemm
from autotune.kernels.moe.api import fused_moe, moe_problem
from autotune.kernels.quant.api import _check_out as _check_quant_out
from autotune.kernels.quant.api import _problem as _quant_problem
from autotune.kernels.quant.api import gemm_quant
from autotune.kernels.quant.problem import QUANT_OPS
from autotune.kernels.serve import check_op, served_config

if TYPE_CHECKING:
    import torch

__all__ = ["CONFIG_ENTRY_OPS", "served_launch"]

#: Ops whose entry point takes a config (`fused_moe(..., config=)`): a config of theirs is timed as a
#: serving process runs it, through the entry point, with the per-call work it does besides the kernels
#: (the MoE's block alignment on the device).
CONFIG_ENTRY_OPS = frozenset({"moe"})


def served_launch(
    op: TunableOp,
    problem: Problem,
    target: Target,
    inputs: Inputs,
    out: torch.Tensor,
    config: Config | None = None,
) -> Launch:
    """A zero-argument launch of the run-time entry point's own call on `inputs` (`op.make_inputs`'s
    layout), writing C into `out`: lookup and fallback included, on every call.

    gemm: `autotune.kernels.gemm(a, b, b_layout=problem.layout, out=out)`, which runs on the process's
    running target (`target` must be that GPU). Quantized GEMMs: `gemm_quant(op.name, a, b, a_scale,
    b_scale, out_dtype=out.dtype, out=out, target=target)` (the registered op of that name). moe:
    `fused_moe(x, w1, w2, topk_weights, topk_ids, ..., out=out, target=target)` on the op's inputs, the
    routing included. Others: `op.prepare` of `served_config`, chosen once, here. `config` (an op of
    `CONFIG_ENTRY_OPS` only): the entry point's call forced to that config instead of the served one.

    Raises:
        ValueError: `problem` is another op's, the inputs or `out` do not fit it, (gemm) `target` is not
            the GPU the entry point runs on, or `config` is given for an op whose entry point takes none.
    """
    check_op(op, problem)
    if config is not None and op.name not in CONFIG_ENTRY_OPS:
        raise ValueError(f"the entry point of {op.name} takes no config")
    if op.name == "gemm":
        return _gemm_launch(problem, target, inputs, out)
    if op.name in QUANT_OPS:
        return _quant_launch(problem, target, inputs, out)
    if op.name == "moe":
        return _moe_launch(problem, target, inputs, out, config)
    return op.prepare(problem, served_config(op, problem, target), target, inputs, out)


def _gemm_launch(problem: Problem, target: Target, inputs: Inputs, out: torch.Tensor) -> Launch:
    running = launch_target()
    if running.device_key() != target.device_key():
        raise ValueError(f"gemm runs on {running}, not on {target}: its served config would be another's")
    a, b = inputs
    layout = problem.layout
    M, N, K, dtype = _check(a, b, layout)
    given = Problem.gemm(M, N, K, dtype, layout)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    _check_out(out, a, M, N)

    def launch() -> None:
        gemm(a, b, b_layout=layout, out=out)

    return launch


def _quant_launch(problem: Problem, target: Target, inputs: Inputs, out: torch.Tensor) -> Launch:
    import torch

    op = problem.op
    if len(inputs) != 4:
        raise ValueError(f"{op} takes (a, b, a_scale, b_scale), got {len(inputs)} inputs")
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    a, b, a_scale, b_scale = inputs
    dtype = out.dtype
    given = _quant_problem(op, a, b, dtype, target)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    _check_quant_out(op, out, problem, dtype, a)

    def launch() -> None:
        gemm_quant(op, a, b, a_scale, b_scale, out_dtype=dtype, target=target, out=out)

    return launch


def _moe_launch(
    problem: Problem, target: Target, inputs: Inputs, out: torch.Tensor, config: Config | None
) -> Launch:
    if len(inputs) != 7:
        raise ValueError(
            f"moe takes (x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale), got {len(inputs)} inputs"
        )
    x, w1, w2, weights, ids, w1s, w2s = inputs
    given = moe_problem(x, w1, ids.shape[1], target)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    block = [128, 128] if w1s is not None and w1.dtype.is_floating_point else None  # FP8: 128x128 scales

    def launch() -> None:
        fused_moe(x, w1, w2, weights, ids, w1_scale=w1s, w2_scale=w2s, block_shape=block, out=out,
                  target=target, config=config)  # fmt: skip

    return launch
