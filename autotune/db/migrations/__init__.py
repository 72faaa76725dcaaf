"""Schema migrations of the autotune database, with Alembic: `upgrade` (``autotune db upgrade``).

One Alembic revision per schema version (`autotune.db.models.REVISIONS`), in ``versions/``; the version
of record is ``meta.schema_version``, which each revision updates (see `autotune.db.models`). `upgrade`
runs every pending revision in one transaction, so an upgrade that fails changes nothing; it refuses,
writing nothing, a database that is not autotune's, one newer than this autotune, and one whose
``meta`` and ``alembic_version`` disagree. A database written before Alembic was adopted (no
``alembic_version``, ``meta`` says 1) is adopted by the baseline revision, which checks its tables.

Writing a revision (from a checkout)::

    from alembic import command
    from autotune.db.migrations import alembic_config
    command.revision(alembic_config(url="scratch.db"), "what changes", rev_id="v3_...", autogenerate=True)

against a scratch database at the previous head; then set its ``schema_version``, bump SCHEMA_VERSION
and add it to REVISIONS in models.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from ..engine import (
    WRITE_OPTION,
    StoreError,
    check_sqlite_path,
    error_cause,
    make_engine,
    mask_url,
    resolve_url,
)
from ..models import ALEMBIC_VERSION, BASE_VERSION, HEAD_REVISION, REVISIONS, SCHEMA_VERSION, MetaModel

__all__ = ["MIGRATIONS_DIR", "Upgrade", "alembic_config", "upgrade"]

logger = logging.getLogger(__name__)

#: This folder: Alembic's script location (env.py, script.py.mako, versions/).
MIGRATIONS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade` did: the database (password masked) and its schema version before and after."""

    url: str
    from_version: int
    to_version: int

    @property
    def changed(self) -> bool:
        return self.from_version != self.to_version

    def line(self) -> str:
        """One line for people."""
        if not self.changed:
            return f"database {self.url} is already at schema version {self.to_version}: nothing to do"
        return f"upgraded database {self.url} from schema version {self.from_version} to {self.to_version}"


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic configuration of these migrations: for `connection` (used as it is, in its transaction),
    else for `url` (else $AUTOTUNE_DB, else ./autotune.db), which env.py connects to itself."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", resolve_url(url).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


@dataclass(frozen=True)
class _State:
    version: int
    revision: str | None  # None: written before Alembic was adopted


def upgrade(url: str | None = None) -> Upgrade:
    """Migrates the database at `url` (else $AUTOTUNE_DB, else ./autotune.db) to `SCHEMA_VERSION`.

    Idempotent: a database at the current version is left as it is. All pending revisions run in one
    transaction (SQLite and PostgreSQL both roll back DDL), taken with the schema-version row locked, so
    two upgrades at once run one after the other. StoreError, naming the database, for one that does
    not exist, is not autotune's, is newer than this autotune, is damaged, or fails to migrate; in every
    such case nothing is written.
    """
    resolved = resolve_url(url)
    where = mask_url(resolved)
    try:
        parsed = make_url(resolved)
    except ArgumentError as exc:
        raise StoreError(f"invalid database URL {where!r}: {exc}") from exc
    if parsed.get_backend_name() == "sqlite":
        _probe_sqlite(parsed, where)
    engine = make_engine(parsed)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin() as transaction:
                before = _survey(conn, where, lock=True)
                if before.version == SCHEMA_VERSION:
                    transaction.rollback()  # nothing to do, nothing written
                    return Upgrade(where, before.version, before.version)
                command.upgrade(alembic_config(connection=conn), "head")
                after = _survey(conn, where)
                if (after.version, after.revision) != (SCHEMA_VERSION, HEAD_REVISION):
                    raise StoreError(
                        f"cannot upgrade database {where}: the migrations ended at schema version "
                        f"{after.version}, revision {after.revision}, not {SCHEMA_VERSION} "
                        f"({HEAD_REVISION}); nothing was changed"
                    )
    except StoreError:
        raise
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot upgrade database {where}: {_reason(exc)}; nothing was changed") from exc
    except (CommandError, RuntimeError) as exc:  # a revision refused the database (e.g. not version 1)
        raise StoreError(f"cannot upgrade database {where}: {exc}; nothing was changed") from exc
    finally:
        engine.dispose()
    logger.info("upgraded %s from schema version %d to %d", where, before.version, SCHEMA_VERSION)
    return Upgrade(where, before.version, SCHEMA_VERSION)


