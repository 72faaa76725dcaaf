"""`autotune emit`: the winners of one GPU as a pinned lookup table for autotune.dispatch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.common import DB_READS, EXIT_OK, CliError, add_verb, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "emit"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="write a pinned lookup table for autotune.dispatch",
        description="Write the winners of one GPU as a pinned Table (JSON) that "
        "autotune.dispatch loads (explicit path or $AUTOTUNE_TABLES) and "
        "autotune.kernels.gemm consults at run time. Measured winners; a problem with none (a compile-only "
        "sweep's, on a machine without the GPU) is served by the cost model's prediction, and the table "
        "is then marked predicted.",
        db=DB_READS,
    )
    p.add_argument("--out", required=True, metavar="TABLE.json", help="output file")
    p.add_argument("--gpu", metavar="FINGERPRINT", help="which GPU (needed when the database holds several)")
    p.add_argument(
        "--m-policy",
        default=None,
        help="how an M between tuned buckets is served "
        "(round_up, round_down, nearest, nearest_log; default: round_up)",
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
        "--range-slack-us",
        type=float,
        default=0.75,
        metavar="US",
        help="and faster by this many microseconds besides (default 0.75: on short calls the vendor "
        "library's own time varies by about that much from one CUDA-graph capture to the next)",
    )
    p.add_argument(
        "--no-ranges",
        action="store_true",
        help="ignore stored M profiles: serve every shape from its tuned M buckets by the M policy",
    )


def run(args: argparse.Namespace) -> int:
    """Writes the table and says how its shapes are served: by profiled M ranges, or by M buckets."""
    from autotune.dispatch import M_POLICIES, TableError
    from autotune.dispatch.emit import DEFAULT_M_POLICY, emit_table

    if args.vendor_margin < 0 or args.range_margin < 0 or args.range_slack_us < 0:
        raise CliError("--vendor-margin, --range-margin and --range-slack-us must be >= 0")

    policy = args.m_policy or DEFAULT_M_POLICY
    if policy not in M_POLICIES:
        raise CliError(f"unknown --m-policy {policy!r}; known: {', '.join(M_POLICIES)}")
    with open_store(args.db, create=False, read_only=True) as store:
        try:
            table = emit_table(
                store,
                fingerprint=args.gpu,
                m_policy=policy,
                vendor_margin=args.vendor_margin,
                profiles=not args.no_ranges,
                range_margin=args.range_margin,
                range_slack_us=args.range_slack_us,
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
