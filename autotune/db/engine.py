"""Database URLs and engines: which database, and how to connect to it (SQLite or PostgreSQL)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import StaticPool

__all__ = [
    "DEFAULT_DB",
    "ENV_VAR",
    "WRITE_OPTION",
    "StoreError",
    "check_sqlite_path",
    "error_cause",
    "make_engine",
    "mask_url",
    "read_only_sqlite",
    "resolve_url",
]

#: Environment variable naming the database when no URL is given.
ENV_VAR = "AUTOTUNE_DB"
#: The database used when neither a URL nor $AUTOTUNE_DB is given (relative to the working directory).
DEFAULT_DB = "autotune.db"
#: Connection execution option that marks a write transaction (SQLite takes its write lock at BEGIN).
WRITE_OPTION = "autotune_write"

_SQLITE_TIMEOUT_S = 30
_PG_CONNECT_TIMEOUT_S = 10


class StoreError(RuntimeError):
    """The database cannot be used: unwritable path, unreachable server, not an autotune database, a schema
    version this code does not support, or an error inside the database. The message says which."""


def resolve_url(url: str | None = None) -> str:
    """The database URL: `url`, else $AUTOTUNE_DB, else ./autotune.db.

    A bare file path (no ``://``) becomes ``sqlite:///<absolute path>``; ``:memory:`` an in-memory SQLite.
    """
    chosen = (url or "").strip() or os.environ.get(ENV_VAR, "").strip() or DEFAULT_DB
    if "://" in chosen:
        return chosen
    if chosen == ":memory:":
        return "sqlite:///:memory:"
    return f"sqlite:///{os.path.abspath(os.path.expanduser(chosen))}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite `url`; None for another database or an in-memory one."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def mask_url(url: str) -> str:
    """`url` with its password replaced by ``***``, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def error_cause(exc: BaseException) -> str:
    """The short reason of a SQLAlchemy error: the driver's first line, without SQL or links."""
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_sqlite_path(parsed: URL, *, read_only: bool = False) -> None:
    """Raises StoreError, naming the path, unless the SQLite file can be created or written (with
    `read_only`: unless it exists and can be read)."""
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    parent = path.parent
    if path.is_dir():
        raise StoreError(f"cannot use {path} as a database: it is a directory")
    if read_only:
        if not path.is_file():
            raise StoreError(f"no database at {path}")
        if not os.access(path, os.R_OK):
            raise StoreError(f"cannot open database {path}: the file is not readable")
        return
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise StoreError(f"cannot create database {path}: {parent} {why}")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(f"cannot open database {path}: the file is not readable and writable")
        mode = path.stat().st_mode
        if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):  # root may write it; we do not
            raise StoreError(
                f"cannot write database {path}: its mode ({stat.filemode(mode)}) marks it read-only; the "
                f"read-only verbs (status, best, report, ...) can read it, or `chmod u+w {path}` to write it"
            )
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create database {path}: directory {parent} is not writable")


def read_only_sqlite(parsed: URL) -> URL:
    """`parsed` (a SQLite file) opened read-only, leaving nothing beside it: ``mode=ro``, with
    ``immutable=1`` where no ``-wal`` file is there (no process has the database open, and a reader of
    a WAL database would otherwise create its ``-shm`` and ``-wal`` files) or where this process may not
    write the file or its folder and the ``-wal`` holds no changes. Where a ``-wal`` is there, a writer
    has the database open (or was killed): then it is opened ``mode=ro`` and what was committed to the
    ``-wal`` is read through its ``-shm``; a ``-shm`` or ``-wal`` that this process's opening created is
    removed again once the database is closed and no process has it open (`_ReadOnlyConnection`).
    Where the ``-wal`` holds changes, its ``-shm`` is missing and the folder cannot take one, StoreError
    says a writer must open the database first. An immutable reader does not see a writer that opens
    the database while it reads; the read-only verbs read for a moment."""
    path = _sqlite_file(parsed)
    writable = all(
        os.access(p, os.W_OK) and p.stat().st_mode & stat.S_IWUSR for p in (path, path.parent)
    )  # the mode bits too: root may write what they mark read-only, and should not
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    pending = wal.is_file() and wal.stat().st_size > 0
    if pending and not shm.is_file() and not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"database {path} has changes in {wal.name} that only a writer can fold in (its -shm file is "
            "gone and the folder is read-only): open it once with a writing verb, or copy the folder with "
            "both files somewhere writable"
        )
    immutable = not wal.exists() or not (writable or pending)
    query = "mode=ro" + ("&immutable=1" if immutable else "")
    return make_url(f"sqlite:///file:{quote(path.as_posix())}?{query}&uri=true")


def _sqlite_file(parsed: URL) -> Path:
    """The absolute path of a SQLite URL's file (a ``file:`` URI's path where it is one)."""
    database = parsed.database or ""
    if database.startswith("file:"):
        database = unquote(database[len("file:") :].partition("?")[0])
    path = Path(database)
    return path if path.is_absolute() else path.absolute()


#: Open connections of this process per SQLite file (made by `make_engine`), and, per file, the -wal and
#: -shm files that did not exist when this process first opened it read-only.
_open: dict[Path, int] = {}
_made: dict[Path, set[Path]] = {}
_open_lock = threading.Lock()
#: The byte of a -shm file that every connection using it holds a shared lock on (SQLite's unix VFS:
#: UNIX_SHM_DMS, 120 + 8).
_SHM_DMS_BYTE = 128


