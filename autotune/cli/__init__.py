"""The `autotune` command line: sweep, plan, check, best, export, import, emit, status."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.result import VENDOR_BACKEND
from autotune.engine.bench import DeviceFault
from autotune.engine.executors import EXECUTORS

if TYPE_CHECKING:
    from autotune.db import Store

__all__ = ["main"]

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

_DESCRIPTION = """\
Autotune GPU matrix kernels per problem shape, keep every measurement in a database, and emit the
pinned tables that autotune.kernels.gemm() reads at run time.

Before:         autotune plan my.toml         (problems, space sizes, estimated duration)
Typical night:  autotune sweep my.toml        (tune; resumable: run it again after any stop)
No GPU here:    autotune sweep my.toml --target gfx942   (compile-only: cost-model predictions)
                autotune check --target gfx950 my.toml   (registers, spills, LDS, MFMA per config)
Next morning:   autotune status
                autotune best --op gemm --m 16 --n 4096 --k 4096
                autotune export --format csv --out tuned/   (one CSV per GPU)
                autotune emit --out gemm-table.json         (then AUTOTUNE_TABLES=gemm-table.json)

The database is --db URL, else $AUTOTUNE_DB, else ./autotune.db (SQLite). Any SQLAlchemy URL works,
e.g. postgresql+psycopg://user@host/db for a fleet.
"""


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", metavar="URL", help="database URL or SQLite file (default: $AUTOTUNE_DB, else ./autotune.db)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    common = argparse.ArgumentParser(add_help=False)  # so that -v also works after the verb
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = sub.add_parser(
        "sweep",
        parents=[common],
        help="tune every problem of a spec on the local GPU (or compile-only for --target)",
        description="Tune every problem of SPEC.toml on the local GPU, with a progress bar. "
        "Each trial is stored as it finishes; running the same command again resumes and "
        "never re-runs a finished or failed trial. Ctrl-C stops cleanly, keeping everything "
        "finished. Configs compile ahead on every CPU core while the GPU measures, and those the "
        "spec's [static] checks flag (spills, LDS, occupancy, MFMA shape) are stored as pruned "
        "without GPU time. With --target ARCH, or on a machine with no GPU (then for gfx942), the "
        "sweep is compile-only: the cost model ranks each space, the best candidates are compiled "
        "for the target and checked, and the predictions are stored (source 'model'), never mixed "
        "with measurements; a later measured sweep on that GPU supersedes them.",
    )
    p.add_argument(
        "spec", metavar="SPEC", nargs="?",
        help="sweep spec: a TOML file, or the name of one that ships with the package (smoke, ...)",
    )  # fmt: skip
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
    _db_arg(p)
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
        default=300.0,
        metavar="S",
        help="seconds one trial (compile, check, timing) may take before its worker is killed and the "
        "trial stored as timeout (default 300)",
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "plan",
        parents=[common],
        help="what a sweep would do and how long it would take, without running it",
        description="For every problem of SPEC.toml: the space size after the constraints (valid/all), the "
        "trials the sweep would run (the budget caps them), how many are already in the database (a "
        "resumed sweep skips them) and an estimated duration, from the cost model's kernel times, the "
        "benchmarker's settings and compilation ahead on every CPU core. On the local GPU, else for "
        "--target (a compile-only sweep's plan; gfx942 when there is no GPU). Estimates, not promises.",
    )
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec")
    p.add_argument("--target", metavar="ARCH", help="plan a compile-only sweep for ARCH")
    p.add_argument("--device", type=int, default=0, metavar="N", help="GPU index (default 0)")
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs the sweep will run on, for the wall-time estimate (default: the GPUs visible here, or 1)",
    )
    p.add_argument("--workers", type=int, metavar="N", help="compiler processes (default: one per CPU core)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _db_arg(p)

    p = sub.add_parser(
        "check",
        parents=[common],
        help="compile-only checks of a spec's configs for a target (no GPU needed)",
        description="For every problem of SPEC.toml: the space size, what compiled for --target, "
        "what the static checks prune and why (MFMA shape vs matrix_instr_nonkdim, spills, LDS over "
        "the target's, occupancy under the floor), and the best candidates by the cost model with "
        "their registers, LDS, occupancy and instructions. Compiles the model's best "
        "[static] candidates per problem (--all: the whole space) on every CPU core. Writes nothing "
        "unless --db is given (then compiled features are kept there and reused).",
    )
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec")
    p.add_argument("--target", required=True, metavar="ARCH", help="gfx942, gfx950 or sm_90")
    p.add_argument("--all", action="store_true", help="compile every config of each space (slow)")
    p.add_argument("--candidates", type=int, metavar="N", help="configs compiled per problem")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout, for machines")
    p.add_argument("--workers", type=int, metavar="N", help="compiler processes (default: one per CPU core)")
    p.add_argument(
        "--db", metavar="URL", help="keep and reuse compiled features in this database (default: none)"
    )

    p = sub.add_parser(
        "best",
        parents=[common],
        help="the winning config of one shape and its runner-ups",
        description="Show the fastest measured configs of one problem, per GPU in the database.",
    )
    p.add_argument("--op", default="gemm", help="op (default gemm)")
    p.add_argument("--m", type=int, required=True, help="M (rows of A, tokens)")
    p.add_argument("--n", type=int, required=True, help="N (columns of C)")
    p.add_argument("--k", type=int, required=True, help="K (the reduction dimension)")
    p.add_argument("--e", type=int, default=0, help="experts of a moe problem (default 0: dense)")
    p.add_argument(
        "--topk", type=int, default=0, help="experts per token of a moe problem (default 0: dense)"
    )
    p.add_argument(
        "--dtype",
        default="bf16",
        help="input dtype (default bf16); for the quantized gemm_* ops, whose op fixes the inputs, the "
        "output dtype",
    )
    p.add_argument(
        "--weights",
        help="weight (B) dtype if not --dtype, e.g. fp8e4m3 for FP8 MoE weights with block scales; for "
        "gemm_fp8_rowwise/blockwise the FP8 flavour (fp8e4m3fnuz names MI300X's)",
    )
    p.add_argument("--layout", default="nk", choices=("nk", "kn"), help="B as (N, K) [default] or (K, N)")
    p.add_argument("--gpu", metavar="FINGERPRINT", help="only this GPU (fingerprint or a prefix of 6+ chars)")
    p.add_argument("--limit", type=int, default=5, help="how many configs to list (default 5)")
    p.add_argument(
        "--predicted",
        action="store_true",
        help="show the cost model's predictions of compile-only sweeps instead of measurements",
    )
    _db_arg(p)

    p = sub.add_parser(
        "export",
        parents=[common],
        help="write tuned tables (one CSV per GPU, or vLLM/SGLang fused-MoE configs)",
        description="--format csv (default): one CSV per GPU fingerprint, a row per winning (problem, "
        "backend, config) with time, TFLOP/s, GB/s, fraction of roofline, speedup over the vendor "
        "library, the GPU's arch and CU count, and the toolchain versions. --format vllm (or sglang): "
        "the moe winners as fused-MoE config files, one per (GPU, E, N, weights), mapping M to the "
        "Triton config (where another backend won, the best Triton config of that M; imported configs "
        "where nothing was measured). vllm and sglang differ only in the file name: vLLM writes "
        "block_shape=[128,128] and NVIDIA_H200 for every H200, SGLang block_shape=[128, 128].",
    )
    p.add_argument(
        "--format", default="csv", choices=("csv", "vllm", "sglang"), help="output format (default csv)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--gpu", metavar="FINGERPRINT", help="only this GPU")
    _db_arg(p)

    p = sub.add_parser(
        "import",
        parents=[common],
        help="import the MoE configs vLLM/SGLang ship (.json) and aiter's tuned CSVs (.csv)",
        description="Import vLLM/SGLang fused-MoE config files (E=..,N=..,device_name=..[,dtype=..]"
        "[,block_shape=..].json) and aiter tuned fused-MoE CSVs (tuned_fmoe.csv) as moe trials of "
        "source 'imported', on a GPU of their own (never mixed with measurements). All or nothing: "
        "every file is read and checked first, then everything is written in one transaction; on any "
        "error nothing is written. Importing again writes nothing new. Configs the installed toolchain "
        "would reject (num_stages=0 on AMD, block sizes that are not powers of two) are stored as "
        "pruned with the reason. vLLM files hold no timings (so they never win in best or emit); aiter "
        "rows carry aiter's time in µs.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="vLLM/SGLang .json or aiter .csv files")
    p.add_argument(
        "--k",
        type=int,
        help="hidden size (K) of the vLLM files; default: inferred from E and N for known models",
    )
    p.add_argument(
        "--topk",
        type=int,
        help="experts per token of the vLLM files; default: inferred from E and N for known models",
    )
    _db_arg(p)

    p = sub.add_parser(
        "emit",
        parents=[common],
        help="write a pinned lookup table for autotune.dispatch",
        description="Write the winners of one GPU as a pinned Table (JSON) that "
        "autotune.dispatch loads (explicit path or $AUTOTUNE_TABLES) and "
        "autotune.kernels.gemm consults at run time.",
    )
    p.add_argument("--out", required=True, metavar="TABLE.json", help="output file")
    p.add_argument("--gpu", metavar="FINGERPRINT", help="which GPU (needed when the database holds several)")
    p.add_argument(
        "--m-policy",
        default=None,
        help="how an M between tuned buckets is served "
        "(round_up, round_down, nearest, nearest_log; default: the measured best, see README)",
    )
    p.add_argument(
        "--vendor-margin",
        type=float,
        default=0.01,
        metavar="FRACTION",
        help="keep the vendor library unless another backend is faster by more than this fraction "
        "(default 0.01: smaller wins are within run-to-run noise), at a shape's tuned M buckets",
    )
    p.add_argument(
        "--range-margin",
        type=float,
        default=0.05,
        metavar="FRACTION",
        help="the same at every profiled M of a shape served by M ranges (default 0.05: launches timed "
        "back to back, as served, vary more between runs)",
    )
    p.add_argument(
        "--no-ranges",
        action="store_true",
        help="ignore stored M profiles: serve every shape from its tuned M buckets by the M policy",
    )
    _db_arg(p)

    p = sub.add_parser(
        "verify",
        parents=[common],
        help="time the served call of a table against the vendor library at every M, on this GPU",
        description="On the local GPU, time the call a serving process gets (autotune.kernels' entry "
        "points with TABLE loaded; for a shape TABLE does not cover, the op's fallback) against the "
        "vendor library at every M of a ladder, both timed as served (CUDA-graph replays over "
        "rotating inputs, interleaved rounds), each output checked first. Prints the worst rows and "
        "a summary per shape, writes every row as JSON, and exits 1 when a row's ratio (vendor "
        "time / served time) is under --min-ratio: run it before deploying a table.",
    )
    p.add_argument("table", metavar="TABLE.json", nargs="?", help="the table to verify (none: the fallbacks)")
    p.add_argument(
        "--problems",
        metavar="SPEC.toml",
        help="verify the shapes of this sweep spec (with or without TABLE) instead of TABLE's entries",
    )
    p.add_argument(
        "--m",
        metavar="LADDER",
        help="the M values: 'serving' (default: 1, 2, 3, 4, 6, 8, every 8 to 512, then log-spaced to each "
        "shape's largest tuned M) or M values and ranges LO-HI:STEP, e.g. 1-16,24,4096",
    )
    p.add_argument("--max-m", type=int, metavar="M", help="the serving ladder up to this M for every shape")
    p.add_argument(
        "--min-ratio",
        type=float,
        default=0.98,
        metavar="R",
        help="fail (exit 1) when a row's vendor time / served time is under R (default 0.98)",
    )
    p.add_argument(
        "--rounds", type=int, default=3, metavar="N", help="interleaved rounds per row (default 3)"
    )
    p.add_argument("--worst", type=int, default=15, metavar="N", help="worst rows to print (default 15)")
    p.add_argument(
        "--out",
        default="autotune-verify.json",
        metavar="FILE",
        help="JSON of every row (default %(default)s)",
    )
    p.add_argument("--device", type=int, default=0, metavar="N", help="GPU index (default 0)")
    p.add_argument(
        "--shard",
        metavar="K/N",
        help="verify only every N-th shape starting at the K-th (0-based), e.g. 0/4 on GPU 0 and 1/4 on "
        "GPU 1 to spread one verification over several GPUs (each writes its own --out)",
    )
    p.add_argument(
        "--interpret",
        action="store_true",
        help="run in Triton's CPU interpreter (checks the pipeline; its timings mean nothing)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "status",
        parents=[common],
        help="what is in the database, and the sweeps running or finished on any host",
        description="Counts of GPUs, problems, sweeps and trials, then the latest sweeps of every host "
        "that writes to this database: state (running; stale when a running sweep's heartbeat "
        "stopped, i.e. it was killed: run its command again to resume), host and process, GPU, "
        "progress, start time and log file.",
    )
    _db_arg(p)
    p.add_argument("--sweeps", type=int, default=10, metavar="N", help="how many sweeps to list (default 10)")
    p.add_argument("--running", action="store_true", help="only sweeps still marked running")

    p = sub.add_parser(
        "db",
        parents=[common],
        help="database maintenance: upgrade its schema",
        description="Maintain the database. `autotune db upgrade` migrates a database written by an older "
        "autotune to this autotune's schema version (back it up first).",
    )
    db_sub = p.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    q = db_sub.add_parser(
        "upgrade",
        parents=[common],
        help="migrate the database to this autotune's schema version",
        description="Migrate the database to this autotune's schema version, all or nothing, and print "
        "the versions before and after; a database already there is left as it is. Back it up first "
        "(copy the SQLite file; pg_dump for PostgreSQL) and stop the sweeps that use it.",
    )
    _db_arg(q)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return EXIT_USAGE
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for console in logging.getLogger().handlers:  # a sweep's log file takes more than the console shows
        console.setLevel(level)
    handlers = {"sweep": _sweep, "plan": _plan, "check": _check, "best": _best, "export": _export}
    handlers["emit"] = _emit
    handlers["verify"] = _verify
    handlers["import"] = _import
    handlers["db"] = _db
    handler = {**handlers, "status": _status}[args.verb]
    try:
        return handler(args)
    except CliError as exc:
        print(f"autotune {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
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


def _check_workers(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers <= 0:
        raise CliError("--workers must be positive")


def _open_store(url: str | None) -> Store:
    from autotune.db import Store, StoreError

    try:
        return Store(url)
    except StoreError as exc:
        raise CliError(str(exc)) from None


# -- sweep ------------------------------------------------------------------------------------------
def _sweep(args: argparse.Namespace) -> int:
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    from autotune.core.target import Target, TargetError, local_target
    from autotune.engine.executors import parse_gpus
    from autotune.sweeps import SpecError, load_spec, plan

    if (args.spec is None) == (args.untuned is None):
        raise CliError("give either a SPEC.toml or --untuned [LOG] (one of the two)")
    if args.spec is not None and (args.strategy is not None or args.trials is not None):
        raise CliError("--strategy and --trials go with --untuned; a spec sets them per [[sweep]] table")
    if args.trials is not None and args.trials <= 0:
        raise CliError("--trials must be positive")
    _check_workers(args)
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
    try:
        gpus = [args.device] if args.device is not None else parse_gpus(args.gpus)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.spec is not None:
        try:
            spec = load_spec(args.spec)
        except SpecError as exc:
            raise CliError(str(exc)) from None
        if args.profile_m is not None:
            spec = _with_profile_m(spec, args.profile_m)
    compile_only = bool(args.target)
    target: Target | None = None
    if args.interpret:
        target = Target.interpreter_target()
    elif args.target:
        target = _compile_target(args.target)
    elif args.executor != "ray":
        try:
            target = local_target(gpus[0] if gpus else 0)
        except TargetError as exc:
            if args.untuned is not None or not _no_gpu() or args.executor != "local" or gpus:
                raise CliError(str(exc)) from None
            target, compile_only = _compile_target(DEFAULT_COMPILE_TARGET), True
            print(
                f"no GPU here: a compile-only sweep for {target.arch} ({target.name}); pass --target "
                "to pick another, or --interpret to run the kernels in Triton's CPU interpreter"
            )
    if compile_only:
        assert target is not None
        spec = _untuned_spec(args, target) if args.untuned is not None else spec
        try:
            planned = plan(spec, target)
        except SpecError as exc:
            raise CliError(str(exc)) from None
        return _predict(args, spec, _open_store(args.db), target, len(planned))
    return _measure(args, spec if args.spec is not None else None, target, gpus, budget_s)


def _with_profile_m(spec: Any, text: str) -> Any:
    """`spec` with every entry's profile_m set from --profile-m."""
    import dataclasses

    from autotune.core.ladder import SERVING, parse_ladder

    if text.strip().lower() == SERVING:
        value: str | tuple[int, ...] = SERVING
    else:
        try:
            value = parse_ladder(text, max_m=1)
        except ValueError as exc:
            raise CliError(f"--profile-m: {exc}") from None
    entries = tuple(dataclasses.replace(e, profile_m=value) for e in spec.entries)
    return dataclasses.replace(spec, entries=entries)


def _untuned_spec(args: argparse.Namespace, target: Any) -> Any:
    from autotune.dispatch import read_untuned_log, untuned_log_path
    from autotune.sweeps import spec_from_untuned

    log_path = args.untuned or str(untuned_log_path())
    if not Path(log_path).is_file():
        raise CliError(f"{log_path}: no untuned-shapes log there (autotune.kernels writes it)")
    return spec_from_untuned(
        read_untuned_log(log_path),
        device_key=target.device_key(),
        strategy=args.strategy or "optuna",
        trials=args.trials or 60,
        source=log_path,
    )


def _measure(
    args: argparse.Namespace, spec: Any, target: Any, gpus: list[int] | None, budget_s: float | None
) -> int:
    """A measured sweep on worker processes (or Ray actors), with its log file and progress bar."""
    from autotune.engine.executors import log_stem, make_workers, sweep_log
    from autotune.engine.workers import WorkerError
    from autotune.sweeps import SpecError, plan

    stem = (
        None if args.log_dir.lower() == "none" else log_stem(args.log_dir, spec.name if spec else "untuned")
    )
    if stem is not None:
        try:
            stem.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"--log-dir {args.log_dir}: cannot create it ({exc.strerror})") from None
    log_file = None if stem is None else stem.with_suffix(".log")
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
                spec = _untuned_spec(args, target)
                if args.profile_m is not None:
                    spec = _with_profile_m(spec, args.profile_m)
            try:
                planned = plan(spec, target)
            except SpecError as exc:
                raise CliError(str(exc)) from None
            store = _open_store(args.db)
            where = f"{len(workers)} workers ({args.executor})" if len(workers) > 1 else str(target)
            print(f"sweep {spec.name!r}: {len(planned)} problems on {where}; database {store.display_url}")
            if log_file is not None:
                print(f"log: {log_file}")
            if target.interpreter:
                print(
                    "note: --interpret runs kernels in Triton's CPU interpreter; results are stored under "
                    "the 'interpreter' target and say nothing about GPU speed"
                )
            report = _run_measured(args, spec, store, target, workers, planned, budget_s, log_file)
    except WorkerError as exc:
        raise CliError(f"{exc} (everything finished is stored; run the same command to resume)") from None
    finally:
        for worker in workers:
            worker.close()
    _print_sweep_report(report)
    if report.budget_spent:
        print(
            f"time budget spent: {report.trials_run} trials run and stored, "
            f"{len(spec.problems()) - len(report.problems)} problems not started; "
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
    spec: Any,
    store: Any,
    target: Any,
    workers: Any,
    planned: Any,
    budget_s: float | None,
    log_file: Path | None,
) -> Any:
    from autotune.sweeps import run_sweep

    budgets = {p: e.budget.trials for e, p in spec.problems()}
    total = sum(min(n, budgets[p] or n) for p, n, _ in planned)
    bar = _progress(total, disabled=args.no_progress)
    tally = {"problems": 0, "wins": 0, "crashed": 0}

    def postfix(last: str) -> None:
        crashed = f", {tally['crashed']} crashed/timeout" if tally["crashed"] else ""
        bar.set_postfix_str(
            f"{tally['problems']}/{len(planned)} problems, {tally['wins']} beat vendor{crashed} | {last}",
            refresh=False,
        )

    def on_trial(problem: Any, config: Any, result: Any) -> None:
        bar.update(1)
        if result.status.value in ("crashed", "timeout"):
            tally["crashed"] += 1
        postfix(f"{problem.M}x{problem.N}x{problem.K} {result.status.value}")

    def on_problem(report: Any) -> None:
        tally["problems"] += 1
        tally["wins"] += int(report.speedup is not None and report.speedup > 1.0)
        postfix(f"{_problem_label(report.problem)} done")

    checker = None
    if not target.interpreter:
        from autotune.engine.checker import StaticChecker

        # One core per local GPU worker is left to measuring; the compile processes get the others.
        measuring_here = len(workers) if args.executor == "local" else 0
        compilers = args.workers or max(1, (os.cpu_count() or 1) - measuring_here)
        checker = StaticChecker(target, spec.static, store=store, workers=compilers)
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
            if checker is not None:
                checker.close()
            bar.close()
    return report


DEFAULT_COMPILE_TARGET = "gfx942"

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in `text`: "8h", "90m", "1h30m", "600s", "2.5h" or a bare number of seconds."""
    import re

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


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _compile_target(name: str) -> Any:
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


def _predict(args: argparse.Namespace, spec: Any, store: Any, target: Any, n_problems: int) -> int:
    """The compile-only sweep: model predictions for `target`, stored as such."""
    from autotune.engine.checker import StaticChecker
    from autotune.sweeps import predict_sweep

    print(
        f"compile-only sweep {spec.name!r}: {n_problems} problems for {target}; "
        f"database {store.display_url}\n"
        f"note: nothing runs on a GPU; the times below are the cost model's predictions, stored as "
        f"source 'model' and superseded by a measured sweep on a {target.arch} GPU"
    )
    bar = _progress(n_problems, disabled=args.no_progress, unit="problem")

    def on_problem(report: Any) -> None:
        bar.update(1)
        p = report.problem
        bar.set_postfix_str(f"{p.M}x{p.N}x{p.K}: {report.ran} compiled", refresh=False)

    with store, StaticChecker(target, spec.static, store=store, workers=args.workers) as checker:
        report = predict_sweep(spec, store, checker, on_problem=on_problem)
    bar.close()
    _print_sweep_report(report)
    if report.interrupted:
        print("interrupted: finished problems are stored; run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"next: autotune emit --out table.json  (a table marked predicted for {target.arch})")
    return EXIT_OK


def _progress(total: int, disabled: bool, unit: str = "trial") -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=disabled or None, dynamic_ncols=True, file=sys.stderr)


def _fmt_us(t: float | None) -> str:
    return "-" if t is None else f"{t:.2f}"


def _print_sweep_report(report: Any) -> None:
    ran = "compiled" if report.predicted else "ran"
    timed = "predicted µs" if report.predicted else "best µs"
    rows = [("problem", "space", ran, "cached", "failed", "best config", timed, "vendor µs", "speedup")]
    for p in report.problems:
        best, vendor = p.picks()  # the final round's where one ran (marked *)
        mark = "*" if p.final else ""
        rows.append(
            (
                _problem_label(p.problem),
                f"{p.space_size}/{p.raw_size}",
                str(p.ran),
                str(p.cached),
                str(p.failed),
                best.config.short() + mark if best else "-",
                _fmt_us(best.time_us if best else None),
                _fmt_us(vendor.time_us if vendor else None),
                "-" if p.speedup is None else f"{p.speedup:.2f}x",
            )
        )
    _print_table(rows)
    if any(p.final for p in report.problems):
        print("* the final round's pick: medians of its finalists timed again head to head")
    print(
        f"{report.trials_run} {'configs compiled' if report.predicted else 'trials run'}, "
        f"{report.trials_cached} read back from the database, "
        f"{report.wall_s:.1f} s; sweep id {report.sweep_id}"
    )
    if report.profiles:
        ran = sum(p.ran for p in report.profiles)
        cached = sum(p.cached for p in report.profiles)
        points = sum(p.points for p in report.profiles)
        share = report.profile_s / report.wall_s if report.wall_s > 0 else 0.0
        print(
            f"profiled {len(report.profiles)} shapes at {points} M values: {ran} timings run, {cached} read "
            f"back, {report.profile_s:.1f} s ({share:.0%} of the sweep); `autotune emit` serves M ranges"
        )
    for what, attr in (
        ("by constraints before compiling ('space' is valid/all)", "pruned"),
        ("by static checks after compiling (no GPU time)", "static_pruned"),
    ):
        counts: Counter[str] = Counter()
        for p in report.problems:
            counts.update(getattr(p, attr))
        if counts:
            print(f"pruned {what}: " + ", ".join(f"{r} {n}" for r, n in counts.most_common()))


def _problem_label(p: Any) -> str:
    """A problem in one table cell: M x N x K, dtype and layout; for moe its experts and weights too."""
    if p.op == "moe":
        weights = "" if p.dtype_b == p.dtype_a else f" w:{p.dtype_b}"
        return f"{p.M}x{p.N}x{p.K} E{p.E} top{p.topk} {p.dtype}{weights}"
    if p.op != "gemm":  # the quantized GEMMs: the op tells the scaling apart
        b = "" if p.dtype_b == p.dtype_a else f"/{p.dtype_b}"
        return f"{p.op} {p.M}x{p.N}x{p.K} {p.dtype_a}{b}"
    return f"{p.M}x{p.N}x{p.K} {p.dtype} {p.layout}"


def _print_table(rows: Sequence[Sequence[str]], indent: str = "") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, row in enumerate(rows):
        print(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if j == 0:
            print(indent + "  ".join("-" * w for w in widths))


# -- plan -------------------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    import json

    from autotune.core.target import TargetError, local_target
    from autotune.sweeps import SpecError, load_spec
    from autotune.sweeps.estimate import makespan, plan_sweep

    _check_workers(args)
    if args.gpus is not None and args.gpus < 1:
        raise CliError("--gpus must be at least 1")
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    compile_only = bool(args.target)
    if args.target:
        target = _compile_target(args.target)
    else:
        try:
            target = local_target(args.device)
        except TargetError as exc:
            if not _no_gpu():
                raise CliError(str(exc)) from None
            target, compile_only = _compile_target(DEFAULT_COMPILE_TARGET), True
    store = (
        _open_store(args.db)
        if args.db or os.environ.get("AUTOTUNE_DB") or Path("autotune.db").exists()
        else None
    )
    try:
        rows = plan_sweep(spec, target, store=store, workers=args.workers, compile_only=compile_only)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    total = sum(r.est_s for r in rows)
    if compile_only:
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
            "problems": [r.to_dict() for r in rows],
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    kind = "compile-only sweep" if compile_only else "sweep"
    print(f"{kind} {spec.name!r}: {len(rows)} problems on {target}")
    table = [("problem", "space", "trials", "done", "estimate")]
    for r in rows:
        p = r.problem
        name = _problem_label(p)
        table.append((name, f"{r.valid}/{r.raw}", str(r.trials), str(r.done), _fmt_duration(r.est_s)))
    _print_table(table)
    left = sum(r.trials - r.done for r in rows)
    on = f" on one GPU, {_fmt_duration(wall)} on {gpus} (problems shared longest first)" if gpus > 1 else ""
    print(
        f"{left} trials left of {sum(r.trials for r in rows)}; estimated {_fmt_duration(total)}{on} "
        "(the static checks may prune more once configs are compiled)"
    )
    return EXIT_OK


def _fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- check ------------------------------------------------------------------------------------------
def _check(args: argparse.Namespace) -> int:
    import json
    from dataclasses import replace

    from autotune.engine.checker import StaticChecker
    from autotune.engine.predict import check_problem
    from autotune.sweeps import SpecError, load_spec, plan

    _check_workers(args)
    if args.candidates is not None and args.candidates <= 0:
        raise CliError("--candidates must be positive")
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    target = _compile_target(args.target)
    try:
        plan(spec, target)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    policy = spec.static if args.candidates is None else replace(spec.static, candidates=args.candidates)
    store = _open_store(args.db) if args.db else None
    checks = []
    problems = spec.problems()
    bar = _progress(len(problems), disabled=args.json, unit="problem")
    try:
        with StaticChecker(target, policy, store=store, workers=args.workers) as checker:
            for entry, problem in problems:
                found = check_problem(
                    entry.op_for(problem),
                    problem,
                    checker,
                    candidates=policy.candidates,
                    everything=args.all,
                    backends=entry.backends,
                )
                checks.append(found)
                bar.update(1)
    finally:
        bar.close()
        if store is not None:
            store.close()
    if args.json:
        settings = {
            "prune": list(policy.prune),
            "min_occupancy": policy.min_occupancy,
            "candidates": policy.candidates,
        }
        doc = {
            "target": target.arch,
            "name": target.name,
            "spec": spec.name,
            "policy": settings,
            "problems": [c.to_dict() for c in checks],
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"compile-only check of {spec.name!r} for {target}: {len(checks)} problems")
    for c in checks:
        _print_check(c)
    return EXIT_OK


def _print_check(c: Any) -> None:
    p = c.problem
    pruned = ", ".join(f"{k} {n}" for k, n in sorted(c.static_pruned.items())) or "none"
    print(
        f"\n{p.op} {_problem_label(p)}: space {c.space_size} valid of {c.raw_size}; "
        f"compiled {len(c.compiled)} ({c.n_failed_compile} compile errors); pruned {c.n_pruned} ({pruned})"
    )
    for cand in c.compiled:
        for f in cand.findings:
            print(f"  pruned {cand.config.short()}: {f.check}: {f.reason}")
    rows = [("rank", "config", "predicted µs", "static features")]
    for i, cand in enumerate(c.best()):
        feats = cand.features.summary() if cand.features is not None else "vendor library (not compiled)"
        rows.append((str(i + 1), cand.config.short(), f"{cand.predicted_us:.2f}", feats))
    print("  best candidates by the cost model:")
    _print_table(rows, indent="  ")


# -- best -------------------------------------------------------------------------------------------
def _best(args: argparse.Namespace) -> int:
    from autotune.core.problem import QUANT_OPS, Problem
    from autotune.core.result import Source

    try:
        if args.op in QUANT_OPS:  # the op fixes its input formats; --dtype is the output's
            if args.e or args.topk or args.layout != "nk":
                raise ValueError(f"{args.op} takes no --e, --topk or --layout")
            problem = Problem.quant(args.op, args.m, args.n, args.k, args.dtype, args.weights or "fp8e4m3")
        else:
            problem = Problem(
                args.op,
                args.m,
                args.n,
                args.k,
                E=args.e,
                topk=args.topk,
                dtype_a=args.dtype,
                dtype_b=args.weights or args.dtype,
                dtype_out=args.dtype,
                layout=args.layout,
            )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.limit <= 0:
        raise CliError("--limit must be positive")
    with _open_store(args.db) as store:
        try:
            source = Source.MODEL if args.predicted else Source.MEASURED
            records = store.best(problem, fingerprint=args.gpu, limit=10_000, source=source)
            finals = (
                []
                if args.predicted
                else store.best(problem, fingerprint=args.gpu, limit=64, source=Source.FINAL)
            )
            predictions = (
                bool(records)
                or args.predicted
                or bool(store.best(problem, fingerprint=args.gpu, limit=1, source=Source.MODEL))
            )
        except ValueError as exc:  # a --gpu prefix that is too short or ambiguous
            raise CliError(str(exc)) from None
    if not records:
        what = "predicted" if args.predicted else "measured"
        hint = " (the database holds predictions: add --predicted)" if predictions else ""
        print(f"no {what} results for {problem}; tune it with `autotune sweep`{hint}")
        return EXIT_FAIL
    by_gpu: dict[str, list[Any]] = {}
    for r in records:
        by_gpu.setdefault(r.gpu.fingerprint, []).append(r)
    for fp, recs in by_gpu.items():
        gpu = recs[0].gpu
        tag = " [interpreter: timings are not a GPU's]" if gpu.interpreter else ""
        if args.predicted:
            tag += " [predicted by the cost model, not measured]"
        print(f"{problem} on {gpu.target} [{fp}]{tag}")
        _print_ranking(problem, recs[: args.limit], recs, "µs")
        final = [r for r in finals if r.gpu.fingerprint == fp]  # fastest first, as `store.best` gives them
        if final:
            print(f"final round ({final[0].extra.get('final_rounds', '?')} rounds, head to head; "
                  "`autotune emit` picks from it where it holds the fastest config above):")  # fmt: skip
            _print_ranking(problem, final, final, "median µs")
        print()
    return EXIT_OK


def _print_ranking(problem: Any, shown: list[Any], ranked: list[Any], us_header: str) -> None:
    """A table of the trial records `shown`, with their speed against the vendor library's fastest of
    `ranked`."""
    vendor = next((r for r in ranked if r.config.backend == VENDOR_BACKEND), None)
    rows = [("rank", "backend", "config", us_header, "TFLOP/s", "vs vendor")]
    for i, r in enumerate(shown):
        t = r.time_us
        vs = f"{vendor.time_us / t:.2f}x" if vendor and vendor.time_us and t else "-"
        tflops = f"{problem.flops() / t / 1e6:.1f}" if t else "-"
        rows.append((str(i + 1), r.config.backend, r.config.canonical(), _fmt_us(t), tflops, vs))
    _print_table(rows)


# -- export / emit / status ---------------------------------------------------------------------------
def _export(args: argparse.Namespace) -> int:
    from autotune.db import StoreError, export_csv, export_vllm

    with _open_store(args.db) as store:
        try:
            if args.format == "csv":
                paths = export_csv(store, args.out, fingerprint=args.gpu)
            else:
                paths = export_vllm(store, args.out, fingerprint=args.gpu, flavor=args.format)
        except (StoreError, ValueError, OSError) as exc:
            raise CliError(str(exc)) from None
    for path in paths:
        print(f"wrote {path}")
    return EXIT_OK


def _import(args: argparse.Namespace) -> int:
    from autotune.db import StoreError, import_files
    from autotune.db.interop import InteropError

    with _open_store(args.db) as store:
        try:
            files = import_files(store, args.files, k=args.k, topk=args.topk)
        except (InteropError, StoreError) as exc:
            raise CliError(f"{exc}; nothing was imported") from None
        where = store.display_url
    for f in files:
        new = f.written or 0
        counts = f"{f.n_entries} entries: {f.n_ok} ok, {f.n_flagged} flagged"
        if f.skipped:
            counts += f", {len(f.skipped)} skipped"
        print(f"{f.path}: {f.format}, {f.summary}")
        print(f"  {counts}; {new} new, {len(f.trials) - new} already stored")
        for entry, reason in f.flagged:
            print(f"  flagged {entry}: {reason}")
        for entry, reason in f.skipped:
            print(f"  skipped {entry}: {reason}")
    total = sum(f.written or 0 for f in files)
    print(f"imported {total} new trials from {len(files)} files into {where}")
    return EXIT_OK


def _emit(args: argparse.Namespace) -> int:
    from autotune.dispatch import M_POLICIES, TableError
    from autotune.dispatch.emit import DEFAULT_M_POLICY, emit_table

    if args.vendor_margin < 0 or args.range_margin < 0:
        raise CliError("--vendor-margin and --range-margin must be >= 0")

    policy = args.m_policy or DEFAULT_M_POLICY
    if policy not in M_POLICIES:
        raise CliError(f"unknown --m-policy {policy!r}; known: {', '.join(M_POLICIES)}")
    with _open_store(args.db) as store:
        try:
            table = emit_table(
                store,
                fingerprint=args.gpu,
                m_policy=policy,
                vendor_margin=args.vendor_margin,
                profiles=not args.no_ranges,
                range_margin=args.range_margin,
            )
            table.save(Path(args.out))
        except (TableError, ValueError, OSError) as exc:
            raise CliError(str(exc)) from None
    kind = "predicted" if table.predicted else "measured"
    ranged = table.ranged
    bucketed = len(table.entries) - ranged
    parts = []
    if ranged:
        n_ranges = sum(len(e.ranges) for e in table.entries)
        parts.append(f"{ranged} shape{'s' * (ranged != 1)} served by {n_ranges} M ranges (profiled)")
    if bucketed:
        n_buckets = sum(len(e.buckets) for e in table.entries)
        parts.append(
            f"{bucketed} shape{'s' * (bucketed != 1)} served by {n_buckets} M buckets (M policy "
            f"{table.m_policy})"
        )
    print(f"wrote {args.out}: {'; '.join(parts)} ({kind}) for {table.target} [{table.fingerprint}]")
    return EXIT_OK


# -- verify -----------------------------------------------------------------------------------------
def _verify(args: argparse.Namespace) -> int:
    import warnings

    from autotune.core.target import Target, TargetError, local_target
    from autotune.dispatch import Dispatcher, Table, TableError, UntunedShapeWarning, install_dispatcher
    from autotune.sweeps.verify import verify

    if args.table is None and args.problems is None:
        raise CliError("give a TABLE.json, --problems SPEC.toml, or both")
    if args.min_ratio <= 0:
        raise CliError("--min-ratio must be positive")
    if args.rounds < 1:
        raise CliError("--rounds must be at least 1")
    if args.max_m is not None and (args.max_m < 1 or args.m is not None):
        raise CliError("--max-m takes a positive M and excludes --m")
    table = None
    if args.table is not None:
        try:
            table = Table.load(args.table)
        except TableError as exc:
            raise CliError(str(exc)) from None
    if args.interpret or os.environ.get("TRITON_INTERPRET") == "1":
        os.environ["TRITON_INTERPRET"] = "1"
        target = Target.interpreter_target()
    else:
        try:
            target = local_target(args.device)
        except TargetError as exc:
            raise CliError(f"verify times on a GPU: {exc}") from None
        import torch

        torch.cuda.set_device(args.device)  # every launch and buffer on that GPU, the entry points' too
    if table is not None and table.device_key != target.device_key():
        raise CliError(
            f"{args.table} was tuned on {table.target}, but this is {target}: verify it on that GPU"
        )
    families = _verify_families(args, table)
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
            raise CliError(f"--shard takes K/N with 0 <= K < N, got {args.shard!r}")
        families = families[int(k) :: int(n)]
    dispatcher = Dispatcher([table] if table else [], device_key=target, untuned_log=os.devnull)
    previous = install_dispatcher(dispatcher)
    total = sum(len(f.ladder) for f in families)
    print(
        f"verify: {len(families)} shapes, {total} rows on {target}"
        + (f"; table {args.table}" if table else "; no table")
    )
    bar = _progress(total, disabled=args.no_progress, unit="row")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedShapeWarning)  # every fallback row would warn once
            report = verify(
                families,
                target=target,
                rounds=args.rounds,
                min_ratio=args.min_ratio,
                on_row=lambda row: bar.update(1),
            )
    finally:
        bar.close()
        install_dispatcher(previous)
    report.table = args.table or ""
    try:
        Path(args.out).write_text(report.to_json() + "\n", encoding="utf-8")
    except OSError as exc:
        raise CliError(f"--out {args.out}: cannot write it ({exc.strerror})") from None
    _print_verify(report, args.worst)
    print(f"wrote {args.out}")
    return EXIT_OK if report.ok else EXIT_FAIL


def _verify_families(args: argparse.Namespace, table: Any) -> list[Any]:
    """The shape families to verify: the spec's (labelled by layer where it names a model), else the
    table's entries; each with its ladder."""
    from autotune.core.ladder import parse_ladder, serving_ladder
    from autotune.kernels import get_op
    from autotune.sweeps import SpecError, load_spec
    from autotune.sweeps.profile import family_of
    from autotune.sweeps.verify import Family, family_of_entry

    def ladder(max_m: int, tuned: Sequence[int]) -> tuple[int, ...]:
        try:
            if args.m is not None:
                return parse_ladder(args.m, max_m)
        except ValueError as exc:
            raise CliError(f"--m: {exc}") from None
        return serving_ladder(args.max_m or max_m, tuned)

    out = []
    if args.problems is not None:
        try:
            spec = load_spec(args.problems)
        except SpecError as exc:
            raise CliError(str(exc)) from None
        grouped: dict[Any, tuple[Any, str, list[int]]] = {}
        for entry in spec.entries:
            for label, p in entry.labeled_problems():
                fam = family_of(p)
                name = f"{entry.model} {label} " if entry.model else ""
                grouped.setdefault(fam, (entry.op_for(p), name, []))[2].append(p.M)
        for fam, (op, label, ms) in grouped.items():
            out.append(Family(op, fam, ladder(max(ms), ms), label))
        return out
    for entry in table.entries:
        fam = family_of_entry(entry)
        if entry.ranges:
            top = entry.ranges[-1].lo - 1 if entry.ranges[-1].lo > 1 else 512
            tuned: list[int] = []
        else:
            tuned = [b.m for b in entry.buckets]
            top = max(tuned)
        out.append(Family(get_op(entry.op), fam, ladder(top, tuned)))
    return out


