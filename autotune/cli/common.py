"""What several verbs share: exit codes, CliError, the verb parsers' common flags, opening the store,
compile-only targets and the progress bar.

Heavy modules (torch, the database, tqdm) are imported inside the functions that need them, so that
importing the CLI and `autotune --help` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    from tqdm import tqdm

    from autotune.core.target import Target
    from autotune.db import Store

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

#: The target of a compile-only sweep or plan on a machine with no GPU.
DEFAULT_COMPILE_TARGET = "gfx942"


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def verbose_parent() -> argparse.ArgumentParser:
    """A parent parser that accepts -v after the verb too (counted with the top level's -v, not shown)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parent


def add_verb(subparsers: Subparsers, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    """The sub-parser of verb `name`, taking -v like the top level."""
    return subparsers.add_parser(name, parents=[verbose_parent()], help=help, description=description)


def db_arg(p: argparse.ArgumentParser) -> None:
    """The --db flag of a verb that reads or writes the database."""
    p.add_argument(
        "--db", metavar="URL", help="database URL or SQLite file (default: $AUTOTUNE_DB, else ./autotune.db)"
    )


def check_workers(args: argparse.Namespace) -> None:
    """--workers, where given, is positive."""
    if args.workers is not None and args.workers <= 0:
        raise CliError("--workers must be positive")


def open_store(url: str | None, *, create: bool = True) -> Store:
    """The store at `url` (None: $AUTOTUNE_DB, else ./autotune.db); CliError if it cannot be opened, or,
    without `create` (the verbs that only read), if it is a SQLite file that does not exist: a mistyped
    path names no database rather than a new empty one."""
    from autotune.db import Store, StoreError
    from autotune.db.engine import resolve_url, sqlite_path

    path = sqlite_path(resolve_url(url))
    if not create and path is not None and not path.exists():
        raise CliError(
            f"no database at {path}: run `autotune sweep` (or `autotune import`) to make one, or name "
            "another with --db or $AUTOTUNE_DB"
        )
    try:
        return Store(url)
    except StoreError as exc:
        raise CliError(str(exc)) from None


def no_gpu() -> bool:
    """Whether this machine has no GPU that torch can use."""
    import torch

    return not torch.cuda.is_available()


def compile_target(name: str) -> Target:
    """The published-limits Target of `name` for compile-only work; CliError if unknown or unbuildable."""
    from autotune.core.target import Target, TargetError
    from autotune.engine.compile import check_compilable

    try:
        target = Target.for_arch(name)
        if target.interpreter:
            raise TargetError("the interpreter compiles nothing; use --interpret to run kernels on the CPU")
        check_compilable(target)
    except TargetError as exc:
        raise CliError(str(exc)) from None
    return target


def progress(total: int, disabled: bool, unit: str = "trial") -> tqdm:
    """A progress bar on stderr (none when `disabled`, or when stderr is not a terminal)."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=disabled or None, dynamic_ncols=True, file=sys.stderr)
