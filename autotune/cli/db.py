"""`autotune db`: database maintenance (`autotune db upgrade` migrates the schema)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_OK, CliError, add_verb, db_arg

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "db"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="database maintenance: upgrade its schema",
        description="Maintain the database. `autotune db upgrade` migrates a database written by an older "
        "autotune to this autotune's schema version (back it up first).",
    )
    db_sub = p.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    q = add_verb(
        db_sub,
        "upgrade",
        help="migrate the database to this autotune's schema version",
        description="Migrate the database to this autotune's schema version, all or nothing, and print "
        "the versions before and after; a database already there is left as it is. Back it up first "
        "(copy the SQLite file; pg_dump for PostgreSQL) and stop the sweeps that use it.",
    )
    db_arg(q)


def run(args: argparse.Namespace) -> int:
    """Runs the db command (only `upgrade`) and prints the schema versions before and after."""
    from autotune.db import StoreError, upgrade_schema

    if args.db_command != "upgrade":  # pragma: no cover - argparse allows no other
        raise CliError(f"unknown db command {args.db_command!r}")
    try:
        done = upgrade_schema(args.db)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    print(done.line())
    return EXIT_OK