class _TrackedConnection(sqlite3.Connection):
    """A connection to the SQLite file `path` (set by `_connection_class`), counted while open."""

    path: Path

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with _open_lock:
            if not _open.get(self.path):
                self._first_open()
            _open[self.path] = _open.get(self.path, 0) + 1
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self._closed()
            raise
        self._counted = True

    def _first_open(self) -> None:
        """Called, under the lock, as this process opens the file while it has no other connection."""

    def close(self) -> None:
        super().close()
        if getattr(self, "_counted", False):
            self._counted = False
            self._closed()

    def _closed(self) -> None:
        with _open_lock:
            left = _open.get(self.path, 1) - 1
            if left > 0:
                _open[self.path] = left
                return
            _open.pop(self.path, None)
            self._last_closed()

    def _last_closed(self) -> None:
        """Called, under the lock, once this process has no connection to the file left."""


class _ReadOnlyConnection(_TrackedConnection):
    """A read-only connection that removes, once this process has closed its last connection to the file,
    the -shm and (empty) -wal files that did not exist when it opened it, where no other process has the
    database open (none holds a lock on the -shm)."""

    def _first_open(self) -> None:
        _made[self.path] = {f for f in _side_files(self.path) if not f.exists()}

    def _last_closed(self) -> None:
        made = {f for f in _made.pop(self.path, set()) if f.exists()}
        if made and _unused(Path(f"{self.path}-shm")):
            for f in sorted(made):
                if f.name.endswith("-wal") and f.stat().st_size > 0:
                    continue  # changes a writer made since: never thrown away
                with contextlib.suppress(OSError):
                    f.unlink()


def _side_files(path: Path) -> tuple[Path, Path]:
    return Path(f"{path}-wal"), Path(f"{path}-shm")


def _unused(shm: Path) -> bool:
    """Whether no process has the database of `shm` open in WAL mode: none holds its lock on the -shm
    file (this process has no connection to it left, so its own locks are gone). False where that cannot
    be told (no fcntl here, the file unreadable)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: leave the files
        return False
    if not shm.exists():
        return True
    try:
        with open(shm, "r+b") as f:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
            except OSError:
                return False
            fcntl.lockf(f, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE)
            return True
    except OSError:
        return False


def _connection_class(path: Path, read_only: bool) -> type[sqlite3.Connection]:
    """The connection class of SQLite file `path`: counted while open; read-only, also cleaning up."""
    base = _ReadOnlyConnection if read_only else _TrackedConnection
    return type(base.__name__, (base,), {"path": path})


def make_engine(parsed: URL, *, read_only: bool = False) -> Engine:
    """An engine for `parsed`. SQLite: WAL, a 30 s busy timeout, foreign keys on, and BEGIN IMMEDIATE for
    write transactions; with `read_only`, the file opened read-only (`read_only_sqlite`). PostgreSQL:
    pre-ping pooled connections and a 10 s connect timeout."""
    display = parsed.render_as_string(hide_password=True)
    try:
        if parsed.get_backend_name() == "sqlite":
            connect_args: dict[str, Any] = {"timeout": _SQLITE_TIMEOUT_S}
            kwargs: dict[str, Any] = {}
            if parsed.database in (None, "", ":memory:"):
                # One shared connection, or every connection would see its own empty database.
                connect_args["check_same_thread"] = False
                kwargs["poolclass"] = StaticPool
            else:
                if read_only and not (parsed.database or "").startswith("file:"):
                    parsed = read_only_sqlite(parsed)
                connect_args["factory"] = _connection_class(_sqlite_file(parsed), read_only)
            engine = create_engine(parsed, connect_args=connect_args, **kwargs)
            event.listen(engine, "connect", _sqlite_on_connect_ro if read_only else _sqlite_on_connect)
            event.listen(engine, "begin", _sqlite_on_begin)
            return engine
        connect_args = {}
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = _PG_CONNECT_TIMEOUT_S
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (ArgumentError, ImportError) as exc:
        raise StoreError(
            f"cannot use database {display}: {exc} (for PostgreSQL: pip install 'autotune[postgres]')"
        ) from exc


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # SQLAlchemy emits BEGIN itself (see _sqlite_on_begin); WAL lets readers run beside one writer.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA foreign_keys = ON")
        _set_wal(cursor)
    finally:
        cursor.close()


def _sqlite_on_connect_ro(dbapi_connection: Any, _record: Any) -> None:
    # As _sqlite_on_connect, but a read-only connection leaves the journal mode as it is.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA query_only = ON")
    finally:
        cursor.close()


def _set_wal(cursor: Any) -> None:
    """Switches to WAL. On a new file several processes may race to switch at once, and SQLite answers
    the losers "database is locked" without waiting on the busy timeout: retry for up to the timeout."""
    import sqlite3
    import time

    deadline = time.monotonic() + _SQLITE_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_on_begin(conn: Connection) -> None:
    # A write transaction takes the write lock up front: two processes that each read and then write
    # would otherwise fail at once with "database is locked" instead of waiting their turn.
    write = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
