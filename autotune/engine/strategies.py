"""Search strategies behind one ask/tell interface: exhaustive, random and Optuna TPE."""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.core.config import Config
from autotune.core.result import TrialResult
from autotune.core.space import SearchSpace

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
    """Stop after `trials` told results or `seconds` of wall-clock time since the first ask.

    None means no limit.
    """

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

    def upcoming(self, n: int) -> list[Config]:
        """Up to `n` configs this strategy will ask next, without asking them (for compiling ahead);
        empty where the next configs depend on results still to come."""
        return []

    def promote(self, config: Config) -> bool:
        """Asks `config`, one of `upcoming`'s, next instead of the config before it (a sweep measures a
        config whose compile is done while an earlier one still compiles). True if the order changed;
        False where the order is not this strategy's to change."""
        return False

    @abstractmethod
    def _next(self) -> Config | None:
        """The next untried config, or None when none is left."""

    def _observe(self, config: Config, result: TrialResult) -> None:  # noqa: B027 - optional hook
        """Hook for strategies that learn from results."""

    def _anchors(self) -> list[Config]:
        out: list[Config] = []
        for sub in self.space.subspaces:
            if not sub.params:  # a backend with no knobs (the vendor library) is one config
                vendor = Config(backend=sub.backend)
                if sub.check(vendor) is None:  # unless it cannot run the problem (pruned, with a reason)
                    out.append(vendor)
            out += [c for c in sub.first if sub.check(c) is None]
        return [c for i, c in enumerate(out) if c not in out[:i]]


class _Ordered(Strategy):
    """A strategy that walks a fixed order: anchors first, then the rest as `_order` arranges them."""

    def __init__(self, space: SearchSpace, budget: Budget | None = None, **kw: Any) -> None:
        super().__init__(space, budget, **kw)
        anchors = self._anchors()
        rest = [c for c in space.configs() if c not in set(anchors)]
        self._queue = anchors + self._order(rest)
        self._pos = 0

    def _order(self, rest: list[Config]) -> list[Config]:
        return rest

    def _next(self) -> Config | None:
        while self._pos < len(self._queue):
            config = self._queue[self._pos]
            self._pos += 1
            if config not in self._told:
                return config
        return None

    def upcoming(self, n: int) -> list[Config]:
        if self.budget.trials is not None:
            n = min(n, max(0, self.budget.trials - len(self.history) - (self._pending is not None)))
        ahead = (c for c in self._queue[self._pos :] if c not in self._told)
        return list(itertools.islice(ahead, max(n, 0)))

    def promote(self, config: Config) -> bool:
        # Same configs, same budget: only the order of the not-yet-asked ones changes.
        try:
            i = self._queue.index(config, self._pos)
        except ValueError:
            return False
        if i == self._pos:
            return False
        self._queue.insert(self._pos, self._queue.pop(i))
        return True


class Exhaustive(_Ordered):
    """Every valid config in the space's deterministic order (anchors first)."""

    name = "exhaustive"


class RandomSearch(_Ordered):
    """Anchors first, then valid configs in a seeded random order without repetition."""

    name = "random"

    def _order(self, rest: list[Config]) -> list[Config]:
        random.Random(self.seed).shuffle(rest)
        return rest


