"""`autotune status`: what is in the database, and the latest sweeps of every host that writes to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import DB_READS, EXIT_OK, CliError, add_verb, open_store
from autotune.cli.tables import print_table

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "status"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="what is in the database, and the sweeps running or finished on any host",
        description="Counts of GPUs, problems, sweeps and trials, then the latest sweeps of every host "
        "that writes to this database: state (running; interrupted when its process on this host is "
        "gone; stale when the heartbeat of one on another host stopped for under a minute: run its "
        "command again to resume), host and process, GPU, progress, start time and log file; then the "
        "problems each running sweep holds (processes that run one spec share its problems).",
        db=DB_READS,
    )
    p.add_argument("--sweeps", type=int, default=10, metavar="N", help="how many sweeps to list (default 10)")
    p.add_argument("--running", action="store_true", help="only sweeps still marked running")


def run(args: argparse.Namespace) -> int:
    """The database's counts, then a row per sweep, newest first (none with --sweeps 0)."""
    from datetime import datetime, timezone

    if args.sweeps < 0:
        raise CliError("--sweeps must be zero or more")
    with open_store(args.db, create=False, read_only=True) as store:
        summary = store.summary()
        sweeps = store.sweeps(limit=args.sweeps, status="running" if args.running else None)
        held = store.held([sw.id for sw in sweeps if sw.status == "running"])
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
    print_table(rows)
    failed = [sw for sw in sweeps if sw.error]
    if failed:
        print()
        for sw in failed:
            print(f"sweep {sw.id} failed: {sw.error}")
    if held:
        print()
        for sw in sweeps:
            if sw.id in held:
                where = f"{sw.host}:{sw.pid}" if sw.pid is not None else sw.host
                print(f"sweep {sw.id} ({where}, {sw.state(now)}) holds: {', '.join(held[sw.id])}")
    return EXIT_OK
