"""The profile's plans made on a thread, one family after another, while the families before are timed.

For each family in order, `PlansAhead` makes its plan (`autotune.sweeps.profile.family_plan`, which
compiles nothing) and queues the compiles its profile will need on the compile pool (`prefetch_family`):
the first family's profile starts once its own plan is made, and the pool works through the families'
compiles in the order they are timed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.engine.runner import SweepStopped
from autotune.sweeps.profile import FamilyProfile, Plan, family_plan, prefetch_family

if TYPE_CHECKING:
    from autotune.engine.checker import StaticChecker
    from autotune.engine.runner import TrialStore

__all__ = ["PlansAhead"]

log = logging.getLogger(__name__)


class PlansAhead:
    """Plans `jobs`' profiles on a background thread, in order (the module's rule); `wait(job)` returns a
    family's plan once it is made. A failure to plan a family is raised by `wait` for that family."""

    def __init__(
        self, jobs: Sequence[FamilyProfile], *, store: TrialStore, target: Target, checker: StaticChecker
    ) -> None:
        self._store = store
        self._target = target
        self._checker = checker
        self._plans: dict[Problem, tuple[Plan, int] | BaseException] = {}
        self._ready = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._plan_all, args=(list(jobs),), name="profile-plans", daemon=True
        )
        self._thread.start()

    def _plan_all(self, jobs: list[FamilyProfile]) -> None:
        for job in jobs:
            if self._closed.is_set():
                return
            made: tuple[Plan, int] | BaseException
            try:
                made = family_plan(job, store=self._store, target=self._target)
                prefetch_family(job.op, made[0], self._checker)
            except Exception as exc:  # raised where the family's plan is asked for
                log.debug("planning the profile of %s failed: %s", job.family, exc)
                made = exc
            with self._ready:
                self._plans[job.family] = made
                self._ready.notify_all()

    def wait(self, job: FamilyProfile, should_stop: Callable[[], bool] = lambda: False) -> tuple[Plan, int]:
        """`job`'s plan and how many candidates it left out (`family_plan`'s), once made; SweepStopped
        when `should_stop` says so first."""
        with self._ready:
            while job.family not in self._plans:
                if should_stop() or self._closed.is_set():
                    raise SweepStopped
                self._ready.wait(0.5)
            made = self._plans[job.family]
        if isinstance(made, BaseException):
            raise made
        return made

    def close(self) -> None:
        """Stops planning after the family being planned (its compiles finish on the pool)."""
        self._closed.set()
        self._thread.join(timeout=60)
