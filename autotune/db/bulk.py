"""Writing many rows of a table at once on the driver, none of SQLAlchemy's work per row: `insert_rows`
(every row), `insert_new_rows` (the rows whose key is not stored yet, and the ids they got) and
`index_deferred` (an index built once, after the rows, instead of row by row).

Rules. Rows are tuples of the values of `columns`, named in the table's column order; each value is
converted as SQLAlchemy's type of its column converts it for the driver (SQLite's datetimes and floats),
so that a row is stored as the ORM stores it. PostgreSQL through psycopg takes the rows as a COPY
stream; other databases as an executemany (`insert_rows`) or as INSERTs of `VALUES_ROWS` rows that leave
a stored key alone and return what they wrote (`insert_new_rows`). Nothing here commits: the caller's
transaction holds it all, so a failure part-way writes nothing.
"""

from __future__ import annotations

import functools
import importlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Index, Table, bindparam, insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateIndex, DropIndex

__all__ = ["VALUES_ROWS", "index_deferred", "insert_new_rows", "insert_new_supported", "insert_rows"]

#: Rows of one INSERT of many (`insert_new_rows`): SQLite takes 32766 parameters, PostgreSQL 65535.
VALUES_ROWS = 1000
Row = tuple[Any, ...]


def insert_rows(conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Row]) -> None:
    """Inserts `rows` (tuples of `columns`' values) into `table`: a COPY on psycopg, else one
    executemany on the driver's cursor."""
    if not rows:
        return
    statement = _driver_insert(conn.dialect, table, columns)
    values = statement.converted(rows)
    if _copies(conn):
        _copy(conn, table.name, columns, values)
        return
    params: list[Any] = values
    if statement.named:
        params = [dict(zip(statement.names, row, strict=True)) for row in values]
    conn.exec_driver_sql(statement.sql, params)


def insert_new_rows(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Row], key: str
) -> dict[str, int]:
    """Inserts, in their order, those of `rows` (as `insert_rows` takes them) whose unique `key` column
    is not stored in `table`, leaving a stored one alone (`insert_new_supported` must hold; on SQLite,
    in a transaction that holds the write lock: BEGIN IMMEDIATE); the ids of the rows it wrote, by key.
    On psycopg the rows go to a temporary table by COPY, then into `table` by one INSERT ... SELECT;
    on SQLite by one executemany (`_insert_new_sqlite`); elsewhere `VALUES_ROWS` rows a statement."""
    if not rows:
        return {}
    if _copies(conn):
        return _insert_new_copied(conn, table, columns, rows, key)
    if conn.dialect.name == "sqlite":
        return _insert_new_sqlite(conn, table, columns, rows, key)
    return _insert_new_values(conn, table, columns, rows, key)


def insert_new_supported(dialect: Any) -> bool:
    """Whether `insert_new_rows` works on `dialect`: an INSERT that can leave a stored key alone and
    return the rows it wrote (ON CONFLICT DO NOTHING RETURNING: PostgreSQL's, SQLite's from 3.35)."""
    return _insert_new(dialect) is not None


@contextmanager
def index_deferred(conn: Connection, index: Index, *, when: bool) -> Iterator[None]:
    """Runs the block with `index` dropped and builds it again after, in the caller's transaction, where
    `when` holds and the database is SQLite (where a transaction's DDL is its own until it commits, and
    readers keep the schema they began with); otherwise leaves it alone. A block that raises leaves the
    drop to the transaction's rollback. For a table that starts empty: one sort after the rows in place
    of an insert into the index per row."""
    if not when or conn.dialect.name != "sqlite":
        yield
        return
    conn.execute(DropIndex(index))
    yield
    conn.execute(CreateIndex(index))


def _copies(conn: Connection) -> bool:
    """Whether `conn` writes rows by COPY: PostgreSQL through psycopg (3)."""
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def _copy(conn: Connection, table: str, columns: tuple[str, ...], rows: Sequence[Row]) -> None:
    """COPY of `rows` into `table` (a name of ours, never the user's) on psycopg; the driver's error
    raised as SQLAlchemy's (an IntegrityError for a key stored meanwhile, ...), as a statement's is."""
    names = ", ".join(f'"{c}"' for c in columns)
    sql = f'COPY "{table}" ({names}) FROM STDIN'
    error = conn.dialect.loaded_dbapi.Error
    try:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor, cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
    except error as exc:
        raise DBAPIError.instance(sql, None, exc, error) from exc


def _insert_new_copied(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Row], key: str
) -> dict[str, int]:
    """`insert_new_rows` on psycopg: the rows, numbered, by COPY into a temporary table of the
    transaction, then one INSERT ... SELECT in their order."""
    staged = f"autotune_new_{table.name}"
    names = ", ".join(f'"{c}"' for c in columns)
    conn.exec_driver_sql(
        f'CREATE TEMPORARY TABLE IF NOT EXISTS "{staged}" ON COMMIT DROP AS '
        f'SELECT 0 AS "row_number", {names} FROM "{table.name}" WITH NO DATA'
    )
    conn.exec_driver_sql(f'TRUNCATE "{staged}"')
    _copy(conn, staged, ("row_number", *columns), [(i, *row) for i, row in enumerate(rows)])
    result = conn.exec_driver_sql(
        f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{staged}" ORDER BY "row_number" '
        f'ON CONFLICT ("{key}") DO NOTHING RETURNING "id", "{key}"'
    )
    return {str(k): int(i) for i, k in result.all()}


