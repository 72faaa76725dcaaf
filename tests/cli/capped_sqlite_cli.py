"""`autotune` with every SQLite connection capped at the pages its file has plus argv[1] (``PRAGMA
max_page_count``): the database is full, as on a full disk, once it would grow past that. For
tests/cli/test_cli_failures.py; the rest of argv is the command line."""

from __future__ import annotations

import sys
from typing import Any

import autotune.db.engine as engine
from autotune.cli import main

_connect = engine._sqlite_on_connect


def _capped(extra: int) -> Any:
    def on_connect(dbapi_connection: Any, record: Any) -> None:
        _connect(dbapi_connection, record)
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages + extra}")

    return on_connect


if __name__ == "__main__":
    engine._sqlite_on_connect = _capped(int(sys.argv[1]))  # type: ignore[assignment]
    sys.exit(main(sys.argv[2:]))
