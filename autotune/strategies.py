"""Search strategies behind one ask/tell interface: exhaustive, random and Optuna TPE."""

from __future__ import annotations

import logging
import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.config import Config
from autotune.result import TrialResult
from autotune.space import SearchSpace

__all__ = [
    "STRATEGIES",
    "Budget",
    "Exhaustive",
    "OptunaTPE",
    "RandomSearch",
    "Strategy",
    "make_strategy",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """Stop after `trials` told results or `seconds` of wall-clock time since the first ask (None: no limit)."""

    trials: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.trials is not None and self.trials <= 0:
            raise ValueError(f"trial budget must be positive, got {self.trials}")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError(f"time budget must be positive, got {self.seconds}")


class Strategy(ABC):
    """Ask/tell search over a SearchSpace.

    `ask()` returns the next config to try, or None when the space or the budget is spent. Every asked
    config must be told (`tell`) before the next ask. Failures are told as results with a failed status
    (score +inf), never raised. The space's `first` configs (vendor baseline, heuristic default) are
    asked before anything else by every strategy. Not thread-safe: one driver per strategy.
    """

    name = "base"

    def __init__(
        self,
        space: SearchSpace,
        budget: Budget | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.space = space
        self.budget = budget or Budget()
        self.seed = seed
        self._clock = clock
        self._start: float | None = None
        self._pending: Config | None = None
        self.history: list[tuple[Config, TrialResult]] = []
        self._told: set[Config] = set()

    def elapsed(self) -> float:
        return 0.0 if self._start is None else self._clock() - self._start

    def budget_left(self) -> bool:
        if self.budget.trials is not None and len(self.history) >= self.budget.trials:
            return False
        return not (self.budget.seconds is not None and self.elapsed() >= self.budget.seconds)

    def ask(self) -> Config | None:
        if self._pending is not None:
            raise RuntimeError(f"tell() the result of {self._pending!r} before asking again")
        if self._start is None:
            self._start = self._clock()
        if not self.budget_left():
            return None
        config = self._next()
        self._pending = config
        return config

    def tell(self, config: Config, result: TrialResult) -> None:
        if config != self._pending:
            raise RuntimeError(f"told {config!r} but the pending config is {self._pending!r}")
        self._pending = None
        self.history.append((config, result))
        self._told.add(config)
        self._observe(config, result)

    @property
    def best(self) -> tuple[Config, TrialResult] | None:
        ok = [(c, r) for c, r in self.history if r.ok]
        return min(ok, key=lambda cr: cr[1].score()) if ok else None

    @abstractmethod
    def _next(self) -> Config | None:
        """The next untried config, or None when none is left."""

    def _observe(self, config: Config, result: TrialResult) -> None:  # noqa: B027 - optional hook
        """Hook for strategies that learn from results."""

    def _anchors(self) -> list[Config]:
        out: list[Config] = []
        for sub in self.space.subspaces:
            if not sub.params:  # a backend with no knobs (the vendor library) is one config
                out.append(Config(backend=sub.backend))
            out += [c for c in sub.first if sub.check(c) is None]
        return [c for i, c in enumerate(out) if c not in out[:i]]


class Exhaustive(Strategy):
    """Every valid config in the space's deterministic order (anchors first)."""

    name = "exhaustive"

    def __init__(self, space: SearchSpace, budget: Budget | None = None, **kw: Any) -> None:
        super().__init__(space, budget, **kw)
        anchors = self._anchors()
        rest = [c for c in space.configs() if c not in set(anchors)]
        self._queue = iter(anchors + rest)

    def _next(self) -> Config | None:
        for config in self._queue:
            if config not in self._told:
                return config
        return None


class RandomSearch(Strategy):
    """Anchors first, then valid configs in a seeded random order without repetition."""

    name = "random"

    def __init__(self, space: SearchSpace, budget: Budget | None = None, **kw: Any) -> None:
        super().__init__(space, budget, **kw)
        anchors = self._anchors()
        rest = [c for c in space.configs() if c not in set(anchors)]
        random.Random(self.seed).shuffle(rest)
        self._queue = iter(anchors + rest)

    def _next(self) -> Config | None:
        for config in self._queue:
            if config not in self._told:
                return config
        return None


class OptunaTPE(Strategy):
    """Optuna's TPE sampler over the space's parameters (backend first, then that backend's knobs).

    Invalid samples are told a penalty and resampled; repeats of a config already tried are told its
    known score without running it. Scores are log(time µs), failures a fixed penalty.
    """

    name = "optuna"
    _PENALTY = math.log(1e9)

    def __init__(
        self, space: SearchSpace, budget: Budget | None = None, *, n_startup: int = 10, **kw: Any
    ) -> None:
        super().__init__(space, budget, **kw)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=n_startup, multivariate=True,
                                             group=True, warn_independent_sampling=False)
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._anchor_queue = self._anchors()
        self._scores: dict[Config, float] = {}
        self._open: dict[Config, Any] = {}
        self._valid_count = len(space.configs())

    def _sample(self) -> tuple[Any, Config]:
        trial = self._study.ask()
        backend = trial.suggest_categorical("backend", list(self.space.backends))
        sub = self.space.subspace(backend)
        values = {name: trial.suggest_categorical(f"{backend}.{name}", list(vals))
                  for name, vals in sub.params.items()}
        return trial, Config(values, backend=backend)

    def _next(self) -> Config | None:
        while self._anchor_queue:
            config = self._anchor_queue.pop(0)
            if config not in self._told:
                return config
        if len(self._told) >= self._valid_count:
            return None
        for _ in range(2000):
            trial, config = self._sample()
            if self.space.check(config) is not None:
                self._study.tell(trial, self._PENALTY)
            elif config in self._scores:
                self._study.tell(trial, self._scores[config])
            else:
                self._open[config] = trial
                return config
        log.info("TPE kept proposing known or invalid configs; falling back to the untried ones in order")
        for config in self.space.configs():
            if config not in self._told:
                return config
        return None

    def _observe(self, config: Config, result: TrialResult) -> None:
        t = result.time_us
        score = math.log(max(t, 1e-3)) if t is not None else self._PENALTY
        self._scores[config] = score
        trial = self._open.pop(config, None)
        if trial is not None:
            self._study.tell(trial, score)
        else:  # an anchor or fallback: teach the sampler about it too
            import optuna

            params: dict[str, Any] = {"backend": config.backend}
            dists: dict[str, Any] = {
                "backend": optuna.distributions.CategoricalDistribution(list(self.space.backends))
            }
            sub = self.space.subspace(config.backend)
            for name, vals in sub.params.items():
                params[f"{config.backend}.{name}"] = config[name]
                dists[f"{config.backend}.{name}"] = optuna.distributions.CategoricalDistribution(list(vals))
            self._study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=score))


STRATEGIES: dict[str, type[Strategy]] = {
    "exhaustive": Exhaustive,
    "random": RandomSearch,
    "optuna": OptunaTPE,
    "tpe": OptunaTPE,
}


def make_strategy(name: str, space: SearchSpace, budget: Budget | None = None, *, seed: int = 0) -> Strategy:
    """The strategy called `name` ("exhaustive", "random", "optuna"/"tpe")."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}") from None
    return cls(space, budget, seed=seed)
