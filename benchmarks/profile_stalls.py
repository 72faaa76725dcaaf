"""Prints the SASS lines with the most warp-state samples from an Nsight Compute source-page CSV
(`ncu -i REPORT --page source --csv --print-source sass`), as `profile_stalls.sh` writes them.

    python benchmarks/profile_stalls.py bench-out/bw_ds16.csv --top 16

Each line: its share of all samples, its share of the samples where the warp issued nothing, and the
instruction. Runs anywhere (it only reads the CSV).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def _column(header: list[str], *words: str) -> int:
    """The index of the first column whose name holds every one of `words` (case-insensitive)."""
    for i, name in enumerate(header):
        if all(w.lower() in name.lower() for w in words):
            return i
    raise ValueError(f"no column with {' '.join(words)!r} among {header}")


def top_lines(path: Path, top: int) -> list[tuple[float, float, str]]:
    """(share of samples, share of not-issued samples, SASS) of the `top` most sampled instructions."""
    text = path.read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith('"#"') or "Source" in line)
    rows = list(csv.reader(text[start:]))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    src = _column(header, "source")
    all_s = _column(header, "warp stall sampling", "all")
    idle = _column(header, "warp stall sampling", "not")

    def num(v: str) -> float:
        return float(v.replace(",", "") or 0)

    total_all = sum(num(r[all_s]) for r in body) or 1.0
    total_idle = sum(num(r[idle]) for r in body) or 1.0
    lines = [(num(r[all_s]) / total_all, num(r[idle]) / total_idle, r[src].strip()) for r in body]
    return sorted(lines, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--name", default="")
    args = ap.parse_args(argv)
    try:
        lines = top_lines(args.csv, args.top)
    except (ValueError, StopIteration) as exc:
        print(f"{args.csv}: {exc}", file=sys.stderr)
        return 1
    print(f"== {args.name or args.csv.stem}: samples %, not-issued %, SASS")
    for share, idle, sass in lines:
        print(f"{100 * share:5.1f} {100 * idle:5.1f}  {sass}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
