"""What the benchmark scripts share: the --out argument and the JSON details written under it, the run's
header, variants timed side by side as one row, host time per call, the tuned winner read from a
database, the served call as a variant, and the short table each script prints last.

The scripts import it by name (`import harness`): a script's own folder is on `sys.path` when it runs.
Timing goes through the package's public helpers (`autotune.engine.bench.interleaved_medians`,
`autotune.kernels.served_launch`); nothing here times a kernel another way. `median_s` times only
the device's reference rates (a copy's bandwidth, a library GEMM's peak).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from autotune import Config, Problem
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.engine.bench import Benchmarker

__all__ = [
    "ServedCall",
    "add_out",
    "copy_gbps",
    "describe",
    "geomean",
    "host_us_per_call",
    "json_path",
    "median_s",
    "paired_overhead",
    "parser",
    "print_table",
    "run_info",
    "side_by_side",
    "tuned_config",
    "write_json",
]


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose --help prints the script's docstring as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_out(ap: argparse.ArgumentParser, help: str = "folder for the JSON details") -> None:
    """Adds --out: a folder (default $OUT, else bench-out); a path ending in .json names the file."""
    default = Path(os.environ.get("OUT", "bench-out"))
    ap.add_argument("--out", type=Path, default=default, help=f"{help} (default: $OUT, else bench-out)")


def json_path(out: Path | str, name: str) -> Path:
    """Where a script's JSON goes: `out` itself if it ends in .json, else OUT/NAME.json."""
    out = Path(out)
    return out if out.suffix == ".json" else out / f"{name}.json"


