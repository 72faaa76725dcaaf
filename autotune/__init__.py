"""autotune: an autotuning framework and tuned-config database for GPU matrix kernels.

The core types import nothing heavy. Parts: `autotune.kernels` (the kernels and run-time `gemm`),
`autotune.db` (the database), `autotune.sweeps` (specs and orchestration), `autotune.dispatch`
(pinned tables and the run-time lookup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import autotune.core.registry  # noqa: F401  (problems of registered ops validate)
from autotune.core.backend import Backend, Backends, Cost
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.space import Constraint, SearchSpace, SubSpace
from autotune.core.target import Target, TargetError

if TYPE_CHECKING:
    from autotune.engine.bench import Benchmarker
    from autotune.engine.strategies import (
        Budget,
        Exhaustive,
        OptunaTPE,
        RandomSearch,
        Strategy,
        make_strategy,
    )
    from autotune.nn import patch

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Backends",
    "Benchmarker",
    "Budget",
    "Config",
    "Constraint",
    "Cost",
    "Exhaustive",
    "OptunaTPE",
    "Problem",
    "RandomSearch",
    "SearchSpace",
    "Source",
    "Strategy",
    "SubSpace",
    "Target",
    "TargetError",
    "Timing",
    "TrialResult",
    "TrialStatus",
    "make_strategy",
    "patch",
]

_LAZY = {
    "Benchmarker": "autotune.engine.bench",
    "Budget": "autotune.engine.strategies",
    "Exhaustive": "autotune.engine.strategies",
    "OptunaTPE": "autotune.engine.strategies",
    "RandomSearch": "autotune.engine.strategies",
    "Strategy": "autotune.engine.strategies",
    "make_strategy": "autotune.engine.strategies",
    "patch": "autotune.nn",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
