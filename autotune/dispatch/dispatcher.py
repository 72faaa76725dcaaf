"""Run-time lookup: the tables valid for the running GPU, the fingerprint guard and the untuned-shapes log.

A serving process calls `lookup(op, M, N, K, ...)`; the first call builds the process-wide `Dispatcher`
from ``$AUTOTUNE_TABLES`` (an ``os.pathsep``-separated list of table files and folders of ``*.json``
tables). A table tuned on another GPU is refused with one warning. A shape that no table covers returns
None, is warned about once, and is appended to the untuned-shapes log (JSON lines) so that a later
``autotune sweep`` can tune it. The caller then runs the op's `fallback_config`
(`autotune.kernels.serve`): the vendor library (torch.mm, torch._scaled_mm where it runs the mode),
except where the heuristic default is measured ahead of it (each op's `fallback_config` says where) or
the vendor library cannot run the problem.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeAlias

from autotune.core.config import Config
from autotune.core.target import Target
from autotune.dispatch.table import Key, Table, TableError, _describe, _Hit, canonical_dtype, find

__all__ = [
    "ENV_TABLES",
    "ENV_UNTUNED_LOG",
    "Dispatcher",
    "UntunedShapeWarning",
    "default_dispatcher",
    "install_dispatcher",
    "load_tables",
    "lookup",
    "read_untuned_log",
    "untuned_log_path",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the tables the default dispatcher loads (files and folders, os.pathsep list).
ENV_TABLES = "AUTOTUNE_TABLES"
#: Environment variable with the path of the untuned-shapes log.
ENV_UNTUNED_LOG = "AUTOTUNE_UNTUNED_LOG"

#: What a Dispatcher is told about the running GPU: its device key, its Target, or None for no GPU.
DeviceKeySource: TypeAlias = "str | Target | Callable[[], str | Target | None] | None"

_LOG_FIELDS = ("op", "m", "n", "k", "dtype", "layout", "params", "device_key")


class UntunedShapeWarning(UserWarning):
    """A shape that no loaded table covers was looked up; the op's fallback config runs it."""


def untuned_log_path() -> Path:
    """The default untuned-shapes log: $AUTOTUNE_UNTUNED_LOG, else ~/.cache/autotune/untuned.jsonl."""
    env = os.environ.get(ENV_UNTUNED_LOG)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "autotune" / "untuned.jsonl"


