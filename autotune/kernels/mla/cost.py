"""The MLA decode's cost model: the cache read at the target's bandwidth by the CUs the grid keeps busy,
once per head group (later groups mostly from the last-level cache), plus the reduce launch."""

from __future__ import annotations

from typing import Any

from autotune.core.problem import Problem, cdiv
from autotune.core.registry import backend_of
from autotune.engine.model import LAUNCH_US
from autotune.kernels.mla.gluon_space import GLUON_BLOCK_H
from autotune.kernels.mla.space import own

__all__ = ["LLC_REREAD", "mla_us"]

#: The cost of reading the cache again for another head group, as a fraction of the first read.
LLC_REREAD = 0.25
#: Launches of the torch baseline (gather, conversion, two matmuls, mask, softmax, copy).
_TORCH_LAUNCHES = 7


def mla_us(problem: Problem, config: Any, target: Any) -> float:
    """Predicted µs of `config` on `problem` (a first model, not yet validated by measurement)."""
    if target.mem_gbps <= 0 or target.cu_count <= 0:
        return 1.0
    stream_us = problem.min_bytes() / (target.mem_gbps * 1e3)
    if backend_of(problem.op, config.backend).library:  # a gathered copy written and read twice more
        return 3 * stream_us + _TORCH_LAUNCHES * LAUNCH_US
    heads = own(problem)[0]
    groups = cdiv(heads, int(config.get("BLOCK_H", GLUON_BLOCK_H)))  # the gluon kernel's: 64, no knob
    splits = int(config["num_kv_splits"])
    programs = problem.M * groups * splits
    busy = min(1.0, programs / target.cu_count)
    us = stream_us * (1 + LLC_REREAD * (groups - 1)) / busy + LAUNCH_US
    return us + (LAUNCH_US if splits > 1 else 0.0)
