"""Per-GPU tuned CSV: one row per (GPU, problem) winner, each config parameter in its own column.

Columns: `BASE_COLUMNS` (the GPU, then the problem), the problems' own parameters as ``param_<NAME>``
(`Problem.extra`: the fused MoE's ``param_E`` and ``param_topk``, the MLA decode's ``param_heads``, ...;
empty for a problem without that parameter), the backend, the config's parameters as ``cfg_<PARAM>``,
then `TAIL_COLUMNS`."""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pandas as pd

from autotune.core.result import Source

from .files import write_atomically
from .records import GpuRecord, Winner
from .store import Store, StoreError

__all__ = [
    "BASE_COLUMNS",
    "TAIL_COLUMNS",
    "csv_filename",
    "export_csv",
    "predicted_winners",
    "winner_row",
    "with_predictions",
]

logger = logging.getLogger(__name__)

#: Columns before the problems' own parameters (``param_<NAME>``), the backend and the config's parameters
#: (``cfg_<PARAM>``).
BASE_COLUMNS: tuple[str, ...] = (
    "gpu_name",
    "arch",
    "cu_count",
    "fingerprint",
    "interpreter",
    "op",
    "m",
    "n",
    "k",
    "dtype",
    "layout",
)
#: Columns after the config parameters.
TAIL_COLUMNS: tuple[str, ...] = (
    "time_us",
    "tflops",
    "gbps",
    "roofline_frac",
    "vendor_time_us",
    "speedup_vs_vendor",
    "torch",
    "triton",
    "runtime",
    "kernel",
    "source_hash",
    "source",
)

#: Significant digits of the float columns (times, rates, ratios): more than any timing resolves, and a
#: rounded value stays within 1e-6 of the stored one (5e-7 at most).
FLOAT_DIGITS = 7


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def csv_filename(gpu: GpuRecord) -> str:
    """``{arch}-{slug of name}-{fingerprint[:8]}.csv``."""
    return f"{_slug(gpu.arch)}-{_slug(gpu.name)}-{gpu.fingerprint[:8]}.csv"


def winner_row(winner: Winner) -> dict[str, Any]:
    """One CSV row (column → value; None where empty) of a winner; its `source` is "model" for the cost
    model's pick of a compile-only sweep, else "measured"."""
    gpu, problem, best = winner.gpu, winner.problem, winner.best
    target = gpu.target
    time_us = winner.time_us
    roofline_us = target.roofline_us(problem.flops(), problem.min_bytes())
    toolchain = target.toolchain
    row: dict[str, Any] = {
        "gpu_name": gpu.name,
        "arch": gpu.arch,
        "cu_count": target.cu_count,
        "fingerprint": gpu.fingerprint,
        "interpreter": gpu.interpreter,
        "op": problem.op,
        "m": problem.M,
        "n": problem.N,
        "k": problem.K,
        "dtype": problem.dtype,
        "layout": problem.layout,
    }
    row.update({f"param_{name}": value for name, value in problem.extra})
    row["backend"] = best.backend
    row.update({f"cfg_{name}": value for name, value in best.config.items() if name != "backend"})
    row.update(
        time_us=time_us,
        tflops=problem.flops() / time_us / 1e6 if time_us > 0 else None,
        gbps=problem.min_bytes() / time_us / 1e3 if time_us > 0 else None,
        roofline_frac=roofline_us / time_us if roofline_us > 0 and time_us > 0 else None,
        vendor_time_us=winner.vendor.time_us if winner.vendor is not None else None,
        speedup_vs_vendor=winner.speedup_vs_vendor,
        torch=toolchain.get("torch"),
        triton=toolchain.get("triton"),
        runtime=toolchain.get("hip") or toolchain.get("cuda"),
        kernel=best.kernel,
        source_hash=best.source_hash,
        source="model" if best.source is Source.MODEL else "measured",
    )
    return {k: _rounded(v) for k, v in row.items()}


def _rounded(value: Any) -> Any:
    """A float to FLOAT_DIGITS significant digits; anything else as it is."""
    return float(f"{value:.{FLOAT_DIGITS}g}") if isinstance(value, float) else value