def write_json(out: Path | str, name: str, data: Any) -> Path:
    """Writes `data` as JSON to `json_path(out, name)`, making its folder; returns the path."""
    path = json_path(out, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def run_info(target: Target | None = None, **extra: Any) -> dict[str, Any]:
    """The run's header: GPU, architecture, SMs (or CUs), toolchain versions, Python, date; then `extra`."""
    info: dict[str, Any] = {}
    if target is not None:
        info |= dict(gpu=target.name, arch=target.arch, cus=target.cu_count, toolchain=target.toolchain)
    info |= dict(python=sys.version.split()[0], date=time.strftime("%Y-%m-%d"))
    return info | extra


def run_logged(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs `cmd`, appending its output to `log`; (exit code, output)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = proc.stdout + proc.stderr
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n{text}\n[exit {proc.returncode}, {time.perf_counter() - t0:.0f} s]\n")
    return proc.returncode, text


#: The command line of `autotune` in this interpreter.
CLI = [sys.executable, "-m", "autotune.cli"]


def emit_table(db: Path, out: Path) -> Path:
    """`autotune emit` of `db` into OUT/table.json (its output printed, logged to OUT/emit.log); exits on
    failure."""
    table = out / "table.json"
    code, text = run_logged([*CLI, "emit", "--db", str(db), "--out", str(table)], out / "emit.log")
    print(text.strip(), flush=True)
    if code != 0:
        raise SystemExit(f"emit failed with exit code {code}")
    return table


def median_s(call: Callable[[], Any], reps: int = 20, warmup: int = 0) -> float:
    """The median time of `call` on the GPU in seconds (CUDA events around each of `reps` calls, after
    `warmup` untimed ones)."""
    import torch

    for _ in range(warmup):
        call()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[reps // 2]


def copy_gbps(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device copy bandwidth: read + write bytes of a `nbytes` copy over its median time."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return 2 * nbytes / median_s(lambda: dst.copy_(src), reps) / 1e9


def describe(info: Mapping[str, Any]) -> str:
    """One line of `run_info`'s header: 'NVIDIA H100 80GB HBM3 (sm_90, 132 SMs) {...} 2026-11-27'."""
    where = f" ({info['arch']}, {info['cus']} SMs)" if "arch" in info else ""
    return f"{info.get('gpu', '?')}{where} {info.get('toolchain', '')} {info.get('date', '')}".strip()


def geomean(xs: Iterable[float]) -> float:
    """Geometric mean of the positive, finite values of `xs`; NaN if there are none."""
    vals = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(statistics.fmean(math.log(x) for x in vals)) if vals else math.nan


def side_by_side(
    bench: Benchmarker,
    problem: Problem,
    variants: Mapping[str, Config],
    rounds: int,
    others: Mapping[str, tuple[Benchmarker, Config]] | None = None,
) -> dict[str, Any]:
    """Times `variants` (and `others`, each by its own Benchmarker) side by side in `rounds` interleaved
    rounds (`interleaved_medians`), as a row's fields: `configs` (name: short config), `NAME_us` (the
    median of the round medians, NaN if it never ran) and `status` (name: "ok" or why not)."""
    from autotune.engine.bench import interleaved_medians

    res = interleaved_medians(bench, problem, dict(variants), rounds, others=others)
    configs = {**{k: c for k, c in variants.items()}, **{k: c for k, (_, c) in (others or {}).items()}}
    row: dict[str, Any] = {"configs": {k: c.short() for k, c in configs.items()}}
    row |= {f"{k}_us": us for k, (us, _) in res.items()}
    row["status"] = {k: status for k, (_, status) in res.items()}
    return row


def host_us_per_call(
    variants: Mapping[str, Callable[[], object]], batches: int, n: int, warmup: int = 20
) -> dict[str, list[float]]:
    """Host µs per call of each variant, one value per batch of `n` calls. The variants take turns in
    rotating order and each batch starts with the GPU idle, so that drifts of the host hit all alike.
    The problems should be tiny, so that the GPU keeps up and the host is what is timed."""
    import torch

    names = list(variants)
    for fn in variants.values():  # compile, allocate, fill caches
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {k: [] for k in names}
    for i in range(batches):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            fn = variants[name]
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out[name].append((time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return out


def paired_overhead(slow: Sequence[float], fast: Sequence[float]) -> dict[str, float]:
    """Median, 20th and 80th percentile of the per-batch differences `slow - fast` (µs)."""
    diffs = sorted(s - f for s, f in zip(slow, fast, strict=True))
    return dict(median=statistics.median(diffs), p20=diffs[len(diffs) // 5], p80=diffs[4 * len(diffs) // 5])


def tuned_config(store: Store, p: Problem, fingerprint: str, ours: tuple[str, ...]) -> Config | None:
    """Our tuned winner of `p`: the fastest of our configs in its final round (the finalists timed head to
    head) where that round holds our fastest measured config, else our fastest measured config."""
    from autotune.core.result import Source, TrialStatus

    measured = [r for r in store.best(p, fingerprint=fingerprint, limit=10_000) if r.config.backend in ours]
    if not measured:
        return None
    final = [t for t in store.trials(fingerprint=fingerprint, problem=p, status=TrialStatus.OK,
                                     source=Source.FINAL)
             if t.config.backend in ours and t.time_us is not None]  # fmt: skip
    if measured[0].config.digest() in {t.config.digest() for t in final}:
        return min(final, key=lambda t: (t.time_us, t.id)).config
    return measured[0].config


class ServedCall:
    """`op`, whose every config launches the run-time entry point's own call on the Benchmarker's inputs
    and output (`autotune.kernels.served_launch`: lookup and fallback included, on every call). Unlike
    `autotune.sweeps.verify.EntryPoint` it keeps its Benchmarker's timing method, so the served call is
    timed exactly as the variants it is compared with."""

    def __init__(self, op: Any) -> None:
        self.op = op

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Any, out: torch.Tensor
    ) -> Callable[[], None]:
        from autotune.kernels import served_launch

        return served_launch(self.op, problem, target, inputs, out)


def _cell(x: Any, digits: int) -> str:
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.{digits}f}"
    return str(x)


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    digits: int | Sequence[int] = 2,
    title: str | None = None,
) -> None:
    """The short table a script prints last: columns of numbers right-aligned, the others left-aligned;
    floats with `digits` decimals (one number, or one per column), NaN as '-'."""
    rows = [list(r) for r in rows]
    per = [digits] * len(columns) if isinstance(digits, int) else list(digits)
    cells = [[_cell(x, d) for x, d in zip(row, per, strict=True)] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return " ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    if title:
        print(f"\n{title}")
    print(line(list(columns)))
    for r in cells:
        print(line(r))
