"""Claims: the problems of a sweep shared by processes and hosts, each held by one sweep at a time."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from .database import Database
from .engine import StoreError
from .liveness import host as _host
from .liveness import lease_s, pid_alive
from .models import ClaimModel, SweepModel, utcnow
from .retry import retrying
from .rows import IN_CHUNK

__all__ = ["Claims"]

logger = logging.getLogger(__name__)


class Claims(Database):
    """Claims on the items (problems, shape families) of a shared sweep's work, for one sweep at a time.

    A claim is held under a lease of `lease_s()`, renewed by its sweep's heartbeat (`SweepLog.touch_sweep`)
    and ended by `release` or by the sweep's end; a claim whose lease ran out, or whose holder on this host
    is a process that no longer exists, is taken over by the next `claim`. An item marked done is never
    handed out again. `claim` is atomic across processes and hosts (a row lock, and the unique key of
    (work, item) where two insert at once); its writes are retried through a transient outage.
    """

    @retrying
    def claim(self, work: str, item: str, sweep_id: int) -> str:
        """Claims `item` of the shared sweep `work` for sweep `sweep_id`, with a lease of `lease_s()`.

        Returns "claimed" (now held by `sweep_id`, also when it held it already or took it over from a
        holder whose lease ran out or, on this host, whose process is gone), "held" (another live sweep
        holds it) or "done" (its trials are all stored). Atomic across processes and hosts."""
        c = ClaimModel
        for _ in range(3):
            now = utcnow()
            until = now + timedelta(seconds=lease_s())
            with self._session(write=True) as session:
                row = session.scalar(select(c).where(c.work == work, c.item == item).with_for_update())
                if row is None:
                    session.add(c(work=work, item=item, sweep_id=sweep_id, lease_until=until, done=False,
                                  claimed_at=now))  # fmt: skip
                    try:
                        session.flush()
                    except IntegrityError:
                        session.rollback()  # another process claimed it first: look again
                        continue
                    return "claimed"
                if row.done:
                    return "done"
                if row.sweep_id != sweep_id and _aware(row.lease_until) > now:
                    holder = session.get(SweepModel, row.sweep_id)
                    if holder is None or not _gone(holder):
                        return "held"
                    if holder.status == "running":
                        holder.status = "interrupted"
                        holder.finished_at = holder.heartbeat_at or now
                if row.sweep_id != sweep_id:
                    logger.info("sweep %d takes %s over from sweep %d", sweep_id, item, row.sweep_id)
                    row.claimed_at = now
                row.sweep_id, row.lease_until = sweep_id, until
                return "claimed"
        raise StoreError(f"cannot claim {item} in {self._display_url}")

    def claimable(self, work: str, items: Sequence[str], sweep_id: int) -> list[str]:
        """The items of `items` that `claim` would now give sweep `sweep_id` ("claimed" or "done"): never
        claimed, done, held by it, or held by a sweep whose lease ran out or, on this host, whose process
        is gone. Read only: cheap enough to ask every fraction of a second while waiting."""
        c, sw = ClaimModel, SweepModel
        if not items:
            return []
        rows: dict[str, tuple[bool, int, datetime, SweepModel | None]] = {}
        with self._session() as session:
            for start in range(0, len(items), IN_CHUNK):
                stmt = (
                    select(c.item, c.done, c.sweep_id, c.lease_until, sw)
                    .outerjoin(sw, sw.id == c.sweep_id)
                    .where(c.work == work, c.item.in_(list(items[start : start + IN_CHUNK])))
                )
                for item, done, holder, until, sweep in session.execute(stmt):
                    rows[item] = (bool(done), int(holder), until, sweep)
        now = utcnow()

        def free(row: tuple[bool, int, datetime, SweepModel | None] | None) -> bool:
            if row is None or row[0] or row[1] == sweep_id or _aware(row[2]) <= now:
                return True
            return row[3] is None or _gone(row[3])

        return [item for item in items if free(rows.get(item))]

    @retrying
    def release(self, work: str, item: str, sweep_id: int, *, done: bool) -> None:
        """Gives up `sweep_id`'s claim on `item` of `work`: marked done (never run again by a sweep of this
        work), or free for another process at once. A claim another sweep holds is left alone."""
        c = ClaimModel
        values: dict[str, Any] = {"done": True} if done else {"lease_until": utcnow()}
        with self._session(write=True) as session:
            session.execute(
                update(c).where(c.work == work, c.item == item, c.sweep_id == sweep_id).values(**values)
            )

    def held(self, sweep_ids: Sequence[int]) -> dict[int, list[str]]:
        """The items each sweep of `sweep_ids` holds (not done), by sweep id, in the order claimed."""
        c = ClaimModel
        out: dict[int, list[str]] = {}
        if not sweep_ids:
            return out
        stmt = (
            select(c.sweep_id, c.item)
            .where(c.sweep_id.in_(list(sweep_ids)), c.done.is_(False))
            .order_by(c.claimed_at, c.id)
        )
        with self._session() as session:
            for sweep_id, item in session.execute(stmt):
                out.setdefault(int(sweep_id), []).append(str(item))
        return out


def _gone(sweep: SweepModel) -> bool:
    """Whether `sweep` ran on this host in a process that no longer exists."""
    return sweep.host == _host() and sweep.pid is not None and not pid_alive(sweep.pid)


def _aware(moment: datetime) -> datetime:
    """`moment` as an aware UTC datetime (SQLite hands back naive ones)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
