"""SearchSpace: the values of each parameter and the constraints that remove invalid combinations.

A subspace is searched as a tree: its parameters are assigned in their order, and a constraint that
names the knobs it reads (`Constraint.knobs`) is decided as soon as the last of them is assigned, so a
prefix that breaks it cuts its whole subtree. Each constraint is a table over the values of its knobs,
filled once per subspace; counts (valid configs, configs pruned by each constraint) come from the sizes
of subtrees, without visiting their configs.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from autotune.core.config import Config, Value

__all__ = ["Constraint", "SearchSpace", "SubSpace"]


@dataclass(frozen=True)
class Constraint:
    """A rule a config must satisfy. `allows(config)` is True when the config is valid.

    `reason` is recorded with every config the constraint prunes, so keep it specific
    (``"BLOCK_M 128 > 2 * next_pow2(M=16): wasted rows"`` is better than ``"bad"``); it may use
    ``{name}`` fields of the config.

    `knobs` names every parameter `allows` reads (those a subspace lacks are left out of the config, as
    in a real one); the search then decides the constraint as soon as they are assigned. None: it may
    read any, and is decided on whole configs. Reading a parameter of the subspace that `knobs` does not
    name is a ValueError.

    `search_only`: a rule of the search alone. A config it rejects runs, and runs right, only where the
    rule expects it to be slow; an M profile still times a tuned bucket's finalist that breaks it at
    another M (`SubSpace.check(config, search_only=False)`).
    """

    name: str
    reason: str
    allows: Callable[[Mapping[str, Value]], bool]
    knobs: tuple[str, ...] | None = None
    search_only: bool = False

    def __post_init__(self) -> None:
        if self.knobs is not None:
            object.__setattr__(self, "knobs", tuple(self.knobs))

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
    default, for instance); they must belong to the space. A config breaking several constraints is
    pruned by the first of them in `constraints`' order.
    """

    backend: str
    params: Mapping[str, Sequence[Value]] = field(default_factory=dict)
    constraints: Sequence[Constraint] = ()
    first: Sequence[Config] = ()
    _tree: list[_Tree] = field(default_factory=list, init=False, repr=False, compare=False)

    def raw_size(self) -> int:
        n = 1
        for values in self.params.values():
            n *= len(values)
        return n

    def violated(self, values: Mapping[str, Value], *, search_only: bool = True) -> Constraint | None:
        """The first constraint `values` breaks (parameters are assumed in range), or None; without
        `search_only`, the search-only constraints are not asked."""
        for constraint in self.constraints:
            if (search_only or not constraint.search_only) and not constraint.allows(values):
                return constraint
        return None

    def check(self, config: Config, *, search_only: bool = True) -> str | None:
        """None when `config` is valid here, else the reason it is not; without `search_only`, whether it
        runs here (the search-only constraints not asked)."""
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
        broken = self.violated(config, search_only=search_only)
        return None if broken is None else broken.explain(config)

    def _search(self) -> _Tree:
        if not self._tree:
            self._tree.append(_Tree(self))
        return self._tree[0]

    def _firsts(self) -> list[Config]:
        """The valid `first` configs, each once."""
        return list(dict.fromkeys(c for c in self.first if self.check(c) is None))

    def walk(self) -> Iterator[tuple[Mapping[str, Value], Constraint | None]]:
        """Every point of the product as a mapping, with the constraint that prunes it (None if valid);
        valid `first` configs come first (and are not repeated)."""
        seen = self._firsts()
        for config in seen:
            yield config, None
        names, backend, constraints = self._search().names, self.backend, self.constraints
        for values, broken in self._search().walk():
            d: dict[str, Value] = dict(zip(names, values, strict=True))
            d["backend"] = backend
            if broken is not None:
                yield d, constraints[broken]
            elif not seen or Config(d) not in seen:
                yield d, None

    def iter_configs(self) -> Iterator[Config]:
        """The valid configs in `walk`'s order, one at a time (as listed by `configs`, where it has)."""
        tree = self._search()
        if tree.configs is not None:
            yield from tree.configs
            return
        firsts = self._firsts()
        yield from firsts
        seen = set(firsts)
        for name, values in [("backend", [self.backend]), *self.params.items()]:
            for v in values:
                Config({name: v})  # TypeError for a name or value no config holds, as a config would say
        # per name in sorted order: the knob's position (-1: the backend) and, per value, the value and
        # its piece of the canonical JSON
        columns = sorted([(n, i) for i, n in enumerate(tree.names) if n != "backend"] + [("backend", -1)])
        pieces = [
            (
                name,
                i,
                [
                    (v, f"{json.dumps(name)}:{json.dumps(v)}")
                    for v in (tree.values[i] if i >= 0 else [self.backend])
                ],
            )
            for name, i in columns
        ]
        for index in tree.valid():
            items: dict[str, Value] = {}
            parts = []
            for name, i, column in pieces:
                value, piece = column[index[i] if i >= 0 else 0]
                items[name] = value
                parts.append(piece)
            config = Config.of_sorted(items, "{" + ",".join(parts) + "}")
            if not seen or config not in seen:
                yield config

    def configs(self) -> tuple[Config, ...]:
        """The valid configs in `walk`'s order (listed once)."""
        tree = self._search()
        if tree.configs is None:
            tree.configs = tuple(self.iter_configs())
        return tree.configs

    def size(self) -> int:
        """How many valid configs (without listing them)."""
        tree = self._search()
        if tree.configs is not None:
            return len(tree.configs)
        valid, _ = tree.counts()
        return valid + sum(1 for c in self._firsts() if not _in_product(c, self.params))

    def prune_counts(self) -> dict[str, int]:
        """How many points of the product each constraint prunes (the first it breaks counts), by
        constraint name; constraints that prune nothing are left out."""
        _, pruned = self._search().counts()
        out: dict[str, int] = {}
        for j, n in sorted(pruned.items()):
            name = self.constraints[j].name
            out[name] = out.get(name, 0) + n
        return out


