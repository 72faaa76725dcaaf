"""verify: the served call of every shape family against the vendor library at every ladder M, on this GPU.

What a serving process gets is the run-time entry point's call (`autotune.kernels.gemm`, `gemm_quant`,
the MoE's served config) at whatever M arrives, through the loaded tables and, for a shape they do not
cover, the op's fallback. `verify` times exactly that call against the op's vendor library at each M of
a ladder (`autotune.core.ladder`), both the way they run when served (CUDA-graph replays back to back over
rotating inputs, `BenchSettings.as_served`), interleaved over several rounds, on the same inputs, each
output checked against the reference first. A row whose served config is the vendor's own call is not
timed: its ratio is 1 by construction. The ratio of a row is the vendor's time over the served call's
(above 1: the served call is faster).

An op whose vendor backend is no library its entry point serves (the fused MoE's per-expert loop) is
compared with what a vLLM deployment runs on this GPU instead (`deployment_baseline`): the imported
file of its shape for this device, else vLLM's fallback rule, at each M the config vLLM picks there.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import rules_of
from autotune.core.result import VENDOR_BACKEND
from autotune.core.target import Target
from autotune.engine.bench import BenchSettings, ServedTiming, interleaved_medians

if TYPE_CHECKING:
    import torch

    from autotune.core.op import Inputs, Launch, TunableOp
    from autotune.dispatch.table import Entry
    from autotune.engine.bench import Benchmarker

__all__ = [
    "DEFAULT_MIN_RATIO",
    "SERVED",
    "VERIFY_SETTINGS",
    "EntryPoint",
    "Family",
    "Row",
    "VerifyReport",
    "deployment_baseline",
    "family_of_entry",
    "has_vendor_library",
    "vendor_config",
    "verify",
    "with_baseline",
]

log = logging.getLogger(__name__)

#: Rows under this ratio (vendor time / served time) fail `autotune verify`.
DEFAULT_MIN_RATIO = 0.98
#: The pseudo-config that `EntryPoint` launches as the run-time entry point's own call.
SERVED = Config({"backend": "served"})
#: How verify times each side of a row (made served by `EntryPoint`): shorter per run than a search's.
VERIFY_SETTINGS = BenchSettings(min_reps=5, max_reps=60, target_time_s=0.04, race=None, precision=0.004)


class EntryPoint(ServedTiming):
    """`op`, timed as served, whose config `SERVED` launches the run-time entry point's call
    (`autotune.kernels.serve`); every other config is the entry point's call forced to it where the
    entry point takes a config (`entry_takes_config`: the MoE, whose alignment runs on every call), else
    `op`'s own launch."""

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        from autotune.kernels.served import entry_takes_config, served_launch

        if config == SERVED:
            return served_launch(self.op, problem, target, inputs, out)
        if entry_takes_config(self.op):
            return served_launch(self.op, problem, target, inputs, out, config)
        return self.op.prepare(problem, config, target, inputs, out)


#: What a family without a served vendor library is compared with at an M (None: nothing there).
Baseline = Callable[[int], "Config | None"]


@dataclass(frozen=True)
class Family:
    """One shape family to verify: its op, its problem at any M, the ladder, and a label put before the
    shape in its name (the layer of a model, say). `baseline` stands in for the vendor library where the
    op has none it serves (None: `deployment_baseline` without a database)."""

    op: TunableOp
    problem: Problem
    ladder: tuple[int, ...]
    label: str = ""
    baseline: Baseline | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return self.label + str(self.problem.with_m(1)).replace(" M=1 ", " ")


@dataclass(frozen=True)
class Row:
    """One (family, M): what was served, both times (µs), the ratio vendor / served and a status.

    `status`: "timed"; "vendor" (the served config is the vendor's call: ratio 1, not timed); "no vendor"
    (the op has no vendor library nor baseline for this problem: not compared); or an error ("served:
    wrong_result: ...") with ratio 0 when the served call failed. `vendor`: the config compared with (the
    vendor library's, or the deployment baseline's), None where there is none.
    """

    family: str
    op: str
    M: int
    served: dict[str, Any]
    served_us: float | None
    vendor_us: float | None
    ratio: float | None
    status: str
    vendor: dict[str, Any] | None = None

    @property
    def compared(self) -> bool:
        return self.ratio is not None


