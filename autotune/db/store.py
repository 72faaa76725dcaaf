"""Store: the tuned-config database. SQLite by default, PostgreSQL for a fleet of hosts."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    Table,
    and_,
    case,
    delete,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import VENDOR_BACKEND, Source, TrialResult, TrialStatus
from autotune.core.static import FEATURES_VERSION, StaticFeatures, StaticFinding
from autotune.core.target import Target

from .bulk import index_deferred, insert_new_rows, insert_new_supported, insert_rows
from .convert import gpu_record, result_of, trial_records
from .engine import (
    WRITE_OPTION,
    StoreError,
    check_sqlite_path,
    error_cause,
    make_engine,
    mask_url,
    resolve_url,
)
from .liveness import host as _host
from .liveness import lease_s, pid_alive
from .models import (
    ADDITIVE_TABLES,
    ALEMBIC_VERSION,
    BASE_VERSION,
    HEAD_REVISION,
    REVISIONS,
    SCHEMA_VERSION,
    SWEEP_STATUSES,
    Base,
    ClaimModel,
    GpuModel,
    KernelModel,
    MetaModel,
    ProblemModel,
    StaticFeaturesModel,
    SweepModel,
    TrialModel,
    utcnow,
)
from .records import (
    UNKNOWN_K,
    UNKNOWN_TOPK,
    GpuRecord,
    GpuSummary,
    Holdings,
    Summary,
    SweepRecord,
    TrialRecord,
    Winner,
)
from .unclosed import Unclosed, forget_unclosed, read_unclosed
from .vllm_rules import deployment_configs

__all__ = ["MIN_PREFIX", "VENDOR_BACKEND", "NewTrial", "Store", "StoreError", "resolve_url"]

logger = logging.getLogger(__name__)

#: Minimum length of a GPU fingerprint prefix.
MIN_PREFIX = 6
#: Waits, in seconds, before each retry of a write that failed with a transient database error (a
#: dropped connection, a server restarting, SQLite locked past its busy timeout).
RETRY_DELAYS_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
#: Environment variable overriding the retry budget (`retry_budget_s`), in seconds.
RETRY_ENV = "AUTOTUNE_RETRY_S"
_RETRY_BUDGET_S = 60.0

_F = TypeVar("_F", bound=Callable[..., Any])


def retry_budget_s() -> float:
    """Seconds a Store keeps retrying through one outage, all its calls together (60 by default,
    ``$AUTOTUNE_RETRY_S`` to change it)."""
    try:
        value = float(os.environ.get(RETRY_ENV, "") or _RETRY_BUDGET_S)
    except ValueError:
        return _RETRY_BUDGET_S
    return value if value >= 0 else _RETRY_BUDGET_S


#: Driver messages of operational errors that no retry cures.
_PERMANENT = ("database or disk is full", "readonly database", "disk i/o error", "no such table")


def _transient(exc: StoreError) -> bool:
    """Whether a failed write may succeed if tried again (the connection or a lock, not the data, and not
    a full disk or a read-only file)."""
    cause = exc.__cause__
    if isinstance(cause, DBAPIError) and cause.connection_invalidated:
        return True
    if not isinstance(cause, OperationalError):
        return False
    return not any(text in error_cause(cause).lower() for text in _PERMANENT)


def _retrying(method: _F) -> _F:
    """Retries `method` with back-off (`retry_delays_s`) on transient database errors, within one budget
    per outage shared by all the Store's calls (`retry_budget_s`): once an outage has lasted that long,
    every call tries once and raises, so that giving up (the data write, the heartbeat, the write that
    marks the sweep failed) takes about the budget in all. Safe for the Store's writes: each is one
    transaction, rolled back on error, and idempotent on its key."""

    @functools.wraps(method)
    def wrapped(self: Store, *args: Any, **kwargs: Any) -> Any:
        for delay in (*self.retry_delays_s, None):
            try:
                out = method(self, *args, **kwargs)
            except StoreError as exc:
                if not _transient(exc):
                    raise
                now = time.monotonic()
                since = getattr(self, "_outage_since", None)
                if since is None:
                    since = now
                    if hasattr(self, "_outage_since"):
                        self._outage_since = now
                left = since + getattr(self, "retry_budget_s", math.inf) - now
                if delay is None or left <= 0:
                    raise
                logger.info("%s; retrying in %g s", exc, min(delay, left))
                time.sleep(min(delay, left))
            else:
                if hasattr(self, "_outage_since"):
                    self._outage_since = None
                return out
        raise AssertionError("unreachable")  # pragma: no cover

    return cast(_F, wrapped)


@dataclass(frozen=True)
class NewTrial:
    """One trial for `Store.record_many`: what `Store.record` takes as arguments, as a value.

    `extra_json` is the JSON of `result.extra` as the Store writes it (`json.dumps`, keys sorted) where
    its maker has it already (an import's row, `autotune.db.foreign.JsonForm`); "": the Store encodes it.
    """

    target: Target
    kernel: str
    source_hash: str
    problem: Problem
    result: TrialResult
    source: Source = Source.MEASURED
    extra_json: str = ""


def _same_shape(problem: Problem, *, imported: Any) -> Any:
    """The SQL condition of a stored problem of `problem`'s shape at any M (its K and params), given op
    and N: with experts, also an imported one whose K and top-k were unknown (`UNKNOWN_K`), where
    `imported` (True, or a condition on the trial) holds."""
    p = ProblemModel
    same = (p.k == problem.K) & (p.params == problem.params_json())
    if problem.topk:
        twin = dataclasses.replace(problem, K=UNKNOWN_K, topk=UNKNOWN_TOPK)
        unknown = (p.k == twin.K) & (p.params == twin.params_json())
        same = same | (unknown if imported is True else imported & unknown)
    return same


class Store:
    """The database of GPUs, kernels, problems, sweeps, trials and static features.

    Opening creates the schema in an empty database (at the current schema version, stamped with its
    Alembic revision) and otherwise checks its schema version (and creates the tables of `ADDITIVE_TABLES`
    that a database of this version lacks); a database of an older version is refused with the command
    that upgrades it (``autotune db upgrade``). Every failure to open raises StoreError with the
    (password-masked) URL and the reason. Each write runs in its own transaction and
    is committed before the call returns, so a crash loses nothing that was recorded; `record_many`
    writes a whole batch (an import) in one transaction, all or nothing. `record` and `record_many` are
    idempotent on the trial key (GPU fingerprint, kernel name + source hash, problem, config hash,
    source), `record_features` on its key (arch, toolchain, kernel name + source hash, problem, config
    hash), also when processes race.

    Writes that fail with a transient error (a dropped connection, a restarting server, SQLite locked past
    its busy timeout) are retried with back-off (`retry_delays_s`) within one budget per outage for all
    calls together (`retry_budget_s`, about a minute) before StoreError; a full disk or a read-only
    file is not retried.

    With `read_only` the database is only read (a SQLite file opened read-only, so that a copy, a file
    of mode 0444 or one in a read-only folder can be inspected; nothing is created); a write raises
    StoreError.

    Thread safety: a Store may be shared by threads (each call has its own session and pooled connection;
    the sweep's per-GPU threads share one). Separate processes (and hosts, with PostgreSQL) may share one
    database, each with its own Store. Errors inside the database surface as
    StoreError; bad arguments as ValueError.
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
            self._open_schema()
        except BaseException:
            self.close()
            raise
        logger.debug("opened %s", self._display_url)

    # -- opening and closing -------------------------------------------------------------------------

    @property
    def display_url(self) -> str:
        """The URL with its password masked."""
        return self._display_url

    def _open_schema(self) -> None:
        engine = self._require_engine()
        try:
            tables = set(inspect(engine).get_table_names())
            if not tables and self.read_only:
                raise StoreError(f"{self._display_url} is not an autotune database (it holds no tables)")
            if not tables:
                self._create_schema(engine)
            else:
                self._check_schema(engine, tables)
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            reason = error_cause(exc)
            if "file is not a database" in reason:
                raise StoreError(f"{self._display_url} is not an autotune database ({reason})") from exc
            raise StoreError(f"cannot open database {self._display_url}: {reason}") from exc

    def _create_schema(self, engine: Engine) -> None:
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    Base.metadata.create_all(conn)
                    conn.execute(insert(MetaModel).values(key="schema_version", value=str(SCHEMA_VERSION)))
                    # Stamped at the head revision, as `alembic stamp head` would: nothing to migrate.
                    ALEMBIC_VERSION.create(conn)
                    conn.execute(insert(ALEMBIC_VERSION).values(version_num=HEAD_REVISION))
        except SQLAlchemyError:
            # Another process may have created the schema at the same moment: accept its work if whole.
            tables = set(inspect(engine).get_table_names())
            if "meta" not in tables:
                raise
            self._check_schema(engine, tables)
            return
        logger.info("created autotune database %s (schema version %d)", self._display_url, SCHEMA_VERSION)

    def _check_schema(self, engine: Engine, tables: set[str]) -> None:
        where = self._display_url
        if "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(
                f"{where} is not an autotune database (it has tables {shown} but no `meta` table); "
                "give another path or URL with --db or $AUTOTUNE_DB"
            )
        with engine.connect() as conn:
            # meta first, then alembic_version: an upgrade that commits in between is then seen as the
            # older version (and the message says to upgrade), never as a damaged database.
            value = conn.scalar(select(MetaModel.value).where(MetaModel.key == "schema_version"))
            revisions = (
                list(conn.scalars(select(ALEMBIC_VERSION.c.version_num)))
                if inspect(conn).has_table(ALEMBIC_VERSION.name)
                else None
            )
        try:
            found = int(value) if value is not None else None
        except ValueError:
            found = None
        if found is None:
            raise StoreError(f"{where} is not an autotune database (its `meta` table has no schema_version)")
        if found < BASE_VERSION:
            raise StoreError(
                f"database {where} has schema version {found}, this autotune expects {SCHEMA_VERSION} "
                "and has no migration from it: open it with the autotune version that wrote it"
            )
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"database {where} has schema version {found}, newer than this autotune supports "
                f"({SCHEMA_VERSION}): upgrade autotune"
            )
        if found < SCHEMA_VERSION:
            raise StoreError(
                f"database {where} has schema version {found}, this autotune needs {SCHEMA_VERSION}: "
                f"run `autotune db upgrade --db {shlex.quote(where)}` (back it up first)"
            )
        if revisions != [HEAD_REVISION]:
            said = "no alembic_version table" if revisions is None else f"alembic_version {revisions}"
            raise StoreError(
                f"database {where} says schema version {found} but has {said} (expected "
                f"[{REVISIONS[found]!r}]): it is damaged; `autotune db upgrade` cannot tell what it holds"
            )
        missing = set(Base.metadata.tables) - tables
        damaged = sorted(missing - set(ADDITIVE_TABLES))
        if damaged:
            raise StoreError(
                f"database {where} (schema version {found}) lacks tables {', '.join(damaged)}: "
                "it is damaged or not an autotune database"
            )
        if missing and not self.read_only:  # read-only: read as empty where asked
            self._add_tables(engine, sorted(missing))

    def _add_tables(self, engine: Engine, names: list[str]) -> None:
        """Creates the additive tables `names` that a database of the current schema version lacks."""
        wanted = [Base.metadata.tables[name] for name in names]
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    Base.metadata.create_all(conn, tables=wanted, checkfirst=True)
        except SQLAlchemyError:
            # Another process may have added them at the same moment: accept its work if whole.
            if set(names) - set(inspect(engine).get_table_names()):
                raise
            return
        logger.info("added tables %s to %s", ", ".join(names), self._display_url)

    def close(self) -> None:
        """Releases the connections. The Store cannot be used afterwards; closing twice is harmless."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self._display_url!r})"

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
        row_id = self._get_or_create(GpuModel, {"fingerprint": fingerprint}, _gpu_values(target))
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
            cached = self._get_or_create(ProblemModel, {"key": key}, _problem_values(problem))
            self._problem_ids[key] = cached
        return cached

    # -- sweeps --------------------------------------------------------------------------------------

    @_retrying
    def start_sweep(
        self,
        name: str,
        spec_text: str,
        target: Target,
        *,
        problems_total: int | None = None,
        workers: int | None = None,
        log_path: str | None = None,
    ) -> int:
        """Records a sweep as running on this host (this process) and `target`; returns its id.

        Sweeps of this host left "running" by a process that no longer exists are closed first: "failed"
        with its reason where the process could not write its end (the database was lost:
        `autotune.db.unclosed`), else "interrupted" (killed with -9, a power cut)."""

        gpu = self.gpu_id(target)
        now = utcnow()
        unclosed = read_unclosed(self.url)
        closed: dict[int, Unclosed | None] = {}
        with self._session(write=True) as session:
            for row in session.scalars(
                select(SweepModel).where(SweepModel.host == _host(), SweepModel.status == "running")
            ):
                if row.pid is not None and row.pid != os.getpid() and not pid_alive(row.pid):
                    ending = closed[row.id] = unclosed.get(row.id)
                    row.status = ending.status if ending else "interrupted"
                    row.error = ending.error if ending else None
                    row.finished_at = row.heartbeat_at or now
            row = SweepModel(name=name, spec_text=spec_text, host=_host(), status="running", gpu_id=gpu,
                             pid=os.getpid(), heartbeat_at=now, problems_total=problems_total,
                             problems_done=0, trials_done=0, workers=workers, log_path=log_path)  # fmt: skip
            session.add(row)
            session.flush()
            sweep_id = int(row.id)
        forget_unclosed(self.url, {i: end for i, end in closed.items() if end is not None})
        return sweep_id

    @_retrying
    def touch_sweep(
        self, sweep_id: int, *, trials_done: int | None = None, problems_done: int | None = None
    ) -> None:
        """The sweep's heartbeat (now) and progress counts; the leases of the problems it holds run
        `lease_s()` from now."""
        with self._session(write=True) as session:
            row = session.get(SweepModel, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._display_url}")
            now = row.heartbeat_at = utcnow()
            if trials_done is not None:
                row.trials_done = trials_done
            if problems_done is not None:
                row.problems_done = problems_done
            c = ClaimModel
            session.execute(
                update(c)
                .where(c.sweep_id == sweep_id, c.done.is_(False))
                .values(lease_until=now + timedelta(seconds=lease_s()))
            )

    @_retrying
    def finish_sweep(self, sweep_id: int, status: str = "finished", error: str | None = None) -> None:
        """Marks a sweep finished, interrupted or failed (with `error`, its reason), and releases the
        problems it still holds (they are free for the other processes of its work at once). Raises
        StoreError for an unknown id."""
        if status not in SWEEP_STATUSES:
            raise ValueError(f"unknown sweep status {status!r}; known: {', '.join(SWEEP_STATUSES)}")
        with self._session(write=True) as session:
            row = session.get(SweepModel, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._display_url}")
            row.status = status
            row.error = error
            now = row.finished_at = row.heartbeat_at = utcnow()
            c = ClaimModel  # what it still holds is free for the others at once
            session.execute(
                update(c).where(c.sweep_id == sweep_id, c.done.is_(False)).values(lease_until=now)
            )

    @_retrying
    def claim(self, work: str, item: str, sweep_id: int) -> str:
        """Claims `item` of the shared sweep `work` for sweep `sweep_id`, with a lease of `lease_s()`.

        Returns "claimed" (now held by `sweep_id`, also when it held it already or took it over from a
        holder whose lease ran out or, on this host, whose process is gone), "held" (another live sweep
        holds it) or "done" (its trials are all stored). Atomic across processes and hosts."""
        c = ClaimModel
        for _ in range(3):
            now = utcnow()
            until = now + timedelta(seconds=lease_s())
            with self._session(write=True) as session:
                row = session.scalar(select(c).where(c.work == work, c.item == item).with_for_update())
                if row is None:
                    session.add(c(work=work, item=item, sweep_id=sweep_id, lease_until=until, done=False,
                                  claimed_at=now))  # fmt: skip
                    try:
                        session.flush()
                    except IntegrityError:
                        session.rollback()  # another process claimed it first: look again
                        continue
                    return "claimed"
                if row.done:
                    return "done"
                if row.sweep_id != sweep_id and _aware(row.lease_until) > now:
                    holder = session.get(SweepModel, row.sweep_id)
                    if holder is None or not _gone(holder):
                        return "held"
                    if holder.status == "running":
                        holder.status = "interrupted"
                        holder.finished_at = holder.heartbeat_at or now
                if row.sweep_id != sweep_id:
                    logger.info("sweep %d takes %s over from sweep %d", sweep_id, item, row.sweep_id)
                    row.claimed_at = now
                row.sweep_id, row.lease_until = sweep_id, until
                return "claimed"
        raise StoreError(f"cannot claim {item} in {self._display_url}")

    def claimable(self, work: str, items: Sequence[str], sweep_id: int) -> list[str]:
        """The items of `items` that `claim` would now give sweep `sweep_id` ("claimed" or "done"): never
        claimed, done, held by it, or held by a sweep whose lease ran out or, on this host, whose process
        is gone. Read only: cheap enough to ask every fraction of a second while waiting."""
        c, sw = ClaimModel, SweepModel
        if not items:
            return []
        rows: dict[str, tuple[bool, int, datetime, SweepModel | None]] = {}
        with self._session() as session:
            for start in range(0, len(items), _IN_CHUNK):
                stmt = (
                    select(c.item, c.done, c.sweep_id, c.lease_until, sw)
                    .outerjoin(sw, sw.id == c.sweep_id)
                    .where(c.work == work, c.item.in_(list(items[start : start + _IN_CHUNK])))
                )
                for item, done, holder, until, sweep in session.execute(stmt):
                    rows[item] = (bool(done), int(holder), until, sweep)
        now = utcnow()

        def free(row: tuple[bool, int, datetime, SweepModel | None] | None) -> bool:
            if row is None or row[0] or row[1] == sweep_id or _aware(row[2]) <= now:
                return True
            return row[3] is None or _gone(row[3])

        return [item for item in items if free(rows.get(item))]

    @_retrying
    def release(self, work: str, item: str, sweep_id: int, *, done: bool) -> None:
        """Gives up `sweep_id`'s claim on `item` of `work`: marked done (never run again by a sweep of this
        work), or free for another process at once. A claim another sweep holds is left alone."""
        c = ClaimModel
        values: dict[str, Any] = {"done": True} if done else {"lease_until": utcnow()}
        with self._session(write=True) as session:
            session.execute(
                update(c).where(c.work == work, c.item == item, c.sweep_id == sweep_id).values(**values)
            )

    def held(self, sweep_ids: Sequence[int]) -> dict[int, list[str]]:
        """The items each sweep of `sweep_ids` holds (not done), by sweep id, in the order claimed."""
        c = ClaimModel
        out: dict[int, list[str]] = {}
        if not sweep_ids:
            return out
        stmt = (
            select(c.sweep_id, c.item)
            .where(c.sweep_id.in_(list(sweep_ids)), c.done.is_(False))
            .order_by(c.claimed_at, c.id)
        )
        with self._session() as session:
            for sweep_id, item in session.execute(stmt):
                out.setdefault(int(sweep_id), []).append(str(item))
        return out

    def sweeps(self, *, limit: int = 20, status: str | None = None) -> list[SweepRecord]:
        """The latest `limit` sweeps of every host, newest first (only those of `status` if given)."""
        query = (
            select(SweepModel, GpuModel.name, GpuModel.fingerprint)
            .join(GpuModel, GpuModel.id == SweepModel.gpu_id)
            .order_by(SweepModel.id.desc())
            .limit(limit)
        )
        if status is not None:
            query = query.where(SweepModel.status == status)
        with self._session() as session:
            found = list(session.execute(query))
            stored = dict(
                session.execute(
                    select(TrialModel.sweep_id, func.count())
                    .where(TrialModel.sweep_id.in_([r.id for r, _, _ in found]))
                    .group_by(TrialModel.sweep_id)
                ).all()
            )
            return [
                SweepRecord(
                    id=r.id,
                    name=r.name,
                    host=r.host,
                    status=r.status,
                    gpu=gpu,
                    started_at=r.started_at,
                    finished_at=r.finished_at,
                    heartbeat_at=r.heartbeat_at,
                    pid=r.pid,
                    problems_total=r.problems_total,
                    problems_done=r.problems_done,
                    trials_done=stored.get(r.id, r.trials_done),  # the rows: a sweep's last moments too
                    workers=r.workers,
                    log_path=r.log_path,
                    gpu_fingerprint=fingerprint,
                    spec_text=r.spec_text,
                    pid_alive=(
                        pid_alive(r.pid)
                        if r.host == _host() and r.pid is not None and r.status == "running"
                        else None
                    ),
                    error=r.error,
                )
                for r, gpu, fingerprint in found
            ]

    # -- trials --------------------------------------------------------------------------------------

    @_retrying
    def record(
        self,
        *,
        target: Target,
        kernel: str,
        source_hash: str,
        problem: Problem,
        result: TrialResult,
        sweep_id: int | None = None,
        source: Source = Source.MEASURED,
    ) -> bool:
        """Writes one trial and commits it. Returns False (writing nothing) if its key is already stored."""
        source = Source(source)
        config = result.config
        extra = _extra_json(result)
        gpu, kernel_row, problem_row = (
            self.gpu_id(target),
            self.kernel_id(kernel, source_hash),
            self.problem_id(problem),
        )
        digest = config.digest()
        key = (
            TrialModel.gpu_id == gpu,
            TrialModel.kernel_id == kernel_row,
            TrialModel.problem_id == problem_row,
            TrialModel.config_hash == digest,
            TrialModel.source == source.value,
        )
        with self._session(write=True) as session:
            if session.scalar(select(TrialModel.id).where(*key)) is not None:
                return False
            session.add(_trial_row(result, source, extra, gpu, kernel_row, problem_row, sweep_id))
            try:
                session.flush()
            except IntegrityError as exc:
                session.rollback()
                if session.scalar(select(TrialModel.id).where(*key)) is not None:
                    return False  # another process recorded the same trial first
                raise StoreError(
                    f"cannot record trial {config.short()} of {problem}: {error_cause(exc)}"
                ) from exc
        logger.debug("recorded %s %s %s: %s", kernel, problem, config.short(), result.status.value)
        return True

    @_retrying
    def record_many(self, trials: Sequence[NewTrial], *, sweep_id: int | None = None) -> list[bool]:
        """Writes every trial of `trials` in ONE transaction: all of them or, on any error, none.

        The GPU, kernel and problem rows they need are created in the same transaction. Trials whose key
        is already stored, or repeated within `trials`, are skipped, so writing the same batch twice
        writes nothing the second time. Returns, per trial in order, True if it was written. Raises
        ValueError (before writing) for an extra that is not JSON-serializable, StoreError for an error in
        the database; either way nothing is written.
        """
        items = list(trials)
        extras = [t.extra_json or _extra_json(t.result) for t in items]
        if not items:
            return []
        return self._record_many(items, extras, sweep_id, replace_final=False)

    def record_stream(self, trials: Iterable[NewTrial], *, chunk: int = 5000) -> int:
        """Writes `trials` (an import's, read as they come) in ONE transaction, `chunk` at a time, so
        that memory holds one chunk however many there are: all of them or, on any error (the
        iterator's own included, which propagates), none. Trials whose key is already stored, or
        repeated, are skipped. Returns how many were written. Not retried: the iterator cannot be read
        twice; StoreError for an error in the database, ValueError for an extra that is not
        JSON-serializable. Into a SQLite database without problems, the problems' shape index is built
        once at the end (`index_deferred`)."""
        written = 0
        gpu_ids: dict[str, int] = {}
        kernel_ids: dict[tuple[str, str], int] = {}
        with self._session(write=True) as session:
            look_first = session.scalar(select(ProblemModel.id).limit(1)) is not None
            with index_deferred(session.connection(), _PROBLEMS_SHAPE, when=not look_first):
                for batch in _batches(trials, chunk):
                    written += self._write_chunk(session, batch, gpu_ids, kernel_ids, look_first)
                    batch.clear()  # gone before the next chunk is read: memory holds one
        self._gpu_ids.update(gpu_ids)
        self._kernel_ids.update(kernel_ids)
        logger.debug("streamed %d new trials in one transaction", written)
        return written

    def _write_chunk(
        self,
        session: Session,
        batch: list[NewTrial],
        gpu_ids: dict[str, int],
        kernel_ids: dict[tuple[str, str], int],
        look_first: bool,
    ) -> int:
        """Inserts the trials of `batch` whose key is not stored yet (`insert_rows`); the GPU, kernel and
        problem rows they need are created first (`_add_rows`; `look_first`: whether the problems table
        held rows before). `gpu_ids` and `kernel_ids` cache ids."""
        t = TrialModel
        extras = [item.extra_json or _extra_json(item.result) for item in batch]
        by_object: dict[int, str] = {}  # a reader hands out few Target objects: hash each once
        for item in batch:
            if id(item.target) not in by_object:
                by_object[id(item.target)] = item.target.fingerprint()
        fingerprints = {by_object[id(item.target)]: item.target for item in batch}
        new_gpus = {fp: target for fp, target in fingerprints.items() if fp not in gpu_ids}
        if new_gpus:
            wanted = {fp: {"fingerprint": fp, **_gpu_values(target)} for fp, target in new_gpus.items()}
            gpu_ids.update(_ensure_rows(session, GpuModel, GpuModel.fingerprint, wanted))
        for name, source_hash in sorted(
            {(item.kernel, item.source_hash) for item in batch} - set(kernel_ids)
        ):
            kernel_ids[(name, source_hash)] = _kernel_row(session, name, source_hash)
        keys = [item.problem.key() for item in batch]
        problems = dict(zip(keys, (item.problem for item in batch), strict=True))
        problem_ids, created = _add_rows(
            session,
            ProblemModel,
            ProblemModel.key,
            _PROBLEM_COLUMNS,
            {k: _problem_row(k, p) for k, p in problems.items()},
            look_first=look_first,
        )
        pids = sorted({i for k, i in problem_ids.items() if k not in created})  # a new problem has no trials
        gids = sorted({gpu_ids[fp] for fp in fingerprints})
        kids = sorted({kernel_ids[(item.kernel, item.source_hash)] for item in batch})
        existing: set[tuple[int, int, int, str, str]] = set()
        for start in range(0, len(pids), _IN_CHUNK):  # GPU and kernel first: the key's index serves it
            stmt = select(t.gpu_id, t.kernel_id, t.problem_id, t.config_hash, t.source).where(
                t.gpu_id.in_(gids), t.kernel_id.in_(kids), t.problem_id.in_(pids[start : start + _IN_CHUNK])
            )
            existing.update((g, k, p, h, s) for g, k, p, h, s in session.execute(stmt))
        rows: list[tuple[Any, ...]] = []
        now, host = utcnow(), _host()
        configs: dict[int, tuple[str, str, str]] = {}  # a reader hands out few Config objects too
        for item, key, extra in zip(batch, keys, extras, strict=True):
            source = _SOURCE_VALUES.get(item.source) or Source(item.source).value
            config = item.result.config
            of_config = configs.get(id(config))
            if of_config is None:
                of_config = configs[id(config)] = (config.backend, config.canonical(), config.digest())
            ids = (None, gpu_ids[by_object[id(item.target)]], kernel_ids[(item.kernel, item.source_hash)],
                   problem_ids[key])  # fmt: skip
            trial_key = (*ids[1:], of_config[2], source)
            if trial_key in existing:
                continue
            existing.add(trial_key)
            rows.append(_trial_tuple(item.result, of_config, source, extra, ids, now, host))
        insert_rows(session.connection(), TRIALS, _TRIAL_COLUMNS, rows)
        return len(rows)

    @_retrying
    def record_final(
        self,
        *,
        target: Target,
        problem: Problem,
        results: Sequence[tuple[str, str, TrialResult]],
        sweep_id: int | None = None,
    ) -> None:
        """Stores a final round of `problem` on `target` ((kernel, source hash, result) per finalist, as
        `Source.FINAL` trials) in one transaction that first deletes the GPU's earlier final round of
        the problem: the final times stored together are always of one head-to-head round."""
        items = [
            NewTrial(target, kernel, source_hash, problem, r, Source.FINAL)
            for kernel, source_hash, r in results
        ]
        if items:
            self._record_many(items, [_extra_json(t.result) for t in items], sweep_id, replace_final=True)

    def _record_many(
        self, items: list[NewTrial], extras: list[str], sweep_id: int | None, *, replace_final: bool
    ) -> list[bool]:
        for attempt in range(3):
            try:
                written, ids = self._record_many_once(items, extras, sweep_id, replace_final)
            except StoreError as exc:
                # Another process inserted one of the same rows at the same moment: look again.
                if attempt == 2 or not isinstance(exc.__cause__, IntegrityError):
                    raise
                continue
            gpu_ids, kernel_ids, problem_ids = ids
            self._gpu_ids.update(gpu_ids)
            self._kernel_ids.update(kernel_ids)
            self._problem_ids.update(problem_ids)
            logger.debug("recorded %d of %d trials in one transaction", sum(written), len(items))
            return written
        raise AssertionError("unreachable")  # pragma: no cover

    def _record_many_once(
        self, items: list[NewTrial], extras: list[str], sweep_id: int | None, replace_final: bool = False
    ) -> tuple[list[bool], tuple[dict[str, int], dict[tuple[str, str], int], dict[str, int]]]:
        targets = {t.target.fingerprint(): t.target for t in items}
        problems = {t.problem.key(): t.problem for t in items}
        kernels = {(t.kernel, t.source_hash) for t in items}
        t = TrialModel
        with self._session(write=True) as session:
            gpu_ids = _ensure_rows(
                session,
                GpuModel,
                GpuModel.fingerprint,
                {fp: {"fingerprint": fp, **_gpu_values(target)} for fp, target in targets.items()},
            )
            problem_ids = _ensure_rows(
                session,
                ProblemModel,
                ProblemModel.key,
                {key: {"key": key, **_problem_values(problem)} for key, problem in problems.items()},
            )
            kernel_ids: dict[tuple[str, str], int] = {}
            for name, source_hash in sorted(kernels):
                kernel_ids[(name, source_hash)] = _kernel_row(session, name, source_hash)
            pids = sorted(set(problem_ids.values()))
            if replace_final:  # the earlier final round of these GPUs and problems
                session.execute(
                    delete(t).where(
                        t.gpu_id.in_(sorted(set(gpu_ids.values()))),
                        t.problem_id.in_(pids),
                        t.source == Source.FINAL.value,
                    )
                )
            existing: set[tuple[int, int, int, str, str]] = set()
            for start in range(0, len(pids), _IN_CHUNK):
                stmt = select(t.gpu_id, t.kernel_id, t.problem_id, t.config_hash, t.source).where(
                    t.gpu_id.in_(sorted(set(gpu_ids.values()))),
                    t.kernel_id.in_(sorted(set(kernel_ids.values()))),
                    t.problem_id.in_(pids[start : start + _IN_CHUNK]),
                )
                existing.update((g, k, p, h, s) for g, k, p, h, s in session.execute(stmt))
            written: list[bool] = []
            for item, extra in zip(items, extras, strict=True):
                source = Source(item.source)
                gpu = gpu_ids[item.target.fingerprint()]
                kernel_row = kernel_ids[(item.kernel, item.source_hash)]
                problem_row = problem_ids[item.problem.key()]
                key = (gpu, kernel_row, problem_row, item.result.config.digest(), source.value)
                if key in existing:
                    written.append(False)
                    continue
                existing.add(key)
                session.add(_trial_row(item.result, source, extra, gpu, kernel_row, problem_row, sweep_id))
                written.append(True)
            session.flush()
        return written, (gpu_ids, kernel_ids, problem_ids)

    @_retrying
    def finished(
        self,
        *,
        target: Target,
        problem: Problem,
        kernels: dict[str, tuple[str, str]],
        source: Source = Source.MEASURED,
    ) -> dict[str, TrialResult]:
        """Stored trials (ok or failed) of `problem` on `target`, as config hash → TrialResult (cached).

        `kernels` maps backend → (kernel name, source hash); only trials of that kernel version count, so a
        changed kernel source is tuned afresh. Used to resume a sweep without re-running anything.
        """
        if not kernels:
            return {}
        stmt = (
            select(TrialModel, KernelModel.name, KernelModel.source_hash)
            .join(KernelModel, TrialModel.kernel_id == KernelModel.id)
            .join(GpuModel, TrialModel.gpu_id == GpuModel.id)
            .join(ProblemModel, TrialModel.problem_id == ProblemModel.id)
            .where(
                GpuModel.fingerprint == target.fingerprint(),
                ProblemModel.key == problem.key(),
                TrialModel.source == Source(source).value,
                KernelModel.name.in_({name for name, _ in kernels.values()}),
            )
            .order_by(TrialModel.id)
        )
        out: dict[str, TrialResult] = {}
        with self._session() as session:
            for trial, name, source_hash in session.execute(stmt):
                if kernels.get(trial.backend) == (name, source_hash):
                    out[trial.config_hash] = result_of(trial)
        return out

    # -- static features -----------------------------------------------------------------------------

    @_retrying
    def record_features(
        self,
        *,
        arch: str,
        toolchain: Mapping[str, str],
        kernel: str,
        source_hash: str,
        problem: Problem,
        config: Config,
        features: StaticFeatures,
        findings: Sequence[tuple[str, str] | StaticFinding] = (),
    ) -> bool:
        """Writes the static features of one config compiled for `arch` with `toolchain`, and the findings
        of the static checks on them (``(check, reason)`` pairs or StaticFindings), and commits.

        Returns False (writing nothing) if the key (arch, toolchain, kernel name + source hash, problem,
        config hash) is already stored, also when another process stored it first. Raises ValueError
        when `features` are of another arch or an argument cannot be stored.
        """
        if not arch or features.arch != arch:
            raise ValueError(f"features of arch {features.arch!r} cannot be recorded for arch {arch!r}")
        toolchain_json, toolchain_hash = _toolchain_key(toolchain)
        pairs = _finding_pairs(findings)
        kernel_row, problem_row = self.kernel_id(kernel, source_hash), self.problem_id(problem)
        digest = config.digest()
        m = StaticFeaturesModel
        key = (
            m.arch == arch,
            m.toolchain_hash == toolchain_hash,
            m.kernel_id == kernel_row,
            m.problem_id == problem_row,
            m.config_hash == digest,
        )
        with self._session(write=True) as session:
            if session.scalar(select(m.id).where(*key)) is not None:
                return False
            session.add(
                m(
                    arch=arch,
                    toolchain=toolchain_json,
                    toolchain_hash=toolchain_hash,
                    kernel_id=kernel_row,
                    problem_id=problem_row,
                    backend=config.backend,
                    config_json=config.canonical(),
                    config_hash=digest,
                    compiled=bool(features.compiled),
                    features_json=features.to_json(),
                    findings_json=json.dumps(pairs),
                    compile_s=float(features.compile_s),
                )
            )
            try:
                session.flush()
            except IntegrityError as exc:
                session.rollback()
                if session.scalar(select(m.id).where(*key)) is not None:
                    return False  # another process recorded the same features first
                raise StoreError(
                    f"cannot record static features of {config.short()} of {problem}: {error_cause(exc)}"
                ) from exc
        logger.debug("recorded static features %s %s %s on %s", kernel, problem, config.short(), arch)
        return True

    @_retrying
    def features(
        self,
        *,
        arch: str,
        toolchain: Mapping[str, str],
        problem: Problem,
        kernels: Mapping[str, tuple[str, str]],
    ) -> dict[str, tuple[StaticFeatures, list[tuple[str, str]]]]:
        """Stored static features of `problem` on `arch` with `toolchain`, as config hash → (features,
        findings).

        `kernels` maps backend → (kernel name, source hash); only features of that kernel version count,
        as in `finished`, so a changed kernel source is compiled afresh.
        """
        if not kernels:
            return {}
        _, toolchain_hash = _toolchain_key(toolchain)
        m = StaticFeaturesModel
        stmt = (
            select(m, KernelModel.name, KernelModel.source_hash)
            .join(KernelModel, m.kernel_id == KernelModel.id)
            .join(ProblemModel, m.problem_id == ProblemModel.id)
            .where(
                m.arch == arch,
                m.toolchain_hash == toolchain_hash,
                ProblemModel.key == problem.key(),
                KernelModel.name.in_({name for name, _ in kernels.values()}),
            )
            .order_by(m.id)
        )
        out: dict[str, tuple[StaticFeatures, list[tuple[str, str]]]] = {}
        with self._session() as session:
            for row, name, source_hash in session.execute(stmt):
                if kernels.get(row.backend) == (name, source_hash):
                    found = [(str(c), str(r)) for c, r in json.loads(row.findings_json or "[]")]
                    out[row.config_hash] = (StaticFeatures.from_json(row.features_json), found)
        return out

    # -- reading trials ------------------------------------------------------------------------------

    def best(
        self,
        problem: Problem,
        *,
        fingerprint: str | None = None,
        limit: int = 5,
        source: Source | None = Source.MEASURED,
    ) -> list[TrialRecord]:
        """The fastest OK trials of `problem` (of every kernel version), fastest first.

        `fingerprint` (or a prefix of at least 6 characters) restricts them to one GPU; `source` None
        takes every source.
        """
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == [] or limit <= 0:
            return []
        stmt = _trial_query().where(
            ProblemModel.key == problem.key(),
            TrialModel.status == TrialStatus.OK.value,
            TrialModel.time_us.is_not(None),
        )
        if gpu_ids is not None:
            stmt = stmt.where(TrialModel.gpu_id.in_(gpu_ids))
        if source is not None:
            stmt = stmt.where(TrialModel.source == Source(source).value)
        stmt = stmt.order_by(TrialModel.time_us, TrialModel.id).limit(limit)
        with self._session() as session:
            return trial_records(session.execute(stmt))

    def imported_configs(
        self, problem: Problem, *, device_key: str | None, kernel: str | None = None
    ) -> dict[int, Config]:
        """The configs imported for `problem`'s shape (any M: vLLM's, SGLang's and aiter's files), by the M
        they were imported for; the newest import of an M wins. With `device_key`, only the files of that
        device (`Target.device_key`: an H100's file does not speak for an H200, where vLLM would run its
        own file or its fallback); None takes every device's. With `kernel`, only the configs stored under
        that kernel name (one project's files: `autotune.db.vllm.project_kernel`). An imported config of a
        problem with experts whose K and top-k were unknown (`UNKNOWN_K`) counts for every K and top-k of
        its E and N. Empty where nothing was imported for the shape."""
        t, p = TrialModel, ProblemModel
        same = _same_shape(problem, imported=True)
        stmt = (
            select(p.m, t.config_json, GpuModel.target_json)
            .join(p, t.problem_id == p.id)
            .join(GpuModel, t.gpu_id == GpuModel.id)
            .where(
                p.op == problem.op,
                p.n == problem.N,
                same,
                t.status == TrialStatus.OK.value,
                t.source == Source.IMPORTED.value,
            )
            .order_by(t.id)
        )
        if kernel is not None:
            stmt = stmt.join(KernelModel, t.kernel_id == KernelModel.id).where(KernelModel.name == kernel)
        with self._session() as session:
            rows = session.execute(stmt).all()
        keys: dict[str, str] = {}  # target JSON → its device key, once per GPU row

        def on_device(target_json: str) -> bool:
            if device_key is None:
                return True
            if target_json not in keys:
                keys[target_json] = Target.from_dict(json.loads(target_json)).device_key()
            return keys[target_json] == device_key

        return {int(m): Config.from_json(text) for m, text, target_json in rows if on_device(target_json)}

    def baseline_configs(self, problem: Problem, target: Target, ms: Iterable[int]) -> dict[int, Config]:
        """What a vLLM deployment on `target` runs for `problem`'s shape, by M key: the files imported for
        its device (`imported_configs`), else, for a MoE, vLLM's fallback rule at each M of `ms`
        (`autotune.db.vllm_rules.deployment_configs`); empty where neither applies."""
        imported = self.imported_configs(problem, device_key=target.device_key())
        return deployment_configs(imported, problem, target, ms)[0]

    def known_configs(self, problem: Problem, *, fingerprint: str | None, limit: int = 3) -> list[Config]:
        """Configs worth trying first when tuning `problem`, best guesses first: the imported config of the
        nearest M of the same shape (vLLM's and aiter's files, as vLLM picks a bucket), then the winners
        measured on the GPU `fingerprint` names for the same shape at other M, nearest M (on a log scale)
        first; at most `limit` measured ones, no config twice. Empty where nothing of the shape is known.
        An imported config of a problem with experts whose K and top-k were unknown (`UNKNOWN_K`) counts
        for every K and top-k of its E and N."""
        t, p = TrialModel, ProblemModel
        is_imported = t.source == Source.IMPORTED.value
        same = _same_shape(problem, imported=is_imported)
        stmt = (
            select(p.m, t.source, t.gpu_id, t.time_us, t.config_json)
            .join(p, t.problem_id == p.id)
            .where(
                p.op == problem.op,
                p.n == problem.N,
                same,
                t.status == TrialStatus.OK.value,
                # vLLM's files carry no times: an imported config counts untimed
                is_imported | ((t.source == Source.MEASURED.value) & t.time_us.is_not(None)),
            )
        )
        gpu_ids = self._match_gpus(fingerprint)
        best: dict[tuple[str, int], tuple[float, str]] = {}  # (source, M) -> fastest (time, config)
        with self._session() as session:
            for m, source, gpu_id, time_us, config_json in session.execute(stmt):
                measured = source == Source.MEASURED.value
                if measured and (m == problem.M or (gpu_ids is not None and gpu_id not in gpu_ids)):
                    continue
                key, us = (source, int(m)), float(time_us or 0.0)  # measured ones are all timed
                if key not in best or us < best[key][0]:
                    best[key] = (us, config_json)

        def by_distance(source: str) -> list[str]:
            ms = sorted((m for s, m in best if s == source), key=lambda m: (abs(math.log(m / problem.M)), m))
            return [best[(source, m)][1] for m in ms]

        imported = by_distance(Source.IMPORTED.value)[:1]
        out: list[Config] = []
        for text in imported + by_distance(Source.MEASURED.value)[:limit]:
            config = Config.from_json(text)
            if config not in out:
                out.append(config)
        return out

    def winners(
        self, fingerprint: str | None = None, source: Source | None = Source.MEASURED, *, final: bool = False
    ) -> list[Winner]:
        """One Winner per (GPU, problem) with an OK trial, ordered by GPU then problem.

        Of each backend only the trials of its newest kernel version (the most recently created kernel
        row with trials for that GPU and problem) are considered. With `final` (measured winners only),
        a (GPU, problem) whose final round (`Source.FINAL`: the finalists timed head to head) counts its
        fastest measured config among the finalists takes its best and vendor trials from that round; a
        final round without it (a later sweep found a faster config, or the round covered other backends)
        is passed over.
        """
        found = self._winners(fingerprint, source)
        if not final or source is not Source.MEASURED or not found:
            return found
        rounds: dict[tuple[int, Problem], dict[str, TrialRecord]] = {}
        for t in self.trials(fingerprint=fingerprint, status=TrialStatus.OK, source=Source.FINAL):
            rounds.setdefault((t.gpu.id, t.problem), {})[t.config.digest()] = t
        out = []
        for w in found:
            last = rounds.get((w.gpu.id, w.problem), {})
            if w.best.config.digest() in last:
                ranked = sorted(last.values(), key=lambda t: (t.time_us, t.id))
                vendor = next((t for t in ranked if t.backend == VENDOR_BACKEND), None)
                w = dataclasses.replace(w, best=ranked[0], vendor=vendor)
            out.append(w)
        return out

    def _winners(self, fingerprint: str | None, source: Source | None) -> list[Winner]:
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        t = TrialModel
        conds: list[ColumnElement[bool]] = []
        if gpu_ids is not None:
            conds.append(t.gpu_id.in_(gpu_ids))
        if source is not None:
            conds.append(t.source == Source(source).value)
        current = (
            select(t.gpu_id, t.problem_id, t.backend, func.max(t.kernel_id).label("kernel_id"))
            .where(*conds)
            .group_by(t.gpu_id, t.problem_id, t.backend)
            .subquery("current")
        )
        on_current = and_(
            t.gpu_id == current.c.gpu_id,
            t.problem_id == current.c.problem_id,
            t.backend == current.c.backend,
            t.kernel_id == current.c.kernel_id,
        )
        is_ok = t.status == TrialStatus.OK.value
        counts_stmt = (
            select(t.gpu_id, t.problem_id, func.count(), func.sum(case((is_ok, 1), else_=0)))
            .join(current, on_current)
            .where(*conds)
            .group_by(t.gpu_id, t.problem_id)
        )
        rank = (
            func.row_number()
            .over(partition_by=(t.gpu_id, t.problem_id, t.backend), order_by=(t.time_us, t.id))
            .label("rank")
        )
        ranked = (
            select(t.id.label("trial_id"), rank)
            .join(current, on_current)
            .where(*conds, is_ok, t.time_us.is_not(None))
            .subquery("ranked")
        )
        best_stmt = _trial_query().join(ranked, ranked.c.trial_id == t.id).where(ranked.c.rank == 1)
        with self._session() as session:
            counts = {(g, p): (int(n), int(ok or 0)) for g, p, n, ok in session.execute(counts_stmt)}
            per_backend = session.execute(best_stmt.order_by(t.id)).all()
            records = trial_records(per_backend)
        groups: dict[tuple[int, int], list[TrialRecord]] = {}
        for row, record in zip(per_backend, records, strict=True):
            groups.setdefault((row[0].gpu_id, row[0].problem_id), []).append(record)
        winners: list[Winner] = []
        for key, candidates in groups.items():
            best = min(candidates, key=lambda r: (r.time_us, r.id))
            vendor = next((r for r in candidates if r.backend == VENDOR_BACKEND), None)
            n, n_ok = counts.get(key, (len(candidates), len(candidates)))
            winners.append(Winner(best.gpu, best.problem, best, vendor, n_ok=n_ok, n_failed=n - n_ok))
        winners.sort(key=lambda w: (w.gpu.id, w.problem))
        return winners

    def trials(
        self,
        *,
        fingerprint: str | None = None,
        problem: Problem | None = None,
        status: TrialStatus | None = None,
        source: Source | None = None,
    ) -> list[TrialRecord]:
        """Stored trials, oldest first, filtered by GPU (fingerprint or prefix), problem, status, source.

        The imported trials (`source` IMPORTED) of a `problem` with experts include those of its shape
        whose K and top-k were unknown (`UNKNOWN_K`: a file that fits several models), which count for
        every K and top-k of their E and N; their problem says so."""
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        stmt = _trial_query()
        if gpu_ids is not None:
            stmt = stmt.where(TrialModel.gpu_id.in_(gpu_ids))
        if problem is not None and problem.topk and source is not None and Source(source) is Source.IMPORTED:
            twin = dataclasses.replace(problem, K=UNKNOWN_K, topk=UNKNOWN_TOPK)
            stmt = stmt.where(ProblemModel.key.in_([problem.key(), twin.key()]))
        elif problem is not None:
            stmt = stmt.where(ProblemModel.key == problem.key())
        if status is not None:
            stmt = stmt.where(TrialModel.status == TrialStatus(status).value)
        if source is not None:
            stmt = stmt.where(TrialModel.source == Source(source).value)
        with self._session() as session:
            return trial_records(session.execute(stmt.order_by(TrialModel.id)))

    def trial_costs(
        self, fingerprint: str | None = None
    ) -> list[tuple[str, str, str, int, int, float, float]]:
        """What the trials cost, per (GPU fingerprint, op, source): (fingerprint, op, source, trials, OK
        trials, compile seconds, measure seconds), ordered by GPU, op and source."""
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        t = TrialModel
        stmt = (
            select(
                GpuModel.fingerprint,
                ProblemModel.op,
                t.source,
                func.count(),
                func.sum(case((t.status == TrialStatus.OK.value, 1), else_=0)),
                func.sum(t.compile_s),
                func.sum(t.measure_s),
            )
            .join(GpuModel, GpuModel.id == t.gpu_id)
            .join(ProblemModel, ProblemModel.id == t.problem_id)
            .group_by(GpuModel.fingerprint, ProblemModel.op, t.source)
            .order_by(GpuModel.fingerprint, ProblemModel.op, t.source)
        )
        if gpu_ids is not None:
            stmt = stmt.where(t.gpu_id.in_(gpu_ids))
        with self._session() as session:
            return [
                (str(fp), str(op), str(src), int(n), int(ok or 0), float(c or 0.0), float(m or 0.0))
                for fp, op, src, n, ok, c, m in session.execute(stmt)
            ]

    def gpus(self) -> list[GpuRecord]:
        """Every stored GPU, in the order they were first seen."""
        with self._session() as session:
            return [gpu_record(row) for row in session.scalars(select(GpuModel).order_by(GpuModel.id))]

    def summary(self) -> Summary:
        """Counts over the whole database."""
        t = TrialModel
        is_ok = t.status == TrialStatus.OK.value
        with self._session() as session:
            n_gpus = session.scalar(select(func.count()).select_from(GpuModel)) or 0
            n_problems = session.scalar(select(func.count()).select_from(ProblemModel)) or 0
            n_kernels = session.scalar(select(func.count()).select_from(KernelModel)) or 0
            sweeps = session.execute(select(SweepModel.status, func.count()).group_by(SweepModel.status))
            by_status = session.execute(select(t.status, func.count()).group_by(t.status))
            by_source = session.execute(select(t.source, func.count()).group_by(t.source))
            per_gpu_rows = session.execute(
                select(
                    t.gpu_id,
                    func.count(),
                    func.sum(case((is_ok, 1), else_=0)),
                    # problems tuned: a profile's problems (its ladder's M) are not tuned ones
                    func.count(
                        func.distinct(
                            case((is_ok & (t.source != Source.PROFILE.value), t.problem_id), else_=None)
                        )
                    ),
                ).group_by(t.gpu_id)
            )
            per_gpu_counts = {g: (int(n), int(ok or 0), int(p)) for g, n, ok, p in per_gpu_rows}
            gpu_rows = [gpu_record(row) for row in session.scalars(select(GpuModel).order_by(GpuModel.id))]
            return Summary(
                url=self._display_url,
                schema_version=SCHEMA_VERSION,
                n_gpus=int(n_gpus),
                n_problems=int(n_problems),
                n_kernels=int(n_kernels),
                sweeps_by_status={s: int(n) for s, n in sweeps},
                trials_by_status={s: int(n) for s, n in by_status},
                trials_by_source={s: int(n) for s, n in by_source},
                per_gpu=tuple(GpuSummary(g, *per_gpu_counts.get(g.id, (0, 0, 0))) for g in gpu_rows),
            )

    def holdings(self, op: str | None = None, *, fingerprint: str | None = None) -> Holdings:
        """How many trials of `op` (None: of every op; on the GPU `fingerprint` names) each source and status
        holds: what a verb that found nothing says the database does hold."""
        t = TrialModel
        stmt = select(t.source, t.status, func.count()).group_by(t.source, t.status)
        if op is not None:  # a subquery, not a join: SQLite would scan the trials once per problem
            stmt = stmt.where(t.problem_id.in_(select(ProblemModel.id).where(ProblemModel.op == op)))
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids is not None:
            stmt = stmt.where(t.gpu_id.in_(gpu_ids))
        with self._session() as session:
            counts = {(str(source), str(status)): int(n) for source, status, n in session.execute(stmt)}
        return Holdings(op, counts)

    def match_gpus(self, fingerprint: str) -> list[GpuRecord]:
        """The stored GPUs `fingerprint` names: the one with exactly that fingerprint, else the one it is
        a unique prefix (of at least 6 characters) of; empty when none. ValueError for a prefix that is
        too short or ambiguous."""
        gpu_ids = self._match_gpus(fingerprint) or []
        if not gpu_ids:
            return []
        with self._session() as session:
            rows = session.scalars(select(GpuModel).where(GpuModel.id.in_(gpu_ids)).order_by(GpuModel.id))
            return [gpu_record(row) for row in rows]

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


# -- helpers ---------------------------------------------------------------------------------------------


#: The trials table, for Core inserts.
TRIALS = cast(Table, TrialModel.__table__)
#: The index of the problems' shapes (op, N, K, M), which a streamed write into no problems defers.
_PROBLEMS_SHAPE = next(
    i for i in cast(Table, ProblemModel.__table__).indexes if i.name == "ix_problems_shape"
)
#: Largest IN (...) list of one query (SQLite allows 32766 parameters; PostgreSQL 65535).
_IN_CHUNK = 500


def _extra_json(result: TrialResult) -> str:
    """The JSON of `result.extra`; ValueError naming the trial when it is not JSON-serializable."""
    try:
        return json.dumps(result.extra, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"extra of trial {result.config.short()} is not JSON-serializable: {exc}") from exc


def _gpu_values(target: Target) -> dict[str, Any]:
    """The columns of a `gpus` row of `target`, but its fingerprint."""
    return dict(
        vendor=target.vendor,
        arch=target.arch,
        name=target.name,
        cu_count=target.cu_count,
        xcds=target.xcds,
        memory_bytes=target.memory_bytes,
        llc_bytes=target.llc_bytes,
        interpreter=target.interpreter,
        toolchain=json.dumps(target.toolchain, sort_keys=True),
        target_json=json.dumps(target.to_dict(), sort_keys=True),
    )


def _problem_values(problem: Problem) -> dict[str, Any]:
    """The columns of a `problems` row of `problem`, but its key: op, M, N and K, and the other fields as
    canonical JSON (`Problem.params_json`)."""
    return dict(op=problem.op, m=problem.M, n=problem.N, k=problem.K, params=problem.params_json())


def _gone(sweep: SweepModel) -> bool:
    """Whether `sweep` ran on this host in a process that no longer exists."""
    return sweep.host == _host() and sweep.pid is not None and not pid_alive(sweep.pid)


def _aware(moment: datetime) -> datetime:
    """`moment` as an aware UTC datetime (SQLite hands back naive ones)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _batches(items: Iterable[NewTrial], size: int) -> Iterator[list[NewTrial]]:
    """`items` in lists of `size` (the last one shorter)."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _trial_row(
    result: TrialResult,
    source: Source,
    extra: str,
    gpu: int,
    kernel: int,
    problem: int,
    sweep_id: int | None,
) -> TrialModel:
    """A new `trials` row of `result` (not yet added to a session)."""
    return TrialModel(**_trial_values(result, source, extra, gpu, kernel, problem, sweep_id))


def _trial_values(
    result: TrialResult,
    source: Source,
    extra: str,
    gpu: int,
    kernel: int,
    problem: int,
    sweep_id: int | None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The columns of a new `trials` row of `result` (`created_at` where given)."""
    config = result.config
    row = _trial_tuple(
        result, (config.backend, config.canonical(), config.digest()), Source(source).value, extra,
        (sweep_id, gpu, kernel, problem), created_at, _host(),
    )  # fmt: skip
    out = dict(zip(_TRIAL_COLUMNS, row, strict=True))
    if created_at is None:
        del out["created_at"]
    return out


def _trial_tuple(
    result: TrialResult,
    config: tuple[str, str, str],
    source: str,
    extra: str,
    ids: tuple[int | None, int, int, int],
    created_at: datetime | None,
    host: str,
) -> tuple[Any, ...]:
    """The values of `_TRIAL_COLUMNS` of a new `trials` row of `result`: `config` is its config's backend,
    canonical JSON and digest, `source` the value of its Source, `ids` its sweep, GPU, kernel and problem
    ids."""
    timing = result.timing
    times = _NO_TIMING if timing is None else (
        timing.median_us, timing.min_us, timing.p20_us, timing.p80_us, timing.mean_us, timing.std_us,
        timing.runs, timing.method,
    )  # fmt: skip
    status = _STATUS_VALUES.get(result.status) or TrialStatus(result.status).value
    return (*ids, *config, status, source, *times, result.rel_error, result.error or "", result.compile_s,
            result.measure_s, extra, created_at, host)  # fmt: skip


#: The columns of a new `trials` row (all but its id), in the table's order: what `_trial_tuple` gives.
_TRIAL_COLUMNS = tuple(c.name for c in TRIALS.columns if c.name != "id")
#: The timing columns of a trial without a timing.
_NO_TIMING = (None,) * 8
#: The stored value of each status and source, by member or value (`TrialStatus(x).value` without its
#: cost per row; another value falls back to it, which raises).
_STATUS_VALUES: dict[str, str] = {s: s.value for s in TrialStatus}
_SOURCE_VALUES: dict[str, str] = {s: s.value for s in Source}
#: The columns of a new `problems` row (all but its id), in the table's order: what `_problem_row` gives.
_PROBLEM_COLUMNS = ("key", "op", "m", "n", "k", "params")


def _problem_row(key: str, problem: Problem) -> tuple[Any, ...]:
    """The values of `_PROBLEM_COLUMNS` of the `problems` row of `problem`, whose key is `key`."""
    return (key, problem.op, problem.M, problem.N, problem.K, problem.params_json())


def _kernel_row(session: Session, name: str, source_hash: str) -> int:
    """The id of the `kernels` row (name, source_hash), inserted (not committed) where missing."""
    found = session.scalar(select(KernelModel.id).filter_by(name=name, source_hash=source_hash))
    if found is None:
        row = KernelModel(name=name, source_hash=source_hash)
        session.add(row)
        session.flush()
        found = row.id
    return int(found)


def _ensure_rows(
    session: Session, model: Any, column: Any, wanted: dict[str, dict[str, Any]]
) -> dict[str, int]:
    """Ids of the rows of `model` whose unique `column` has the values `wanted` names, the missing ones
    inserted (not committed) from their column values in `wanted`."""
    ids = _row_ids(session, model, column, sorted(wanted))
    missing = [k for k in sorted(wanted) if k not in ids]
    if missing:
        rows = [model(**wanted[k]) for k in missing]
        session.add_all(rows)
        session.flush()
        ids.update((str(getattr(row, column.key)), int(row.id)) for row in rows)
    return ids


def _add_rows(
    session: Session,
    model: Any,
    column: Any,
    columns: tuple[str, ...],
    wanted: dict[str, tuple[Any, ...]],
    *,
    look_first: bool,
) -> tuple[dict[str, int], set[str]]:
    """Ids of the rows of `model` whose unique `column` has the values `wanted` names, and the keys of those
    inserted here (not committed) from their values of `columns` in `wanted`, in the keys' order
    (`insert_new_rows`: no ORM objects, a key stored meanwhile left alone), the others read back.
    `look_first` reads the stored ones before (where the table held rows: a PostgreSQL insert that
    conflicts uses up a sequence value); a database without ON CONFLICT ... RETURNING always does, and
    inserts the others plainly."""
    keys = sorted(wanted)
    ids = _row_ids(session, model, column, keys) if look_first else {}
    missing = [k for k in keys if k not in ids]
    if not missing:
        return ids, set()
    conn, table = session.connection(), model.__table__
    if not insert_new_supported(conn.dialect):
        if not look_first:
            return _add_rows(session, model, column, columns, wanted, look_first=True)
        insert_rows(conn, table, columns, [wanted[k] for k in missing])
        ids.update(_row_ids(session, model, column, missing))
        return ids, set(missing)
    created = insert_new_rows(conn, table, columns, [wanted[k] for k in missing], column.key)
    ids.update(created)
    ids.update(_row_ids(session, model, column, [k for k in missing if k not in created]))
    return ids, set(created)


def _row_ids(session: Session, model: Any, column: Any, keys: list[str]) -> dict[str, int]:
    """Ids of the stored rows of `model` whose `column` is one of `keys`."""
    ids: dict[str, int] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = keys[start : start + _IN_CHUNK]
        ids.update(
            (str(k), int(i)) for i, k in session.execute(select(model.id, column).where(column.in_(chunk)))
        )
    return ids


def _toolchain_key(toolchain: Mapping[str, str]) -> tuple[str, str]:
    """The canonical JSON of `toolchain` (keys sorted), and the first 16 hex digits of the sha256 of that
    JSON with the version of the features' extraction added (`FEATURES_VERSION`): the key under which
    features are stored, so that features an older extraction read are compiled again."""
    try:
        text = json.dumps(dict(toolchain), sort_keys=True)
        keyed = json.dumps({**toolchain, "features": FEATURES_VERSION}, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"toolchain {toolchain!r} is not a JSON-serializable mapping: {exc}") from exc
    return text, hashlib.sha256(keyed.encode()).hexdigest()[:16]


def _finding_pairs(findings: Sequence[tuple[str, str] | StaticFinding]) -> list[tuple[str, str]]:
    """`findings` as (check, reason) pairs of strings."""
    pairs: list[tuple[str, str]] = []
    for finding in findings:
        pair = (finding.check, finding.reason) if isinstance(finding, StaticFinding) else tuple(finding)
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ValueError(f"a finding must be a (check, reason) pair of strings, got {finding!r}")
        pairs.append((pair[0], pair[1]))
    return pairs


def _trial_query() -> Select:
    return (
        select(TrialModel, GpuModel, KernelModel, ProblemModel)
        .join(GpuModel, TrialModel.gpu_id == GpuModel.id)
        .join(KernelModel, TrialModel.kernel_id == KernelModel.id)
        .join(ProblemModel, TrialModel.problem_id == ProblemModel.id)
    )