def _insert_new_values(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Row], key: str
) -> dict[str, int]:
    """`insert_new_rows` as INSERTs of `VALUES_ROWS` rows that leave a stored key alone and return the
    rows they wrote."""
    created: dict[str, int] = {}
    for start in range(0, len(rows), VALUES_ROWS):
        batch = rows[start : start + VALUES_ROWS]
        statement = _driver_insert(conn.dialect, table, columns, len(batch), key)
        flat = list(itertools.chain.from_iterable(statement.converted(batch)))
        params = dict(zip(statement.names, flat, strict=True)) if statement.named else tuple(flat)
        created.update((str(k), int(i)) for i, k in conn.exec_driver_sql(statement.sql, params).all())
    return created


def _insert_new_sqlite(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Row], key: str
) -> dict[str, int]:
    """`insert_new_rows` on SQLite, whose write transactions hold the database's one write lock (the
    Store's begin with it): one executemany that leaves a stored key alone, then the rows whose id
    lies above the largest before it, which are the rows it wrote (SQLite gives a new row the largest
    id plus one). Ids near the largest SQLite holds, which it would pick at random: `VALUES_ROWS` rows a
    statement, each returning what it wrote."""
    ids = f'SELECT "id", "{key}" FROM "{table.name}"'
    before = conn.exec_driver_sql(f'SELECT max("id") FROM "{table.name}"').scalar() or 0
    if before >= _LARGE_ID:
        return _insert_new_values(conn, table, columns, rows, key)
    statement = _driver_insert(conn.dialect, table, columns, 0, key)
    conn.exec_driver_sql(statement.sql, statement.converted(rows))
    return {str(k): int(i) for i, k in conn.exec_driver_sql(f'{ids} WHERE "id" > ?', (before,)).all()}


#: An id beyond which SQLite may give a new row a smaller id than the largest (at 2**63 - 1).
_LARGE_ID = 1 << 62


def _insert_new(dialect: Any) -> Callable[[Table], Any] | None:
    """The INSERT of `dialect` that can leave a stored key alone and return the rows it wrote; None for
    another."""
    if dialect.name not in ("sqlite", "postgresql") or not dialect.insert_returning:
        return None
    return cast(Callable[[Table], Any], importlib.import_module(f"sqlalchemy.dialects.{dialect.name}").insert)


@dataclass(frozen=True)
class _DriverInsert:
    """An INSERT as the driver takes it: its SQL, the names of its parameters in the order the driver
    takes them (`named`: by name), and the converter of each column whose type has one (SQLite's
    datetimes and floats), by position."""

    sql: str
    names: tuple[str, ...]
    named: bool
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]

    def converted(self, rows: Sequence[Row]) -> list[Row]:
        """`rows` with each value converted for the driver (a value that every row shares, once)."""
        if not self.converters:
            return list(rows)
        picked: list[Sequence[Any]] = list(zip(*rows, strict=True))
        for i, convert in self.converters:
            column = picked[i]
            shared = len(set(map(id, column))) == 1
            picked[i] = [convert(column[0])] * len(column) if shared else list(map(convert, column))
        return list(zip(*picked, strict=True))


@functools.lru_cache(maxsize=32)
def _driver_insert(
    dialect: Any, table: Table, columns: tuple[str, ...], rows: int = 0, key: str = ""
) -> _DriverInsert:
    """The INSERT into `table` of `columns` (in the table's order) for `dialect`: of one row, for
    executemany (leaving a stored `key` alone, where given), or of `rows` rows at once, leaving a stored
    `key` alone and returning the id and key of each row it wrote (`_insert_new`). ValueError for
    columns out of the table's order, or where the insert would write a column more (a default)."""
    if columns != tuple(c.name for c in table.columns if c.name in columns):
        raise ValueError(f"{columns} are not columns of {table.name} in its order")
    if rows:
        values = [{c: bindparam(f"{c}_{i}", type_=table.c[c].type) for c in columns} for i in range(rows)]
        insert_new = cast(Callable[[Table], Any], _insert_new(dialect))
        stmt = insert_new(table).values(values).on_conflict_do_nothing(index_elements=[key])
        compiled = stmt.returning(table.c.id, table.c[key]).compile(dialect=dialect)
        wanted = tuple(f"{c}_{i}" for i in range(rows) for c in columns)
    else:
        stmt = insert(table)
        if key:
            stmt = cast(Callable[[Table], Any], _insert_new(dialect))(table).on_conflict_do_nothing(
                index_elements=[key]
            )
        compiled = stmt.compile(dialect=dialect, column_keys=list(columns), for_executemany=True)
        wanted = columns
    order = tuple(compiled.positiontup or ()) if compiled.positional else wanted
    if order != wanted or set(compiled.binds) != set(wanted):
        raise ValueError(f"an insert into {table.name} takes {sorted(compiled.binds)}, not {sorted(wanted)}")
    processors = (table.c[c].type.dialect_impl(dialect).bind_processor(dialect) for c in columns)
    converters = tuple((i, f) for i, f in enumerate(processors) if f is not None)
    return _DriverInsert(compiled.string, order, not compiled.positional, converters)
