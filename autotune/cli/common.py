"""What several verbs share: exit codes, CliError, the verb parsers' common flags, opening the store,
compile-only targets, the defaults' verdicts and the progress bar.

Heavy modules (torch, the database, tqdm) are imported inside the functions that need them, so that
importing the CLI and `autotune --help` stay fast.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    from tqdm import tqdm

    from autotune.core.problem import Problem
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.engine.verdicts import Compiler
    from autotune.sweeps import SweepSpec

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

#: The target of a compile-only sweep or plan on a machine with no GPU.
DEFAULT_COMPILE_TARGET = "gfx942"
#: Seconds one trial may take before its worker is killed (`sweep --trial-timeout`, `plan`'s estimate).
TRIAL_TIMEOUT_S = 300.0

_DB_DEFAULT = "default: $AUTOTUNE_DB, else ./autotune.db"
#: --db of a verb that only reads the database: it must exist.
DB_READS = f"the database to read: a URL or an existing SQLite file ({_DB_DEFAULT})"
#: --db of a verb that writes the database and makes it where it is missing (sweep, import).
DB_CREATES = f"the database: a URL or a SQLite file, created if missing ({_DB_DEFAULT})"


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def verbose_parent() -> argparse.ArgumentParser:
    """A parent parser that accepts -v after the verb too (counted with the top level's -v)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more logging (-vv for debug)"
    )
    return parent


def add_verb(
    subparsers: Subparsers,
    name: str,
    *,
    help: str,
    description: str,
    db: str | None = None,
    bar: bool = False,
) -> argparse.ArgumentParser:
    """The sub-parser of verb `name` with the flags every verb has where they mean something: -v (more
    logging) always; --db where the verb uses the database, `db` its help (`DB_READS`, `DB_CREATES` or
    the verb's own); --no-progress where it draws a progress bar (`bar`)."""
    p = subparsers.add_parser(name, parents=[verbose_parent()], help=help, description=description)
    if db is not None:
        db_arg(p, db)
    if bar:
        p.add_argument(
            "--no-progress", action="store_true", help="no progress bar (there is none where stderr is not "
            "a terminal)",
        )  # fmt: skip
    return p


def db_arg(
    p: argparse.ArgumentParser,
    help: str = "database URL or SQLite file (default: $AUTOTUNE_DB, else ./autotune.db)",
) -> None:
    """The --db flag of a verb that reads or writes the database (`help`: what the verb does with it)."""
    p.add_argument("--db", metavar="URL", help=help)


def spec_arg(p: argparse.ArgumentParser, *, nargs: str | None = None) -> None:
    """The SPEC argument: a TOML file, or the name of a spec that ships with the package."""
    p.add_argument(
        "spec", metavar="SPEC", nargs=nargs,
        help="sweep spec: a TOML file, or the name of one that ships with the package (smoke, ...)",
    )  # fmt: skip


def check_workers(args: argparse.Namespace) -> None:
    """--workers, where given, is positive."""
    if args.workers is not None and args.workers <= 0:
        raise CliError("--workers must be positive")


def open_store(url: str | None, *, create: bool = True, read_only: bool = False) -> Store:
    """The store at `url` (None: $AUTOTUNE_DB, else ./autotune.db); CliError if it cannot be opened, or,
    without `create`, if it is a SQLite file that does not exist: a mistyped path names no database
    rather than a new empty one (only `sweep` and `import` create one: `missing_database` says where
    they will). `read_only` (the verbs that only read) opens an existing database read-only: a
    read-only file or folder can be inspected, and nothing is left beside it (no -wal or -shm file)."""
    from autotune.db import Store, StoreError

    path = missing_database(url)
    if path is not None and not create:
        raise CliError(
            f"no database at {path}: run `autotune sweep` (or `autotune import`) to make one, or name "
            "another with --db or $AUTOTUNE_DB"
        )
    if path is not None:
        read_only = False  # a new, empty database (where `create` allows it)
    try:
        return Store(url, read_only=read_only)
    except StoreError as exc:
        raise CliError(str(exc)) from None


def missing_database(url: str | None) -> Path | None:
    """The SQLite file `url` names (None: $AUTOTUNE_DB, else ./autotune.db) where it does not exist yet:
    `open_store(url, create=True)` would make a new, empty database there; None for an existing file
    or a database server."""
    from autotune.db.engine import resolve_url, sqlite_path

    path = sqlite_path(resolve_url(url))
    return path if path is not None and not path.exists() else None


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


