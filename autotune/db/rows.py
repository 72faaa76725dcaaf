"""Rows: the column values of the rows a Store writes, and the helpers that insert them in a session.

Nothing here commits: each helper works inside the caller's transaction (`Database._session`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, Table, select
from sqlalchemy.orm import Session

from autotune.core.problem import Problem
from autotune.core.result import Source, TrialResult, TrialStatus
from autotune.core.target import Target

from .bulk import insert_new_rows, insert_new_supported, insert_rows
from .liveness import host as _host
from .models import GpuModel, KernelModel, ProblemModel, TrialModel

__all__ = [
    "IN_CHUNK",
    "PROBLEMS_SHAPE",
    "PROBLEM_COLUMNS",
    "SOURCE_VALUES",
    "TRIALS",
    "TRIAL_COLUMNS",
    "add_rows",
    "ensure_rows",
    "extra_json",
    "gpu_values",
    "kernel_row_id",
    "problem_tuple",
    "problem_values",
    "row_ids",
    "trial_query",
    "trial_row",
    "trial_tuple",
]
#: The trials table, for Core inserts.
TRIALS = cast(Table, TrialModel.__table__)
#: The index of the problems' shapes (op, N, K, M), which a streamed write into no problems defers.
PROBLEMS_SHAPE = next(i for i in cast(Table, ProblemModel.__table__).indexes if i.name == "ix_problems_shape")
#: Largest IN (...) list of one query (SQLite allows 32766 parameters; PostgreSQL 65535).
IN_CHUNK = 500


def extra_json(result: TrialResult) -> str:
    """The JSON of `result.extra`; ValueError naming the trial when it is not JSON-serializable."""
    try:
        return json.dumps(result.extra, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"extra of trial {result.config.short()} is not JSON-serializable: {exc}") from exc


def gpu_values(target: Target) -> dict[str, Any]:
    """The columns of a `gpus` row of `target`, but its fingerprint."""
    return dict(
        vendor=target.vendor,
        arch=target.arch,
        name=target.name,
        cu_count=target.cu_count,
        xcds=target.xcds,
        memory_bytes=target.memory_bytes,
        llc_bytes=target.llc_bytes,
        interpreter=target.interpreter,
        toolchain=json.dumps(target.toolchain, sort_keys=True),
        target_json=json.dumps(target.to_dict(), sort_keys=True),
    )


def problem_values(problem: Problem) -> dict[str, Any]:
    """The columns of a `problems` row of `problem`, but its key: op, M, N and K, and the other fields as
    canonical JSON (`Problem.params_json`)."""
    return dict(op=problem.op, m=problem.M, n=problem.N, k=problem.K, params=problem.params_json())


def trial_row(
    result: TrialResult,
    source: Source,
    extra: str,
    gpu: int,
    kernel: int,
    problem: int,
    sweep_id: int | None,
) -> TrialModel:
    """A new `trials` row of `result` (not yet added to a session)."""
    return TrialModel(**_trial_values(result, source, extra, gpu, kernel, problem, sweep_id))


def _trial_values(
    result: TrialResult,
    source: Source,
    extra: str,
    gpu: int,
    kernel: int,
    problem: int,
    sweep_id: int | None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The columns of a new `trials` row of `result` (`created_at` where given)."""
    config = result.config
    row = trial_tuple(
        result, (config.backend, config.canonical(), config.digest()), Source(source).value, extra,
        (sweep_id, gpu, kernel, problem), created_at, _host(),
    )  # fmt: skip
    out = dict(zip(TRIAL_COLUMNS, row, strict=True))
    if created_at is None:
        del out["created_at"]
    return out


def trial_tuple(
    result: TrialResult,
    config: tuple[str, str, str],
    source: str,
    extra: str,
    ids: tuple[int | None, int, int, int],
    created_at: datetime | None,
    host: str,
) -> tuple[Any, ...]:
    """The values of `TRIAL_COLUMNS` of a new `trials` row of `result`: `config` is its config's backend,
    canonical JSON and digest, `source` the value of its Source, `ids` its sweep, GPU, kernel and problem
    ids."""
    timing = result.timing
    times = _NO_TIMING if timing is None else (
        timing.median_us, timing.min_us, timing.p20_us, timing.p80_us, timing.mean_us, timing.std_us,
        timing.runs, timing.method,
    )  # fmt: skip
    status = _STATUS_VALUES.get(result.status) or TrialStatus(result.status).value
    return (*ids, *config, status, source, *times, result.rel_error, result.error or "", result.compile_s,
            result.measure_s, extra, created_at, host)  # fmt: skip


