"""The run-time entry points' own calls as launches: `served_launch(op, problem, target, inputs, out)`
runs exactly what a serving process gets for `problem` (lookup and fallback included, on every call), so
that a benchmark or `autotune verify` times the served call itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from autotune.core.config import Config
from autotune.core.op import Inputs, Launch, TunableOp
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.kernels.serve import check_op, served_config

if TYPE_CHECKING:
    import torch

__all__ = ["entry_takes_config", "served_launch"]


def entry_takes_config(op: TunableOp) -> bool:
    """Whether `op`'s entry point takes a config (`entry_takes_config` on the op: the MoE's `fused_moe`): a
    config of such an op is timed as a serving process runs it, through the entry point, with the per-call
    work it does besides the kernels."""
    return bool(getattr(op, "entry_takes_config", False))


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

    An op with an entry point names its module (`op.entry_module`), whose `entry_launch(problem,
    target, inputs, out, config)` launches its call: the dense GEMM's `gemm`, which runs on the
    process's GPU (so `target` must be it); the quantized GEMMs' `gemm_quant`; the MoE's `fused_moe`,
    routing included. Others: `op.prepare` of `served_config`, chosen once, here. `config` (an op whose
    entry point takes one, `entry_takes_config`): the entry point's call forced to that config instead of
    the served one.

    Raises:
        ValueError: `problem` is another op's, the inputs or `out` do not fit it, (gemm) `target` is not
            the GPU the entry point runs on, or `config` is given for an op whose entry point takes none.
    """
    check_op(op, problem)
    if config is not None and not entry_takes_config(op):
        raise ValueError(f"the entry point of {op.name} takes no config")
    module = getattr(op, "entry_module", None)
    if module is not None:
        launch: Launch = importlib.import_module(module).entry_launch(problem, target, inputs, out, config)
        return launch
    return op.prepare(problem, served_config(op, problem, target), target, inputs, out)
