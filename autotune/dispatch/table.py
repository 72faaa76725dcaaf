"""Table: the pinned, immutable lookup of tuned configs for one GPU.

A Table maps a shape family ``(op, dtype, layout, N, K, params)`` either to **M ranges** (contiguous
intervals covering every M from 1 up, each with the config measured fastest there: built from a profile
at a ladder of M, see `autotune.dispatch.ranges`) or, for a family that was not profiled, to a sorted list
of **M buckets**, each with the config that won at that tuned M, an M between buckets being served by the
table's M policy (see `M_POLICIES`). A lookup is one dict get on a tuple key and one bisect either way.

File format (JSON, UTF-8; written by `Table.save`, read with the standard library only)::

    {"format": "autotune-table", "version": 3,
     "fingerprint": "<Target.fingerprint()>",   # hardware + toolchain the configs were measured with
     "device_key": "<Target.device_key()>",     # hardware alone: what the dispatch guard compares
     "target": { ...Target.to_dict()... },
     "predicted": false,        # true when any config is a model's prediction, not a measurement
     "m_policy": "round_up",    # how an M between tuned buckets is served (one of M_POLICIES)
     "created": "2026-11-21T19:00:00Z", "generator": "autotune 0.1.0",
     "entries": [
       {"op": "<op>", "dtype": "bf16", "layout": "nk", "n": 4096, "k": 4096,
        "buckets": [{"m": 1, "config": {"backend": "triton", "BLOCK_M": 16, ...}, "time_us": 12.3}, ...]},
       {"op": "<op>", "dtype": "bf16", "layout": "nk", "n": 8192, "k": 4096,
        "ranges": [{"lo": 1, "hi": 2, "config": {"backend": "triton_gemv", ...}, "speedup": 1.1, "points": 2},
                   {"lo": 3, "hi": null, "config": {"backend": "torch"}, "speedup": 1.0, "points": 70}]},
       {"op": "<op with parameters>", "dtype": "bf16", "layout": "nk", "n": 1536, "k": 4096,
        "params": "E=128,topk=8", "buckets": [...]}
     ]}

An entry has either "buckets" or "ranges". Ranges start at M = 1, follow each other without a gap, and
the last has ``"hi": null``; ``speedup`` is the vendor library's time over the config's, geometric mean
over the profiled M inside (null where not profiled against the vendor), ``points`` how many profiled M
lie inside. ``params`` (absent for none) are the op's own problem parameters, "NAME=VALUE" by name, then
B's dtype where the op keys it (`Problem.table_params`).

Versions: 1 has no ranges, 2 has ranges; in both an entry also has ``"e"`` and ``"topk"``, the fused
MoE's expert counts (0 for other ops), which version 3 holds in ``params`` like any op's own parameters
(``"e": 128, "topk": 8`` is ``"params": "E=128,topk=8"``). A file is written as the oldest version that
reads it the same: 1 without ranges, 2 with, 3 where an entry's params hold what versions 1 and 2 kept in
"e" and "topk" (an older reader would take such an entry for another family). All three are read, the
older two converted as they are read.

A bucket whose config a cost model predicted (nothing measured it) carries ``"predicted": true``; a bucket
without the field is measured. The top-level ``predicted`` is true when any bucket is (or when the whole
table was built as predicted), so a reader that knows no per-bucket field still sees the table as predicted.

A table whose shapes are served by the dense GEMM's "tunableop" backend carries ``"pins": {"tunableop":
[{"validators": {...}, "results": [[op_signature, param_signature, solution, ms, M, N, K, dtype, layout],
...]}]}``: the vendor solutions TunableOp picked for those exact shapes, which the run-time hands to
PyTorch's TunableOp (`autotune.kernels.dense.tunableop`). Readers that know no pins ignore the field.

``dtype`` is the canonical short name of A's dtype ("bf16", "fp16", "fp8e4m3", ...); torch-style aliases
("bfloat16", "torch.float16") are accepted when a table is built or loaded. ``time_us`` may be null.
``fingerprint`` and ``device_key`` must agree with ``target``; a file where they do not is rejected.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import math
import os
import tempfile
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.problem import B_DTYPE_KEY, Problem, normalize_dtype
from autotune.core.target import Target

__all__ = [
    "FORMAT",
    "M_POLICIES",
    "RANGES",
    "VERSION",
    "Bucket",
    "Entry",
    "Key",
    "Range",
    "Table",
    "TableError",
    "check_ranges",
    "find",
    "key_of",
]

#: The value of the "format" field of every table file.
FORMAT = "autotune-table"
#: The newest table file version this code reads and writes (see the module docstring for which is written).
VERSION = 3
#: The file versions this code reads.
VERSIONS = (1, 2, 3)
#: The fields of an entry of versions 1 and 2 that version 3 holds in its params, by the name of the
#: parameter they are (the fused MoE's expert counts, which predate the ops' own parameters).
_FORMER_FIELDS = {"e": "E", "topk": "topk"}
#: The lookup rule of an entry with M ranges: the range whose lo is the largest <= M (an index policy, not
#: one of `M_POLICIES`, which say how an M between tuned buckets is served).
RANGES = "ranges"

#: How an M between tuned buckets is served.
#: round_up: the smallest tuned M >= M (the largest bucket if M is above all);
#: round_down: the largest tuned M <= M (the smallest if M is below all);
#: nearest: nearest by |M - m| (ties go up); nearest_log: nearest by |log2 M - log2 m| (ties go up).
M_POLICIES: tuple[str, ...] = ("round_up", "round_down", "nearest", "nearest_log")

#: Index key of a shape family: (op, dtype, layout, N, K, params); `params` is the op's own problem
#: parameters as text, and B's dtype where the op keys it (`Problem.table_params`), "" for none.
Key = tuple[str, str, str, int, int, str]
_Hit = tuple[tuple[int, ...], tuple[Config, ...], tuple[Any, ...], str]


class TableError(ValueError):
    """A table file that cannot be used: missing, not JSON, not a table, unsupported version, malformed."""


def pick(ms: tuple[int, ...], M: int, policy: str) -> int:
    """Index into the sorted, non-empty `ms` of the bucket that serves `M` under `policy`.

    Integer arithmetic only (nearest_log compares M² with lo·hi), so ties are exact and go up.

    Raises:
        ValueError: `policy` is not one of `M_POLICIES`.
    """
    if policy == "round_up":
        i = bisect_left(ms, M)
        return i if i < len(ms) else i - 1
    if policy == "round_down" or policy == RANGES:
        i = bisect_right(ms, M) - 1
        return i if i >= 0 else 0
    if policy == "nearest" or policy == "nearest_log":
        i = bisect_left(ms, M)
        if i == len(ms):
            return i - 1
        if i == 0 or ms[i] == M:
            return i
        lo, hi = ms[i - 1], ms[i]
        if policy == "nearest":
            return i - 1 if M - lo < hi - M else i
        # |log2 M - log2 lo| < |log2 hi - log2 M|  <=>  M / lo < hi / M  <=>  M * M < lo * hi
        return i - 1 if lo * hi > M * M else i
    raise ValueError(f"unknown m_policy {policy!r}; known: {', '.join(M_POLICIES)}")


def find(index: Mapping[Key, _Hit], key: Key, M: int, m_policy: str | None = None, column: int = 1) -> Any:
    """The lookup, written once (`Table.lookup_row`, `Dispatcher.lookup` and `autotune.dispatch.lookup`
    call it): item `column` (1: the config, 2: the Bucket or Range) of the row that serves `M` in the
    entry of `index` that `key` names, else in the entry of its canonical dtype name ("bfloat16",
    torch.bfloat16 -> "bf16"); None where neither is there. An entry with M ranges serves the range that
    holds M (the first for M < 1); one with buckets serves M by `m_policy`, else by its own policy.

    The hot path: one dict get and one bisect, no allocation (ValueError for an unknown `m_policy`).
    """
    hit = index.get(key)
    if hit is None:
        canon = canonical_dtype(key[1])
        if canon == key[1] or (hit := index.get((key[0], canon, *key[2:]))) is None:
            return None
    policy = hit[3]
    if policy == RANGES:  # lo=1: the first range (its lo is 1) for M < 1
        return hit[column][bisect_right(hit[0], M, 1) - 1]
    if m_policy:
        policy = m_policy
    if policy == "round_up":  # hi: the last bucket for an M above them all
        return hit[column][bisect_left(hit[0], M, 0, len(hit[0]) - 1)]
    return hit[column][pick(hit[0], M, policy)]


def key_of(problem: Problem) -> Key:
    """The key of `problem`'s shape family: (op, A's canonical dtype, layout, N, K, params)."""
    p = problem
    return (p.op, normalize_dtype(p.dtype), p.layout, p.N, p.K, p.table_params)


def _check_policy(policy: str) -> str:
    if policy not in M_POLICIES:
        raise ValueError(f"unknown m_policy {policy!r}; known: {', '.join(M_POLICIES)}")
    return policy


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive" if minimum > 0 else "a non-negative"
        raise ValueError(f"{name} must be {kind} integer, got {value!r}")
    return value


@dataclass(frozen=True)
class Bucket:
    """One tuned M of a shape family: the winning config and its time (µs, None where unknown).

    `predicted` marks a config (and time) a cost model predicted rather than measured.
    Immutable. Raises ValueError on a non-positive M or a negative or non-finite time.
    """

    m: int
    config: Config
    time_us: float | None = None
    predicted: bool = False

    def __post_init__(self) -> None:
        _check_int("m", self.m, 1)
        if not isinstance(self.predicted, bool):
            raise ValueError(f"predicted must be true or false, got {self.predicted!r}")
        if not isinstance(self.config, Config):
            if not isinstance(self.config, Mapping):
                raise ValueError(f"config must be a Config or a mapping, got {self.config!r}")
            object.__setattr__(self, "config", Config(self.config))
        if self.time_us is not None:
            if isinstance(self.time_us, bool) or not isinstance(self.time_us, (int, float)):
                raise ValueError(f"time_us must be a number or null, got {self.time_us!r}")
            if not math.isfinite(self.time_us) or self.time_us < 0:
                raise ValueError(f"time_us must be finite and non-negative, got {self.time_us!r}")
            object.__setattr__(self, "time_us", float(self.time_us))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"m": self.m, "config": self.config.to_dict(), "time_us": self.time_us}
        if self.predicted:  # written only where true: a measured bucket reads as before
            out["predicted"] = True
        return out


@dataclass(frozen=True)
class Range:
    """The config that serves every M in [lo, hi] (hi None: no upper end).

    `speedup` is the geometric mean, over the profiled M inside the range, of the vendor library's time
    over the served config's (1.0 for the vendor itself; None where nothing inside was profiled against
    the vendor). `points` counts the profiled M inside. Immutable; ValueError on bad bounds.
    """

    lo: int
    hi: int | None
    config: Config
    speedup: float | None = None
    points: int = 0

    def __post_init__(self) -> None:
        _check_int("lo", self.lo, 1)
        if self.hi is not None and (
            isinstance(self.hi, bool) or not isinstance(self.hi, int) or self.hi < self.lo
        ):
            raise ValueError(f"a range's hi must be an integer >= lo ({self.lo}) or null, got {self.hi!r}")
        if not isinstance(self.config, Config):
            if not isinstance(self.config, Mapping):
                raise ValueError(f"config must be a Config or a mapping, got {self.config!r}")
            object.__setattr__(self, "config", Config(self.config))
        if self.speedup is not None:
            if isinstance(self.speedup, bool) or not isinstance(self.speedup, (int, float)):
                raise ValueError(f"speedup must be a number or null, got {self.speedup!r}")
            if not math.isfinite(self.speedup) or self.speedup <= 0:
                raise ValueError(f"speedup must be finite and positive, got {self.speedup!r}")
            object.__setattr__(self, "speedup", float(self.speedup))
        _check_int("points", self.points, 0)

    def __contains__(self, M: object) -> bool:
        return isinstance(M, int) and self.lo <= M and (self.hi is None or self.hi >= M)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "config": self.config.to_dict(),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "points": self.points,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Range:
        """Inverse of `to_dict`. Raises ValueError (or TypeError) on a malformed mapping."""
        if not isinstance(raw.get("config"), dict):
            raise ValueError("a range needs a 'config' object")
        return cls(raw["lo"], raw.get("hi"), Config(raw["config"]), raw.get("speedup"), raw.get("points", 0))


def check_ranges(ranges: tuple[Range, ...]) -> None:
    """ValueError unless `ranges` are contiguous from M = 1 and the last has no upper end."""
    if not ranges:
        raise ValueError("no ranges")
    if ranges[0].lo != 1:
        raise ValueError(f"the first range must start at M = 1, got {ranges[0].lo}")
    for a, b in itertools.pairwise(ranges):
        if a.hi is None or b.lo != a.hi + 1:
            raise ValueError(f"ranges must be contiguous: [{a.lo}, {a.hi}] is followed by [{b.lo}, {b.hi}]")
    if ranges[-1].hi is not None:
        raise ValueError(f"the last range must have no upper end (hi null), got {ranges[-1].hi}")


@dataclass(frozen=True)
class Entry:
    """How one shape family (`Key`: op, dtype, layout, N, K, params) is served: its M ranges or its M
    buckets.

    Immutable. An entry has `ranges` (contiguous from M = 1, the last open-ended: built from a profile) or
    `buckets` (tuned M values, served by the table's M policy), not both. `buckets` is stored sorted by m;
    `dtype` is normalized to its canonical short name. Raises ValueError on neither or both, a repeated
    m, ranges that leave a gap, or an invalid field.
    """

    op: str
    dtype: str
    layout: str
    n: int
    k: int
    buckets: tuple[Bucket, ...] = ()
    ranges: tuple[Range, ...] = ()
    params: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or not self.op:
            raise ValueError(f"op must be a non-empty string, got {self.op!r}")
        if not isinstance(self.layout, str) or not self.layout:
            raise ValueError(f"layout must be a non-empty string, got {self.layout!r}")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        _check_int("n", self.n, 1)
        _check_int("k", self.k, 1)
        if not isinstance(self.params, str):
            raise ValueError(f"params must be a string, got {self.params!r}")
        buckets = tuple(sorted(self.buckets, key=lambda b: b.m))
        ranges = tuple(sorted(self.ranges, key=lambda r: r.lo))
        if not buckets and not ranges:
            raise ValueError("an entry needs buckets or ranges")
        if buckets and ranges:
            raise ValueError("an entry has buckets or ranges, not both")
        for a, b in itertools.pairwise(buckets):
            if a.m == b.m:
                raise ValueError(f"two buckets for m={a.m}")
        if ranges:
            check_ranges(ranges)
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "ranges", ranges)

    @property
    def key(self) -> Key:
        """The index key (op, dtype, layout, N, K, params)."""
        return (self.op, self.dtype, self.layout, self.n, self.k, self.params)

    def describe(self) -> str:
        """Human form of the shape family, e.g. ``OP bf16 B:nk N=4096 K=4096``."""
        return _describe(self.key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "dtype": self.dtype,
            "layout": self.layout,
            "n": self.n,
            "k": self.k,
            **({"params": self.params} if self.params else {}),
            **(
                {"ranges": [r.to_dict() for r in self.ranges]}
                if self.ranges
                else {"buckets": [b.to_dict() for b in self.buckets]}
            ),
        }

    def rows(self) -> tuple[Bucket, ...] | tuple[Range, ...]:
        """Its ranges, or its buckets where it has none."""
        return self.ranges or self.buckets


def _check_pins(pins: Any) -> dict[str, tuple[Mapping[str, Any], ...]]:
    """`pins` as a Table holds them: backend name → groups, each an object with "validators" (an object of
    strings) and "results" (a list of lists); ValueError naming what is wrong."""
    if not isinstance(pins, Mapping):
        raise ValueError(f"'pins' must be an object of backend → list, got {type(pins).__name__}")
    out: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for backend, groups in pins.items():
        if not isinstance(groups, (list, tuple)) or not all(isinstance(g, Mapping) for g in groups):
            raise ValueError(f"'pins'[{backend!r}] must be a list of objects")
        for g in groups:
            validators, results = g.get("validators"), g.get("results")
            if not isinstance(validators, Mapping) or not all(
                isinstance(v, str) for v in validators.values()
            ):
                raise ValueError(f"'pins'[{backend!r}]: 'validators' must be an object of strings")
            if not isinstance(results, (list, tuple)) or not all(
                isinstance(r, (list, tuple)) for r in results
            ):
                raise ValueError(f"'pins'[{backend!r}]: 'results' must be a list of lists")
        out[str(backend)] = tuple(
            {"validators": dict(g["validators"]), "results": [list(r) for r in g["results"]]} for g in groups
        )
    return out


def _describe(key: Key) -> str:
    op, dtype, layout, n, k, params = key
    own = f" {params}" if params else ""
    return f"{op} {dtype} B:{layout} N={n} K={k}{own}"


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _generator() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"autotune {version('autotune')}"
        except PackageNotFoundError:
            return "autotune"
    except ImportError:  # pragma: no cover - stdlib
        return "autotune"


class Table:
    """Immutable tuned-config table for one GPU, indexed for sub-microsecond lookups.

    Contract: nothing changes after construction, so a Table is safe to share between threads. Lookups
    never raise for an unknown shape (they return None) and never log. Construction raises ValueError on
    invalid arguments; reading a file raises `TableError` (a ValueError) with a message that names the
    file and, for a malformed entry, which entry and field.
    """

    __slots__ = (
        "_index",
        "created",
        "entries",
        "generator",
        "m_policy",
        "pins",
        "predicted",
        "source",
        "target",
    )

    target: Target
    m_policy: str
    predicted: bool
    created: str
    generator: str  # the tool that wrote the file read, "" for a table built in memory
    source: str  # the file it was read from, or "<memory>" / "<string>"
    entries: tuple[Entry, ...]
    #: What a backend serves beside its configs, by backend: "tunableop" → the vendor solutions pinned per
    #: shape (`autotune.kernels.dense.tunableop.install`). Empty for most tables.
    pins: Mapping[str, tuple[Mapping[str, Any], ...]]
    #: key → (starts: tuned M values or range los, their configs, the entry's rows, the entry's policy)
    _index: dict[Key, _Hit]

    def __init__(
        self,
        *,
        target: Target,
        entries: Iterable[Entry],
        m_policy: str = "round_up",
        predicted: bool = False,
        created: str | None = None,
        source: str = "<memory>",
        pins: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    ) -> None:
        if not isinstance(target, Target):
            raise ValueError(f"target must be a Target, got {target!r}")
        ordered = sorted(entries, key=lambda entry: entry.key)
        policy = _check_policy(m_policy)
        index: dict[Key, _Hit] = {}
        for entry in ordered:
            if not isinstance(entry, Entry):
                raise ValueError(f"entries must be Entry values, got {entry!r}")
            if entry.key in index:
                raise ValueError(f"two entries for {entry.describe()}")
            if entry.ranges:
                starts = tuple(r.lo for r in entry.ranges)
                index[entry.key] = (starts, tuple(r.config for r in entry.ranges), entry.ranges, RANGES)
            else:
                ms = tuple(b.m for b in entry.buckets)
                index[entry.key] = (ms, tuple(b.config for b in entry.buckets), entry.buckets, policy)
        init = object.__setattr__
        init(self, "target", target)
        init(self, "m_policy", policy)
        any_predicted = any(b.predicted for entry in ordered for b in entry.buckets)
        init(self, "predicted", bool(predicted) or any_predicted)
        init(self, "created", created or _utc_now())
        init(self, "generator", "")
        init(self, "source", source)
        init(self, "entries", tuple(ordered))
        init(self, "pins", _check_pins(pins or {}))
        init(self, "_index", index)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Table is immutable; cannot set {name!r}")

    # -- identity -------------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """Hash of the GPU and toolchain the configs were measured with."""
        return self.target.fingerprint()

    @property
    def device_key(self) -> str:
        """Hash of the GPU alone: what the dispatch guard compares with the running GPU."""
        return self.target.device_key()

    # -- building -------------------------------------------------------------------------------------

    @classmethod
    def from_winners(
        cls,
        target: Target,
        winners: Iterable[tuple[Problem, Config, float | None] | tuple[Problem, Config, float | None, bool]],
        *,
        m_policy: str = "round_up",
        predicted: bool = False,
        ranges: Mapping[Key, Iterable[Range]] | None = None,
        pins: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    ) -> Table:
        """Builds a table from (problem, winning config, time in µs or None[, predicted]) tuples.

        Problems are grouped by (op, dtype, layout, N, K, params), one bucket per M; `dtype` is the
        problem's A dtype. A bucket is predicted where its tuple's fourth item is true, or every bucket
        where `predicted` is true; the table is predicted when any bucket is. A family with `ranges`
        (key → its M ranges, e.g. from `ranges_from_profile`) is served by them instead of its buckets.

        Raises:
            ValueError: two winners for the same shape and M, or an invalid policy.
        """
        groups: dict[Key, dict[int, Bucket]] = {}
        for winner in winners:
            problem, config, time_us = winner[0], winner[1], winner[2]
            guessed = predicted or (len(winner) > 3 and bool(winner[3]))
            key = key_of(problem)
            group = groups.setdefault(key, {})
            if problem.M in group:
                raise ValueError(f"two winners for {_describe(key)} M={problem.M}; pass one per M")
            group[problem.M] = Bucket(problem.M, config, time_us, guessed)
        ranged = {key: tuple(rows) for key, rows in (ranges or {}).items()}
        entries = [
            Entry(*key[:5], buckets=tuple(group.values()), params=key[5])
            for key, group in groups.items()
            if key not in ranged
        ]
        entries += [Entry(*key[:5], ranges=rows, params=key[5]) for key, rows in ranged.items()]
        return cls(target=target, entries=entries, m_policy=m_policy, predicted=predicted, pins=pins)

    # -- serialization --------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Table:
        """Reads a table file.

        Raises:
            TableError: the file is missing or unreadable, or its content is not a valid table.
        """
        p = Path(path)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise TableError(f"table file {str(p)!r} does not exist") from None
        except IsADirectoryError:
            raise TableError(f"{str(p)!r} is a directory, not a table file") from None
        except OSError as exc:
            raise TableError(f"cannot read table file {str(p)!r}: {exc}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise TableError(f"{str(p)!r} is not an autotune table: not UTF-8 text") from None
        return cls.from_json(text, source=str(p))

    @classmethod
    def from_json(cls, text: str, source: str = "<string>") -> Table:
        """Parses the JSON form written by `to_json`.

        Raises:
            TableError: `text` is not JSON, not an autotune table, of an unsupported version, or malformed.
        """
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TableError(f"{source} is not an autotune table: not valid JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            what = type(data).__name__ if not isinstance(data, dict) else f"format={data.get('format')!r}"
            raise TableError(
                f"{source} is not an autotune table (expected a JSON object with "
                f'"format": "{FORMAT}", got {what})'
            )
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise TableError(f"{source}: malformed table: 'version' must be an integer, got {version!r}")
        if version not in VERSIONS:
            hint = "; upgrade autotune to read it" if version > VERSION else ""
            raise TableError(
                f"{source}: unsupported table version {version} (this autotune reads versions "
                f"{', '.join(map(str, VERSIONS))}){hint}"
            )
        return cls._from_dict(data, source, version)

    @classmethod
    def _from_dict(cls, data: dict[str, Any], source: str, version: int = VERSION) -> Table:
        def bad(what: str) -> TableError:
            return TableError(f"{source}: malformed table: {what}")

        raw_target = data.get("target")
        if not isinstance(raw_target, dict):
            raise bad("'target' must be an object")
        try:
            target = Target.from_dict(raw_target)
        except (TypeError, ValueError) as exc:
            raise bad(f"'target' is not a valid target ({exc})") from None
        for name, expected in (("device_key", target.device_key()), ("fingerprint", target.fingerprint())):
            if data.get(name) != expected:
                raise bad(
                    f"{name!r} {data.get(name)!r} does not match its target {target} ({expected!r}); "
                    "was the file edited by hand?"
                )
        m_policy = data.get("m_policy", "round_up")
        if m_policy not in M_POLICIES:
            raise bad(f"'m_policy' must be one of {', '.join(M_POLICIES)}, got {m_policy!r}")
        predicted = data.get("predicted", False)
        if not isinstance(predicted, bool):
            raise bad(f"'predicted' must be true or false, got {predicted!r}")
        created = data.get("created")
        if created is not None and not isinstance(created, str):
            raise bad(f"'created' must be a string, got {created!r}")
        raw_entries = data.get("entries")
        if not isinstance(raw_entries, list):
            raise bad("'entries' must be a list")
        entries = [_entry_from_dict(raw, f"entries[{i}]", bad, version) for i, raw in enumerate(raw_entries)]
        try:
            table = cls(
                target=target,
                entries=entries,
                m_policy=m_policy,
                predicted=predicted,
                created=created,
                source=source,
                pins=data.get("pins") or {},
            )
        except ValueError as exc:
            raise bad(str(exc)) from None
        generator = data.get("generator")
        object.__setattr__(table, "generator", generator if isinstance(generator, str) else "")
        return table

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (see the module docstring)."""
        return {
            "format": FORMAT,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "device_key": self.device_key,
            "target": self.target.to_dict(),
            "predicted": self.predicted,
            "m_policy": self.m_policy,
            "created": self.created,
            "generator": _generator(),
            **({"pins": {k: [dict(g) for g in v] for k, v in self.pins.items()}} if self.pins else {}),
            "entries": [entry.to_dict() for entry in self.entries],
        }

    def to_json(self) -> str:
        """The file form: header fields one per line, one bucket or range per line (diff-friendly)."""
        data = self.to_dict()
        entries = data.pop("entries")
        lines = ["{"]
        lines += [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in data.items()]
        lines.append(' "entries": [')
        for i, entry in enumerate(entries):
            name = "ranges" if "ranges" in entry else "buckets"
            rows = entry.pop(name)
            head = json.dumps(entry)[:-1]
            lines.append(f"  {head}, " + f'"{name}": [')
            lines += [
                f"   {json.dumps(b, sort_keys=False)}" + ("," if j < len(rows) - 1 else "")
                for j, b in enumerate(rows)
            ]
            lines.append("  ]}" + ("," if i < len(entries) - 1 else ""))
        lines.append(" ]")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the table atomically (a temporary file in the same folder, then os.replace), readable as
        any file this process creates is (the umask's mode, not the temporary file's 0600): a serving
        process of another user reads it. The temporary files of earlier saves of `path` whose process is
        gone (killed mid-save) are removed."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = self.to_json()
        _remove_orphans(p)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp", dir=p.parent)
        try:
            os.chmod(tmp, 0o666 & ~_umask())
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            crashpoints.point("emit.replace", str(p))
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- lookup ---------------------------------------------------------------------------------------

    def lookup(
        self,
        op: str,
        M: int,
        N: int,
        K: int,
        *,
        dtype: str = "bf16",
        layout: str = "nk",
        params: str = "",
        m_policy: str | None = None,
    ) -> Config | None:
        """The config for this shape, or None when its family (`Key`) is not in the table.

        `m_policy` overrides the table's policy for this call, for entries with buckets (an entry with
        M ranges always serves the range that holds M). `params`: the family's (`Problem.table_params`).
        """
        config: Config | None = find(self._index, (op, dtype, layout, N, K, params), M, m_policy)
        return config

    def lookup_row(
        self,
        op: str,
        M: int,
        N: int,
        K: int,
        *,
        dtype: str = "bf16",
        layout: str = "nk",
        params: str = "",
        m_policy: str | None = None,
    ) -> Bucket | Range | None:
        """Like `lookup`, but returns the row that serves M: its Range, or its Bucket (tuned m, time)."""
        row: Bucket | Range | None = find(self._index, (op, dtype, layout, N, K, params), M, m_policy, 2)
        return row

    def lookup_bucket(
        self,
        op: str,
        M: int,
        N: int,
        K: int,
        *,
        dtype: str = "bf16",
        layout: str = "nk",
        params: str = "",
        m_policy: str | None = None,
    ) -> Bucket | None:
        """Like `lookup`, but returns the whole bucket (its tuned m and time as well); None for a shape
        that is not in the table or is served by M ranges (see `lookup_row`)."""
        row = self.lookup_row(op, M, N, K, dtype=dtype, layout=layout, params=params, m_policy=m_policy)
        return row if isinstance(row, Bucket) else None

    def keys(self) -> tuple[Key, ...]:
        """The (op, dtype, layout, N, K, params) keys, sorted."""
        return tuple(entry.key for entry in self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __len__(self) -> int:
        """Number of rows (buckets and ranges) over all entries."""
        return sum(len(entry.rows()) for entry in self.entries)

    @property
    def version(self) -> int:
        """The file version this table is written as: the oldest that reads it the same (3 where an
        entry's params hold what versions 1 and 2 kept in fields of their own, else 2 with M ranges, 1
        without)."""
        if any(_holds_former_fields(entry.params) for entry in self.entries):
            return VERSION
        return 2 if self.ranged else 1

    @property
    def ranged(self) -> int:
        """How many entries are served by M ranges."""
        return sum(1 for entry in self.entries if entry.ranges)

    def __repr__(self) -> str:
        return (
            f"Table({self.target}, {len(self.entries)} shapes ({self.ranged} ranged), {len(self)} rows, "
            f"m_policy={self.m_policy!r}{', predicted' if self.predicted else ''}, source={self.source!r})"
        )


def canonical_dtype(dtype: object) -> str:
    """The canonical short name of `dtype` (a name or a torch dtype), or str(dtype) if it is unknown."""
    try:
        return normalize_dtype(str(dtype))
    except ValueError:
        return str(dtype)


def _holds_former_fields(params: str) -> bool:
    """Whether a family's `params` name a parameter that versions 1 and 2 kept in a field of its own."""
    return bool(params) and any(
        item.partition("=")[0] in _FORMER_FIELDS.values() for item in params.split(",")
    )


def _former_params(raw: Mapping[str, Any], params: Any) -> str:
    """The params of an entry of version 1 or 2: its "e" and "topk" (where not 0) as the parameters
    they are, among the op's own by name, before B's dtype (as `Problem.table_params` orders them);
    ValueError for a field that is no non-negative integer."""
    if not isinstance(params, str):
        raise ValueError(f"params must be a string, got {params!r}")
    items = [item for item in params.split(",") if item]
    for field, name in _FORMER_FIELDS.items():
        value = _check_int(field, raw.get(field, 0), 0)
        if value:
            items.append(f"{name}={value}")
    b_dtype = [item for item in items if item.startswith(B_DTYPE_KEY)]
    own = sorted(
        (item for item in items if not item.startswith(B_DTYPE_KEY)), key=lambda i: i.partition("=")[0]
    )
    return ",".join(own + b_dtype)


def _entry_from_dict(raw: Any, where: str, bad: Any, version: int = VERSION) -> Entry:
    if not isinstance(raw, dict):
        raise bad(f"{where} must be an object, got {type(raw).__name__}")
    fields = ("op", "dtype", "layout", "n", "k", *(_FORMER_FIELDS if version < 3 else ()), "params")
    shape = " (" + " ".join(f"{f}={raw[f]}" for f in fields if f in raw) + ")"
    missing = [f for f in ("op", "dtype", "layout", "n", "k") if f not in raw]
    if "buckets" not in raw and "ranges" not in raw:
        missing.append("buckets")
    if missing:
        raise bad(f"{where}{shape} lacks {', '.join(repr(f) for f in missing)}")
    if "buckets" in raw and "ranges" in raw:
        raise bad(f"{where}{shape} has both 'buckets' and 'ranges'; an entry has one of them")
    buckets = []
    ranges = []
    if "ranges" in raw:
        raw_ranges = raw["ranges"]
        if not isinstance(raw_ranges, list):
            raise bad(f"{where}.ranges{shape} must be a list")
        for j, rr in enumerate(raw_ranges):
            at = f"{where}.ranges[{j}]{shape}"
            if not isinstance(rr, dict) or "lo" not in rr:
                raise bad(f"{at} must be an object with 'lo', 'hi' and a 'config' object")
            try:
                ranges.append(Range.from_dict(rr))
            except (TypeError, ValueError) as exc:
                raise bad(f"{at}: {exc}") from None
    else:
        raw_buckets = raw["buckets"]
        if not isinstance(raw_buckets, list):
            raise bad(f"{where}.buckets{shape} must be a list")
        for j, rb in enumerate(raw_buckets):
            at = f"{where}.buckets[{j}]{shape}"
            if not isinstance(rb, dict) or "m" not in rb or not isinstance(rb.get("config"), dict):
                raise bad(f"{at} must be an object with 'm' and a 'config' object")
            try:
                predicted = rb.get("predicted", False)  # absent: measured (files before per-bucket markers)
                buckets.append(Bucket(rb["m"], Config(rb["config"]), rb.get("time_us"), predicted))
            except (TypeError, ValueError) as exc:
                raise bad(f"{at}: {exc}") from None
    try:
        params = raw.get("params", "")
        if version < 3:
            params = _former_params(raw, params)
        return Entry(
            raw["op"], raw["dtype"], raw["layout"], raw["n"], raw["k"], tuple(buckets), tuple(ranges), params
        )
    except (TypeError, ValueError) as exc:
        raise bad(f"{where}{shape}: {exc}") from None


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_orphans(path: Path) -> None:
    """Removes the temporary files `Table.save` left beside `path` in a process that no longer runs."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True