class Dispatcher:
    """Holds the tables valid for the running GPU and answers lookups.

    Contract:
        * Thread-safe. Lookups read an index dict that is never mutated, only replaced whole (under a
          lock) when tables are added or replaced, so they take no lock. Loading is guarded by a lock.
        * A table whose `device_key` differs from the running GPU's is refused with one RuntimeWarning
          and never used. A table from the same GPU with another toolchain is used (logged at INFO).
        * When several tables cover a shape, the one added last wins.
        * `lookup` never raises for an unknown shape: it returns None, warns once per shape
          (`UntunedShapeWarning`) and appends one line per distinct (shape, M) to the untuned-shapes log.
          A failure to write that log is logged once and never raised.
        * The tuned path does no logging and allocates nothing beyond the key tuple.

    Args:
        tables: Tables to add, in order.
        device_key: The running GPU: its `Target.device_key()`, its Target, None to detect it lazily with
            `autotune.core.target.local_target()`, or a callable returning one of those (called once, lazily).
            Where no GPU is found, only tables of the Triton CPU interpreter are used.
        untuned_log: Path of the untuned-shapes log; default `untuned_log_path()` at the time of writing.
    """

    def __init__(
        self,
        tables: Iterable[Table] = (),
        *,
        device_key: DeviceKeySource = None,
        untuned_log: str | os.PathLike[str] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._device_key_source = device_key
        self._resolved = False
        self._running_key: str | None = None
        self._running_target: Target | None = None
        self._untuned_log = Path(untuned_log).expanduser() if untuned_log is not None else None
        self._tables: tuple[Table, ...] = ()
        self._index: dict[Key, _Hit] = {}
        self._warned_shapes: set[Key] = set()
        self._logged: set[tuple[Key, int]] = set()
        self._log_failed = False
        for table in tables:
            self.add(table)

    # -- the running GPU ------------------------------------------------------------------------------

    @property
    def device_key(self) -> str | None:
        """The running GPU's device key (None where no GPU was found); resolved on first use."""
        return self._running()[0]

    @property
    def running_target(self) -> Target | None:
        """The running GPU's Target where one was given or detected (None otherwise)."""
        return self._running()[1]

    @property
    def tables(self) -> tuple[Table, ...]:
        """The tables in use, in the order they were added."""
        return self._tables

    @property
    def untuned_log_path(self) -> Path:
        """The untuned-shapes log this dispatcher appends to."""
        return self._untuned_log if self._untuned_log is not None else untuned_log_path()

    def _running(self) -> tuple[str | None, Target | None]:
        if not self._resolved:
            with self._lock:
                if not self._resolved:
                    self._resolve()
        return self._running_key, self._running_target

    def _resolve(self) -> None:
        source = self._device_key_source
        value: str | Target | None
        try:
            if source is None:
                value = _detect_local_target()
            elif callable(source):
                value = source()
            else:
                value = source
        except Exception as exc:  # a user callable that fails must not break serving
            logger.warning("autotune: cannot determine the running GPU (%s); treating it as none", exc)
            value = None
        if isinstance(value, Target):
            self._running_target, self._running_key = value, value.device_key()
        else:
            self._running_target, self._running_key = None, value
        self._resolved = True

    # -- loading --------------------------------------------------------------------------------------

    def add(self, table: Table) -> bool:
        """Adds `table` if it was tuned on the running GPU; returns whether it is used.

        A table of another GPU is refused with one RuntimeWarning naming both GPUs.
        """
        with self._lock:
            if not self._accepts(table):
                return False
            index = dict(self._index)
            index.update(_index_of(table))
            self._tables = (*self._tables, table)
            self._index = index
        return True

    def set_tables(self, tables: Iterable[Table]) -> int:
        """Replaces all tables by those of `tables` valid for the running GPU; returns how many are used."""
        with self._lock:
            accepted = []
            for table in tables:
                if self._accepts(table):
                    accepted.append(table)
            index: dict[Key, _Hit] = {}
            for table in accepted:
                index.update(_index_of(table))
            self._tables = tuple(accepted)
            self._index = index
        return len(accepted)

    def _accepts(self, table: Table) -> bool:
        running_key, running_target = self._running()
        shapes = f"{len(table.entries)} shape{'s' if len(table.entries) != 1 else ''}"
        if running_key is None:
            if table.target.interpreter:
                logger.info("autotune: no GPU found; using interpreter table %s", table.source)
                return True
            warnings.warn(
                f"autotune table {table.source} was tuned on {table.target}, but no GPU is visible to this "
                f"process; the table is not used and its {shapes} run the fallback (the vendor library).",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        if table.device_key != running_key:
            running = str(running_target) if running_target else f"another GPU (device key {running_key})"
            warnings.warn(
                f"autotune table {table.source} was tuned on {table.target} (device key "
                f"{table.device_key}), but this process runs on {running}; the table is not used and its "
                f"{shapes} run the fallback (the vendor library). Emit a table on this GPU "
                f"(`autotune emit`) or point ${ENV_TABLES} at the right one.",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        if logger.isEnabledFor(logging.INFO):
            running_fp = (
                running_target.fingerprint()
                if running_target is not None
                else replace(table.target, toolchain=_toolchain()).fingerprint()
            )
            if table.fingerprint != running_fp:
                running_tc = running_target.toolchain if running_target is not None else _toolchain()
                logger.info(
                    "autotune: table %s was tuned on this GPU with another toolchain (%s; running %s); "
                    "using it",
                    table.source,
                    _format_toolchain(table.target.toolchain),
                    _format_toolchain(running_tc),
                )
            if table.predicted:
                logger.info("autotune: table %s holds predicted configs, not measured ones", table.source)
        return True

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
    ) -> Config | None:
        """The tuned config for this shape, or None when no table covers its family (`Key`; `params`: the
        op's own parameters, `Problem.table_params`).

        None also records the shape as untuned (see `note_untuned`).
        """
        config: Config | None = find(self._index, (op, dtype, layout, N, K, params), M)
        return config if config is not None else self._miss(op, M, N, K, dtype, layout, params)

    def _miss(
        self, op: str, M: int, N: int, K: int, dtype: str, layout: str, params: str = ""
    ) -> Config | None:
        """A shape no table covers (nor under its canonical dtype name): recorded as untuned."""
        self._record_untuned((op, canonical_dtype(dtype), layout, N, K, params), M, stacklevel=4)
        return None

    @contextlib.contextmanager
    def recording(self) -> Iterator[set[Key]]:
        """Inside: the keys of every lookup this dispatcher answers (through `lookup` too) are added to the
        set it yields, covered or not. For tools that ask which families a model's call looks up
        (`autotune.nn.confirm`); the hot path outside is unchanged."""
        seen: set[Key] = set()
        with self._lock:
            self._index = _Recording(self._index, seen)
        try:
            yield seen
        finally:
            with self._lock:
                if isinstance(self._index, _Recording):
                    self._index = dict(self._index)  # tables added inside are kept

    # -- untuned shapes -------------------------------------------------------------------------------

    def note_untuned(
        self, op: str, M: int, N: int, K: int, dtype: str, layout: str, params: str = ""
    ) -> None:
        """Records that this shape has no tuned config.

        Warns once per (op, dtype, layout, N, K, params) and appends one JSON line per distinct (shape, M)
        to the untuned-shapes log. Never raises for a log that cannot be written.
        """
        self._record_untuned((op, canonical_dtype(dtype), layout, N, K, params), M, stacklevel=3)

    def _record_untuned(self, key: Key, M: int, stacklevel: int) -> None:
        if (key, M) in self._logged:
            return
        with self._lock:
            if (key, M) in self._logged:
                return
            self._logged.add((key, M))
            first = key not in self._warned_shapes
            self._warned_shapes.add(key)
            path = self._append_untuned(key, M)
        if first:
            warnings.warn(
                f"autotune: no tuned config for {_describe(key)} on this GPU (first seen at M={M}); "
                f"the fallback runs (the vendor library). Run `autotune sweep` on it; the untuned-shapes "
                f"log is at "
                f"{path if path is not None else '<unwritable>'}",
                UntunedShapeWarning,
                stacklevel=stacklevel,
            )

    def _append_untuned(self, key: Key, M: int) -> Path | None:
        path: Path | None = None
        try:
            path = self.untuned_log_path
            op, dtype, layout, n, k, params = key
            record = {
                "op": op,
                "m": M,
                "n": n,
                "k": k,
                "dtype": dtype,
                "layout": layout,
                **({"params": params} if params else {}),
                "device_key": self._running()[0],
                "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            line = json.dumps(record, default=str) + "\n"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:  # one write of one line: safe to append to
                f.write(line)
        except Exception as exc:  # never let the log break a lookup
            if not self._log_failed:
                self._log_failed = True
                logger.warning("autotune: cannot write the untuned-shapes log %s: %s", path, exc)
        return path

    def __repr__(self) -> str:
        return f"Dispatcher({len(self._tables)} tables, {len(self._index)} shapes)"


def _detect_local_target() -> Target | None:
    """The GPU kernels run on here, or the interpreter target when TRITON_INTERPRET=1 and no GPU."""
    try:
        from autotune.core.target import running_target

        return running_target()
    except Exception as exc:  # ImportError without torch, driver errors
        logger.info("autotune: no GPU found (%s); only interpreter tables will be used", exc)
        return None


def _toolchain() -> dict[str, str]:
    from autotune.core.target import toolchain_versions

    return toolchain_versions()


def _format_toolchain(toolchain: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(toolchain.items())) or "unknown"


class _Recording(dict[Key, _Hit]):
    """An index that adds each key asked for to `seen`."""

    def __init__(self, index: dict[Key, _Hit], seen: set[Key]) -> None:
        super().__init__(index)
        self.seen = seen

    def get(self, key: Key, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)


def _index_of(table: Table) -> dict[Key, _Hit]:
    return dict(table._index)


# -- the untuned-shapes log ---------------------------------------------------------------------------


def read_untuned_log(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Reads the untuned-shapes log (default `untuned_log_path()`); [] when it does not exist.

    Blank lines are skipped; corrupt lines are skipped with a logged warning. Records that repeat an
    earlier one in everything but "time" are dropped, so each (shape, M, device) appears once.
    """
    p = Path(path).expanduser() if path is not None else untuned_log_path()
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not all(f in record for f in ("op", "m", "n", "k")):
            logger.warning("autotune: skipping corrupt line %d of the untuned-shapes log %s", lineno, p)
            continue
        try:
            key = tuple(record.get(f) for f in _LOG_FIELDS)
            hash(key)
        except TypeError:
            logger.warning("autotune: skipping corrupt line %d of the untuned-shapes log %s", lineno, p)
            continue
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


# -- the process-wide dispatcher ------------------------------------------------------------------------

_default: Dispatcher | None = None
_default_lock = threading.Lock()


def default_dispatcher() -> Dispatcher:
    """The process-wide Dispatcher, built on first use from $AUTOTUNE_TABLES.

    Never raises for a bad $AUTOTUNE_TABLES: a missing path or a file that is not a table is warned
    about and skipped (call `load_tables()` to get the error instead).
    """
    global _default
    d = _default
    if d is None:
        with _default_lock:
            if _default is None:
                d = Dispatcher()
                d.set_tables(_tables_from_env(strict=False))
                _default = d
            d = _default
    return d


def load_tables(path: str | os.PathLike[str] | None = None) -> Dispatcher:
    """Replaces the default dispatcher's tables and returns it.

    Args:
        path: A table file or a folder of ``*.json`` tables (read in name order; later ones win). None
            reads $AUTOTUNE_TABLES, an os.pathsep-separated list of files and folders, where entries
            that do not exist are warned about and skipped.

    Raises:
        TableError: `path` does not exist, or a file read is not a valid table. The dispatcher's
            tables are left as they were.
    """
    global _default
    if path is not None:
        tables = _read_tables(Path(path).expanduser(), strict=True)
    else:
        tables = _tables_from_env(strict=True)
    with _default_lock:
        if _default is None:
            _default = Dispatcher()
        d = _default
    d.set_tables(tables)
    return d


def lookup(
    op: str,
    M: int,
    N: int,
    K: int,
    *,
    dtype: str = "bf16",
    layout: str = "nk",
    params: str = "",
) -> Config | None:
    """`default_dispatcher().lookup(...)`: the tuned config, or None for an untuned shape."""
    d = _default
    if d is None:
        d = default_dispatcher()
    # find, not d.lookup: one call less
    config: Config | None = find(d._index, (op, dtype, layout, N, K, params), M)
    return config if config is not None else d._miss(op, M, N, K, dtype, layout, params)


def _tables_from_env(strict: bool) -> list[Table]:
    value = os.environ.get(ENV_TABLES, "")
    tables: list[Table] = []
    for item in value.split(os.pathsep):
        if not item.strip():
            continue
        p = Path(item.strip()).expanduser()
        if not p.exists():
            warnings.warn(
                f"autotune: ${ENV_TABLES} names {str(p)!r}, which does not exist; skipped",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        tables += _read_tables(p, strict=strict)
    return tables


def _read_tables(path: Path, strict: bool) -> list[Table]:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            logger.warning("autotune: no *.json tables in %s", path)
    elif path.exists():
        files = [path]
    else:
        raise TableError(f"table path {str(path)!r} does not exist")
    tables = []
    for file in files:
        try:
            tables.append(Table.load(file))
        except TableError as exc:
            if strict:
                raise
            warnings.warn(f"autotune: {exc}; skipped", RuntimeWarning, stacklevel=5)
    return tables


def install_dispatcher(dispatcher: Dispatcher | None) -> Dispatcher | None:
    """Makes `dispatcher` the process-wide one that `lookup` and the kernels' entry points use (None: the
    next lookup builds one from $AUTOTUNE_TABLES again); returns the one it replaces. For tools that serve
    chosen tables (`autotune verify`) and for tests."""
    global _default
    with _default_lock:
        previous, _default = _default, dispatcher
    return previous
