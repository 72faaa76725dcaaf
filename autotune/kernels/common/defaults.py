"""What the ops' heuristic defaults share: split-K for a tile grid that underfills the GPU, and fitting a
config to its space."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.core.config import Config, Value
from autotune.core.problem import Problem, cdiv
from autotune.core.space import SubSpace
from autotune.core.target import Target

__all__ = ["fit_to_space", "pick_split_k"]


def pick_split_k(
    problem: Problem, target: Target, bm: int, bn: int, bk: int, choices: Sequence[Value]
) -> int:
    """The largest SPLIT_K of `choices` whose grid of (BLOCK_M x BLOCK_N tile, K slice) items fits the CUs
    in one wave, each slice keeping at least two K tiles of `bk`; 1 where none does."""
    tiles = cdiv(problem.M, bm) * cdiv(problem.N, bn)
    best = 1
    for sk in sorted(int(v) for v in choices):
        if tiles * sk <= target.cu_count and problem.K // sk >= 2 * bk:
            best = sk
    return best


def fit_to_space(
    config: Config, sub: SubSpace, shrink: Sequence[str] = ("num_stages", "BLOCK_K", "BLOCK_N", "BLOCK_M")
) -> Config:
    """`config` if `sub` holds it; else `config` with the first knob of `shrink` that can be made smaller
    and fit; else the first config of `sub`; ValueError when `sub` holds none. Heuristic defaults go
    through this, so they always belong to their space."""
    if sub.check(config) is None:
        return config
    for smaller in shrink:
        for value in sorted((int(v) for v in sub.params[smaller]), reverse=True):
            candidate = config.replace(**{smaller: value})
            if int(value) < int(config[smaller]) and sub.check(candidate) is None:
                return candidate
    for values, broken in sub.walk():
        if broken is None:
            return Config(values)
    raise ValueError(f"no {sub.backend} config fits this problem: each breaks a constraint of its space")