def target_or_local(name: str | None, device: int = 0) -> tuple[Target, bool]:
    """(the target, whether it is compile-only): `name`'s (--target) where given, else the local GPU,
    else, on a machine with no GPU, `DEFAULT_COMPILE_TARGET`'s."""
    from autotune.core.target import TargetError, local_target

    if name:
        return compile_target(name), True
    try:
        return local_target(device), False
    except TargetError as exc:
        if not no_gpu():
            raise CliError(str(exc)) from None
        return compile_target(DEFAULT_COMPILE_TARGET), True


def check_defaults(spec: SweepSpec, target: Target, compiler: Compiler) -> int:
    """The heuristic defaults of every problem of `spec` on `target` checked at once on `compiler`'s
    processes (`autotune.engine.verdicts.Verdicts.prefetch`), before the spaces that start with them are
    built one after another; returns the binaries compiled. Nothing where this process does not check
    defaults for `target` (the interpreter, `AUTOTUNE_CHECK_DEFAULTS=0`)."""
    import logging

    from autotune.engine.verdicts import can_check, verdicts

    if target.interpreter or not can_check(target):
        return 0
    asks = []
    for entry, problem in spec.problems():
        op = entry.op_for(problem)
        try:
            asks.append((op, problem, target, op.default_candidates(problem, target)))
        except ValueError:  # no default: building its space says why
            continue
    compiled = verdicts().prefetch(asks, compiler)
    logging.getLogger(__name__).info("checked the defaults of %d problems: %d compiled", len(asks), compiled)
    return compiled


def progress(
    total: int | None, disabled: bool, unit: str = "trial", desc: str | None = None, leave: bool = True
) -> tqdm:
    """A progress bar on stderr (none when `disabled`, or when stderr is not a terminal), drawn at once;
    `desc` names the phase (`total` None: a phase that counts nothing, shown with its time), `leave`
    False erases the bar when it closes."""
    from tqdm import tqdm

    disable = disabled or None  # None: off where stderr is not a terminal
    shape = _PHASE if total is None else None
    sized = _columns() > 0  # a terminal that reports no width (some containers): a fixed one
    bar = tqdm(
        total=total,
        unit=unit,
        desc=desc,
        leave=leave,
        disable=disable,
        dynamic_ncols=sized,
        ncols=None if sized else 100,
        nrows=None if sized else 40,
        file=sys.stderr,
        bar_format=shape,
    )
    if not bar.disable:
        threading.Thread(target=_tick, args=(bar,), name="progress-tick", daemon=True).start()
    return bar


def _columns() -> int:
    """The width of the terminal on stderr; -1 where it is none."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return -1


#: Seconds between redraws of a bar that nothing updated: its time goes on, so no phase looks stalled.
TICK_S = 1.0


def _tick(bar: tqdm) -> None:
    """Redraws `bar` every `TICK_S` until it is closed (a closed bar is disabled)."""
    while True:
        time.sleep(TICK_S)
        if bar.disable:
            return
        bar.refresh()


#: How a phase that counts nothing shows: its name and the time so far.
_PHASE = "{desc} [{elapsed}]"


def next_phase(bar: tqdm, desc: str, total: int | None = None) -> None:
    """`bar` moved on to phase `desc`, counting `total` steps where given, drawn at once."""
    bar.set_description_str(desc, refresh=total is None)
    if total is not None:
        bar.bar_format = None
        bar.reset(total=total)  # drawn


def planned_spaces(
    spec: SweepSpec, target: Target, disabled: bool, compiler: Compiler | None = None
) -> list[tuple[Problem, int, int]]:
    """`autotune.sweeps.plan` (every problem's space built and counted) with a progress bar of the
    problems, erased when done; CliError for a bad spec. With `compiler`, the problems' defaults are
    checked on its processes first, all at once (`check_defaults`)."""
    from autotune.cli.tables import problem_label
    from autotune.sweeps import SpecError, plan

    bar = progress(len(spec.problems()), disabled, unit="problem", desc="search spaces", leave=False)

    def built(problem: Problem) -> None:
        bar.set_postfix_str(problem_label(problem), refresh=False)
        bar.update(1)

    try:
        if compiler is not None:
            bar.set_description_str("checking defaults")
            check_defaults(spec, target, compiler)
            bar.set_description_str("search spaces")
        return plan(spec, target, on_problem=built)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    finally:
        bar.close()
