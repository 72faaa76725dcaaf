"""The parts of other projects' file formats that ops bring, found without naming an op.

Rule: the database names no op. An op names the modules of its parts (its `format_modules`, read through
`autotune.core.registry.format_modules`); each such module holds `FORMATS`, a tuple of records of the
kinds the database's readers and writers take: `JsonReader` and `CsvReader` (the reader of a format
`autotune.db.interop` tells), `Fallback` (what a serving engine runs where no imported file covers a
shape), `Exporter` (an `autotune export --format`), and an op's rows of a table several ops share
(`autotune.db.aiter_gemm.AiterRows`, `autotune.db.tunableop.TunableOpRows`). `parts(kind)` gives every
record of one kind, in the ops' registration order. The modules are imported on the first call (they
import the database, so no op imports them itself).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from autotune.core.registry import format_modules

if TYPE_CHECKING:
    from autotune.core.config import Config
    from autotune.core.problem import Problem
    from autotune.core.target import Target

    from .foreign import Found
    from .store import NewTrial, Store

__all__ = ["CsvReader", "Export", "Exporter", "Fallback", "JsonReader", "exporter", "parts"]

T = TypeVar("T")


def parts(kind: type[T]) -> tuple[T, ...]:
    """Every record of `kind` the registered ops' format modules hold, in registration order."""
    return tuple(part for part in _loaded(format_modules()) if isinstance(part, kind))


@functools.lru_cache(maxsize=8)
def _loaded(modules: tuple[str, ...]) -> tuple[object, ...]:
    """The records of `modules`' `FORMATS`, in order (each set of modules imported once)."""
    return tuple(part for name in modules for part in importlib.import_module(name).FORMATS)


@dataclass(frozen=True)
class CsvReader:
    """The reader of the CSV files `autotune.db.interop` tells as `format` (e.g. "aiter", aiter's tuned
    fused-MoE CSV): `trials(path, lines, found)` yields the trials of the file `path` (its lines `lines`)
    as it reads them, what else it finds going to `found`; InteropError naming the file (and row) for a
    file it cannot read."""

    format: str
    trials: Callable[[Path, Iterable[str], Found], Iterator[NewTrial]]


@dataclass(frozen=True)
class JsonReader:
    """The reader of the JSON config files `autotune.db.interop` tells as `format` ("vllm"), files that name
    their shape in their names and come from several projects:

    - `plan(files, k, topk, flags, warn)`: (K, top-k, warnings) of each of `files` that the shape flags
      (`ShapeFlag`s, else `k` and `topk`) name; what concerns several files goes to `warn`;
    - `trials(path, open_text, found, *, k, topk, source_hash, project)`: the file's trials as read
      (`open_text` opens it, maybe more than once; `source_hash` None: the reader's own default), what
      else it finds going to `found`;
    - `held(store, trial)`: the configs other projects' files of the name of `trial`'s file hold in
      `store` (by project, then M): an import says where they differ.
    """

    format: str
    plan: Callable[..., dict[Path, tuple[int | None, int | None, list[str]]]]
    trials: Callable[..., Iterator[NewTrial]]
    held: Callable[[Store, NewTrial], dict[str, dict[int, Config]]]


@dataclass(frozen=True)
class Fallback:
    """What a serving engine runs for a shape that no imported file of its covers (vLLM's fused-MoE rule):
    `configs(problem, target, ms)` by M key (at each M of `ms` and where the rule steps), empty for a
    problem it does not serve; `source` names it in a report ("vLLM fallback")."""

    source: str
    configs: Callable[[Problem, Target, Iterable[int]], dict[int, Config]]


@dataclass(frozen=True)
class Export:
    """What an exporter wrote: each file with what it holds in words, and the notes of what was left out
    or conflicts."""

    files: tuple[tuple[Path, str], ...]
    notes: tuple[str, ...]

    @property
    def paths(self) -> list[Path]:
        return [path for path, _ in self.files]


@dataclass(frozen=True)
class Exporter:
    """Writes the database's configs as another project's files (`autotune export --format NAME`, NAME one
    of `formats`): `write(store, out_dir, fingerprint, NAME, **options)` → `Export`; StoreError where
    there is nothing to write, InteropError (a ValueError) for configs the format cannot hold."""

    formats: tuple[str, ...]
    write: Callable[..., Export]


def exporter(format: str) -> Exporter:
    """The exporter that writes `format`; ValueError naming the formats the ops' exporters write."""
    found = parts(Exporter)
    for one in found:
        if format in one.formats:
            return one
    known = ", ".join(name for one in found for name in one.formats)
    raise ValueError(f"no exporter writes {format!r}; known: {known}")
