"""What a report shows, read from the database and from `autotune verify` JSON files into plain values.

Per GPU: per op, one cell per (shape family, M) with the winner's backend, config, time, speed-up over
the vendor library and roofline position; the M profiles' fastest candidate and vendor time over M; the
sweeps and what the trials cost. A GPU without measured winners shows the cost model's predictions of its
compile-only sweeps, marked as such. A family is a problem without its M; a family that a model spec of
the database's sweeps names gets its layer's name ("attn.qkv tp8") before its shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.result import VENDOR_BACKEND, Source, TrialStatus

if TYPE_CHECKING:
    from autotune.core.problem import Problem
    from autotune.db import GpuRecord, Store, SweepRecord, Winner

__all__ = ["Cell", "CostRow", "Curves", "GpuView", "OpView", "VerifyView", "gpu_views", "read_verify"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """The winner of one (family, M): backend, config, µs, the vendor's µs and vendor / winner (None
    without a vendor time), achieved TFLOP/s and GB/s, FLOP per byte, and the roofline's lower bound over
    the time (None where the device's peaks are unknown)."""

    family: str
    M: int
    backend: str
    config: str
    time_us: float
    vendor_us: float | None
    speedup: float | None
    tflops: float
    gbps: float
    intensity: float
    roof_fraction: float | None


@dataclass(frozen=True)
class OpView:
    """The cells of one op, its families (rows) and its M values (columns), both in order."""

    op: str
    families: list[str]
    ms: list[int]
    cells: list[Cell]


@dataclass(frozen=True)
class Curves:
    """Named series of (M, µs) of one family, from an M profile or a verify run."""

    family: str
    source: str
    series: list[tuple[str, list[tuple[int, float]]]]


@dataclass(frozen=True)
class CostRow:
    """What the trials of one (op, source) cost: trials, OK ones, compile and measure seconds."""

    op: str
    source: str
    trials: int
    ok: int
    compile_s: float
    measure_s: float


@dataclass(frozen=True)
class GpuView:
    """Everything the report shows of one GPU."""

    gpu: GpuRecord
    predicted: bool
    ops: list[OpView]
    profiles: list[Curves]
    sweeps: list[SweepRecord]
    costs: list[CostRow]


@dataclass(frozen=True)
class VerifyView:
    """One `autotune verify` JSON file: where it ran, its threshold, and served vs vendor per family."""

    path: str
    device: str
    min_ratio: float
    ok: bool
    curves: list[Curves] = field(default_factory=list)


def gpu_views(store: Store, fingerprint: str | None = None) -> list[GpuView]:
    """A view per GPU of `store` holding winners (measured, else predicted), or of the GPU `fingerprint`
    names (ValueError for a prefix too short or ambiguous)."""
    gpus = store.match_gpus(fingerprint) if fingerprint else store.gpus()
    sweeps = store.sweeps(limit=1_000_000)
    layers = _layers(sweeps)
    costs = store.trial_costs(fingerprint)
    out = []
    for gpu in gpus:
        predicted = False
        winners = store.winners(gpu.fingerprint, Source.MEASURED, final=True)
        if not winners:
            winners = store.winners(gpu.fingerprint, Source.MODEL)
            predicted = bool(winners)
        profile = store.trials(fingerprint=gpu.fingerprint, status=TrialStatus.OK, source=Source.PROFILE)
        if not winners and not profile:
            continue
        out.append(
            GpuView(
                gpu=gpu,
                predicted=predicted,
                ops=_ops(gpu, winners, layers),
                profiles=_profiles(profile, layers),
                sweeps=[s for s in sweeps if s.gpu_fingerprint == gpu.fingerprint],
                costs=[CostRow(*row[1:]) for row in costs if row[0] == gpu.fingerprint],
            )
        )
    return out


def family_label(problem: Problem, layers: dict[Problem, str]) -> str:
    """The family of `problem` in one line: its layer's name where known, then its shape without M."""
    family = problem.with_m(1)
    shape = str(family).replace(" M=1 ", " ").removeprefix(f"{problem.op} ")
    layer = layers.get(family)
    return f"{layer}: {shape}" if layer else shape


def _layers(sweeps: Sequence[SweepRecord]) -> dict[Problem, str]:
    """The layer name of each family the model specs of `sweeps` name (a spec that no longer loads, say
    for a catalog entry this version lacks, names none)."""
    from autotune.sweeps import SpecError, parse_spec

    out: dict[Problem, str] = {}
    seen: set[str] = set()
    for sw in sweeps:
        if "model" not in sw.spec_text or sw.spec_text in seen:  # a spec swept again names the same layers
            continue
        seen.add(sw.spec_text)
        try:
            spec = parse_spec(sw.spec_text, source=f"sweep {sw.id}")
        except (SpecError, ValueError) as exc:
            log.debug("no layer names from sweep %s: %s", sw.id, exc)
            continue
        for problem, label in spec.layers().items():
            out.setdefault(problem.with_m(1), label)
    return out


def _ops(gpu: GpuRecord, winners: Sequence[Winner], layers: dict[Problem, str]) -> list[OpView]:
    by_op: dict[str, list[Winner]] = {}
    for w in winners:
        by_op.setdefault(w.problem.op, []).append(w)
    views = []
    for op in sorted(by_op):
        ws = sorted(by_op[op], key=lambda w: (w.problem.N, w.problem.K, w.problem.key()))
        cells = [_cell(gpu, w, family_label(w.problem, layers)) for w in ws]
        families = list(dict.fromkeys(c.family for c in cells))
        views.append(OpView(op, families, sorted({c.M for c in cells}), cells))
    return views


def _cell(gpu: GpuRecord, w: Winner, family: str) -> Cell:
    p, t = w.problem, w.time_us
    vendor = w.vendor.time_us if w.vendor is not None else None
    bound = gpu.target.roofline_us(p.flops(), p.min_bytes())
    return Cell(
        family=family,
        M=p.M,
        backend=w.config.backend,
        config=w.config.short(),
        time_us=t,
        vendor_us=vendor,
        speedup=w.speedup_vs_vendor,
        tflops=p.flops() / t / 1e6,
        gbps=p.min_bytes() / t / 1e3,
        intensity=p.arithmetic_intensity(),
        roof_fraction=bound / t if bound > 0 else None,
    )


def _profiles(trials: Sequence[Any], layers: dict[Problem, str]) -> list[Curves]:
    """Per family of the profile trials: the vendor's time and the fastest other candidate's, per M."""
    best: dict[Problem, dict[str, dict[int, float]]] = {}
    for r in trials:
        if r.time_us is None:
            continue
        side = "vendor" if r.backend == VENDOR_BACKEND else "fastest candidate"
        per_m = best.setdefault(r.problem.with_m(1), {}).setdefault(side, {})
        per_m[r.problem.M] = min(r.time_us, per_m.get(r.problem.M, float("inf")))
    out = []
    for family in sorted(best, key=lambda p: (p.op, p.N, p.K, p.key())):
        sides = best[family]
        series: list[tuple[str, list[tuple[int, float]]]] = [
            (name, sorted(sides[name].items())) for name in ("fastest candidate", "vendor") if name in sides
        ]
        out.append(Curves(f"{family.op} {family_label(family, layers)}", "profile", series))
    return out


def read_verify(path: str | Path) -> VerifyView:
    """The served and vendor times per family of a verify JSON file; ValueError if it is not one."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        rows = data["rows"]
        families: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for row in rows:
            sides = families.setdefault(str(row["family"]), {"served": [], "vendor": []})
            for name in ("served", "vendor"):
                us = row.get(f"{name}_us")
                if isinstance(us, (int, float)) and us > 0:
                    sides[name].append((int(row["M"]), float(us)))
        view = VerifyView(
            str(p),
            str(data.get("device", "")),
            float(data.get("min_ratio", 0.0)),
            bool(data.get("ok", False)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{p}: not a JSON report of `autotune verify` (its --out): {exc}") from None
    for family, sides in families.items():
        series = [(name, sorted(pts)) for name, pts in sides.items() if pts]
        if series:
            view.curves.append(Curves(family, "verify", series))
    return view
