"""Running a sweep once its flags are checked: measured on worker processes (or Ray actors) with a log
file, or compile-only (the cost model's predictions); either with a progress bar, then its report."""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import TYPE_CHECKING

from autotune.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    missing_database,
    open_store,
    planned_spaces,
    progress,
)
from autotune.cli.tables import fmt_us, print_table, problem_label, with_layers

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path

    from autotune.core.config import Config
    from autotune.core.problem import Problem
    from autotune.core.result import TrialResult
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.engine.checker import StaticChecker
    from autotune.engine.runner import ProblemReport
    from autotune.engine.workers import Worker
    from autotune.sweeps import SweepReport, SweepSpec


def measure(
    args: argparse.Namespace,
    spec: SweepSpec | None,
    target: Target | None,
    gpus: list[int] | None,
    budget_s: float | None,
) -> int:
    """A measured sweep on worker processes (or Ray actors), with its log file and progress bar.

    `spec` None: the shapes of the untuned log; `target` None (Ray): the GPU the first actor landed on.
    """
    from autotune.cli.sweep_spec import untuned_spec, with_profile_m
    from autotune.engine.executors import make_workers, sweep_log
    from autotune.engine.workers import WorkerError

    stem = _log_stem(args.log_dir, spec.name if spec else "untuned")
    log_file = None if stem is None else stem.with_suffix(".log")
    checker = None
    try:
        workers = make_workers(
            args.executor,
            gpus=gpus,
            interpret=args.interpret,
            timeout_s=args.trial_timeout,
            stem=stem,
            target=target,
            address=args.address,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        with sweep_log(log_file):
            if target is None:  # Ray: the GPU the first actor landed on
                target = workers[0].target
            if spec is None:
                spec = untuned_spec(args, target)
                if args.profile_m is not None:
                    spec = with_profile_m(spec, args.profile_m)
            checker = None if target.interpreter else _checker(args, spec, target, len(workers))
            planned = planned_spaces(spec, target, args.no_progress, checker.pool if checker else None)
            new = missing_database(args.db)
            store = open_store(args.db)  # once the spec is known to be good: a bad one creates nothing
            if checker is not None:
                checker.store = store
            where = f"{len(workers)} workers ({args.executor})" if len(workers) > 1 else str(target)
            print(f"sweep {spec.name!r}: {len(planned)} problems on {where}; database {_shown(store, new)}")
            if log_file is not None:
                print(f"log: {log_file}")
            if target.interpreter:
                print(_interpreter_note(spec, store, target, len(workers), args.trial_timeout))
            report = _run_measured(args, spec, store, target, workers, planned, budget_s, log_file, checker)
    except WorkerError as exc:
        raise CliError(f"{exc} (everything finished is stored; run the same command to resume)") from None
    finally:
        if checker is not None:
            checker.close()
        for worker in workers:
            worker.close()
    print_sweep_report(report, spec.layers())
    return _measured_exit(report, len(spec.problems()))


def _shown(store: Store, new: Path | None) -> str:
    """The database's URL, and whether the sweep created it."""
    return store.display_url + (" (new: created now)" if new is not None else "")


def _checker(args: argparse.Namespace, spec: SweepSpec, target: Target, gpu_workers: int) -> StaticChecker:
    """The static checker of a measured sweep, its store set once opened: its compile processes take the
    CPU cores that the local GPU workers leave free (one core per GPU worker measures)."""
    from autotune.engine.checker import StaticChecker

    measuring_here = gpu_workers if args.executor == "local" else 0
    compilers = args.workers or max(1, (os.cpu_count() or 1) - measuring_here)
    return StaticChecker(target, spec.static, workers=compilers)


def _interpreter_note(
    spec: SweepSpec, store: Store, target: Target, processes: int, trial_timeout_s: float
) -> str:
    """What an interpreter sweep is and what it will cost, said before it starts."""
    from autotune.cli.plan import fmt_duration
    from autotune.sweeps.estimate import makespan, plan_sweep

    rows = plan_sweep(spec, target, store=store, trial_timeout_s=trial_timeout_s)
    left = sum(r.trials - r.done for r in rows)
    wall = makespan([r.est_s for r in rows], max(1, processes))
    on = f"{processes} interpreter processes" if processes > 1 else "one interpreter process"
    return (
        "note: --interpret runs kernels in Triton's CPU interpreter; results are stored under the "
        "'interpreter' target and say nothing about GPU speed.\n"
        f"note: {left} trials left, about {fmt_duration(wall)} on {on} (each launch runs every program "
        "instance in Python); to check the pipeline quickly, tune shapes of a few hundred with few "
        "trials, or run a compile-only sweep with --target ARCH"
    )


def _log_stem(log_dir: str, name: str) -> Path | None:
    """The path, without suffix, of the sweep's log files in --log-dir, created if missing; None for
    'none' (no log files)."""
    from autotune.engine.executors import log_stem

    if log_dir.lower() == "none":
        return None
    stem = log_stem(log_dir, name)
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--log-dir {log_dir}: cannot create it ({exc.strerror})") from None
    return stem


def _measured_exit(report: SweepReport, n_problems: int) -> int:
    """The exit status of a measured sweep (0, or 130 when interrupted), saying on stderr how to go on
    where its budget ran out or Ctrl-C stopped it."""
    if report.budget_spent:
        print(
            f"time budget spent: {report.trials_run} trials run and stored, "
            f"{n_problems - len(report.problems)} problems not started; "
            "run the same command (with a budget) to go on",
            file=sys.stderr,
        )
        return EXIT_OK
    if report.interrupted:
        print(
            f"interrupted: {report.trials_run} trials run and stored; run the same command to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_OK


def _run_measured(
    args: argparse.Namespace,
    spec: SweepSpec,
    store: Store,
    target: Target,
    workers: Sequence[Worker],
    planned: list[tuple[Problem, int, int]],
    budget_s: float | None,
    log_file: Path | None,
    checker: StaticChecker | None,
) -> SweepReport:
    """`run_sweep` with the progress bar, its tally of problems, vendor wins and crashes, and the static
    checker (None: the interpreter's sweep, which checks nothing); closes the store, not the checker."""
    from autotune.sweeps import run_sweep

    budgets = {p: e.budget.trials for e, p in spec.problems()}
    total = sum(min(n, budgets[p] or n) for p, n, _ in planned)
    bar = progress(total, disabled=args.no_progress)
    tally = {"problems": 0, "wins": 0, "crashed": 0}

    def postfix(last: str) -> None:
        crashed = f", {tally['crashed']} crashed/timeout" if tally["crashed"] else ""
        bar.set_postfix_str(
            f"{tally['problems']}/{len(planned)} problems, {tally['wins']} beat vendor{crashed} | {last}",
            refresh=False,
        )

    def on_trial(problem: Problem, config: Config, result: TrialResult) -> None:
        bar.update(1)
        if result.status.value in ("crashed", "timeout"):
            tally["crashed"] += 1
        postfix(f"{problem.M}x{problem.N}x{problem.K} {result.status.value}")

    def on_problem(report: ProblemReport) -> None:
        tally["problems"] += 1
        tally["wins"] += int(report.speedup is not None and report.speedup > 1.0)
        postfix(f"{problem_label(report.problem)} done")

    with store:
        try:
            report = run_sweep(
                spec,
                store,
                target,
                workers=workers,
                on_trial=on_trial,
                on_problem=on_problem,
                checker=checker,
                budget_s=budget_s,
                log_path=None if log_file is None else str(log_file.resolve()),
            )
        finally:
            bar.close()
    return report


def predict(args: argparse.Namespace, spec: SweepSpec, target: Target) -> int:
    """The compile-only sweep: model predictions for `target`, stored as such; the problems' defaults
    checked first on the compile processes, all at once."""
    from autotune.engine.checker import StaticChecker
    from autotune.engine.executors import sweep_log
    from autotune.sweeps import predict_sweep

    with StaticChecker(target, spec.static, workers=args.workers) as checker:
        n_problems = len(planned_spaces(spec, target, args.no_progress, checker.pool))
        new = missing_database(args.db)
        store = checker.store = open_store(args.db)  # once the spec is known to be good
        stem = _log_stem(args.log_dir, spec.name)
        log_file = None if stem is None else stem.with_suffix(".log")
        print(
            f"compile-only sweep {spec.name!r}: {n_problems} problems for {target}; "
            f"database {_shown(store, new)}\n"
            f"note: nothing runs on a GPU; the times below are the cost model's predictions, stored as "
            f"source 'model' and superseded by a measured sweep on a {target.arch} GPU"
        )
        if log_file is not None:
            print(f"log: {log_file}")
        bar = progress(n_problems, disabled=args.no_progress, unit="problem")

        def on_problem(report: ProblemReport) -> None:
            bar.update(1)
            p = report.problem
            bar.set_postfix_str(f"{p.M}x{p.N}x{p.K}: {report.ran} compiled", refresh=False)

        def on_step(problem: Problem, step: str) -> None:
            bar.set_postfix_str(f"{problem_label(problem)}: {step}")  # drawn now: a compile takes seconds

        log_path = None if log_file is None else str(log_file.resolve())
        with sweep_log(log_file), store:
            report = predict_sweep(
                spec, store, checker, on_problem=on_problem, on_step=on_step, log_path=log_path
            )
        bar.close()
    print_sweep_report(report, spec.layers())
    if report.interrupted:
        print("interrupted: finished problems are stored; run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"next: autotune emit --out table.json  (a table marked predicted for {target.arch})")
    return EXIT_OK


def print_layouts(report: SweepReport) -> None:
    """Per shape tuned at several values of a layout parameter (the MLA decode's page size): the fastest
    value, then each value's best time."""
    from autotune.sweeps.layouts import fastest_layouts

    results = []
    for p in report.problems:
        best, _ = p.picks()
        results.append((p.problem, best.time_us if best else None))
    for pick in fastest_layouts(results):
        times = ", ".join(f"{v}: {fmt_us(us)}" for v, us in pick.times_us)
        shape = problem_label(pick.problem)
        print(f"fastest {pick.param} of {shape}: {pick.fastest} (best µs by {pick.param}: {times})")


def print_sweep_report(report: SweepReport, layers: dict[Problem, str] | None = None) -> None:
    """A row per problem (its model layer first where it is one; configs run or compiled, read back,
    pruned by the static checks (compile errors included) and failed when run (crashes, timeouts, wrong
    results: a pruned config never runs, so it is no failure); its best config, the vendor library's
    time, the speedup), then the totals, the M profiles and what was pruned, each config by the first
    reason it breaks."""
    ran = "compiled" if report.predicted else "ran"
    timed = "predicted µs" if report.predicted else "best µs"
    rows: list[tuple[str, ...]] = [
        ("problem", "space", ran, "cached", "pruned", "failed", "best config", timed, "vendor µs", "speedup")
    ]
    for p in report.problems:
        best, vendor = p.picks()  # the final round's where one ran (marked *)
        mark = "*" if p.final else ""
        rows.append(
            (
                problem_label(p.problem),
                f"{p.space_size}/{p.raw_size}",
                str(p.ran),
                str(p.cached),
                str(sum(p.static_pruned.values())),
                str(p.failed),
                best.config.short() + mark if best else "-",
                fmt_us(best.time_us if best else None),
                fmt_us(vendor.time_us if vendor else None),
                "-" if p.speedup is None else f"{p.speedup:.2f}x",
            )
        )
    print_table(with_layers(rows, [p.problem for p in report.problems], layers or {}))
    if any(p.final for p in report.problems):
        print("* the final round's pick: medians of its finalists timed again head to head")
    print(
        f"{report.trials_run} {'configs compiled' if report.predicted else 'trials run'}, "
        f"{report.trials_cached} read back from the database, "
        f"{report.wall_s:.1f} s; sweep id {report.sweep_id}"
    )
    if report.profiles:
        n_ran = sum(p.ran + p.retimed for p in report.profiles)
        cached = sum(p.cached for p in report.profiles)
        reused = sum(p.reused for p in report.profiles)
        points = sum(p.points for p in report.profiles)
        pruned = sum(p.pruned for p in report.profiles)
        left_out = sum(p.left_out for p in report.profiles)
        share = report.profile_s / report.wall_s if report.wall_s > 0 else 0.0
        print(
            f"profiled {len(report.profiles)} shapes at {points} M values: {n_ran} timings run, {cached} "
            f"read back, {reused} taken from the final rounds, {report.profile_s:.1f} s ({share:.0%} of the "
            f"sweep; {pruned} timings left out as far behind, {left_out} M left to the vendor library); "
            "`autotune emit` serves M ranges"
        )
    print_layouts(report)
    problems = len(report.problems)
    over = f"summed over {problems} problems" if problems > 1 else "of the problem"
    for what, attr in (
        (f"by constraints before compiling (each by the first it breaks, {over}; 'space' is valid/all)",
         "pruned"),
        (f"by static checks after compiling (each by the first it fails, no GPU time; {over})",
         "static_pruned"),
    ):  # fmt: skip
        counts: Counter[str] = Counter()
        for p in report.problems:
            counts.update(getattr(p, attr))
        if counts:
            print(f"configs pruned {what}: " + ", ".join(f"{r} {n}" for r, n in counts.most_common()))
