"""TrialWrites: trials written as they finish (one, a batch, a final round) and read back to resume."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from autotune.core.problem import Problem
from autotune.core.result import Source, TrialResult
from autotune.core.target import Target

from .convert import result_of
from .database import Database
from .engine import StoreError, error_cause
from .models import GpuModel, KernelModel, ProblemModel, TrialModel
from .records import NewTrial
from .retry import retrying
from .rows import IN_CHUNK, ensure_rows, extra_json, gpu_values, kernel_row_id, problem_values, trial_row

__all__ = ["TrialWrites"]

logger = logging.getLogger(__name__)


class TrialWrites(Database):
    """Writes trials and reads back those a sweep finished.

    Each write is one transaction, committed before the call returns, so a crash loses nothing that was
    recorded; `record_many` and `record_final` write their whole batch in one transaction, all or
    nothing. Writes are idempotent on the trial key (GPU fingerprint, kernel name + source hash,
    problem, config hash, source), also when processes race, and are retried through a transient outage
    (`autotune.db.retry`). An extra that is not JSON-serializable is a ValueError, raised before writing.
    """

    @retrying
    def record(
        self,
        *,
        target: Target,
        kernel: str,
        source_hash: str,
        problem: Problem,
        result: TrialResult,
        sweep_id: int | None = None,
        source: Source = Source.MEASURED,
    ) -> bool:
        """Writes one trial and commits it. Returns False (writing nothing) if its key is already stored."""
        source = Source(source)
        config = result.config
        extra = extra_json(result)
        gpu, kernel_row, problem_row = (
            self.gpu_id(target),
            self.kernel_id(kernel, source_hash),
            self.problem_id(problem),
        )
        digest = config.digest()
        key = (
            TrialModel.gpu_id == gpu,
            TrialModel.kernel_id == kernel_row,
            TrialModel.problem_id == problem_row,
            TrialModel.config_hash == digest,
            TrialModel.source == source.value,
        )
        with self._session(write=True) as session:
            if session.scalar(select(TrialModel.id).where(*key)) is not None:
                return False
            session.add(trial_row(result, source, extra, gpu, kernel_row, problem_row, sweep_id))
            try:
                session.flush()
            except IntegrityError as exc:
                session.rollback()
                if session.scalar(select(TrialModel.id).where(*key)) is not None:
                    return False  # another process recorded the same trial first
                raise StoreError(
                    f"cannot record trial {config.short()} of {problem}: {error_cause(exc)}"
                ) from exc
        logger.debug("recorded %s %s %s: %s", kernel, problem, config.short(), result.status.value)
        return True

    @retrying
    def record_many(self, trials: Sequence[NewTrial], *, sweep_id: int | None = None) -> list[bool]:
        """Writes every trial of `trials` in ONE transaction: all of them or, on any error, none.

        The GPU, kernel and problem rows they need are created in the same transaction. Trials whose key
        is already stored, or repeated within `trials`, are skipped, so writing the same batch twice
        writes nothing the second time. Returns, per trial in order, True if it was written. Raises
        ValueError (before writing) for an extra that is not JSON-serializable, StoreError for an error in
        the database; either way nothing is written.
        """
        items = list(trials)
        extras = [t.extra_json or extra_json(t.result) for t in items]
        if not items:
            return []
        return self._record_many(items, extras, sweep_id, replace_final=False)

    @retrying
    def record_final(
        self,
        *,
        target: Target,
        problem: Problem,
        results: Sequence[tuple[str, str, TrialResult]],
        sweep_id: int | None = None,
    ) -> None:
        """Stores a final round of `problem` on `target` ((kernel, source hash, result) per finalist, as
        `Source.FINAL` trials) in one transaction that first deletes the GPU's earlier final round of
        the problem: the final times stored together are always of one head-to-head round."""
        items = [
            NewTrial(target, kernel, source_hash, problem, r, Source.FINAL)
            for kernel, source_hash, r in results
        ]
        if items:
            self._record_many(items, [extra_json(t.result) for t in items], sweep_id, replace_final=True)

    def _record_many(
        self, items: list[NewTrial], extras: list[str], sweep_id: int | None, *, replace_final: bool
    ) -> list[bool]:
        for attempt in range(3):
            try:
                written, ids = self._record_many_once(items, extras, sweep_id, replace_final)
            except StoreError as exc:
                # Another process inserted one of the same rows at the same moment: look again.
                if attempt == 2 or not isinstance(exc.__cause__, IntegrityError):
                    raise
                continue
            gpu_ids, kernel_ids, problem_ids = ids
            self._gpu_ids.update(gpu_ids)
            self._kernel_ids.update(kernel_ids)
            self._problem_ids.update(problem_ids)
            logger.debug("recorded %d of %d trials in one transaction", sum(written), len(items))
            return written
        raise AssertionError("unreachable")  # pragma: no cover

    def _record_many_once(
        self, items: list[NewTrial], extras: list[str], sweep_id: int | None, replace_final: bool = False
    ) -> tuple[list[bool], tuple[dict[str, int], dict[tuple[str, str], int], dict[str, int]]]:
        targets = {t.target.fingerprint(): t.target for t in items}
        problems = {t.problem.key(): t.problem for t in items}
        kernels = {(t.kernel, t.source_hash) for t in items}
        t = TrialModel
        with self._session(write=True) as session:
            gpu_ids = ensure_rows(
                session,
                GpuModel,
                GpuModel.fingerprint,
                {fp: {"fingerprint": fp, **gpu_values(target)} for fp, target in targets.items()},
            )
            problem_ids = ensure_rows(
                session,
                ProblemModel,
                ProblemModel.key,
                {key: {"key": key, **problem_values(problem)} for key, problem in problems.items()},
            )
            kernel_ids: dict[tuple[str, str], int] = {}
            for name, source_hash in sorted(kernels):
                kernel_ids[(name, source_hash)] = kernel_row_id(session, name, source_hash)
            pids = sorted(set(problem_ids.values()))
            if replace_final:  # the earlier final round of these GPUs and problems
                session.execute(
                    delete(t).where(
                        t.gpu_id.in_(sorted(set(gpu_ids.values()))),
                        t.problem_id.in_(pids),
                        t.source == Source.FINAL.value,
                    )
                )
            existing: set[tuple[int, int, int, str, str]] = set()
            for start in range(0, len(pids), IN_CHUNK):
                stmt = select(t.gpu_id, t.kernel_id, t.problem_id, t.config_hash, t.source).where(
                    t.gpu_id.in_(sorted(set(gpu_ids.values()))),
                    t.kernel_id.in_(sorted(set(kernel_ids.values()))),
                    t.problem_id.in_(pids[start : start + IN_CHUNK]),
                )
                existing.update((g, k, p, h, s) for g, k, p, h, s in session.execute(stmt))
            written: list[bool] = []
            for item, extra in zip(items, extras, strict=True):
                source = Source(item.source)
                gpu = gpu_ids[item.target.fingerprint()]
                kernel_row = kernel_ids[(item.kernel, item.source_hash)]
                problem_row = problem_ids[item.problem.key()]
                key = (gpu, kernel_row, problem_row, item.result.config.digest(), source.value)
                if key in existing:
                    written.append(False)
                    continue
                existing.add(key)
                session.add(trial_row(item.result, source, extra, gpu, kernel_row, problem_row, sweep_id))
                written.append(True)
            session.flush()
        return written, (gpu_ids, kernel_ids, problem_ids)

    @retrying
    def finished(
        self,
        *,
        target: Target,
        problem: Problem,
        kernels: dict[str, tuple[str, str]],
        source: Source = Source.MEASURED,
    ) -> dict[str, TrialResult]:
        """Stored trials (ok or failed) of `problem` on `target`, as config hash → TrialResult (cached).

        `kernels` maps backend → (kernel name, source hash); only trials of that kernel version count, so a
        changed kernel source is tuned afresh. Used to resume a sweep without re-running anything.
        """
        if not kernels:
            return {}
        stmt = (
            select(TrialModel, KernelModel.name, KernelModel.source_hash)
            .join(KernelModel, TrialModel.kernel_id == KernelModel.id)
            .join(GpuModel, TrialModel.gpu_id == GpuModel.id)
            .join(ProblemModel, TrialModel.problem_id == ProblemModel.id)
            .where(
                GpuModel.fingerprint == target.fingerprint(),
                ProblemModel.key == problem.key(),
                TrialModel.source == Source(source).value,
                KernelModel.name.in_({name for name, _ in kernels.values()}),
            )
            .order_by(TrialModel.id)
        )
        out: dict[str, TrialResult] = {}
        with self._session() as session:
            for trial, name, source_hash in session.execute(stmt):
                if kernels.get(trial.backend) == (name, source_hash):
                    out[trial.config_hash] = result_of(trial)
        return out