def export_csv(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes one CSV per GPU (all GPUs, or the one `fingerprint` or its prefix names) into `out_dir`.

    A problem measured on a GPU gets its measured winner (`source` "measured"); one only predicted there
    (a compile-only sweep for that GPU) the cost model's pick (`source` "model"). Returns the paths
    written. Raises StoreError if there is no winner to export or `out_dir` cannot be written. Each file is
    written to a temporary name and renamed, so a reader never sees half a file.
    """
    measured = store.winners(fingerprint, final=True)
    held = {(w.gpu.id, w.problem) for w in measured}
    predicted = [
        w for w in store.winners(fingerprint, source=Source.MODEL) if (w.gpu.id, w.problem) not in held
    ]
    winners = [*measured, *predicted]
    if not winners:
        which = f" for GPU {fingerprint}" if fingerprint else ""
        holds = store.holdings(fingerprint=fingerprint).describe()
        raise StoreError(
            f"nothing to export: {store.display_url} holds no successful trials{which}, measured or "
            f"predicted; it holds {holds}: run `autotune sweep` to measure them"
        )
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create output directory {out}: {exc.strerror or exc}") from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise StoreError(f"cannot write to output directory {out}")

    by_gpu: dict[int, list[Winner]] = {}
    for w in winners:
        by_gpu.setdefault(w.gpu.id, []).append(w)
    written: list[Path] = []
    used: set[str] = set()
    for group in by_gpu.values():
        gpu = group[0].gpu
        name = csv_filename(gpu)
        if name in used:  # two fingerprints sharing 8 leading digits
            name = name.replace(gpu.fingerprint[:8], gpu.fingerprint)
        used.add(name)
        group.sort(
            key=lambda w: (
                w.problem.op,
                w.problem.dtype,
                w.problem.N,
                w.problem.K,
                w.problem.extra,
                w.problem.M,
                w.problem.key(),
            )
        )
        rows = [winner_row(w) for w in group]
        param_columns = sorted({c for row in rows for c in row if c.startswith("param_")})
        cfg_columns = sorted({c for row in rows for c in row if c.startswith("cfg_")})
        columns = [*BASE_COLUMNS, *param_columns, "backend", *cfg_columns, *TAIL_COLUMNS]
        frame = pd.DataFrame(rows, columns=columns, dtype=object)
        path = out / name
        write_atomically(path, functools.partial(frame.to_csv, index=False))
        logger.info("wrote %d rows to %s", len(rows), path)
        written.append(path)
    return written


def with_predictions(store: Store) -> Store:
    """`store` as an exporter of measured winners reads it, with the cost model's picks of compile-only
    sweeps (`Source.MODEL`) among its winners where nothing was measured (`predicted_winners`): what
    ``export --predicted`` writes in a format that reads winners (``--format aiter``), as `export_csv` does
    always. Only `Store.winners` differs; the rest is `store`'s own."""
    return cast(Store, _WithPredictions(store))


def predicted_winners(
    store: Store, fingerprint: str | None, measured: list[Winner]
) -> list[tuple[Winner, GpuRecord]]:
    """The cost model's winners (`Source.MODEL`) of problems that `measured` holds no winner of on their
    device, each with the GPU to file it under: its device's measured GPU where `measured` has one, else
    its own. A device is a hardware identity (`Target.device_key()`): a compile-only sweep's target for the
    arch and the GPU measured later are one device under two fingerprints, as `emit` reads them. With
    `fingerprint`, the predictions of that GPU's device."""
    if fingerprint is None:
        model = store.winners(None, source=Source.MODEL)
    else:
        named = store.match_gpus(fingerprint)
        device = named[0].target.device_key() if named else None
        model = [w for w in store.winners(None, source=Source.MODEL) if w.gpu.target.device_key() == device]
    home = {w.gpu.target.device_key(): w.gpu for w in measured}
    held = {(w.gpu.target.device_key(), w.problem) for w in measured}
    out = []
    for w in model:
        device = w.gpu.target.device_key()
        if (device, w.problem) not in held:
            out.append((w, home.get(device, w.gpu)))
    return out


class _WithPredictions:
    """A view of a Store whose measured winners are joined by predicted ones (`with_predictions`)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def winners(
        self, fingerprint: str | None = None, source: Source | None = Source.MEASURED, *, final: bool = False
    ) -> list[Winner]:
        found = self._store.winners(fingerprint, source, final=final)
        if source is not Source.MEASURED:
            return found
        predicted = [replace(w, gpu=gpu) for w, gpu in predicted_winners(self._store, fingerprint, found)]
        return sorted([*found, *predicted], key=lambda w: (w.gpu.id, w.problem))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
