"""The schema on open: created in an empty database, else its version checked (never migrated here).

A database of an older schema version is refused with the command that upgrades it (``autotune db
upgrade``, `autotune.db.migrations`); the tables of `ADDITIVE_TABLES` that a database of this version
lacks are created. Every failure raises StoreError with the (password-masked) URL and the reason.
"""

from __future__ import annotations

import logging
import shlex

from sqlalchemy import Engine, insert, inspect, select
from sqlalchemy.exc import SQLAlchemyError

from .engine import WRITE_OPTION, StoreError, error_cause
from .models import (
    ADDITIVE_TABLES,
    ALEMBIC_VERSION,
    BASE_VERSION,
    HEAD_REVISION,
    REVISIONS,
    SCHEMA_VERSION,
    Base,
    MetaModel,
)

__all__ = ["open_schema"]

logger = logging.getLogger(__name__)


def open_schema(engine: Engine, where: str, *, read_only: bool) -> None:
    """Creates the schema in the empty database of `engine` (`where`: its masked URL), else checks it."""
    try:
        tables = set(inspect(engine).get_table_names())
        if not tables and read_only:
            raise StoreError(f"{where} is not an autotune database (it holds no tables)")
        if not tables:
            _create_schema(engine, where, read_only)
        else:
            _check_schema(engine, tables, where, read_only)
    except StoreError:
        raise
    except SQLAlchemyError as exc:
        reason = error_cause(exc)
        if "file is not a database" in reason:
            raise StoreError(f"{where} is not an autotune database ({reason})") from exc
        raise StoreError(f"cannot open database {where}: {reason}") from exc


def _create_schema(engine: Engine, where: str, read_only: bool) -> None:
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
        _check_schema(engine, tables, where, read_only)
        return
    logger.info("created autotune database %s (schema version %d)", where, SCHEMA_VERSION)


def _check_schema(engine: Engine, tables: set[str], where: str, read_only: bool) -> None:
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
    if missing and not read_only:  # read-only: read as empty where asked
        _add_tables(engine, sorted(missing), where)


def _add_tables(engine: Engine, names: list[str], where: str) -> None:
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
    logger.info("added tables %s to %s", ", ".join(names), where)
