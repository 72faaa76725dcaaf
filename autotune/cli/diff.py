"""`autotune diff A B`: the winners of two databases, or of two GPUs of one database, side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.cli.common import EXIT_FAIL, EXIT_OK, CliError, add_verb, open_store
from autotune.cli.tables import fmt_us, print_table, problem_label

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.core.result import Source
    from autotune.db import GpuRecord, Store, Winner
    from autotune.db.compare import DiffRow, DiffSummary

NAME = "diff"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="two databases, or two GPUs of one database, side by side per problem",
        description="Compare the winners of side A (the reference) with those of side B, problem by "
        "problem: each side's best time, B's time over A's (above 1: B is slower), the winning config "
        "of each side, then the problems only one side holds. Problems on both sides come worst "
        "regression first. A and B are each a database (a SQLite file or a URL) or a GPU of the "
        "--db database, named by fingerprint (6+ characters of it) or by arch where one GPU has it: "
        "`autotune diff before.db after.db` (after a driver or Triton upgrade), `autotune diff gfx942 "
        "gfx950` (MI300X against MI355X in one database). A database holding several GPUs needs --gpu-a "
        "or --gpu-b to pick one. Measured winners (the final round's where one ran); where neither side "
        "holds any, the cost model's predictions of compile-only sweeps, said so; --predicted compares the "
        "predictions also where measurements exist.",
        db="the database of A and B where they name GPUs: a URL or an existing SQLite file (default: "
        "$AUTOTUNE_DB, else ./autotune.db)",
    )
    p.add_argument("a", metavar="A", help="side A: a database, or a GPU of the --db database")
    p.add_argument("b", metavar="B", help="side B: a database, or a GPU of the --db database")
    p.add_argument("--gpu-a", metavar="GPU", help="the GPU of database A (fingerprint prefix or arch)")
    p.add_argument("--gpu-b", metavar="GPU", help="the GPU of database B (fingerprint prefix or arch)")
    p.add_argument("--op", help="only problems of this op")
    p.add_argument(
        "--predicted",
        action="store_true",
        help="compare the cost model's predictions of compile-only sweeps, also where measurements exist",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=3.0,
        metavar="PCT",
        help="a change within this many percent counts as noise in the summary (default 3)",
    )
    p.add_argument("--limit", type=int, default=0, metavar="N", help="show only the first N rows (0: all)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of tables")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: where it came from, its GPU and its winners, measured and predicted."""

    name: str
    database: str
    gpu: GpuRecord
    measured: list[Winner]
    predicted: list[Winner]

    def describe(self) -> str:
        return f"{self.database}: {self.gpu}"

    def winners(self, predicted: bool) -> list[Winner]:
        return self.predicted if predicted else self.measured

    def to_dict(self, predicted: bool) -> dict[str, Any]:
        return {
            "database": self.database,
            "gpu": self.gpu.name,
            "arch": self.gpu.arch,
            "fingerprint": self.gpu.fingerprint,
            "problems": len(self.winners(predicted)),
        }


def run(args: argparse.Namespace) -> int:
    """The comparison of A and B: measured, else (or with --predicted) predicted; exit 1 when neither
    side holds a winner."""
    from autotune.db.compare import diff_winners, summarize

    if args.tolerance < 0:
        raise CliError("--tolerance must be zero or more")
    if args.limit < 0:
        raise CliError("--limit must be zero or more")
    a = _side("A", args.a, args.gpu_a, args)
    b = _side("B", args.b, args.gpu_b, args)
    if a.database == b.database and a.gpu.id == b.gpu.id:
        raise CliError(f"A and B are the same GPU of the same database ({a.describe()}): nothing to compare")
    predicted = args.predicted or not (a.measured or b.measured)
    note = _note(a, b, predicted, args.predicted)
    rows = diff_winners(a.winners(predicted), b.winners(predicted))
    summary = summarize(rows, args.tolerance / 100.0)
    shown = rows[: args.limit] if args.limit else rows
    if args.json:
        print(
            json.dumps(
                {
                    "a": a.to_dict(predicted),
                    "b": b.to_dict(predicted),
                    "predicted": predicted,
                    "summary": summary.to_dict(),
                    "rows": [r.to_dict() for r in shown],
                },
                indent=1,
            )
        )
    else:
        if note and rows:
            print(note)
        _print(a, b, shown, summary, hidden=len(rows) - len(shown))
    if not rows:
        what = "predictions" if args.predicted else "measured winners or predictions"
        if not args.json:
            print(f"neither side holds {what}" + (f" of {args.op}" if args.op else ""))
        return EXIT_FAIL
    return EXIT_OK


def _note(a: Side, b: Side, predicted: bool, asked: bool) -> str:
    """What is compared where the flags did not say: predictions where neither side holds measurements;
    measurements, and where a side holds only predictions, how to compare those."""
    if predicted and not asked:
        return (
            "neither side holds measurements: comparing the cost model's predictions of compile-only "
            "sweeps (--predicted compares them also where measurements exist)\n"
        )
    only = [s.name for s in (a, b) if not s.measured and s.predicted]
    if not predicted and only:
        return (
            f"side {only[0]} holds no measurements, only predictions: --predicted compares the cost "
            "model's predictions of both sides\n"
        )
    return ""


