"""Queries: reading the stored trials, GPUs and counts (what the CLI's verbs show)."""

from __future__ import annotations

from sqlalchemy import case, func, select

from autotune.core.problem import Problem
from autotune.core.registry import rules_of
from autotune.core.result import Source, TrialStatus

from .convert import gpu_record, trial_records
from .database import Database
from .models import SCHEMA_VERSION, GpuModel, KernelModel, ProblemModel, SweepModel, TrialModel
from .records import GpuRecord, GpuSummary, Holdings, Summary, TrialRecord
from .rows import trial_query

__all__ = ["Queries"]


class Queries(Database):
    """Read-only queries over the trials, GPUs, kernels, problems and sweeps.

    A GPU is named by its fingerprint or a unique prefix of it (at least `MIN_PREFIX` characters); a
    prefix too short or ambiguous is a ValueError, one that names no stored GPU gives nothing. Each call
    reads in one transaction and returns records (`autotune.db.records`), never SQLAlchemy objects.
    """

    def best(
        self,
        problem: Problem,
        *,
        fingerprint: str | None = None,
        limit: int = 5,
        source: Source | None = Source.MEASURED,
    ) -> list[TrialRecord]:
        """The fastest OK trials of `problem` (of every kernel version), fastest first.

        `fingerprint` (or a prefix of at least 6 characters) restricts them to one GPU; `source` None
        takes every source.
        """
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == [] or limit <= 0:
            return []
        stmt = trial_query().where(
            ProblemModel.key == problem.key(),
            TrialModel.status == TrialStatus.OK.value,
            TrialModel.time_us.is_not(None),
        )
        if gpu_ids is not None:
            stmt = stmt.where(TrialModel.gpu_id.in_(gpu_ids))
        if source is not None:
            stmt = stmt.where(TrialModel.source == Source(source).value)
        stmt = stmt.order_by(TrialModel.time_us, TrialModel.id).limit(limit)
        with self._session() as session:
            return trial_records(session.execute(stmt))

    def trials(
        self,
        *,
        fingerprint: str | None = None,
        problem: Problem | None = None,
        status: TrialStatus | None = None,
        source: Source | None = None,
    ) -> list[TrialRecord]:
        """Stored trials, oldest first, filtered by GPU (fingerprint or prefix), problem, status, source.

        The imported trials (`source` IMPORTED) of a `problem` include those of its op's `unknown_twin`
        (a fused MoE's vLLM file whose K and top-k were unknown: it fits several models), which count for
        every problem of that family; their problem says so."""
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        stmt = trial_query()
        if gpu_ids is not None:
            stmt = stmt.where(TrialModel.gpu_id.in_(gpu_ids))
        twin = None
        if problem is not None and source is not None and Source(source) is Source.IMPORTED:
            twin = rules_of(problem.op).unknown_twin(problem)
        if problem is not None and twin is not None:
            stmt = stmt.where(ProblemModel.key.in_([problem.key(), twin.key()]))
        elif problem is not None:
            stmt = stmt.where(ProblemModel.key == problem.key())
        if status is not None:
            stmt = stmt.where(TrialModel.status == TrialStatus(status).value)
        if source is not None:
            stmt = stmt.where(TrialModel.source == Source(source).value)
        with self._session() as session:
            return trial_records(session.execute(stmt.order_by(TrialModel.id)))

    def trial_costs(
        self, fingerprint: str | None = None
    ) -> list[tuple[str, str, str, int, int, float, float]]:
        """What the trials cost, per (GPU fingerprint, op, source): (fingerprint, op, source, trials, OK
        trials, compile seconds, measure seconds), ordered by GPU, op and source."""
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids == []:
            return []
        t = TrialModel
        stmt = (
            select(
                GpuModel.fingerprint,
                ProblemModel.op,
                t.source,
                func.count(),
                func.sum(case((t.status == TrialStatus.OK.value, 1), else_=0)),
                func.sum(t.compile_s),
                func.sum(t.measure_s),
            )
            .join(GpuModel, GpuModel.id == t.gpu_id)
            .join(ProblemModel, ProblemModel.id == t.problem_id)
            .group_by(GpuModel.fingerprint, ProblemModel.op, t.source)
            .order_by(GpuModel.fingerprint, ProblemModel.op, t.source)
        )
        if gpu_ids is not None:
            stmt = stmt.where(t.gpu_id.in_(gpu_ids))
        with self._session() as session:
            return [
                (str(fp), str(op), str(src), int(n), int(ok or 0), float(c or 0.0), float(m or 0.0))
                for fp, op, src, n, ok, c, m in session.execute(stmt)
            ]

    def problem_ops(self) -> list[str]:
        """The ops of the stored problems, by name (sorted)."""
        with self._session() as session:
            return sorted(str(op) for op in session.scalars(select(ProblemModel.op).distinct()))

    def gpus(self) -> list[GpuRecord]:
        """Every stored GPU, in the order they were first seen."""
        with self._session() as session:
            return [gpu_record(row) for row in session.scalars(select(GpuModel).order_by(GpuModel.id))]

    def summary(self) -> Summary:
        """Counts over the whole database."""
        t = TrialModel
        is_ok = t.status == TrialStatus.OK.value
        with self._session() as session:
            n_gpus = session.scalar(select(func.count()).select_from(GpuModel)) or 0
            n_problems = session.scalar(select(func.count()).select_from(ProblemModel)) or 0
            n_kernels = session.scalar(select(func.count()).select_from(KernelModel)) or 0
            sweeps = session.execute(select(SweepModel.status, func.count()).group_by(SweepModel.status))
            by_status = session.execute(select(t.status, func.count()).group_by(t.status))
            by_source = session.execute(select(t.source, func.count()).group_by(t.source))
            per_gpu_rows = session.execute(
                select(
                    t.gpu_id,
                    func.count(),
                    func.sum(case((is_ok, 1), else_=0)),
                    # problems tuned: a profile's problems (its ladder's M) are not tuned ones
                    func.count(
                        func.distinct(
                            case((is_ok & (t.source != Source.PROFILE.value), t.problem_id), else_=None)
                        )
                    ),
                ).group_by(t.gpu_id)
            )
            per_gpu_counts = {g: (int(n), int(ok or 0), int(p)) for g, n, ok, p in per_gpu_rows}
            gpu_rows = [gpu_record(row) for row in session.scalars(select(GpuModel).order_by(GpuModel.id))]
            return Summary(
                url=self._display_url,
                schema_version=SCHEMA_VERSION,
                n_gpus=int(n_gpus),
                n_problems=int(n_problems),
                n_kernels=int(n_kernels),
                sweeps_by_status={s: int(n) for s, n in sweeps},
                trials_by_status={s: int(n) for s, n in by_status},
                trials_by_source={s: int(n) for s, n in by_source},
                per_gpu=tuple(GpuSummary(g, *per_gpu_counts.get(g.id, (0, 0, 0))) for g in gpu_rows),
            )

    def holdings(self, op: str | None = None, *, fingerprint: str | None = None) -> Holdings:
        """How many trials of `op` (None: of every op; on the GPU `fingerprint` names) each source and status
        holds: what a verb that found nothing says the database does hold."""
        t = TrialModel
        stmt = select(t.source, t.status, func.count()).group_by(t.source, t.status)
        if op is not None:  # a subquery, not a join: SQLite would scan the trials once per problem
            stmt = stmt.where(t.problem_id.in_(select(ProblemModel.id).where(ProblemModel.op == op)))
        gpu_ids = self._match_gpus(fingerprint)
        if gpu_ids is not None:
            stmt = stmt.where(t.gpu_id.in_(gpu_ids))
        with self._session() as session:
            counts = {(str(source), str(status)): int(n) for source, status, n in session.execute(stmt)}
        return Holdings(op, counts)

    def match_gpus(self, fingerprint: str) -> list[GpuRecord]:
        """The stored GPUs `fingerprint` names: the one with exactly that fingerprint, else the one it is
        a unique prefix (of at least 6 characters) of; empty when none. ValueError for a prefix that is
        too short or ambiguous."""
        gpu_ids = self._match_gpus(fingerprint) or []
        if not gpu_ids:
            return []
        with self._session() as session:
            rows = session.scalars(select(GpuModel).where(GpuModel.id.in_(gpu_ids)).order_by(GpuModel.id))
            return [gpu_record(row) for row in rows]
