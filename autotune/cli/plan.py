"""`autotune plan`: what a sweep would do and how long it would take, without running it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from autotune.cli.common import (
    EXIT_OK,
    TRIAL_TIMEOUT_S,
    CliError,
    add_verb,
    check_workers,
    missing_database,
    next_phase,
    open_store,
    progress,
    spec_arg,
    target_or_local,
)
from autotune.cli.tables import print_table, problem_label, with_layers

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.core.problem import Problem
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.sweeps import SweepSpec
    from autotune.sweeps.estimate import PlanRow

NAME = "plan"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="what a sweep would do and how long it would take, without running it",
        description="For every problem of SPEC: the space size after the constraints (valid/all), the "
        "trials the sweep would run (the budget caps them), how many are already in the database (a "
        "resumed sweep skips them) and an estimated duration, from the cost model's kernel times, the "
        "benchmarker's settings, compilation ahead on every CPU core and the trial timeout. On the local "
        "GPU, else for --target (a compile-only sweep's plan; gfx942 when there is no GPU). Compiles "
        "nothing: the ops' defaults are taken as far as their static verdicts are known here. Estimates, "
        "not promises.",
        db="the database whose stored trials count as done, only read: a URL or a SQLite file (default: "
        "$AUTOTUNE_DB, else ./autotune.db where it exists); a file that does not exist yet is planned as "
        "empty, never created",
        bar=True,
    )
    spec_arg(p)
    p.add_argument("--target", metavar="ARCH", help="plan a compile-only sweep for ARCH")
    p.add_argument(
        "--interpret",
        action="store_true",
        help="plan `sweep --interpret`: the trials in Triton's CPU interpreter, which runs each program "
        "instance of a launch in Python (seconds a launch on shapes of thousands)",
    )
    p.add_argument("--device", type=int, default=0, metavar="N", help="GPU index (default 0)")
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs the sweep will run on, for the wall-time estimate (default: the GPUs visible here, or 1)",
    )
    p.add_argument("--workers", type=int, metavar="N", help="compiler processes (default: one per CPU core)")
    p.add_argument(
        "--trial-timeout",
        type=float,
        default=TRIAL_TIMEOUT_S,
        metavar="S",
        help="the sweep's --trial-timeout (default %(default)g): a trial estimated near it is counted at "
        "the whole of it",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")


def run(args: argparse.Namespace) -> int:
    """The plan of every problem on the local GPU, else compile-only for --target (or the default
    compile target where there is no GPU); reads the database only where one is named or exists. A
    progress bar on stderr names each phase as it starts (loading the spec, the target, planning)."""
    import time

    from autotune.engine.verdicts import known_only
    from autotune.sweeps import SpecError, load_spec
    from autotune.sweeps.estimate import plan_sweep

    start = time.perf_counter()
    check_workers(args)
    if args.gpus is not None and args.gpus < 1:
        raise CliError("--gpus must be at least 1")
    if args.interpret and args.target:
        raise CliError("--interpret and --target exclude each other (interpreter or compile-only)")
    if args.trial_timeout <= 0:
        raise CliError("--trial-timeout must be positive")
    bar = progress(None, args.no_progress, unit="problem", desc=f"loading {args.spec}", leave=False)

    def planned(problem: Problem) -> None:
        bar.set_postfix_str(problem_label(problem), refresh=False)
        bar.update(1)

    try:
        try:
            spec = load_spec(args.spec)
        except SpecError as exc:
            raise CliError(str(exc)) from None
        next_phase(bar, "target")
        target, compile_only = _target(args)
        store = _store(args.db)
        next_phase(bar, "planning", len(spec.problems()))
        try:
            with known_only():  # the defaults' verdicts known so far: the estimates need no compile
                rows = plan_sweep(
                    spec, target, store=store, workers=args.workers, compile_only=compile_only,
                    on_problem=planned, trial_timeout_s=args.trial_timeout,
                )  # fmt: skip
        except SpecError as exc:
            raise CliError(str(exc)) from None
        finally:
            if store is not None:
                store.close()
    finally:
        bar.close()
    return _report(args, spec, target, compile_only, rows, time.perf_counter() - start)


def _report(
    args: argparse.Namespace,
    spec: SweepSpec,
    target: Target,
    compile_only: bool,
    rows: list[PlanRow],
    elapsed: float,
) -> int:
    """The plan as a table (or one JSON document), with the time it took to make."""
    import json

    from autotune.sweeps.estimate import makespan

    total = sum(r.est_s for r in rows)
    if compile_only or (target.interpreter and not args.gpus):
        gpus = 1
    else:
        from autotune.engine.workers import visible_devices

        gpus = args.gpus or max(1, len(visible_devices()))
    wall = makespan([r.est_s for r in rows], gpus)
    if args.json:
        doc = {
            "spec": spec.name,
            "target": target.arch,
            "compile_only": compile_only,
            "est_s": round(total, 1),
            "gpus": gpus,
            "wall_s": round(wall, 1),
            "plan_s": round(elapsed, 2),
            "problems": [r.to_dict() for r in rows],
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    kind = "compile-only sweep" if compile_only else "sweep"
    print(f"{kind} {spec.name!r}: {len(rows)} problems on {target}")
    _print_rows(rows, total, wall, gpus, spec.layers(), checked=not target.interpreter)
    print(f"planned in {elapsed:.1f} s")
    return EXIT_OK


def _target(args: argparse.Namespace) -> tuple[Target, bool]:
    """(the target, whether the plan is compile-only): the interpreter with --interpret, --target, else
    the local GPU, else (no GPU here) the default compile target."""
    from autotune.core.target import Target

    if args.interpret:
        return Target.interpreter_target(), False
    return target_or_local(args.target, args.device)


def _store(url: str | None) -> Store | None:
    """The database named (--db, $AUTOTUNE_DB) or at ./autotune.db, opened read-only; None where there is
    none: where one is named but does not exist yet, saying so on stderr (a sweep will create it)."""
    from autotune.db.engine import ENV_VAR

    named = bool(url or os.environ.get(ENV_VAR, "").strip())
    missing = missing_database(url)
    if missing is None:
        return open_store(url, create=False, read_only=True)
    if named:
        print(f"autotune plan: no database at {missing} yet: nothing counts as done", file=sys.stderr)
    return None


def _print_rows(
    rows: list[PlanRow], total: float, wall: float, gpus: int, layers: dict[Problem, str], checked: bool
) -> None:
    """A row per problem (its model layer first, where it is one), then the trials left and the
    estimates: `total` on one GPU, `wall` on `gpus`; `checked`: the sweep runs the static checks."""
    table: list[tuple[str, ...]] = [("problem", "space", "trials", "done", "estimate")]
    for r in rows:
        table.append(
            (
                problem_label(r.problem),
                f"{r.valid}/{r.raw}",
                str(r.trials),
                str(r.done),
                fmt_duration(r.est_s),
            )
        )
    print_table(with_layers(table, [r.problem for r in rows], layers))
    left = sum(r.trials - r.done for r in rows)
    on = f" on one GPU, {fmt_duration(wall)} on {gpus} (problems shared longest first)" if gpus > 1 else ""
    caveat = " (the static checks may prune more once configs are compiled)" if checked else ""
    print(f"{left} trials left of {sum(r.trials for r in rows)}; estimated {fmt_duration(total)}{on}{caveat}")


def fmt_duration(seconds: float) -> str:
    """Seconds under 90 s, minutes under 90 min, else hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
