"""Winners: the fastest config of each (GPU, problem), of the newest kernel versions."""

from __future__ import annotations

import dataclasses

from sqlalchemy import ColumnElement, and_, case, func, select

from autotune.core.problem import Problem
from autotune.core.result import VENDOR_BACKEND, Source, TrialStatus

from .convert import trial_records
from .models import TrialModel
from .queries import Queries
from .records import TrialRecord, Winner
from .rows import trial_query

__all__ = ["Winners"]


class Winners(Queries):
    """The winner of each (GPU, problem): its fastest OK trial of the newest kernel version of each
    backend, with the vendor library's trial beside it; with `final`, as its final round timed them.
    Read-only, like `Queries`."""

    def winners(
        self, fingerprint: str | None = None, source: Source | None = Source.MEASURED, *, final: bool = False
    ) -> list[Winner]:
        """One Winner per (GPU, problem) with an OK trial, ordered by GPU then problem.

        Of each backend only the trials of its newest kernel version (the most recently created kernel
        row with trials for that GPU and problem) are considered. With `final` (measured winners only),
        a (GPU, problem) whose final round (`Source.FINAL`: the finalists timed head to head) counts its
        fastest measured config among the finalists takes its best and vendor trials from that round; a
        final round without it (a later sweep found a faster config, or the round covered other backends)
        is passed over.
        """
        found = self._winners(fingerprint, source)
        if not final or source is not Source.MEASURED or not found:
            return found
        rounds: dict[tuple[int, Problem], dict[str, TrialRecord]] = {}
        for t in self.trials(fingerprint=fingerprint, status=TrialStatus.OK, source=Source.FINAL):
            rounds.setdefault((t.gpu.id, t.problem), {})[t.config.digest()] = t
        out = []
        for w in found:
            last = rounds.get((w.gpu.id, w.problem), {})
            if w.best.config.digest() in last:
                ranked = sorted(last.values(), key=lambda t: (t.time_us, t.id))
                vendor = next((t for t in ranked if t.backend == VENDOR_BACKEND), None)
                w = dataclasses.replace(w, best=ranked[0], vendor=vendor)
            out.append(w)
        return out

    def _winners(self, fingerprint: str | None, source: Source | None) -> list[Winner]:
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        t = TrialModel
        conds: list[ColumnElement[bool]] = []
        if gpu_ids is not None:
            conds.append(t.gpu_id.in_(gpu_ids))
        if source is not None:
            conds.append(t.source == Source(source).value)
        current = (
            select(t.gpu_id, t.problem_id, t.backend, func.max(t.kernel_id).label("kernel_id"))
            .where(*conds)
            .group_by(t.gpu_id, t.problem_id, t.backend)
            .subquery("current")
        )
        on_current = and_(
            t.gpu_id == current.c.gpu_id,
            t.problem_id == current.c.problem_id,
            t.backend == current.c.backend,
            t.kernel_id == current.c.kernel_id,
        )
        is_ok = t.status == TrialStatus.OK.value
        counts_stmt = (
            select(t.gpu_id, t.problem_id, func.count(), func.sum(case((is_ok, 1), else_=0)))
            .join(current, on_current)
            .where(*conds)
            .group_by(t.gpu_id, t.problem_id)
        )
        rank = (
            func.row_number()
            .over(partition_by=(t.gpu_id, t.problem_id, t.backend), order_by=(t.time_us, t.id))
            .label("rank")
        )
        ranked = (
            select(t.id.label("trial_id"), rank)
            .join(current, on_current)
            .where(*conds, is_ok, t.time_us.is_not(None))
            .subquery("ranked")
        )
        best_stmt = trial_query().join(ranked, ranked.c.trial_id == t.id).where(ranked.c.rank == 1)
        with self._session() as session:
            counts = {(g, p): (int(n), int(ok or 0)) for g, p, n, ok in session.execute(counts_stmt)}
            per_backend = session.execute(best_stmt.order_by(t.id)).all()
            records = trial_records(per_backend)
        groups: dict[tuple[int, int], list[TrialRecord]] = {}
        for row, record in zip(per_backend, records, strict=True):
            groups.setdefault((row[0].gpu_id, row[0].problem_id), []).append(record)
        winners: list[Winner] = []
        for key, candidates in groups.items():
            best = min(candidates, key=lambda r: (r.time_us, r.id))
            vendor = next((r for r in candidates if r.backend == VENDOR_BACKEND), None)
            n, n_ok = counts.get(key, (len(candidates), len(candidates)))
            winners.append(Winner(best.gpu, best.problem, best, vendor, n_ok=n_ok, n_failed=n - n_ok))
        winners.sort(key=lambda w: (w.gpu.id, w.problem))
        return winners
