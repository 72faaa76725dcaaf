"""Database: what every part of the Store shares: the engine, the session context, the retry state, and
the ids of the GPU, kernel and problem rows."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.core import crashpoints
from autotune.core.problem import Problem
from autotune.core.target import Target

from .engine import (
    WRITE_OPTION,
    StoreError,
    check_sqlite_path,
    error_cause,
    make_engine,
    mask_url,
    resolve_url,
)
from .models import GpuModel, KernelModel, ProblemModel
from .retry import RETRY_DELAYS_S, retry_budget_s
from .rows import gpu_values, problem_values
from .schema import open_schema

__all__ = ["MIN_PREFIX", "Database"]

logger = logging.getLogger(__name__)

#: Minimum length of a GPU fingerprint prefix.
MIN_PREFIX = 6


class Database:
    """The state the parts of a `Store` share, and the one place they reach the database through.

    Holds the engine (None once closed), the session factory, the retry state of `autotune.db.retry`
    (one budget per outage for all the calls of a Store) and caches of row ids (GPU by fingerprint,
    kernel by name and source hash, problem by key), which are never stale: those rows are never
    deleted. Every transaction is one `_session`: committed on success, rolled back on any error, database
    errors raised as StoreError; a write transaction passes the crash points "db.commit" and
    "db.committed" (`autotune.core.crashpoints`) named after the method that runs it. Opening is
    `autotune.db.schema.open_schema`. Thread-safe as `Store` says.
    """

    def __init__(self, url: str | None = None, *, read_only: bool = False) -> None:
        self.url: str = resolve_url(url)
        self.read_only = read_only
        self._display_url = mask_url(self.url)
        try:
            parsed = make_url(self.url)
        except ArgumentError as exc:
            raise StoreError(f"invalid database URL {self._display_url!r}: {exc}") from exc
        if parsed.get_backend_name() == "sqlite":
            check_sqlite_path(parsed, read_only=read_only)
        self._engine: Engine | None = make_engine(parsed, read_only=read_only)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._gpu_ids: dict[str, int] = {}
        self._kernel_ids: dict[tuple[str, str], int] = {}
        self._problem_ids: dict[str, int] = {}
        self.retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S
        self.retry_budget_s: float = retry_budget_s()
        self._outage_since: float | None = None
        try:
            open_schema(self._require_engine(), self._display_url, read_only=self.read_only)
        except BaseException:
            self.close()
            raise
        logger.debug("opened %s", self._display_url)

    # -- opening and closing -------------------------------------------------------------------------

    @property
    def display_url(self) -> str:
        """The URL with its password masked."""
        return self._display_url

    def close(self) -> None:
        """Releases the connections. The Store cannot be used afterwards; closing twice is harmless."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._display_url!r})"

    def _require_engine(self) -> Engine:
        if self._engine is None:
            raise StoreError(f"the store of {self._display_url} is closed")
        return self._engine

    @contextmanager
    def _session(self, *, write: bool = False) -> Iterator[Session]:
        """One transaction: commits on success, rolls back on any error, raises database errors as
        StoreError. `write` takes SQLite's write lock at the start."""
        self._require_engine()
        session = self._sessions()
        try:
            if write:
                session.connection(execution_options={WRITE_OPTION: True})
            yield session
            if write and crashpoints.armed():
                crashpoints.point("db.commit", sys._getframe(2).f_code.co_name)
            session.commit()
            if write and crashpoints.armed():
                crashpoints.point("db.committed", sys._getframe(2).f_code.co_name)
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"database error on {self._display_url}: {error_cause(exc)}") from exc
        except OverflowError as exc:  # an integer the driver cannot bind (SQLite: 64 bits)
            session.rollback()
            raise StoreError(f"a value is out of range for {self._display_url}: {exc}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    # -- identities ----------------------------------------------------------------------------------

    def _get_or_create(self, model: Any, lookup: dict[str, Any], values: dict[str, Any]) -> int:
        for _ in range(3):
            with self._session(write=True) as session:
                existing = session.scalar(select(model.id).filter_by(**lookup))
                if existing is not None:
                    return int(existing)
                row = model(**lookup, **values)
                session.add(row)
                try:
                    session.flush()
                except IntegrityError:
                    session.rollback()  # another process inserted it first: look again
                    continue
                return int(row.id)
        raise StoreError(f"cannot create {model.__tablename__} row {lookup} in {self._display_url}")

    def gpu_id(self, target: Target) -> int:
        """The id of `target`'s row (by fingerprint), created on first use."""
        fingerprint = target.fingerprint()
        cached = self._gpu_ids.get(fingerprint)
        if cached is not None:
            return cached
        row_id = self._get_or_create(GpuModel, {"fingerprint": fingerprint}, gpu_values(target))
        self._gpu_ids[fingerprint] = row_id
        return row_id

    def kernel_id(self, name: str, source_hash: str) -> int:
        """The id of the kernel version (name, source hash), created on first use."""
        key = (name, source_hash)
        cached = self._kernel_ids.get(key)
        if cached is None:
            cached = self._get_or_create(KernelModel, {"name": name, "source_hash": source_hash}, {})
            self._kernel_ids[key] = cached
        return cached

    def problem_id(self, problem: Problem) -> int:
        """The id of `problem`'s row (by `Problem.key()`), created on first use."""
        key = problem.key()
        cached = self._problem_ids.get(key)
        if cached is None:
            cached = self._get_or_create(ProblemModel, {"key": key}, problem_values(problem))
            self._problem_ids[key] = cached
        return cached

    def _match_gpus(self, fingerprint: str | None) -> list[int] | None:
        """Ids of the GPUs `fingerprint` names (exactly, or as a unique prefix); None for no filter."""
        if fingerprint is None:
            return None
        fp = fingerprint.strip().lower()
        if len(fp) < MIN_PREFIX:
            raise ValueError(
                f"GPU fingerprint {fingerprint!r} is too short: give at least {MIN_PREFIX} characters"
            )
        with self._session() as session:
            rows = session.execute(
                select(GpuModel.id, GpuModel.fingerprint).where(
                    GpuModel.fingerprint.startswith(fp, autoescape=True)
                )
            ).all()
        exact = [gid for gid, f in rows if f == fp]
        if exact:
            return exact
        if len(rows) > 1:
            found = ", ".join(sorted(f for _, f in rows))
            raise ValueError(f"GPU fingerprint prefix {fingerprint!r} is ambiguous: it matches {found}")
        return [gid for gid, _ in rows]
