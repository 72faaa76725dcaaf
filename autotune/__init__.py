"""autotune: an autotuning framework and tuned-config database for GPU matrix kernels.

The core types import nothing heavy. Parts: `autotune.kernels` (the kernels and run-time `gemm`),
`autotune.db` (the database), `autotune.sweeps` (specs and orchestration), `autotune.dispatch`
(pinned tables and the run-time lookup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.config import Config
from autotune.problem import Problem
from autotune.result import Source, Timing, TrialResult, TrialStatus
from autotune.space import Constraint, SearchSpace, SubSpace
from autotune.target import Target, TargetError

if TYPE_CHECKING:
    from autotune.bench import Benchmarker
    from autotune.strategies import Budget, Exhaustive, OptunaTPE, RandomSearch, Strategy, make_strategy

__version__ = "0.1.0"

__all__ = [
    "Benchmarker",
    "Budget",
    "Config",
    "Constraint",
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
]

_LAZY = {
    "Benchmarker": "autotune.bench",
    "Budget": "autotune.strategies",
    "Exhaustive": "autotune.strategies",
    "OptunaTPE": "autotune.strategies",
    "RandomSearch": "autotune.strategies",
    "Strategy": "autotune.strategies",
    "make_strategy": "autotune.strategies",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