class OptunaTPE(Strategy):
    """Optuna's TPE sampler over the space's parameters (backend first, then that backend's knobs).

    Only valid configs are ever measured: a sample that breaks a constraint, or repeats a config already
    tried or queued, is marked failed in the study (TPE learns nothing from it) and replaced by the nearest
    untried valid config, which is then told like any other. Scores are log(time µs); failures a fixed
    penalty. `upcoming(n)` samples ahead so that a sweep can compile while the GPU measures: all of the
    random start-up trials, then up to `lookahead` more, sampled with Optuna's constant liar (trials still
    running count as bad results, so a batch spreads out instead of repeating itself).
    """

    name = "optuna"
    _PENALTY = math.log(1e9)

    def __init__(
        self,
        space: SearchSpace,
        budget: Budget | None = None,
        *,
        n_startup: int = 10,
        lookahead: int = 4,
        **kw: Any,
    ) -> None:
        super().__init__(space, budget, **kw)
        import warnings

        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate TPE and the constant liar are marked experimental
            sampler = optuna.samplers.TPESampler(
                seed=self.seed, n_startup_trials=n_startup, multivariate=True, constant_liar=True
            )
        self._optuna = optuna
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._n_startup = n_startup
        self._lookahead = lookahead
        self._anchor_queue = self._anchors()
        self._ahead: list[Config] = []  # sampled ahead, not asked yet
        self._open: dict[Config, Any] = {}
        self._valid = space.configs()
        # Each backend's knobs restricted to the values that occur in some valid config.
        self._values: dict[str, dict[str, list[Any]]] = {}
        for sub in space.subspaces:
            mine = [c for c in self._valid if c.backend == sub.backend]
            self._values[sub.backend] = {
                name: [v for v in vals if any(c[name] == v for c in mine)]
                for name, vals in sub.params.items()
            }
        # Backends without knobs are anchors (asked first), never sampled.
        self._backends = [
            b for b in space.backends if self._values[b] and any(c.backend == b for c in self._valid)
        ]
        self._scores: dict[Config, float] = {}

    def _sample(self) -> tuple[Any, Config]:
        trial = self._study.ask()
        backend = trial.suggest_categorical("backend", self._backends)
        values = {
            name: trial.suggest_categorical(f"{backend}.{name}", vals)
            for name, vals in self._values[backend].items()
        }
        return trial, Config(values, backend=backend)

    def _taken(self, config: Config) -> bool:
        """Tried, queued ahead, or asked and not yet told."""
        return config in self._told or config in self._ahead or config == self._pending

    def _nearest_untried(self, config: Config) -> Config | None:
        """The untried valid config closest to `config` (log2 distance on numbers, 1 per other mismatch)."""
        best, best_d = None, math.inf
        for c in self._valid:
            if self._taken(c):
                continue
            d = 0.0 if c.backend == config.backend else 100.0
            for name, v in c.items():
                w = config.get(name)
                if w == v:
                    continue
                if isinstance(v, (int, float)) and isinstance(w, (int, float)) and v > 0 and w > 0:
                    d += abs(math.log2(v / w))
                else:
                    d += 1.0
            if d < best_d:
                best, best_d = c, d
        return best

    def _anchors_left(self) -> list[Config]:
        return [c for c in self._anchor_queue if not self._taken(c)]

    def _draw(self) -> Config | None:
        """A new valid config that is neither tried nor queued, from the sampler (or its replacement)."""
        if not self._backends:
            return self._nearest_untried(Config())
        trial, config = self._sample()
        if config in self._scores:  # a repeat: the sampler hears the known score again
            self._study.tell(trial, self._scores[config])
        elif self._taken(config):  # queued or asked, still running: a replacement takes its place
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        elif self.space.check(config) is None:
            self._open[config] = trial
            return config
        else:
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        return self._nearest_untried(config)

    def _next(self) -> Config | None:
        while self._anchor_queue:
            config = self._anchor_queue.pop(0)
            if config not in self._told:
                return config
        if self._ahead:
            return self._ahead.pop(0)
        if len(self._told) >= len(self._valid):
            return None
        return self._draw()

    def upcoming(self, n: int) -> list[Config]:
        if self.budget.trials is not None:
            n = min(n, max(0, self.budget.trials - len(self.history) - (self._pending is not None)))
        anchors = self._anchors_left()
        done = len(self._study.get_trials(deepcopy=False, states=(self._optuna.trial.TrialState.COMPLETE,)))
        depth = len(anchors) + self._lookahead + max(0, self._n_startup - done - len(self._ahead))
        while len(anchors) + len(self._ahead) < min(n, depth):
            config = self._draw()
            if config is None:
                break
            self._ahead.append(config)
        return (anchors + self._ahead)[: max(n, 0)]

    def promote(self, config: Config) -> bool:
        # Only configs sampled ahead move, and never before the anchors (baseline, default, seeds).
        if self._anchors_left() or config not in self._ahead or self._ahead[0] == config:
            return False
        self._ahead.remove(config)
        self._ahead.insert(0, config)
        return True

    def _observe(self, config: Config, result: TrialResult) -> None:
        t = result.time_us
        score = math.log(max(t, 1e-3)) if t is not None else self._PENALTY
        self._scores[config] = score
        trial = self._open.pop(config, None)
        if trial is not None:
            self._study.tell(trial, score)
            return
        # an anchor or a replacement: teach the sampler about it as a finished trial
        dist = self._optuna.distributions.CategoricalDistribution
        params: dict[str, Any] = {"backend": config.backend}
        if config.backend not in self._backends:
            return
        dists: dict[str, Any] = {"backend": dist(self._backends)}
        for name, vals in self._values.get(config.backend, {}).items():
            if config.get(name) in vals:
                params[f"{config.backend}.{name}"] = config[name]
                dists[f"{config.backend}.{name}"] = dist(vals)
        self._study.add_trial(
            self._optuna.trial.create_trial(params=params, distributions=dists, value=score)
        )


STRATEGIES: dict[str, type[Strategy]] = {
    "exhaustive": Exhaustive,
    "random": RandomSearch,
    "optuna": OptunaTPE,
    "tpe": OptunaTPE,
}


def make_strategy(
    name: str,
    space: SearchSpace,
    budget: Budget | None = None,
    *,
    seed: int = 0,
    clock: Callable[[], float] | None = None,
) -> Strategy:
    """The strategy called `name` ("exhaustive", "random", "optuna"/"tpe"); `clock` (seconds) is what its
    time budget is counted on (default: the monotonic wall clock)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}") from None
    return cls(space, budget, seed=seed, clock=clock or time.monotonic)
