"""Rows to values: turns the ORM rows of the models into the records, Problems and TrialResults the Store
returns, so no SQLAlchemy object escapes the Store."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target

from .models import GpuModel, ProblemModel, TrialModel
from .records import GpuRecord, TrialRecord

__all__ = ["as_utc", "gpu_record", "problem_of", "result_of", "timing_of", "trial_records"]


def as_utc(value: datetime) -> datetime:
    """`value` as an aware UTC datetime (SQLite returns naive ones; every stored time is UTC)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def gpu_record(row: GpuModel) -> GpuRecord:
    """The GpuRecord of a `gpus` row, its Target rebuilt from `target_json`."""
    return GpuRecord(
        id=row.id,
        fingerprint=row.fingerprint,
        target=Target.from_dict(json.loads(row.target_json)),
        interpreter=bool(row.interpreter),
        created_at=as_utc(row.created_at),
    )


def problem_of(row: ProblemModel) -> Problem:
    """The Problem of a `problems` row: its op, M, N and K, and the other fields from its params."""
    return Problem.from_params(row.op, int(row.m), int(row.n), int(row.k), row.params)


def timing_of(row: TrialModel) -> Timing | None:
    """The Timing of a trial, None if it was not timed; statistics not stored default to the median."""
    if row.time_us is None:
        return None
    median = row.time_us

    def or_median(value: float | None) -> float:
        return median if value is None else value

    return Timing(
        median_us=median,
        min_us=or_median(row.min_us),
        p20_us=or_median(row.p20_us),
        p80_us=or_median(row.p80_us),
        mean_us=or_median(row.mean_us),
        std_us=row.std_us or 0.0,
        runs=row.runs or 0,
        method=row.timing_method or "unknown",
    )


def result_of(row: TrialModel) -> TrialResult:
    """The TrialResult a trial row stores, marked `cached`."""
    return TrialResult(
        config=Config.from_json(row.config_json),
        status=TrialStatus(row.status),
        timing=timing_of(row),
        rel_error=row.rel_error,
        error=row.error or "",
        compile_s=row.compile_s or 0.0,
        measure_s=row.measure_s or 0.0,
        cached=True,
        extra=json.loads(row.extra or "{}"),
    )


def trial_records(rows: Iterable[Any]) -> list[TrialRecord]:
    """TrialRecords of (trial, gpu, kernel, problem) rows."""
    gpus: dict[int, GpuRecord] = {}
    problems: dict[int, Problem] = {}
    out: list[TrialRecord] = []
    for trial, gpu_row, kernel_row, problem_row in rows:
        gpu = gpus.get(gpu_row.id)
        if gpu is None:
            gpu = gpus[gpu_row.id] = gpu_record(gpu_row)
        problem = problems.get(problem_row.id)
        if problem is None:
            problem = problems[problem_row.id] = problem_of(problem_row)
        result = result_of(trial)
        out.append(
            TrialRecord(
                gpu=gpu,
                problem=problem,
                kernel=kernel_row.name,
                source_hash=kernel_row.source_hash,
                config=result.config,
                status=result.status,
                source=Source(trial.source),
                timing=result.timing,
                rel_error=result.rel_error,
                error=result.error,
                compile_s=result.compile_s,
                measure_s=result.measure_s,
                created_at=as_utc(trial.created_at),
                sweep_id=trial.sweep_id,
                extra=result.extra,
                id=trial.id,
            )
        )
    return out