def _print_verify(report: Any, worst: int) -> None:
    from autotune.sweeps.verify import rows_text

    rows = report.worst(worst)
    if rows:
        print(f"worst {len(rows)} rows (ratio = vendor µs / served µs):")
        for line in rows_text(rows):
            print("  " + line)
    table = [("shape", "rows", "timed", "vendor", "geomean", "min", "at M", f"< {report.min_ratio:g}")]
    for s in report.summary():
        table.append(
            (
                s["family"],
                str(s["rows"]),
                str(s["compared"] - s["vendor_rows"]),
                str(s["vendor_rows"]),
                "-" if s["geomean"] is None else f"{s['geomean']:.3f}",
                "-" if s["min"] is None else f"{s['min']:.3f}",
                "-" if s["min_m"] is None else str(s["min_m"]),
                str(s["under"]),
            )
        )
    _print_table(table)
    failing = report.failing()
    verdict = "ok" if not failing else f"FAIL: {len(failing)} rows under {report.min_ratio:g}"
    print(f"{verdict} ({report.wall_s:.0f} s; 'vendor' rows serve the vendor's own call: ratio 1, not timed)")


def _status(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    if args.sweeps < 0:
        raise CliError("--sweeps must be zero or more")
    with _open_store(args.db) as store:
        summary = store.summary()
        sweeps = store.sweeps(limit=args.sweeps, status="running" if args.running else None)
    for line in summary.lines():
        print(line)
    if not sweeps:
        return EXIT_OK
    now = datetime.now(timezone.utc)
    rows = [("sweep", "name", "state", "host:pid", "gpu", "workers", "problems", "trials", "started", "log")]
    for sw in sweeps:
        problems = f"{sw.problems_done or 0}/{sw.problems_total}" if sw.problems_total is not None else "-"
        rows.append(
            (
                str(sw.id),
                sw.name,
                sw.state(now),
                f"{sw.host}:{sw.pid}" if sw.pid is not None else sw.host,
                sw.gpu,
                "-" if sw.workers is None else str(sw.workers),
                problems,
                "-" if sw.trials_done is None else str(sw.trials_done),
                sw.started_at.strftime("%Y-%m-%d %H:%M"),
                sw.log_path or "-",
            )
        )
    print()
    _print_table(rows)
    return EXIT_OK


# -- db ---------------------------------------------------------------------------------------------
def _db(args: argparse.Namespace) -> int:
    from autotune.db import StoreError, upgrade_schema

    if args.db_command != "upgrade":  # pragma: no cover - argparse allows no other
        raise CliError(f"unknown db command {args.db_command!r}")
    try:
        done = upgrade_schema(args.db)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    print(done.line())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