def _reason(exc: SQLAlchemyError) -> str:
    reason = error_cause(exc)
    if "file is not a database" in reason:
        return f"it is not an autotune database ({reason})"
    return reason


def _probe_sqlite(parsed: URL, where: str) -> None:
    """Refuses a SQLite database that does not exist (connecting would create it) or is not autotune's,
    reading it through a plain connection: the Store's engine switches every file it opens to WAL."""
    database = parsed.database or ""
    if database in ("", ":memory:"):
        raise StoreError(f"{where} is an in-memory database: there is nothing to upgrade")
    if not database.startswith("file:") and not Path(database).is_file():
        raise StoreError(
            f"there is no database at {database}: nothing to upgrade (autotune creates a new database at "
            f"schema version {SCHEMA_VERSION} on first use)"
        )
    check_sqlite_path(parsed)
    probe = create_engine(parsed, poolclass=NullPool)
    try:
        with probe.connect() as conn:
            _identify(conn, where)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot upgrade database {where}: {_reason(exc)}") from exc
    finally:
        probe.dispose()


def _identify(conn: Connection, where: str, *, lock: bool = False) -> int:
    """The schema version of the database of `conn`; StoreError for a database that is not autotune's,
    newer than this autotune or older than the baseline. `lock` holds the schema-version row until the
    transaction ends (PostgreSQL; SQLite's write lock is taken at BEGIN)."""
    tables = set(inspect(conn).get_table_names())
    if not tables:
        raise StoreError(
            f"{where} is empty, not an autotune database: nothing to upgrade (autotune creates its tables "
            "at the current schema version on first use)"
        )
    if MetaModel.__tablename__ not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(
            f"{where} is not an autotune database (it has tables {shown} but no `meta` table): "
            "nothing to upgrade"
        )
    query = select(MetaModel.value).where(MetaModel.key == "schema_version")
    value = conn.scalar(query.with_for_update() if lock else query)
    try:
        found = int(value) if value is not None else None
    except ValueError:
        found = None
    if found is None:
        raise StoreError(f"{where} is not an autotune database (its `meta` table has no schema_version)")
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"database {where} has schema version {found}, newer than this autotune supports "
            f"({SCHEMA_VERSION}): upgrade autotune"
        )
    if found < BASE_VERSION:
        raise StoreError(
            f"database {where} has schema version {found}, older than any this autotune can upgrade "
            f"(it migrates from version {BASE_VERSION} on): open it with the autotune version that wrote it"
        )
    return found


def _survey(conn: Connection, where: str, *, lock: bool = False) -> _State:
    """The schema version and Alembic revision of the database of `conn`, as `_identify`; StoreError too
    when they disagree. Run it inside the write transaction (the two are read one after the other)."""
    found = _identify(conn, where, lock=lock)
    if not inspect(conn).has_table(ALEMBIC_VERSION.name):
        if found != BASE_VERSION:
            raise StoreError(
                f"database {where} says schema version {found} but has no alembic_version table: "
                "it is damaged"
            )
        return _State(found, None)  # written before Alembic; the baseline revision checks its tables
    revisions = list(conn.scalars(select(ALEMBIC_VERSION.c.version_num)))
    if revisions != [REVISIONS[found]]:
        raise StoreError(
            f"database {where} says schema version {found} but its alembic_version holds {revisions} "
            f"(expected [{REVISIONS[found]!r}]): it is damaged"
        )
    return _State(found, revisions[0])
