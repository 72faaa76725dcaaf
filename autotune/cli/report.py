"""`autotune report`: one self-contained HTML page of what the database knows, with its figures inline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.common import DB_READS, EXIT_FAIL, EXIT_OK, CliError, add_verb, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "report"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="one HTML file with figures: speed-ups, backends, roofline, served vs vendor, sweep cost",
        description="Write one HTML file that opens from disk in any browser (figures inline as SVG, no "
        "script, no server, nothing fetched). Per GPU (all of the database's, or --gpu's) and per op: a "
        "heatmap of the winners' speed-up over the vendor library by shape family (N, K; the layer's "
        "name where a model spec tuned it) and M, the backend of each winner, and each winner's "
        "position under the GPU's roofline (achieved TFLOP/s over FLOP per byte; the roof where the "
        "device's peaks are known); the M profiles' fastest candidate against the vendor over M; each "
        "sweep's wall time and trials, and what the trials cost to compile and measure. A GPU without "
        "measured winners shows the predictions of its compile-only sweeps, marked as such. Add "
        "--verify FILE (the JSON that `autotune verify` writes) for its served-vs-vendor curves. Exit "
        "status 1 when there is nothing to show.",
        db=DB_READS,
    )
    p.add_argument(
        "--out", default="autotune-report.html", metavar="FILE", help="the HTML file (default %(default)s)"
    )
    p.add_argument("--gpu", metavar="FINGERPRINT", help="only this GPU (fingerprint or a prefix of 6+ chars)")
    p.add_argument(
        "--verify",
        action="append",
        default=[],
        metavar="FILE",
        help="a JSON report of `autotune verify` to draw (repeat for several)",
    )
    p.add_argument("--title", default="autotune report", help="the page's title")


def run(args: argparse.Namespace) -> int:
    """Reads the views, writes the page and says where."""
    from autotune import __version__
    from autotune.cli.reporting import gpu_views, read_verify, render
    from autotune.db import StoreError
    from autotune.db.files import write_atomically

    try:
        verifies = [read_verify(path) for path in args.verify]
    except ValueError as exc:
        raise CliError(str(exc)) from None
    with open_store(args.db, create=False, read_only=True) as store:
        try:
            views = gpu_views(store, args.gpu)
        except ValueError as exc:  # a --gpu prefix that is too short or ambiguous
            raise CliError(str(exc)) from None
        source = store.display_url
        holdings = store.holdings().describe() if not views else ""
    if args.gpu and not views and not verifies:
        raise CliError(f"no GPU {args.gpu!r} with winners or profiles in {source}")
    page = render(args.title, source, views, verifies, version=__version__)
    out = Path(args.out)
    try:
        write_atomically(out, lambda tmp: _write(tmp, page))
    except StoreError as exc:
        raise CliError(str(exc)) from None
    figures = page.count('class="figure"')
    print(f"wrote {out} ({len(views)} GPU{'s' * (len(views) != 1)}, {figures} figures)")
    if not views and not verifies:
        print(f"nothing to show: the database holds {holdings}; tune with `autotune sweep` first")
        return EXIT_FAIL
    return EXIT_OK


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
