"""SearchSpace: the values of each parameter and the constraints that remove invalid combinations."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from autotune.core.config import Config, Value

__all__ = ["Constraint", "SearchSpace", "SubSpace"]


@dataclass(frozen=True)
class Constraint:
    """A rule a config must satisfy. `allows(config)` is True when the config is valid.

    `reason` is recorded with every config the constraint prunes, so keep it specific
    (``"BLOCK_M 128 > 2 * next_pow2(M=16): wasted rows"`` is better than ``"bad"``); it may use
    ``{name}`` fields of the config.
    """

    name: str
    reason: str
    allows: Callable[[Mapping[str, Value]], bool]

    def explain(self, config: Mapping[str, Value]) -> str:
        try:
            return f"{self.name}: {self.reason.format(**config)}"
        except (KeyError, IndexError, ValueError):
            return f"{self.name}: {self.reason}"


@dataclass(frozen=True)
class SubSpace:
    """The configs of one backend: the product of `params`, filtered by `constraints`.

    `backend` is added to every config as the ``backend`` parameter. A backend with no parameters (the
    vendor library) is a single config. `first` lists configs to visit before the rest (the heuristic
    default, for instance); they must belong to the space.
    """

    backend: str
    params: Mapping[str, Sequence[Value]] = field(default_factory=dict)
    constraints: Sequence[Constraint] = ()
    first: Sequence[Config] = ()

    def raw_size(self) -> int:
        n = 1
        for values in self.params.values():
            n *= len(values)
        return n

    def _product(self) -> Iterator[dict[str, Value]]:
        names = list(self.params)
        for values in itertools.product(*(self.params[n] for n in names)):
            d: dict[str, Value] = dict(zip(names, values, strict=True))
            d["backend"] = self.backend
            yield d

    def violated(self, values: Mapping[str, Value]) -> Constraint | None:
        """The first constraint `values` breaks (parameters are assumed in range), or None."""
        for constraint in self.constraints:
            if not constraint.allows(values):
                return constraint
        return None

    def check(self, config: Config) -> str | None:
        """None when `config` is valid here, else the reason it is not."""
        if config.backend != self.backend:
            return f"backend {config.backend!r} is not {self.backend!r}"
        extra = set(config) - set(self.params) - {"backend"}
        if extra:
            return f"unknown parameters for backend {self.backend}: {', '.join(sorted(extra))}"
        for name, values in self.params.items():
            if name not in config:
                return f"missing parameter {name}"
            if config[name] not in values:
                return f"{name}={config[name]!r} is not among {list(values)}"
        broken = self.violated(config)
        return None if broken is None else broken.explain(config)

    def walk(self) -> Iterator[tuple[Mapping[str, Value], Constraint | None]]:
        """Every point of the product as a mapping, with the constraint that prunes it (None if valid);
        valid `first` configs come first (and are not repeated)."""
        seen: set[Config] = set()
        for config in self.first:
            if self.check(config) is None and config not in seen:
                seen.add(config)
                yield config, None
        for values in self._product():
            broken = self.violated(values)
            if broken is not None:
                yield values, broken
            elif not seen or Config(values) not in seen:
                yield values, None


class SearchSpace:
    """The configs of one kernel for one (Problem, Target): a union of per-backend subspaces.

    Immutable after construction. Iteration order is deterministic: backends in the given order, each
    backend's `first` configs, then the product in parameter order.
    """

    def __init__(self, subspaces: Sequence[SubSpace]) -> None:
        names = [s.backend for s in subspaces]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate backends in search space: {names}")
        self.subspaces: tuple[SubSpace, ...] = tuple(subspaces)
        self._by_backend = {s.backend: s for s in self.subspaces}
        self._valid: tuple[Config, ...] | None = None
        self._pruned_counts: dict[str, int] = {}

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self._by_backend)

    def subspace(self, backend: str) -> SubSpace:
        return self._by_backend[backend]

    def check(self, config: Config) -> str | None:
        """None when `config` is in the space, else the reason it is not."""
        sub = self._by_backend.get(config.backend)
        if sub is None:
            return f"backend {config.backend!r} is not in this space ({', '.join(self.backends)})"
        return sub.check(config)

    def __contains__(self, config: object) -> bool:
        return isinstance(config, Config) and self.check(config) is None

    def walk(self) -> Iterator[tuple[Mapping[str, Value], Constraint | None]]:
        for sub in self.subspaces:
            yield from sub.walk()

    def configs(self) -> tuple[Config, ...]:
        """All valid configs, in the deterministic order (computed once)."""
        if self._valid is None:
            valid: list[Config] = []
            counts: dict[str, int] = {}
            for values, broken in self.walk():
                if broken is None:
                    valid.append(values if isinstance(values, Config) else Config(values))
                else:
                    counts[broken.name] = counts.get(broken.name, 0) + 1
            self._valid, self._pruned_counts = tuple(valid), counts
        return self._valid

    def pruned(self) -> Iterator[tuple[Config, str]]:
        """Every config removed by a constraint, with the reason."""
        for values, broken in self.walk():
            if broken is not None:
                yield Config(values), broken.explain(values)

    def raw_size(self) -> int:
        return sum(s.raw_size() for s in self.subspaces)

    def __len__(self) -> int:
        return len(self.configs())

    def prune_summary(self) -> dict[str, int]:
        """How many configs each constraint removed (the first failing constraint counts)."""
        self.configs()
        return dict(self._pruned_counts)
