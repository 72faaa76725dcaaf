"""TrialStream: an import's trials, read as they come, written in one transaction a chunk at a time."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.core.result import Source

from .bulk import index_deferred, insert_rows
from .database import Database
from .liveness import host as _host
from .models import GpuModel, ProblemModel, TrialModel, utcnow
from .records import NewTrial
from .rows import (
    IN_CHUNK,
    PROBLEM_COLUMNS,
    PROBLEMS_SHAPE,
    SOURCE_VALUES,
    TRIAL_COLUMNS,
    TRIALS,
    add_rows,
    ensure_rows,
    extra_json,
    gpu_values,
    kernel_row_id,
    problem_tuple,
    trial_tuple,
)

__all__ = ["TrialStream"]

logger = logging.getLogger(__name__)


class TrialStream(Database):
    """Writes an import's trials (any number, read from an iterator) through Core inserts, with memory
    for one chunk: all of them in ONE transaction or, on any error, none; trials whose key is stored or
    repeated are skipped. Not retried (`record_stream` says why)."""

    def record_stream(self, trials: Iterable[NewTrial], *, chunk: int = 5000) -> int:
        """Writes `trials` (an import's, read as they come) in ONE transaction, `chunk` at a time, so
        that memory holds one chunk however many there are: all of them or, on any error (the
        iterator's own included, which propagates), none. Trials whose key is already stored, or
        repeated, are skipped. Returns how many were written. Not retried: the iterator cannot be read
        twice; StoreError for an error in the database, ValueError for an extra that is not
        JSON-serializable. Into a SQLite database without problems, the problems' shape index is built
        once at the end (`index_deferred`)."""
        written = 0
        gpu_ids: dict[str, int] = {}
        kernel_ids: dict[tuple[str, str], int] = {}
        with self._session(write=True) as session:
            look_first = session.scalar(select(ProblemModel.id).limit(1)) is not None
            with index_deferred(session.connection(), PROBLEMS_SHAPE, when=not look_first):
                for batch in _batches(trials, chunk):
                    written += self._write_chunk(session, batch, gpu_ids, kernel_ids, look_first)
                    batch.clear()  # gone before the next chunk is read: memory holds one
        self._gpu_ids.update(gpu_ids)
        self._kernel_ids.update(kernel_ids)
        logger.debug("streamed %d new trials in one transaction", written)
        return written

    def _write_chunk(
        self,
        session: Session,
        batch: list[NewTrial],
        gpu_ids: dict[str, int],
        kernel_ids: dict[tuple[str, str], int],
        look_first: bool,
    ) -> int:
        """Inserts the trials of `batch` whose key is not stored yet (`insert_rows`); the GPU, kernel and
        problem rows they need are created first (`add_rows`; `look_first`: whether the problems table
        held rows before). `gpu_ids` and `kernel_ids` cache ids."""
        t = TrialModel
        extras = [item.extra_json or extra_json(item.result) for item in batch]
        by_object: dict[int, str] = {}  # a reader hands out few Target objects: hash each once
        for item in batch:
            if id(item.target) not in by_object:
                by_object[id(item.target)] = item.target.fingerprint()
        fingerprints = {by_object[id(item.target)]: item.target for item in batch}
        new_gpus = {fp: target for fp, target in fingerprints.items() if fp not in gpu_ids}
        if new_gpus:
            wanted = {fp: {"fingerprint": fp, **gpu_values(target)} for fp, target in new_gpus.items()}
            gpu_ids.update(ensure_rows(session, GpuModel, GpuModel.fingerprint, wanted))
        for name, source_hash in sorted(
            {(item.kernel, item.source_hash) for item in batch} - set(kernel_ids)
        ):
            kernel_ids[(name, source_hash)] = kernel_row_id(session, name, source_hash)
        keys = [item.problem.key() for item in batch]
        problems = dict(zip(keys, (item.problem for item in batch), strict=True))
        problem_ids, created = add_rows(
            session,
            ProblemModel,
            ProblemModel.key,
            PROBLEM_COLUMNS,
            {k: problem_tuple(k, p) for k, p in problems.items()},
            look_first=look_first,
        )
        pids = sorted({i for k, i in problem_ids.items() if k not in created})  # a new problem has no trials
        gids = sorted({gpu_ids[fp] for fp in fingerprints})
        kids = sorted({kernel_ids[(item.kernel, item.source_hash)] for item in batch})
        existing: set[tuple[int, int, int, str, str]] = set()
        for start in range(0, len(pids), IN_CHUNK):  # GPU and kernel first: the key's index serves it
            stmt = select(t.gpu_id, t.kernel_id, t.problem_id, t.config_hash, t.source).where(
                t.gpu_id.in_(gids), t.kernel_id.in_(kids), t.problem_id.in_(pids[start : start + IN_CHUNK])
            )
            existing.update((g, k, p, h, s) for g, k, p, h, s in session.execute(stmt))
        rows: list[tuple[Any, ...]] = []
        now, host = utcnow(), _host()
        configs: dict[int, tuple[str, str, str]] = {}  # a reader hands out few Config objects too
        for item, key, extra in zip(batch, keys, extras, strict=True):
            source = SOURCE_VALUES.get(item.source) or Source(item.source).value
            config = item.result.config
            of_config = configs.get(id(config))
            if of_config is None:
                of_config = configs[id(config)] = (config.backend, config.canonical(), config.digest())
            ids = (None, gpu_ids[by_object[id(item.target)]], kernel_ids[(item.kernel, item.source_hash)],
                   problem_ids[key])  # fmt: skip
            trial_key = (*ids[1:], of_config[2], source)
            if trial_key in existing:
                continue
            existing.add(trial_key)
            rows.append(trial_tuple(item.result, of_config, source, extra, ids, now, host))
        insert_rows(session.connection(), TRIALS, TRIAL_COLUMNS, rows)
        return len(rows)


def _batches(items: Iterable[NewTrial], size: int) -> Iterator[list[NewTrial]]:
    """`items` in lists of `size` (the last one shorter)."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch
