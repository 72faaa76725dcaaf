"""Serve every M: sweep a spec as the README says, emit its table, and verify the served call against the
vendor library at every ladder M, with the table and without one, in one run on this host's GPUs.

    python benchmarks/serve_every_m.py --out results/            # benchmarks/serve_every_m.toml
    python benchmarks/serve_every_m.py --phase verify --db results/serve.db --out results/

Phases: `sweep` (`autotune sweep SPEC`: tuning, final rounds, the M profile), `verify` (`autotune emit`,
then `autotune verify TABLE --problems SPEC` and `autotune verify --problems SPEC`, each shared out over
the GPUs with --shard), or `all`. `--export FORMAT` adds a round trip after verify: `autotune export`,
`autotune import` of those files into a fresh database, and `autotune export` of that one; the two
exports must hold the same files with the same rows. Prints the profile's share of the sweep's time and,
per model and overall, the served call's ratio to the vendor library (geometric mean, lowest, rows under
0.98) with the table and without; writes the logs, the table and every verify row to --out.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness

HERE = Path(__file__).resolve().parent


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def sweep(spec: Path, db: Path, out: Path) -> dict[str, Any]:
    cmd = [*harness.CLI, "sweep", str(spec), "--db", str(db), "--no-progress", "--log-dir", "none"]
    code, text = harness.run_logged(cmd, out / "sweep.log")
    if code != 0:
        print(text[-3000:])
        raise SystemExit(f"sweep failed with exit code {code}")
    total = re.search(r"trials run, (\d+) read back from the database, ([\d.]+) s", text)
    prof = re.search(
        r"profiled (\d+) shapes at (\d+) M values: (\d+) timings run, (\d+) read back, (\d+) taken from "
        r"the final rounds, ([\d.]+) s",
        text,
    )
    out_ = {"wall_s": float(total[2]) if total else math.nan}
    if prof:
        out_ |= {"profile_shapes": int(prof[1]), "profile_points": int(prof[2]), "profile_runs": int(prof[3]),
                 "profile_reused": int(prof[5]), "profile_s": float(prof[6])}  # fmt: skip
    print(text.strip().splitlines()[-2] if text.strip() else "")
    return out_


def verify(
    spec: Path, table: Path | None, name: str, out: Path, gpus: int, min_ratio: float
) -> dict[str, Any]:
    """`autotune verify` shared out over `gpus` processes, one per GPU; their rows merged."""
    procs = []
    for k in range(gpus):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(k)}  # each shard alone on its GPU
        cmd = [*harness.CLI, "verify", *([str(table)] if table else []), "--problems", str(spec),
               "--device", "0", "--shard", f"{k}/{gpus}", "--out", str(out / f".{name}.{k}.json"),
               "--no-progress", "--min-ratio", str(min_ratio)]  # fmt: skip
        procs.append(
            (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        )
    rows: list[dict[str, Any]] = []
    with (out / f"{name}.log").open("w", encoding="utf-8") as log:
        for k, (cmd, p) in enumerate(procs):
            text, _ = p.communicate()
            log.write(f"$ {' '.join(cmd)}\n{text}\n[exit {p.returncode}]\n")
            if p.returncode not in (0, 1):
                print(text[-3000:])
                raise SystemExit(f"verify shard {k} failed with exit code {p.returncode}")
            part = out / f".{name}.{k}.json"
            rows += json.loads(part.read_text())["rows"]
            part.unlink()
    (out / f"{name}.json").write_text(json.dumps({"min_ratio": min_ratio, "rows": rows}, indent=1) + "\n")
    return {"rows": rows}


def export_roundtrip(db: Path, fmt: str, out: Path) -> dict[str, Any]:
    """Export `db` in `fmt`, import the files into a fresh database, export that: the files of both exports
    and whether their rows match (each file's lines compared as a set: the order of rows is not kept)."""
    first, second, again = out / f"export-{fmt}", out / f"export-{fmt}-again", out / "imported.db"
    again.unlink(missing_ok=True)
    log = out / "export.log"
    steps = [
        [*harness.CLI, "export", "--format", fmt, "--db", str(db), "--out", str(first)],
        [*harness.CLI, "import", str(first), "--db", str(again)],
        [*harness.CLI, "export", "--format", fmt, "--db", str(again), "--out", str(second)],
    ]
    for cmd in steps:
        code, text = harness.run_logged(cmd, log)
        if code != 0:
            print(text[-3000:])
            raise SystemExit(f"{' '.join(cmd[3:5])} failed with exit code {code}")

    def files(folder: Path) -> dict[str, set[str]]:
        return {
            str(f.relative_to(folder)): set(f.read_text(encoding="utf-8").splitlines())
            for f in sorted(folder.rglob("*"))
            if f.is_file()
        }

    a, b = files(first), files(second)
    lost = {name: sorted(rows - b.get(name, set())) for name, rows in a.items() if rows - b.get(name, set())}
    return {"files": sorted(a), "rows": sum(len(r) for r in a.values()), "same": a == b, "lost": lost}


def summarize(rows: list[dict[str, Any]], min_ratio: float) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    positive = [x for x in ratios if x > 0]
    return {
        "rows": len(rows),
        "timed": sum(1 for r in rows if r["status"] == "timed"),
        "geomean": harness.geomean(positive),
        "min": min(ratios, default=math.nan),
        "under": sum(1 for x in ratios if x < min_ratio),
    }


def group_of(row: dict[str, Any]) -> str:
    """'llama-3.1-8b tp1' from a family label 'llama-3.1-8b mlp.down tp1 gemm N=...'."""
    words = row["family"].split()
    tp = next((w for w in words if re.fullmatch(r"tp\d+", w)), "")
    return f"{words[0]} {tp}".strip()


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--spec", type=Path, default=HERE / "serve_every_m.toml", help="the sweep spec")
    ap.add_argument("--db", type=Path, help="the database (default OUT/serve.db)")
    harness.add_out(ap, "results folder")
    ap.add_argument("--phase", choices=("all", "sweep", "verify"), default="all")
    ap.add_argument("--min-ratio", type=float, default=0.98)
    ap.add_argument("--gpus", type=int, help="GPUs to verify on at once (default: all visible)")
    ap.add_argument("--export", metavar="FORMAT", help="after verify, an export/import/export round trip")
    ap.add_argument(
        "--fallback-spec",
        type=Path,
        default=HERE / "serve_every_m_fp8.toml",
        help="a second spec whose shapes are verified without a table (their fallbacks); 'none' to skip",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.db or args.out / "serve.db"
    gpus = args.gpus or max(1, gpu_count())
    summary = args.out / "summary.json"  # the phases of one benchmark add to it
    results: dict[str, Any] = json.loads(summary.read_text()) if summary.is_file() else {}
    results |= {"spec": str(args.spec), "gpus": gpus}
    t0 = time.perf_counter()
    if args.phase in ("all", "sweep"):
        results["sweep"] = sweep(args.spec, db, args.out)
        print(f"sweep: {results['sweep']}", flush=True)
    if args.phase in ("all", "verify"):
        table = harness.emit_table(db, args.out)
        runs: list[tuple[str, Path, Path | None]] = [
            ("verify_table", args.spec, table),
            ("verify_none", args.spec, None),
        ]
        if str(args.fallback_spec) != "none":
            runs.append(("verify_none_2", args.fallback_spec, None))
        for name, spec, path in runs:
            t1 = time.perf_counter()
            rows = verify(spec, path, name, args.out, gpus, args.min_ratio)["rows"]
            groups: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                groups.setdefault(group_of(r), []).append(r)
            results[name] = {g: summarize(rs, args.min_ratio) for g, rs in sorted(groups.items())}
            results[name]["all"] = summarize(rows, args.min_ratio)
            results[name]["wall_s"] = time.perf_counter() - t1
            worst = sorted((r for r in rows if r["ratio"] is not None), key=lambda r: r["ratio"])[:8]
            print(f"\n{name}: worst rows")
            for r in worst:
                print(f"  {r['ratio']:.3f}  M={r['M']:<5} {r['family']}: {r['served']}  [{r['status']}]")
    if args.export and args.phase in ("all", "verify"):
        results["export"] = export_roundtrip(db, args.export, args.out)
        rt = results["export"]
        print(f"\nexport {args.export}: {len(rt['files'])} files, {rt['rows']} lines, round trip "
              f"{'identical' if rt['same'] else 'DIFFERS: ' + json.dumps(rt['lost'])[:2000]}")  # fmt: skip
    results[f"{args.phase}_wall_s"] = time.perf_counter() - t0
    summary.write_text(json.dumps(results, indent=1) + "\n")
    if "sweep" in results and "profile_s" in results["sweep"]:
        s = results["sweep"]
        tuning = s["wall_s"] - s["profile_s"]
        share = s["profile_s"] / tuning
        print(f"\nprofile: {s['profile_s']:.0f} s after {tuning:.0f} s of tuning: +{share:.0%}")
    for name in ("verify_table", "verify_none", "verify_none_2"):
        if name not in results:
            continue
        lines = [
            (g, s["rows"], s["timed"], s["geomean"], s["min"], s["under"])
            for g, s in results[name].items()
            if isinstance(s, dict)
        ]
        title = f"{name} (ratio = vendor µs / served µs; {results[name]['wall_s']:.0f} s)"
        harness.print_table(("group", "rows", "timed", "geomean", "min", "under"), lines, 3, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
