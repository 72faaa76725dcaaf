"""Records: immutable values the Store returns (no SQLAlchemy objects escape the Store)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target

__all__ = [
    "GpuRecord",
    "GpuSummary",
    "Holdings",
    "NewTrial",
    "Summary",
    "SweepRecord",
    "TrialRecord",
    "Winner",
]


@dataclass(frozen=True)
class NewTrial:
    """One trial for `Store.record_many`: what `Store.record` takes as arguments, as a value.

    `extra_json` is the JSON of `result.extra` as the Store writes it (`json.dumps`, keys sorted) where
    its maker has it already (an import's row, `autotune.db.foreign.JsonForm`); "": the Store encodes it.
    """

    target: Target
    kernel: str
    source_hash: str
    problem: Problem
    result: TrialResult
    source: Source = Source.MEASURED
    extra_json: str = ""


@dataclass(frozen=True)
class GpuRecord:
    """One stored GPU: its fingerprint and the Target it was recorded with."""

    id: int
    fingerprint: str
    target: Target
    interpreter: bool
    created_at: datetime

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def arch(self) -> str:
        return self.target.arch

    def __str__(self) -> str:
        return f"{self.target} [{self.fingerprint[:8]}]"


@dataclass(frozen=True)
class TrialRecord:
    """One stored trial with its GPU, problem, kernel version and config.

    `timing` is None where nothing was timed; `time_us` is the median of OK trials only.
    """

    gpu: GpuRecord
    problem: Problem
    kernel: str
    source_hash: str
    config: Config
    status: TrialStatus
    source: Source
    timing: Timing | None
    rel_error: float | None
    error: str
    compile_s: float
    measure_s: float
    created_at: datetime
    sweep_id: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    id: int = 0

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def backend(self) -> str:
        return self.config.backend

    @property
    def time_us(self) -> float | None:
        return self.timing.median_us if self.timing is not None and self.ok else None

    def to_result(self) -> TrialResult:
        """The TrialResult this record stores, marked `cached`."""
        return TrialResult(
            config=self.config,
            status=self.status,
            timing=self.timing,
            rel_error=self.rel_error,
            error=self.error,
            compile_s=self.compile_s,
            measure_s=self.measure_s,
            cached=True,
            extra=dict(self.extra),
        )


@dataclass(frozen=True)
class Winner:
    """The fastest OK trial of one (GPU, problem), with the vendor library's best for comparison.

    `vendor` is the fastest OK trial of backend "torch" (hipBLASLt / cuBLAS), None if there is none.
    `n_ok` and `n_failed` count the trials considered (the newest kernel version of each backend).
    """

    gpu: GpuRecord
    problem: Problem
    best: TrialRecord
    vendor: TrialRecord | None
    n_ok: int
    n_failed: int

    @property
    def config(self) -> Config:
        return self.best.config

    @property
    def time_us(self) -> float:
        t = self.best.time_us
        assert t is not None  # a winner is always an OK trial
        return t

    @property
    def speedup_vs_vendor(self) -> float | None:
        """Vendor time / best time (1.0 when the vendor library wins), or None without a vendor trial."""
        if self.vendor is None or self.vendor.time_us is None or self.time_us <= 0:
            return None
        return self.vendor.time_us / self.time_us


@dataclass(frozen=True)
class SweepRecord:
    """One stored sweep: where it runs, how far it got and whether it is still alive.

    `state` is the status, except for a sweep marked "running" that is not: "interrupted" where it ran
    on this host and its process is gone (`pid_alive` False), "stale" where its heartbeat is older than
    `stale_after_s` (killed on another host without a chance to say so). Either way, running its command
    again resumes it.
    """

    id: int
    name: str
    host: str
    status: str
    gpu: str
    started_at: datetime
    finished_at: datetime | None
    heartbeat_at: datetime | None
    pid: int | None
    problems_total: int | None
    problems_done: int | None
    trials_done: int | None
    workers: int | None
    log_path: str | None
    gpu_fingerprint: str = ""
    spec_text: str = ""
    #: Whether its process is alive: known only for a running sweep of this host, else None.
    pid_alive: bool | None = None
    #: Why it failed, where it did.
    error: str | None = None

    def state(self, now: datetime, stale_after_s: float | None = None) -> str:
        if self.status != "running":
            return self.status
        if self.pid_alive is False:
            return "interrupted"
        if stale_after_s is None:
            from .liveness import stale_after_s as default

            stale_after_s = default()
        last = self.heartbeat_at or self.started_at
        if last.tzinfo is None:  # SQLite hands back naive datetimes
            last = last.replace(tzinfo=now.tzinfo)
        return "stale" if (now - last).total_seconds() > stale_after_s else "running"


@dataclass(frozen=True)
class GpuSummary:
    """Per-GPU counts of a Summary."""

    gpu: GpuRecord
    n_trials: int
    n_ok: int
    n_problems_tuned: int  # problems with at least one OK trial


@dataclass(frozen=True)
class Summary:
    """Counts over the whole database, for ``autotune status``."""

    url: str
    schema_version: int
    n_gpus: int
    n_problems: int
    n_kernels: int
    sweeps_by_status: dict[str, int]
    trials_by_status: dict[str, int]
    trials_by_source: dict[str, int]
    per_gpu: tuple[GpuSummary, ...] = ()

    @property
    def n_sweeps(self) -> int:
        return sum(self.sweeps_by_status.values())

    @property
    def n_trials(self) -> int:
        return sum(self.trials_by_status.values())

    def lines(self) -> list[str]:
        """Human-readable lines, one fact each."""

        def counts(d: dict[str, int]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))

        out = [
            f"database  {self.url} (schema {self.schema_version})",
            f"gpus      {self.n_gpus}",
            f"problems  {self.n_problems}",
            f"kernels   {self.n_kernels}",
            f"sweeps    {self.n_sweeps}" + (f" ({counts(self.sweeps_by_status)})" if self.n_sweeps else ""),
            f"trials    {self.n_trials}" + (f" ({counts(self.trials_by_status)})" if self.n_trials else ""),
        ]
        if self.n_trials:
            out.append(f"sources   {counts(self.trials_by_source)}")
        for g in self.per_gpu:
            out.append(f"  {g.gpu}: {g.n_problems_tuned} problems tuned, {g.n_trials} trials ({g.n_ok} ok)")
        return out


@dataclass(frozen=True)
class Holdings:
    """What the database holds of one op (`op`; None: of every op), for the messages of a verb that found
    nothing to show or write: trials per (source, status)."""

    op: str | None
    counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def _count(self, sources: tuple[str, ...], ok: bool | None = None) -> int:
        return sum(
            n
            for (source, status), n in self.counts.items()
            if source in sources and (ok is None or (status == TrialStatus.OK.value) == ok)
        )

    @property
    def n_imported(self) -> int:
        """Reference records from imported files (flagged ones too)."""
        return self._count(("imported",))

    def describe(self) -> str:
        """The holdings in words, e.g. "12 reference records from imported files (2 flagged) and no
        measured trials of OP"."""
        of = f" of {self.op}" if self.op else ""
        if not self.counts:
            return f"no trials{of}"
        measured = self._count(("measured", "final", "profile"))
        parts = []
        imported = self.n_imported
        if imported:
            flagged = self._count(("imported",), ok=False)
            parts.append(
                f"{imported} reference record{'s' * (imported != 1)} from imported files"
                + (f" ({flagged} flagged)" if flagged else "")
            )
        predicted = self._count(("model",))
        if predicted:
            parts.append(f"{predicted} prediction{'s' * (predicted != 1)} of compile-only sweeps")
        if measured:
            failed = self._count(("measured", "final", "profile"), ok=False)
            parts.append(
                f"{measured} measured trial{'s' * (measured != 1)}"
                + (f" ({failed} failed)" if failed else "")
            )
        else:
            parts.append("no measured trials")
        return (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + of
