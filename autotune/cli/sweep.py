"""`autotune sweep`: tune every problem of a spec, measured on GPUs or compile-only for a target.

The flags are checked here, before anything starts; `sweep_run` runs the sweep and prints its report.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from autotune.cli.common import (
    DB_CREATES,
    DEFAULT_COMPILE_TARGET,
    TRIAL_TIMEOUT_S,
    CliError,
    add_verb,
    check_workers,
    compile_target,
    next_phase,
    no_gpu,
    progress,
    spec_arg,
)
from autotune.engine.executors import EXECUTORS

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.core.target import Target

NAME = "sweep"

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="tune every problem of a spec on the local GPU (or compile-only for --target)",
        description="Tune every problem of SPEC on the local GPU, with a progress bar. "
        "Each trial is stored as it finishes; running the same command again resumes and "
        "never re-runs a finished or failed trial. Ctrl-C stops cleanly, keeping everything "
        "finished. Configs compile ahead on every CPU core while the GPU measures, and those the "
        "spec's [static] checks flag (spills, LDS, occupancy, MFMA shape) are stored as pruned "
        "without GPU time. With --target ARCH, or on a machine with no GPU (then for gfx942), the "
        "sweep is compile-only: the cost model ranks each space, the best candidates are compiled "
        "for the target and checked, and the predictions are stored (source 'model'), never mixed "
        "with measurements; a later measured sweep on that GPU supersedes them.",
        db=DB_CREATES,
        bar=True,
    )
    spec_arg(p, nargs="?")
    p.add_argument(
        "--untuned",
        metavar="LOG",
        nargs="?",
        const="",
        help="instead of a spec, tune the shapes that autotune.kernels logged as untuned on this GPU "
        "(LOG, default $AUTOTUNE_UNTUNED_LOG or ~/.cache/autotune/untuned.jsonl)",
    )
    p.add_argument("--strategy", help="with --untuned: exhaustive, random or optuna (default)")
    p.add_argument("--trials", type=int, help="with --untuned: trial budget per shape (default 60)")
    p.add_argument(
        "--interpret",
        action="store_true",
        help="run the kernels in Triton's CPU interpreter (tests the pipeline without a GPU; "
        "results are stored under their own 'interpreter' target, never mixed with a GPU's, and "
        "their timings mean nothing for a GPU)",
    )
    p.add_argument(
        "--target",
        metavar="ARCH",
        help="compile-only sweep for ARCH (gfx942, gfx950, sm_90; mi300x, mi355x, h100 also work): "
        "no GPU needed, stores predictions",
    )
    _add_execution_args(p)
    _add_limit_args(p)


def _add_execution_args(p: argparse.ArgumentParser) -> None:
    """Where and how trials run: GPUs, executor, timeouts, log files, compiler processes."""
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="GPUs to run on, as indices among the visible ones (CUDA_VISIBLE_DEVICES and "
        "HIP_VISIBLE_DEVICES are respected): 0,1,3 or 0-3 or all (default all). One worker process "
        "per GPU; problems are shared out, longest first, so that all finish together. With "
        "--interpret each index is one interpreter process; with --executor ray, the number of actors",
    )
    p.add_argument("--device", type=int, metavar="N", help="one GPU index (the same as --gpus N)")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: a worker process per GPU of this host [default]; a config that crashes or hangs "
        "its worker is stored as crashed or timeout and the worker is replaced. ray: a Ray actor "
        "per GPU of a Ray cluster (--address), results written here. inline: in this process, no "
        "isolation (debugging)",
    )
    p.add_argument(
        "--address", metavar="ADDR", help="with --executor ray: the cluster (default: start a local one)"
    )
    p.add_argument(
        "--trial-timeout",
        type=float,
        default=TRIAL_TIMEOUT_S,
        metavar="S",
        help="seconds one trial (compile, check, timing) may take before its worker is killed and the "
        "trial stored as timeout (default %(default)g)",
    )
    p.add_argument(
        "--log-dir",
        default="autotune-logs",
        metavar="DIR",
        help="where each sweep writes its log file, NAME-DATE-TIME-PID.log, with one more per worker "
        "(default ./autotune-logs; 'none' for no files)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="compiler processes (default: one per CPU core, less one per GPU worker in a measured sweep)",
    )


def _add_limit_args(p: argparse.ArgumentParser) -> None:
    """How long the sweep may take and what it profiles after tuning."""
    p.add_argument(
        "--budget",
        metavar="TIME",
        help="time budget for the whole sweep, e.g. 8h, 90m, 1h30m, 600s: shared across the problems "
        "(each gets an equal share of what is left); when spent the sweep stops, resumable",
    )
    p.add_argument(
        "--profile-m",
        metavar="LADDER",
        help="after tuning, time each shape's finalists, the vendor library and the default at these M "
        "(for every [[sweep]] table, overriding its profile_m): 'serving' (1, 2, 3, 4, 6, 8, every 8 to "
        "512, then log-spaced up to the shape's largest M; the default on a GPU), 'none', or M values "
        "and ranges LO-HI:STEP, e.g. 1,2,4,8-512:8,1024. `autotune emit` serves M ranges from it",
    )


def run(args: argparse.Namespace) -> int:
    """Checks the flags, loads the spec and picks the target: compile-only with --target, or where there
    is no GPU (then for the default compile target); else measured on the GPUs."""
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    from autotune.cli.sweep_run import measure, predict
    from autotune.cli.sweep_spec import untuned_spec, with_profile_m
    from autotune.core.target import Target, TargetError, local_target
    from autotune.engine.executors import parse_gpus
    from autotune.sweeps import SpecError, load_spec

    budget_s = _check_flags(args)
    try:
        gpus = [args.device] if args.device is not None else parse_gpus(args.gpus)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    where = f"loading {args.spec}" if args.spec is not None else "starting"
    bar = progress(None, args.no_progress, desc=where, leave=False)  # imports, the spec, the GPU: seconds
    note = ""
    try:
        if args.spec is not None:
            try:
                spec = load_spec(args.spec)
            except SpecError as exc:
                raise CliError(str(exc)) from None
            if args.profile_m is not None:
                spec = with_profile_m(spec, args.profile_m)
        next_phase(bar, "target")
        compile_only = bool(args.target)
        target: Target | None = None
        if args.interpret:
            target = Target.interpreter_target()
        elif args.target:
            target = compile_target(args.target)
        elif args.executor != "ray":
            try:
                target = local_target(gpus[0] if gpus else 0)
            except TargetError as exc:
                if not no_gpu() or args.executor != "local" or gpus:
                    raise CliError(str(exc)) from None
                target, compile_only = compile_target(DEFAULT_COMPILE_TARGET), True
                note = (
                    f"no GPU here: a compile-only sweep for {target.arch} ({target.name}); pass --target "
                    "to pick another, or --interpret to run the kernels in Triton's CPU interpreter"
                )
    finally:
        bar.close()
    if note:
        print(note)
    if compile_only:
        assert target is not None
        spec = untuned_spec(args, target) if args.untuned is not None else spec
        return predict(args, spec, target)
    return measure(args, spec if args.spec is not None else None, target, gpus, budget_s)


def _check_flags(args: argparse.Namespace) -> float | None:
    """The flags' rules, checked in order; returns --budget in seconds (None: no budget)."""
    if (args.spec is None) == (args.untuned is None):
        raise CliError(
            "give either a SPEC.toml or --untuned [LOG] (one of the two); the name of a spec that ships "
            "with the package (smoke, ...) is a SPEC too"
        )
    if args.spec is not None and (args.strategy is not None or args.trials is not None):
        raise CliError("--strategy and --trials go with --untuned; a spec sets them per [[sweep]] table")
    if args.trials is not None and args.trials <= 0:
        raise CliError("--trials must be positive")
    check_workers(args)
    budget_s = parse_duration(args.budget) if args.budget else None
    if args.interpret and args.target:
        raise CliError("--interpret and --target exclude each other (interpreter or compile-only)")
    if args.target and (args.executor != "local" or args.gpus or args.device is not None):
        raise CliError("--target is a compile-only sweep: it takes no --executor, --gpus or --device")
    if args.gpus is not None and args.device is not None:
        raise CliError("--gpus and --device exclude each other (--device N is --gpus N)")
    if args.address is not None and args.executor != "ray":
        raise CliError("--address goes with --executor ray")
    if args.trial_timeout <= 0:
        raise CliError("--trial-timeout must be positive")
    return budget_s


def parse_duration(text: str) -> float:
    """Seconds in `text`: "8h", "90m", "1h30m", "600s", "2.5h" or a bare number of seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise CliError(f"--budget {text!r}: give a duration like 8h, 90m, 1h30m or 600s")
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise CliError(f"--budget {text!r}: the duration must be positive")
    return seconds
