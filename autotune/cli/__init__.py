"""The `autotune` command line: doctor, sweep, plan, check, best, diff, report, export, import, emit, verify,
status, db.

One module per verb, each with `add_parser(subparsers)` (its flags) beside `run(args) -> int` (its
handler). This module assembles the parser and maps errors to exit codes: a CliError or a database that
cannot be used is one line on stderr and exit 2, Ctrl-C exit 130, a GPU fault exit 1, a closed pipe on
stdout a quiet exit 0. Heavy modules (torch, the database, the search)
are imported inside the handlers, so that `autotune --help` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from autotune.cli import (
    best,
    check,
    db,
    diff,
    doctor,
    emit,
    export,
    imports,
    plan,
    report,
    status,
    sweep,
    verify,
)
from autotune.cli.common import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CliError
from autotune.engine.bench import DeviceFault

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]

#: The verbs, in the order `autotune --help` lists them.
VERBS = (doctor, sweep, plan, check, best, diff, report, export, imports, emit, verify, status, db)

_DESCRIPTION = """\
Autotune GPU matrix kernels per problem shape, keep every measurement in a database, and emit the
pinned tables that autotune.kernels.gemm() reads at run time.

New machine:    autotune doctor               (what works here, in under a minute)
Before:         autotune plan my.toml         (problems, space sizes, estimated duration)
Typical night:  autotune sweep my.toml        (tune; resumable: run it again after any stop)
No GPU here:    autotune sweep my.toml --target gfx942   (compile-only: cost-model predictions)
                autotune check --target gfx950 my.toml   (registers, spills, LDS, MFMA per config)
Next morning:   autotune status
                autotune best --m 16 --n 4096 --k 4096
                autotune export --format csv --out tuned/   (one CSV per GPU)
                autotune emit --out table.json              (then AUTOTUNE_TABLES=table.json)
                autotune report --out report.html           (figures: speed-ups, roofline, cost)
After upgrades: autotune diff before.db after.db            (per problem: which got slower)

The database is --db URL, else $AUTOTUNE_DB, else ./autotune.db (SQLite). Any SQLAlchemy URL works,
e.g. postgresql+psycopg://user@host/db for a fleet.
"""


def _parser() -> argparse.ArgumentParser:
    """The top-level parser, with a sub-parser per verb."""
    parser = argparse.ArgumentParser(
        prog="autotune", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        verb.add_parser(subparsers)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`argv` parsed; a flag no parser knows is an error of the verb's parser (its usage, exit 2) where
    it comes after the verb, else of the top level's."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        given = list(sys.argv[1:] if argv is None else argv)
        verbs = _verb_parsers(parser)
        at = given.index(args.verb) if args.verb in given else len(given)
        after = args.verb in verbs and unknown[0] in given[at + 1 :]
        (verbs[args.verb] if after else parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _verb_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each verb's sub-parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the verb of `argv` (default: the command line) and returns its exit status; no verb: the
    help, exit 2; a bad flag: the verb's usage and the error, exit 2."""
    parser = _parser()
    args = _parse(parser, argv)
    if not args.verb:
        parser.print_help()
        return EXIT_USAGE
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for console in logging.getLogger().handlers:  # a sweep's log file takes more than the console shows
        console.setLevel(level)
    handler = {verb.NAME: verb.run for verb in VERBS}[args.verb]
    try:
        return handler(args)
    except CliError as exc:
        print(f"autotune {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (`autotune status | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush cannot fail again
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"autotune {args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DeviceFault as exc:
        print(
            f"autotune {args.verb}: the GPU faulted and this process cannot use it any more: {exc}\n"
            "The config is stored as crashed; run the same command again to resume without it.",
            file=sys.stderr,
        )
        return EXIT_FAIL
    except Exception as exc:  # last: a damaged database, a server gone: one line, not a traceback
        if not _store_error(exc):
            raise
        print(f"autotune {args.verb}: error: the database cannot be used: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _store_error(exc: BaseException) -> bool:
    """Whether `exc` is the database's StoreError (a verb that never opened the database raised none, so
    the database modules are not imported for the check)."""
    engine = sys.modules.get("autotune.db.engine")
    return engine is not None and isinstance(exc, engine.StoreError)
