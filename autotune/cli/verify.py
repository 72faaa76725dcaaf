"""`autotune verify`: time the served call of a table against the vendor library at every M, on this GPU.

Exits 1 when a row's ratio (vendor time / served time) is under --min-ratio.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_FAIL, EXIT_OK, CliError, add_verb, open_store, progress
from autotune.cli.tables import print_table

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    from autotune.cli.common import Subparsers
    from autotune.core.op import TunableOp
    from autotune.core.problem import Problem
    from autotune.core.target import Target
    from autotune.dispatch import Table
    from autotune.sweeps.verify import Family, VerifyReport

    #: The M ladder of a shape: (its largest M, the Ms it was tuned at) -> the Ms to verify.
    Ladder: TypeAlias = Callable[[int, Sequence[int]], tuple[int, ...]]

NAME = "verify"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="time the served call of a table against the vendor library at every M, on this GPU",
        description="On the local GPU, time the call a serving process gets (autotune.kernels' entry "
        "points with TABLE loaded; for a shape TABLE does not cover, the op's fallback) against the "
        "vendor library (for the fused MoE, what vLLM runs on this GPU) at every M of a ladder, both "
        "timed as served (CUDA-graph replays over "
        "rotating inputs, interleaved rounds), each output checked first. Prints the worst rows and "
        "a summary per shape, writes every row as JSON, and exits 1 when a row's ratio (vendor "
        "time / served time) is under --min-ratio: run it before deploying a table.",
        db="for a shape whose op has no vendor library (the fused MoE): the database whose files "
        "imported for this GPU (vLLM, SGLang, aiter) are its baseline, as `autotune emit` took them; "
        "without a file, vLLM's fallback rule (default: $AUTOTUNE_DB, else ./autotune.db where it exists)",
        bar=True,
    )
    p.add_argument("table", metavar="TABLE.json", nargs="?", help="the table to verify (none: the fallbacks)")
    p.add_argument(
        "--problems",
        metavar="SPEC",
        help="verify the shapes of this sweep spec, a TOML file or the name of one that ships with the "
        "package (with or without TABLE), instead of TABLE's entries",
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


def run(args: argparse.Namespace) -> int:
    """Times every row with TABLE installed as the dispatcher (none: the fallbacks), writes --out and
    prints the worst rows and a summary; TABLE must have been tuned on this GPU."""
    import warnings

    from autotune.core.target import Target, TargetError, local_target
    from autotune.dispatch import Dispatcher, Table, TableError, UntunedShapeWarning, install_dispatcher
    from autotune.sweeps.verify import verify

    _check_flags(args)
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
    families = _with_baselines(_shard(args.shard, _families(args, table)), target, args.db)
    dispatcher = Dispatcher([table] if table else [], device_key=target, untuned_log=os.devnull)
    previous = install_dispatcher(dispatcher)
    total = sum(len(f.ladder) for f in families)
    print(
        f"verify: {len(families)} shapes, {total} rows on {target}"
        + (f"; table {args.table}" if table else "; no table")
    )
    bar = progress(total, disabled=args.no_progress, unit="row")
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
    _print_report(report, args.worst)
    print(f"wrote {args.out}")
    return EXIT_OK if report.ok else EXIT_FAIL


def _check_flags(args: argparse.Namespace) -> None:
    """A table or a spec (or both); a positive ratio; one round or more; --max-m positive, without --m."""
    if args.table is None and args.problems is None:
        raise CliError("give a TABLE.json, --problems SPEC, or both")
    if args.min_ratio <= 0:
        raise CliError("--min-ratio must be positive")
    if args.rounds < 1:
        raise CliError("--rounds must be at least 1")
    if args.max_m is not None and (args.max_m < 1 or args.m is not None):
        raise CliError("--max-m takes a positive M and excludes --m")


def _with_baselines(families: list[Family], target: Target, url: str | None) -> list[Family]:
    """`families`, each of an op without a served vendor library given what a vLLM deployment runs
    (`with_baseline`: the files of the database at `url` imported for this GPU, else vLLM's fallback
    rule); says which for each. The default database is read only where it exists."""
    from autotune.db.engine import resolve_url, sqlite_path
    from autotune.sweeps.verify import has_vendor_library, with_baseline

    if all(has_vendor_library(f.op) for f in families):
        return families
    store = None
    path = sqlite_path(resolve_url(url))
    if url is not None or path is None or path.exists():
        store = open_store(url, create=False, read_only=True)
    out = []
    for fam in families:
        fam, source = with_baseline(fam, target, store)
        if not has_vendor_library(fam.op):
            print(f"  {fam.name}: compared with {source or 'nothing (no file, no vLLM rule)'}")
        out.append(fam)
    return out


def _shard(shard: str | None, families: list[Family]) -> list[Family]:
    """The families of --shard K/N: every N-th starting at the K-th (all of them without --shard)."""
    if shard is None:
        return families
    k, _, n = shard.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise CliError(f"--shard takes K/N with 0 <= K < N, got {shard!r}")
    return families[int(k) :: int(n)]


def _families(args: argparse.Namespace, table: Table | None) -> list[Family]:
    """The shape families to verify: the spec's (labelled by layer where it names a model), else the
    table's entries; each with its ladder (--m, else the serving ladder up to --max-m or the shape's
    largest M)."""
    from autotune.core.ladder import parse_ladder, serving_ladder

    def ladder(max_m: int, tuned: Sequence[int]) -> tuple[int, ...]:
        try:
            if args.m is not None:
                return parse_ladder(args.m, max_m)
        except ValueError as exc:
            raise CliError(f"--m: {exc}") from None
        return serving_ladder(args.max_m or max_m, tuned)

    if args.problems is not None:
        return _spec_families(args.problems, ladder)
    assert table is not None  # the flags' rules: a table where there is no spec
    return _table_families(table, ladder)


def _spec_families(path: str, ladder: Ladder) -> list[Family]:
    """A family per shape of the spec at `path`, its ladder up to the largest M the spec names."""
    from autotune.sweeps import SpecError, load_spec
    from autotune.sweeps.profile import family_of
    from autotune.sweeps.verify import Family

    try:
        spec = load_spec(path)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    grouped: dict[Problem, tuple[TunableOp, str, list[int]]] = {}
    for entry in spec.entries:
        for label, p in entry.labeled_problems():
            fam = family_of(p)
            name = f"{entry.model} {label} " if entry.model else ""
            grouped.setdefault(fam, (entry.op_for(p), name, []))[2].append(p.M)
    return [Family(op, fam, ladder(max(ms), ms), label) for fam, (op, label, ms) in grouped.items()]


def _table_families(table: Table, ladder: Ladder) -> list[Family]:
    """A family per entry of `table`: its ladder up to below its last M range (512 where that starts at
    1), else up to its largest M bucket."""
    from autotune.kernels import get_op
    from autotune.sweeps.verify import Family, family_of_entry

    out = []
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


def _print_report(report: VerifyReport, worst: int) -> None:
    """The `worst` rows, a summary per shape and the verdict."""
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
    print_table(table)
    failing = report.failing()
    verdict = "ok" if not failing else f"FAIL: {len(failing)} rows under {report.min_ratio:g}"
    print(f"{verdict} ({report.wall_s:.0f} s; 'vendor' rows serve the vendor's own call: ratio 1, not timed)")
