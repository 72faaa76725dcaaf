"""What a serving process runs: the loaded tables' config for a problem, else the op's fallback.

`served_config(op, problem, target)` is the config the run-time entry point (`autotune.kernels.gemm` and
`linear`, `gemm_quant`) runs for `problem`: the loaded tables' (`autotune.dispatch.lookup`, keyed as the
entry points key it), else `op.fallback_config(problem, target)`. The vendor library is the safe default;
the heuristic default runs only where it is measured ahead (see each op's `fallback_config`):

- gemm: torch.mm, at every M (FALLBACK_GEMV_ROWS: the GEMV kernel was not safe).
- quantized GEMMs: torch._scaled_mm where the op's space on the target holds it, except for the FP8 ops
  on NVIDIA GPUs at M <= QUANT_DEFAULT_MAX_M[op]; else the heuristic default.
- moe: the heuristic default (its "torch" backend is a baseline loop, not a vendor library).

`served_launch` is the entry point's own call on given inputs, so that a benchmark times exactly what a
serving process gets. Like the entry points, a lookup that misses warns once per shape and appends the
shape to the untuned-shapes log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.config import Config
from autotune.core.op import Inputs, Launch, TunableOp
from autotune.core.problem import QUANT_OPS, Problem
from autotune.core.target import Target
from autotune.dispatch import lookup
from autotune.kernels.gemm_space import GEMV_ROWS

if TYPE_CHECKING:
    import torch

__all__ = ["served_config", "served_launch"]

# The fallback of each (op, problem, target) looked up.
_fallbacks: dict[tuple[str, Problem, Target], Config] = {}


def _check_op(op: TunableOp, problem: Problem) -> None:
    if problem.op != op.name:
        raise ValueError(f"{op.name} cannot serve a {problem.op} problem: {problem}")


def served_config(op: TunableOp, problem: Problem, target: Target) -> Config:
    """The config a run-time call of `op` on `problem` runs on `target`: the loaded tables' config, else
    `op.fallback_config` (also where a table's GEMV config would serve more rows than the kernel takes).

    Raises:
        ValueError: `problem` is another op's.
    """
    _check_op(op, problem)
    config = lookup(
        op.name, problem.M, problem.N, problem.K, problem.E,
        dtype=problem.dtype, layout=problem.layout, topk=problem.topk,
    )  # fmt: skip
    if config is None or (problem.M > GEMV_ROWS and config.backend == "triton_gemv"):
        key = (op.name, problem, target)
        config = _fallbacks.get(key)
        if config is None:
            config = op.fallback_config(problem, target)
            if len(_fallbacks) >= 4096:
                _fallbacks.clear()
            _fallbacks[key] = config
    return config


def served_launch(
    op: TunableOp, problem: Problem, target: Target, inputs: Inputs, out: torch.Tensor
) -> Launch:
    """A zero-argument launch of the run-time entry point's own call on `inputs` (`op.make_inputs`'s
    layout), writing C into `out`: lookup and fallback included, on every call.

    gemm: `autotune.kernels.gemm(a, b, b_layout=problem.layout, out=out)`, which runs on the process's
    running target (`target` must be that GPU). Quantized GEMMs: `gemm_quant(op.name, a, b, a_scale,
    b_scale, out_dtype=out.dtype, out=out, target=target)` (the registered op of that name). Others (moe,
    which has no run-time entry point yet): `op.prepare` of `served_config`, chosen once, here.

    Raises:
        ValueError: `problem` is another op's, the inputs or `out` do not fit it, or (gemm) `target` is
            not the GPU the entry point runs on.
    """
    _check_op(op, problem)
    if op.name == "gemm":
        return _gemm_launch(problem, target, inputs, out)
    if op.name in QUANT_OPS:
        return _quant_launch(problem, target, inputs, out)
    return op.prepare(problem, served_config(op, problem, target), target, inputs, out)


def _gemm_launch(problem: Problem, target: Target, inputs: Inputs, out: torch.Tensor) -> Launch:
    from autotune.kernels.api import _check, _check_out, _running, gemm

    running = _running()
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

    from autotune.kernels.quant_api import _check_out, _problem, gemm_quant

    op = problem.op
    if len(inputs) != 4:
        raise ValueError(f"{op} takes (a, b, a_scale, b_scale), got {len(inputs)} inputs")
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    a, b, a_scale, b_scale = inputs
    dtype = out.dtype
    given = _problem(op, a, b, dtype, target)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    _check_out(op, out, problem, dtype, a)

    def launch() -> None:
        gemm_quant(op, a, b, a_scale, b_scale, out_dtype=dtype, target=target, out=out)

    return launch