@dataclass
class VerifyReport:
    """Every row of a verify run, the threshold and where it ran."""

    rows: list[Row] = field(default_factory=list)
    min_ratio: float = DEFAULT_MIN_RATIO
    device: str = ""
    table: str = ""
    wall_s: float = 0.0

    def failing(self) -> list[Row]:
        """Rows under the threshold (a failed served call included), worst first."""
        return sorted((r for r in self.rows if r.ratio is not None and r.ratio < self.min_ratio),
                      key=lambda r: r.ratio or 0.0)  # fmt: skip

    def worst(self, n: int) -> list[Row]:
        """The `n` compared rows with the lowest ratio, worst first."""
        return sorted((r for r in self.rows if r.ratio is not None), key=lambda r: (r.ratio, r.family, r.M))[
            :n
        ]

    @property
    def ok(self) -> bool:
        return not self.failing()

    def summary(self) -> list[dict[str, Any]]:
        """Per family, then over all rows: rows compared, geometric-mean ratio, lowest ratio and its M, rows
        under the threshold, rows served by the vendor's own call."""
        groups: dict[str, list[Row]] = {}
        for r in self.rows:
            groups.setdefault(r.family, []).append(r)
        out = [_summary(name, rows, self.min_ratio) for name, rows in groups.items()]
        out.append(_summary("all", self.rows, self.min_ratio))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "table": self.table,
            "min_ratio": self.min_ratio,
            "ok": self.ok,
            "wall_s": round(self.wall_s, 1),
            "summary": self.summary(),
            "rows": [asdict(r) for r in self.rows],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


def _summary(name: str, rows: Sequence[Row], min_ratio: float) -> dict[str, Any]:
    ratios = [(r.ratio, r.M) for r in rows if r.ratio is not None]
    positive = [x for x, _ in ratios if x > 0]
    lowest = min(ratios, default=None)
    return {
        "family": name,
        "rows": len(rows),
        "compared": len(ratios),
        "geomean": math.exp(sum(map(math.log, positive)) / len(positive)) if positive else None,
        "min": None if lowest is None else lowest[0],
        "min_m": None if lowest is None else lowest[1],
        "under": sum(1 for x, _ in ratios if x < min_ratio),
        "vendor_rows": sum(1 for r in rows if r.status == "vendor"),
    }


def vendor_config(op: TunableOp, problem: Problem, target: Target) -> Config | None:
    """The op's vendor-library config for `problem` on `target`, or None where its space has none or its
    entry point does not serve it (`Backend.served`: a baseline loop is no vendor library)."""
    if not has_vendor_library(op):
        return None
    space = op.space(problem, target)
    if VENDOR_BACKEND not in space.backends:
        return None
    for values, broken in space.subspace(VENDOR_BACKEND).walk():
        if broken is None:
            return values if isinstance(values, Config) else Config(values)
    return None


def has_vendor_library(op: TunableOp) -> bool:
    """Whether `op`'s entry point serves its vendor backend (`Backend.served`; an op of a test without
    backends counts as one that does): the MoE's per-expert loop is no vendor library."""
    backend = getattr(op, "backend", None)
    return backend is None or bool(backend(VENDOR_BACKEND).served)


def deployment_baseline(
    family: Problem, target: Target, ladder: Sequence[int], store: Any = None
) -> tuple[Baseline | None, str]:
    """What a vLLM deployment on `target` runs for `family`'s shape at each M, and where that comes from
    (`autotune.db.baselines.deployment_configs`: the files imported into `store` for this device, else
    vLLM's fallback rule); (None, "") where neither applies (another op, MXFP4 weights without a file).
    The config at an M is the nearest M key's, as vLLM picks it (`autotune.dispatch.ranges.imported_pick`)."""
    from autotune.db.baselines import deployment_configs
    from autotune.dispatch.ranges import imported_pick

    imported = store.imported_configs(family, device_key=target.device_key()) if store is not None else {}
    found, source = deployment_configs(imported, family, target, ladder)
    return (functools.partial(imported_pick, found) if found else None), source


def with_baseline(fam: Family, target: Target, store: Any = None) -> tuple[Family, str]:
    """`fam`, given `deployment_baseline` (from `store`'s files where given) where its op has no vendor
    library and it has no baseline yet, and where that comes from ("" where nothing was given)."""
    if fam.baseline is not None or has_vendor_library(fam.op):
        return fam, ""
    baseline, source = deployment_baseline(fam.problem, target, fam.ladder, store)
    return replace(fam, baseline=baseline), source


