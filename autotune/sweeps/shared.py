"""A sweep shared by processes and hosts: the same spec on the same kind of GPU against one database.

Every process that runs it claims a problem before tuning it (`Store.claim`): one process tunes each
problem, the others take the next one free. A holder's heartbeat keeps its leases alive; the problems of
a holder that died are taken over once its lease runs out (at once on its own host, where its process is
seen gone). A problem is marked done when tuned; a sweep that stops early frees what it holds.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.core.problem import Problem
    from autotune.core.target import Target
    from autotune.db import Store

__all__ = ["WAIT_POLL_S", "SharedWork", "profile_item", "work_key"]

#: How often a process whose problems left are all held elsewhere looks whether one was freed, in seconds.
WAIT_POLL_S = 0.25


def work_key(spec_text: str, target: Target) -> str:
    """The key the processes of one shared sweep agree on: the digest of the spec's text and the GPU's
    fingerprint (a spec run on another kind of GPU is other work)."""
    text = f"{spec_text}\0{target.fingerprint()}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class SharedWork:
    """The claims of one sweep (`sweep_id`) on the items of its work: its problems (by `Problem.key()`)
    and the shape families it profiles (`profile_item`). Thread-safe as the Store is."""

    def __init__(self, store: Store, work: str, sweep_id: int) -> None:
        self.store, self.work, self.sweep_id = store, work, sweep_id

    def claim(self, item: str) -> str:
        """ "claimed" (this sweep runs `item` now), "held" (another live sweep does) or "done"."""
        return self.store.claim(self.work, item, self.sweep_id)

    def claimable(self, items: list[str]) -> list[str]:
        """The items of `items` a claim would now get (read only: `Store.claimable`)."""
        return self.store.claimable(self.work, items, self.sweep_id)

    def done(self, item: str) -> None:
        """`item` is finished: no sweep of this work runs it again."""
        self.store.release(self.work, item, self.sweep_id, done=True)

    def free(self, item: str) -> None:
        """`item` is given back unfinished: another process may take it at once."""
        self.store.release(self.work, item, self.sweep_id, done=False)


def profile_item(family: Problem) -> str:
    """The item of a shared sweep that stands for profiling the shape family `family` (its problem at
    M = 1)."""
    return f"profile:{family.key()}"