def _in_product(config: Config, params: Mapping[str, Sequence[Value]]) -> bool:
    """Whether `config` (a member of the subspace) is one of its product's points as the product spells
    it (a value equal to the parameter's but of another type, True for 1, makes another config)."""
    point: dict[str, Value] = {"backend": config.backend}
    for name, values in params.items():
        point[name] = next(v for v in values if v == config[name])
    return Config(point) == config


class _Unassigned:
    """Stands for a parameter a constraint did not name in its knobs: any use of it raises."""

    __slots__ = ("knob",)

    def __init__(self, knob: str) -> None:
        self.knob = knob

    def _refuse(self, *args: object) -> Any:
        raise _UndeclaredKnob(self.knob)

    __int__ = __index__ = __float__ = __bool__ = __hash__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rshift__ = _refuse
    __str__ = __format__ = __len__ = __iter__ = __contains__ = __getitem__ = _refuse


class _UndeclaredKnob(Exception):
    pass


class _Tree:
    """The search tree of one subspace: its parameters assigned in order, each constraint a table over
    the values of its knobs and decided at the level of the last of them (level 0: before any)."""

    def __init__(self, sub: SubSpace) -> None:
        self.sub = sub
        self.names = list(sub.params)
        self.values = [tuple(sub.params[k]) for k in self.names]
        n, m = len(self.names), len(sub.constraints)
        position = {k: i for i, k in enumerate(self.names)}
        self.keys: list[tuple[int, ...]] = []
        self.getters: list[Callable[[Sequence[Value]], Any]] = []
        self.tables: list[dict[Any, Any]] = []
        self.at_level: list[list[int]] = [[] for _ in range(n + 1)]
        for j, constraint in enumerate(sub.constraints):
            if constraint.knobs is None:
                key = tuple(range(n))
            else:
                key = tuple(sorted({position[k] for k in constraint.knobs if k in position}))
            self.keys.append(key)
            self.getters.append(itemgetter(*key) if key else _no_key)
            self.tables.append({} if constraint.knobs is None else self._table(constraint, key))
            self.at_level[key[-1] + 1 if key else 0].append(j)
        # the least index of a constraint decided at level d or deeper (m: none)
        self.least_from = [m] * (n + 2)
        for d in range(n, -1, -1):
            self.least_from[d] = min([self.least_from[d + 1], *self.at_level[d]])
        # configs of the parameters from d on
        self.rest = [1] * (n + 1)
        for d in range(n - 1, -1, -1):
            self.rest[d] = self.rest[d + 1] * len(self.values[d])
        self.memo: dict[tuple[Any, ...], tuple[int, dict[int, int]]] = {}
        self.relevant: dict[tuple[int, int], Callable[[Sequence[Value]], Any]] = {}
        self.configs: tuple[Config, ...] | None = None
        self._counts: tuple[int, dict[int, int]] | None = None

    def _table(self, constraint: Constraint, key: tuple[int, ...]) -> dict[Any, Any]:
        """`constraint` at every combination of its knobs' values: True, False, or the exception it
        raised (raised again where the combination is reached)."""
        view: dict[str, Any] = {name: _Unassigned(name) for name in self.names}
        view["backend"] = self.sub.backend
        table: dict[Any, Any] = {}
        for combo in itertools.product(*(self.values[i] for i in key)):
            for i, v in zip(key, combo, strict=True):
                view[self.names[i]] = v
            try:
                result: Any = bool(constraint.allows(view))
            except _UndeclaredKnob as exc:
                raise ValueError(
                    f"constraint {constraint.name!r} of backend {self.sub.backend!r} reads {exc.args[0]!r}, "
                    f"which its knobs {list(constraint.knobs or ())} do not name"
                ) from None
            except Exception as exc:  # raised again where the combination is reached
                result = exc
            table[combo[0] if len(combo) == 1 else combo] = result
        return table

    def ok(self, j: int, assigned: Sequence[Value]) -> bool:
        """Whether constraint `j` allows `assigned` (its knobs among them)."""
        key = self.getters[j](assigned)
        table = self.tables[j]
        result = table.get(key)
        if result is None:  # a constraint without knobs: decided on the whole config
            d: dict[str, Value] = dict(zip(self.names, assigned, strict=True))
            d["backend"] = self.sub.backend
            result = table[key] = bool(self.sub.constraints[j].allows(d))
        elif result is not True and result is not False:
            raise result
        return result

    def _failing(self, depth: int, bound: int, assigned: Sequence[Value]) -> int:
        """The first constraint decided at level `depth`, of index below `bound`, that `assigned`
        breaks; `bound` if none."""
        for j in self.at_level[depth]:
            if j >= bound:
                break
            if not self.ok(j, assigned):
                return j
        return bound

    # -- counting ----------------------------------------------------------------------------------

    def counts(self) -> tuple[int, dict[int, int]]:
        """(valid points, points pruned by each constraint index). Subspaces whose knobs and constraint
        tables are equal (the same kernel at nearby M, say) count alike: counted once per process."""
        if self._counts is None:
            key = self._fingerprint()
            known = None if key is None else _COUNTED.get(key)
            if known is None:
                known = self._enter(0, len(self.sub.constraints), [])
                self.memo.clear()
                if key is not None:
                    with _COUNTED_LOCK:
                        if len(_COUNTED) >= _COUNTED_MAX:
                            _COUNTED.pop(next(iter(_COUNTED)))
                        _COUNTED[key] = known
            self._counts = known
        return self._counts

    def _fingerprint(self) -> tuple[Any, ...] | None:
        """What the counts depend on: the knobs' values and every constraint's table (None where a
        constraint is decided on whole configs, or its table holds an error)."""
        tables = []
        for constraint, key, table in zip(self.sub.constraints, self.keys, self.tables, strict=True):
            if constraint.knobs is None:
                return None
            results = tuple(table.values())
            if not all(r is True or r is False for r in results):
                return None
            tables.append((key, results))
        return (tuple(self.names), tuple(self.values), tuple(tables))

    def _enter(self, depth: int, bound: int, assigned: list[Value]) -> tuple[int, dict[int, int]]:
        """`assigned` holds the first `depth` parameters and passes every constraint below `bound`
        decided above level `depth`: (completions passing every constraint below `bound`, completions
        pruned, by the first constraint they break)."""
        j = self._failing(depth, bound, assigned)
        if j == bound:
            return self._count(depth, bound, assigned)
        passed, pruned = self._count(depth, j, assigned)
        if passed:
            pruned = dict(pruned)
            pruned[j] = pruned.get(j, 0) + passed
        return 0, pruned

    def _count(self, depth: int, bound: int, assigned: list[Value]) -> tuple[int, dict[int, int]]:
        """As `_enter`, once the constraints decided at level `depth` have passed; memoized on the values
        of the assigned parameters that the constraints still to decide read."""
        if self.least_from[depth + 1] >= bound:
            return self.rest[depth], {}
        getter = self.relevant.get((depth, bound))
        if getter is None:
            read = sorted(
                {i for j in range(bound) if self._level(j) > depth for i in self.keys[j] if i < depth}
            )
            getter = self.relevant[depth, bound] = itemgetter(*read) if read else _no_key
        memo_key = (depth, bound, getter(assigned))
        hit = self.memo.get(memo_key)
        if hit is not None:
            return hit
        passed = 0
        pruned: dict[int, int] = {}
        for v in self.values[depth]:
            assigned.append(v)
            p, f = self._enter(depth + 1, bound, assigned)
            assigned.pop()
            passed += p
            for j, k in f.items():
                pruned[j] = pruned.get(j, 0) + k
        self.memo[memo_key] = (passed, pruned)
        return passed, pruned

    def _level(self, j: int) -> int:
        key = self.keys[j]
        return key[-1] + 1 if key else 0

    # -- listing -----------------------------------------------------------------------------------

    def valid(self) -> Iterator[tuple[int, ...]]:
        """The valid points of the product, in its order, as the index of each knob's value: a
        depth-first walk that enters a value only where the constraints decided at its level allow it."""
        m, n = len(self.sub.constraints), len(self.names)
        if self._failing(0, m, []) != m:
            return
        if n == 0:
            yield ()
            return
        values, at_level, failing = self.values, self.at_level, self._failing
        assigned: list[Value] = [v[0] for v in values]  # beyond `depth`: stale, never read
        index = [0] * n
        depth = 0
        while depth >= 0:
            i = index[depth]
            if i == len(values[depth]):
                depth -= 1
                if depth >= 0:
                    index[depth] += 1
                continue
            assigned[depth] = values[depth][i]
            if at_level[depth + 1] and failing(depth + 1, m, assigned) != m:
                index[depth] = i + 1
            elif depth == n - 1:
                yield tuple(index)
                index[depth] = i + 1
            else:
                depth += 1
                index[depth] = 0

    def walk(self) -> Iterator[tuple[tuple[Value, ...], int | None]]:
        """Every point of the product in its order, with the index of the first constraint it breaks."""
        m = len(self.sub.constraints)
        for values, bound in self._walk(0, self._failing(0, m, []), []):
            yield values, None if bound == m else bound

    def _walk(self, depth: int, bound: int, assigned: list[Value]) -> Iterator[tuple[tuple[Value, ...], int]]:
        if depth == len(self.names):
            yield tuple(assigned), bound
            return
        for v in self.values[depth]:
            assigned.append(v)
            yield from self._walk(depth + 1, self._failing(depth + 1, bound, assigned), assigned)
            assigned.pop()