#: The columns of a new `trials` row (all but its id), in the table's order: what `trial_tuple` gives.
TRIAL_COLUMNS = tuple(c.name for c in TRIALS.columns if c.name != "id")
#: The timing columns of a trial without a timing.
_NO_TIMING = (None,) * 8
#: The stored value of each status and source, by member or value (`TrialStatus(x).value` without its
#: cost per row; another value falls back to it, which raises).
_STATUS_VALUES: dict[str, str] = {s: s.value for s in TrialStatus}
SOURCE_VALUES: dict[str, str] = {s: s.value for s in Source}
#: The columns of a new `problems` row (all but its id), in the table's order: what `problem_tuple` gives.
PROBLEM_COLUMNS = ("key", "op", "m", "n", "k", "params")


def problem_tuple(key: str, problem: Problem) -> tuple[Any, ...]:
    """The values of `PROBLEM_COLUMNS` of the `problems` row of `problem`, whose key is `key`."""
    return (key, problem.op, problem.M, problem.N, problem.K, problem.params_json())


def kernel_row_id(session: Session, name: str, source_hash: str) -> int:
    """The id of the `kernels` row (name, source_hash), inserted (not committed) where missing."""
    found = session.scalar(select(KernelModel.id).filter_by(name=name, source_hash=source_hash))
    if found is None:
        row = KernelModel(name=name, source_hash=source_hash)
        session.add(row)
        session.flush()
        found = row.id
    return int(found)


def ensure_rows(
    session: Session, model: Any, column: Any, wanted: dict[str, dict[str, Any]]
) -> dict[str, int]:
    """Ids of the rows of `model` whose unique `column` has the values `wanted` names, the missing ones
    inserted (not committed) from their column values in `wanted`."""
    ids = row_ids(session, model, column, sorted(wanted))
    missing = [k for k in sorted(wanted) if k not in ids]
    if missing:
        rows = [model(**wanted[k]) for k in missing]
        session.add_all(rows)
        session.flush()
        ids.update((str(getattr(row, column.key)), int(row.id)) for row in rows)
    return ids


def add_rows(
    session: Session,
    model: Any,
    column: Any,
    columns: tuple[str, ...],
    wanted: dict[str, tuple[Any, ...]],
    *,
    look_first: bool,
) -> tuple[dict[str, int], set[str]]:
    """Ids of the rows of `model` whose unique `column` has the values `wanted` names, and the keys of those
    inserted here (not committed) from their values of `columns` in `wanted`, in the keys' order
    (`insert_new_rows`: no ORM objects, a key stored meanwhile left alone), the others read back.
    `look_first` reads the stored ones before (where the table held rows: a PostgreSQL insert that
    conflicts uses up a sequence value); a database without ON CONFLICT ... RETURNING always does, and
    inserts the others plainly."""
    keys = sorted(wanted)
    ids = row_ids(session, model, column, keys) if look_first else {}
    missing = [k for k in keys if k not in ids]
    if not missing:
        return ids, set()
    conn, table = session.connection(), model.__table__
    if not insert_new_supported(conn.dialect):
        if not look_first:
            return add_rows(session, model, column, columns, wanted, look_first=True)
        insert_rows(conn, table, columns, [wanted[k] for k in missing])
        ids.update(row_ids(session, model, column, missing))
        return ids, set(missing)
    created = insert_new_rows(conn, table, columns, [wanted[k] for k in missing], column.key)
    ids.update(created)
    ids.update(row_ids(session, model, column, [k for k in missing if k not in created]))
    return ids, set(created)


def row_ids(session: Session, model: Any, column: Any, keys: list[str]) -> dict[str, int]:
    """Ids of the stored rows of `model` whose `column` is one of `keys`."""
    ids: dict[str, int] = {}
    for start in range(0, len(keys), IN_CHUNK):
        chunk = keys[start : start + IN_CHUNK]
        ids.update(
            (str(k), int(i)) for i, k in session.execute(select(model.id, column).where(column.in_(chunk)))
        )
    return ids


def trial_query() -> Select:
    """The trials joined with their GPU, kernel and problem rows (what `trial_records` reads)."""
    return (
        select(TrialModel, GpuModel, KernelModel, ProblemModel)
        .join(GpuModel, TrialModel.gpu_id == GpuModel.id)
        .join(KernelModel, TrialModel.kernel_id == KernelModel.id)
        .join(ProblemModel, TrialModel.problem_id == ProblemModel.id)
    )