def family_of_entry(entry: Entry) -> Problem:
    """The problem (at M = 1) of a table entry, as its op's rules read a table key (`key_problem`). A
    table keys a family by A's dtype (a quantized GEMM's output is taken as bf16) and a MoE's by its
    weights' dtype too (`Problem.table_params`)."""
    return rules_of(entry.op).key_problem(entry.key)


def verify(
    families: Sequence[Family],
    *,
    target: Target,
    bench_for: Callable[[TunableOp], Benchmarker | Any] | None = None,
    served_config: Callable[[TunableOp, Problem, Target], Config] | None = None,
    rounds: int = 3,
    min_ratio: float = DEFAULT_MIN_RATIO,
    on_row: Callable[[Row], None] | None = None,
) -> VerifyReport:
    """Times the served call against the vendor library for every family at every M of its ladder.

    `bench_for(op)` gives the measurer of an op's rows (default: a Benchmarker of `EntryPoint(op)` on this
    GPU with `VERIFY_SETTINGS.as_served()`); it must time `SERVED` as the entry point's call.
    `served_config` says which config the entry point serves (default `autotune.kernels.serve
    .served_config`, through the process-wide dispatcher: install the tables to verify first). Tests
    inject both.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if served_config is None:
        from autotune.kernels.serve import served_config as _served

        served_config = _served
    if bench_for is None:
        bench_for = _default_bench(target)
    t0 = time.perf_counter()
    report = VerifyReport(min_ratio=min_ratio, device=str(target))
    benches: dict[str, Any] = {}
    for fam in families:
        bench = benches.get(fam.name)
        if bench is None:
            bench = benches[fam.name] = bench_for(fam.op)
        fam, _ = with_baseline(fam, target)
        for M in fam.ladder:
            row = _row(fam, fam.problem.with_m(M), target, bench, served_config, rounds)
            report.rows.append(row)
            if on_row is not None:
                on_row(row)
    report.wall_s = time.perf_counter() - t0
    return report


def _default_bench(target: Target) -> Callable[[TunableOp], Benchmarker]:
    def make(op: TunableOp) -> Benchmarker:
        from autotune.engine.bench import Benchmarker

        settings = None if target.interpreter else VERIFY_SETTINGS  # timed as served (EntryPoint)
        return Benchmarker(EntryPoint(op), target, settings=settings)

    return make


def _row(
    fam: Family,
    problem: Problem,
    target: Target,
    bench: Any,
    served_config: Callable[[TunableOp, Problem, Target], Config],
    rounds: int,
) -> Row:
    served = served_config(fam.op, problem, target)
    vendor = vendor_config(fam.op, problem, target)
    if vendor is None and fam.baseline is not None:
        vendor = fam.baseline(problem.M)
    base: dict[str, Any] = {"family": fam.name, "op": problem.op, "M": problem.M, "served": served.to_dict()}
    if vendor is None:
        return Row(**base, served_us=None, vendor_us=None, ratio=None, status="no vendor")
    base["vendor"] = vendor.to_dict()
    if served == vendor:
        return Row(**base, served_us=None, vendor_us=None, ratio=1.0, status="vendor")
    times = interleaved_medians(bench, problem, {"served": SERVED, "vendor": vendor}, rounds)
    (s_us, s_status), (v_us, v_status) = times["served"], times["vendor"]
    if s_status != "ok" or not math.isfinite(s_us):
        return Row(**base, served_us=None, vendor_us=_finite(v_us), ratio=0.0, status=f"served: {s_status}")
    if v_status != "ok" or not math.isfinite(v_us):
        return Row(**base, served_us=s_us, vendor_us=None, ratio=None, status=f"vendor: {v_status}")
    return Row(**base, served_us=s_us, vendor_us=v_us, ratio=v_us / s_us, status="timed")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def rows_text(rows: Sequence[Row]) -> Iterator[str]:
    """The rows as aligned text lines (a header first)."""
    yield f"{'ratio':>6}  {'M':>6}  {'served µs':>10}  {'vendor µs':>10}  family / served config"
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        s = "-" if r.served_us is None else f"{r.served_us:.2f}"
        v = "-" if r.vendor_us is None else f"{r.vendor_us:.2f}"
        config = Config(r.served).short()
        note = "" if r.status in ("timed", "vendor") else f"  [{r.status[:120]}]"
        yield f"{ratio:>6}  {r.M:>6}  {s:>10}  {v:>10}  {r.family}: {config}{note}"
