"""SweepLog: the sweeps' rows: started, kept alive, finished, listed."""

from __future__ import annotations

import os
from datetime import timedelta

from sqlalchemy import func, select, update

from autotune.core.target import Target

from .database import Database
from .engine import StoreError
from .liveness import host as _host
from .liveness import lease_s, pid_alive
from .models import SWEEP_STATUSES, ClaimModel, GpuModel, SweepModel, TrialModel, utcnow
from .records import SweepRecord
from .retry import retrying
from .unclosed import Unclosed, forget_unclosed, read_unclosed

__all__ = ["SweepLog"]


class SweepLog(Database):
    """The sweeps' rows: one per run of a spec on one host, process and GPU, with its status, heartbeat,
    progress counts and, once it ended, its end.

    A sweep is "running" from `start_sweep` until `finish_sweep` ends it; `touch_sweep` is its heartbeat,
    which also renews the leases of the problems it holds (`Claims`). Sweeps left "running" by a process
    of this host that no longer exists are closed by the next `start_sweep` of the host. Each call is
    one transaction; the writes are retried through a transient outage (`autotune.db.retry`).
    """

    @retrying
    def start_sweep(
        self,
        name: str,
        spec_text: str,
        target: Target,
        *,
        problems_total: int | None = None,
        workers: int | None = None,
        log_path: str | None = None,
    ) -> int:
        """Records a sweep as running on this host (this process) and `target`; returns its id.

        Sweeps of this host left "running" by a process that no longer exists are closed first: "failed"
        with its reason where the process could not write its end (the database was lost:
        `autotune.db.unclosed`), else "interrupted" (killed with -9, a power cut)."""

        gpu = self.gpu_id(target)
        now = utcnow()
        unclosed = read_unclosed(self.url)
        closed: dict[int, Unclosed | None] = {}
        with self._session(write=True) as session:
            for row in session.scalars(
                select(SweepModel).where(SweepModel.host == _host(), SweepModel.status == "running")
            ):
                if row.pid is not None and row.pid != os.getpid() and not pid_alive(row.pid):
                    ending = closed[row.id] = unclosed.get(row.id)
                    row.status = ending.status if ending else "interrupted"
                    row.error = ending.error if ending else None
                    row.finished_at = row.heartbeat_at or now
            row = SweepModel(name=name, spec_text=spec_text, host=_host(), status="running", gpu_id=gpu,
                             pid=os.getpid(), heartbeat_at=now, problems_total=problems_total,
                             problems_done=0, trials_done=0, workers=workers, log_path=log_path)  # fmt: skip
            session.add(row)
            session.flush()
            sweep_id = int(row.id)
        forget_unclosed(self.url, {i: end for i, end in closed.items() if end is not None})
        return sweep_id

    @retrying
    def touch_sweep(
        self, sweep_id: int, *, trials_done: int | None = None, problems_done: int | None = None
    ) -> None:
        """The sweep's heartbeat (now) and progress counts; the leases of the problems it holds run
        `lease_s()` from now."""
        with self._session(write=True) as session:
            row = session.get(SweepModel, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._display_url}")
            now = row.heartbeat_at = utcnow()
            if trials_done is not None:
                row.trials_done = trials_done
            if problems_done is not None:
                row.problems_done = problems_done
            c = ClaimModel
            session.execute(
                update(c)
                .where(c.sweep_id == sweep_id, c.done.is_(False))
                .values(lease_until=now + timedelta(seconds=lease_s()))
            )

    @retrying
    def finish_sweep(self, sweep_id: int, status: str = "finished", error: str | None = None) -> None:
        """Marks a sweep finished, interrupted or failed (with `error`, its reason), and releases the
        problems it still holds (they are free for the other processes of its work at once). Raises
        StoreError for an unknown id."""
        if status not in SWEEP_STATUSES:
            raise ValueError(f"unknown sweep status {status!r}; known: {', '.join(SWEEP_STATUSES)}")
        with self._session(write=True) as session:
            row = session.get(SweepModel, sweep_id)
            if row is None:
                raise StoreError(f"no sweep with id {sweep_id} in {self._display_url}")
            row.status = status
            row.error = error
            now = row.finished_at = row.heartbeat_at = utcnow()
            c = ClaimModel  # what it still holds is free for the others at once
            session.execute(
                update(c).where(c.sweep_id == sweep_id, c.done.is_(False)).values(lease_until=now)
            )

    def sweeps(self, *, limit: int = 20, status: str | None = None) -> list[SweepRecord]:
        """The latest `limit` sweeps of every host, newest first (only those of `status` if given)."""
        query = (
            select(SweepModel, GpuModel.name, GpuModel.fingerprint)
            .join(GpuModel, GpuModel.id == SweepModel.gpu_id)
            .order_by(SweepModel.id.desc())
            .limit(limit)
        )
        if status is not None:
            query = query.where(SweepModel.status == status)
        with self._session() as session:
            found = list(session.execute(query))
            stored = dict(
                session.execute(
                    select(TrialModel.sweep_id, func.count())
                    .where(TrialModel.sweep_id.in_([r.id for r, _, _ in found]))
                    .group_by(TrialModel.sweep_id)
                ).all()
            )
            return [
                SweepRecord(
                    id=r.id,
                    name=r.name,
                    host=r.host,
                    status=r.status,
                    gpu=gpu,
                    started_at=r.started_at,
                    finished_at=r.finished_at,
                    heartbeat_at=r.heartbeat_at,
                    pid=r.pid,
                    problems_total=r.problems_total,
                    problems_done=r.problems_done,
                    trials_done=stored.get(r.id, r.trials_done),  # the rows: a sweep's last moments too
                    workers=r.workers,
                    log_path=r.log_path,
                    gpu_fingerprint=fingerprint,
                    spec_text=r.spec_text,
                    pid_alive=(
                        pid_alive(r.pid)
                        if r.host == _host() and r.pid is not None and r.status == "running"
                        else None
                    ),
                    error=r.error,
                )
                for r, gpu, fingerprint in found
            ]