def _no_key(_: Sequence[Value]) -> tuple[()]:
    return ()


#: Counts of subspaces by `_Tree._fingerprint`, oldest dropped first beyond _COUNTED_MAX.
_COUNTED: dict[tuple[Any, ...], tuple[int, dict[int, int]]] = {}
_COUNTED_MAX = 4096
_COUNTED_LOCK = threading.Lock()


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

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self._by_backend)

    def subspace(self, backend: str) -> SubSpace:
        return self._by_backend[backend]

    def check(self, config: Config, *, search_only: bool = True) -> str | None:
        """None when `config` is in the space, else the reason it is not (`SubSpace.check`)."""
        sub = self._by_backend.get(config.backend)
        if sub is None:
            return f"backend {config.backend!r} is not in this space ({', '.join(self.backends)})"
        return sub.check(config, search_only=search_only)

    def __contains__(self, config: object) -> bool:
        return isinstance(config, Config) and self.check(config) is None

    def walk(self) -> Iterator[tuple[Mapping[str, Value], Constraint | None]]:
        for sub in self.subspaces:
            yield from sub.walk()

    def configs(self) -> tuple[Config, ...]:
        """All valid configs, in the deterministic order (computed once)."""
        if self._valid is None:
            self._valid = tuple(c for sub in self.subspaces for c in sub.configs())
        return self._valid

    def head(self, n: int) -> tuple[Config, ...]:
        """The first `n` valid configs (`configs()[:n]`, without listing the rest)."""
        if self._valid is not None:
            return self._valid[:n]
        return tuple(itertools.islice((c for sub in self.subspaces for c in sub.iter_configs()), n))

    def pruned(self) -> Iterator[tuple[Config, str]]:
        """Every config removed by a constraint, with the reason."""
        for values, broken in self.walk():
            if broken is not None:
                yield Config(values), broken.explain(values)

    def raw_size(self) -> int:
        return sum(s.raw_size() for s in self.subspaces)

    def __len__(self) -> int:
        """How many valid configs (counted without listing them)."""
        if self._valid is not None:
            return len(self._valid)
        return sum(s.size() for s in self.subspaces)

    def prune_summary(self) -> dict[str, int]:
        """How many configs each constraint removed (the first failing constraint counts)."""
        out: dict[str, int] = {}
        for sub in self.subspaces:
            for name, n in sub.prune_counts().items():
                out[name] = out.get(name, 0) + n
        return out
