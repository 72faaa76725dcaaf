"""What a serving process runs: the loaded tables' config for a problem, else the op's fallback.

`served_config(op, problem, target)` is the config the run-time entry point (`autotune.kernels.gemm` and
`linear`, `gemm_quant`) runs for `problem`: the loaded tables' (`autotune.dispatch.lookup`, keyed as the
entry points key it), else `op.fallback_config(problem, target)`. The vendor library is the safe default;
the heuristic default runs only where it is measured ahead, or where the op has no vendor library (each
op's `fallback_config` says which: the dense GEMM's torch.mm at every M, the quantized GEMMs'
torch._scaled_mm but the FP8 ones' on NVIDIA GPUs at small M, the fused MoE's heuristic default).

A table's config of a backend the entry point does not run (`Backend.served`: the MoE's per-expert loop,
the MLA decode's aiter call) is answered with the fallback too.

Like the entry points, a lookup that misses warns once per shape and appends the shape to the
untuned-shapes log. `autotune.kernels.served.served_launch` launches the entry points' own calls.
"""

from __future__ import annotations

from autotune.core.backend import Backend
from autotune.core.config import Config
from autotune.core.op import TunableOp
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.dispatch import lookup

__all__ = ["check_op", "served_config"]

# The fallback of each (op, problem, target) looked up.
_fallbacks: dict[tuple[str, Problem, Target], Config] = {}


def check_op(op: TunableOp, problem: Problem) -> None:
    if problem.op != op.name:
        raise ValueError(f"{op.name} cannot serve a {problem.op} problem: {problem}")


def served_config(op: TunableOp, problem: Problem, target: Target) -> Config:
    """The config a run-time call of `op` on `problem` runs on `target`: the loaded tables' config, else
    `op.fallback_config` (also where a table's config would serve more rows of A than its backend's kernel
    takes, `Backend.max_m`, or is of a backend the entry point does not run, `Backend.served`).

    Raises:
        ValueError: `problem` is another op's.
    """
    check_op(op, problem)
    config = lookup(
        op.name, problem.M, problem.N, problem.K,
        dtype=problem.dtype, layout=problem.layout, params=problem.table_params,
    )  # fmt: skip
    if config is None or not _serves(op.backend(config.backend), problem.M):
        key = (op.name, problem, target)
        config = _fallbacks.get(key)
        if config is None:
            config = op.fallback_config(problem, target)
            if len(_fallbacks) >= 4096:
                _fallbacks.clear()
            _fallbacks[key] = config
    return config


def _serves(record: Backend, M: int) -> bool:
    """Whether the entry point runs `record`'s configs at M rows of A."""
    return record.served and (record.max_m is None or record.max_m >= M)