def _side(name: str, text: str, gpu: str | None, args: argparse.Namespace) -> Side:
    """Side `name` as `text` names it: a database (its GPU `gpu`, or its only GPU with winners, measured
    where any are, else predicted), or a GPU of the --db database."""
    from autotune.core.result import Source

    if _is_database(text):
        url, pick = text, gpu
    else:
        if gpu is not None:
            raise CliError(f"--gpu-{name.lower()} names a GPU of a database, but {name} ({text}) is a GPU")
        url, pick = args.db, text
    with open_store(url, create=False, read_only=True) as store:
        measured = _winners(store, Source.MEASURED, args.op)
        predicted = _winners(store, Source.MODEL, args.op)
        holding = predicted if args.predicted else measured or predicted
        chosen = _pick_gpu(store, name, pick, holding)
        database = store.display_url
    return Side(
        name,
        database,
        chosen,
        [w for w in measured if w.gpu.id == chosen.id],
        [w for w in predicted if w.gpu.id == chosen.id],
    )


def _is_database(text: str) -> bool:
    """Whether `text` names a database rather than a GPU: a URL, an existing file, or a name ending like a
    SQLite file's."""
    return "://" in text or Path(text).exists() or Path(text).suffix in (".db", ".sqlite", ".sqlite3")


def _winners(store: Store, source: Source, op: str | None) -> list[Winner]:
    """The winners of `source` (measured: the final round's where one ran), of `op` where given."""
    from autotune.core.result import Source

    found = store.winners(None, source, final=source == Source.MEASURED)
    return [w for w in found if op is None or w.problem.op == op]


def _pick_gpu(store: Store, side: str, name: str | None, winners: list[Winner]) -> GpuRecord:
    """The GPU `name` names (fingerprint prefix or arch); without a name, the one GPU holding winners."""
    holding = {w.gpu.id: w.gpu for w in winners}
    gpus = store.gpus()
    if not gpus:
        raise CliError(
            f"side {side}: {store.display_url} holds no GPU: nothing was measured or predicted there"
        )
    if name is None:
        if len(holding) == 1:
            return next(iter(holding.values()))
        if not holding and len(gpus) == 1:
            return gpus[0]
        listed = ", ".join(f"{g.fingerprint[:8]} ({g.arch})" for g in (holding.values() or gpus)) or "none"
        what = f"winners of {len(holding)}" if holding else str(len(gpus))
        flag = f"--gpu-{side.lower()}"
        raise CliError(f"side {side}: {store.display_url} holds {what} GPUs ({listed}); pick one with {flag}")
    by_arch = [g for g in gpus if g.arch == name.lower()]
    if len(by_arch) > 1:  # the arch of several GPUs: the one holding winners, where only one does
        by_arch = [g for g in by_arch if g.id in holding] or by_arch
    if len(by_arch) == 1:
        return by_arch[0]
    if by_arch:
        listed = ", ".join(g.fingerprint[:8] for g in by_arch)
        raise CliError(
            f"side {side}: several {name} GPUs in {store.display_url} ({listed}): name one by fingerprint"
        )
    try:
        found = store.match_gpus(name)
    except ValueError as exc:
        raise CliError(f"side {side}: {exc}") from None
    if not found:
        known = ", ".join(f"{g.fingerprint[:8]} ({g.arch})" for g in gpus) or "none"
        raise CliError(
            f"side {side}: no GPU {name!r} in {store.display_url} (its GPUs: {known}); a database must be "
            "an existing file or a URL"
        )
    return found[0]


def _print(a: Side, b: Side, rows: list[DiffRow], summary: DiffSummary, hidden: int) -> None:
    print(f"A  {a.describe()}")
    print(f"B  {b.describe()}")
    tol = f"{summary.tolerance * 100:g}%"
    geomean = "-" if summary.geomean is None else f"{summary.geomean:.3f}"
    print(
        f"{summary.both} problems on both sides: B slower on {summary.slower}, faster on {summary.faster} "
        f"(beyond {tol}); same winning config on {summary.same_config}; geometric mean of B/A time "
        f"{geomean}; only in A {summary.only_a}, only in B {summary.only_b}"
    )
    if not rows:
        return
    table = [("op", "problem", "A µs", "B µs", "B/A", "A config", "B config")]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        if r.side != "both":
            ratio = f"only {r.side.upper()}"
        a_config = "-" if r.a is None else r.a.config.short()
        b_config = "same" if r.same_config else "-" if r.b is None else r.b.config.short()
        a_us = None if r.a is None else r.a.time_us
        b_us = None if r.b is None else r.b.time_us
        table.append(
            (r.problem.op, problem_label(r.problem), fmt_us(a_us), fmt_us(b_us), ratio, a_config, b_config)
        )
    print()
    print_table(table)
    if hidden:
        print(f"({hidden} more rows; raise --limit to see them)")
