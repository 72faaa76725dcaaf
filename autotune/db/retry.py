"""Retries: a Store's writes tried again with back-off through a transient database outage."""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy.exc import DBAPIError, OperationalError

from .engine import StoreError, error_cause

__all__ = ["RETRY_DELAYS_S", "RETRY_ENV", "retry_budget_s", "retrying", "transient"]

logger = logging.getLogger(__name__)
#: Waits, in seconds, before each retry of a write that failed with a transient database error (a
#: dropped connection, a server restarting, SQLite locked past its busy timeout).
RETRY_DELAYS_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
#: Environment variable overriding the retry budget (`retry_budget_s`), in seconds.
RETRY_ENV = "AUTOTUNE_RETRY_S"
_RETRY_BUDGET_S = 60.0

_F = TypeVar("_F", bound=Callable[..., Any])


def retry_budget_s() -> float:
    """Seconds a Store keeps retrying through one outage, all its calls together (60 by default,
    ``$AUTOTUNE_RETRY_S`` to change it)."""
    try:
        value = float(os.environ.get(RETRY_ENV, "") or _RETRY_BUDGET_S)
    except ValueError:
        return _RETRY_BUDGET_S
    return value if value >= 0 else _RETRY_BUDGET_S


#: Driver messages of operational errors that no retry cures.
_PERMANENT = ("database or disk is full", "readonly database", "disk i/o error", "no such table")


def transient(exc: StoreError) -> bool:
    """Whether a failed write may succeed if tried again (the connection or a lock, not the data, and not
    a full disk or a read-only file)."""
    cause = exc.__cause__
    if isinstance(cause, DBAPIError) and cause.connection_invalidated:
        return True
    if not isinstance(cause, OperationalError):
        return False
    return not any(text in error_cause(cause).lower() for text in _PERMANENT)


def retrying(method: _F) -> _F:
    """Retries `method` with back-off (`retry_delays_s`) on transient database errors, within one budget
    per outage shared by all the Store's calls (`retry_budget_s`): once an outage has lasted that long,
    every call tries once and raises, so that giving up (the data write, the heartbeat, the write that
    marks the sweep failed) takes about the budget in all. Safe for the Store's writes: each is one
    transaction, rolled back on error, and idempotent on its key."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        for delay in (*self.retry_delays_s, None):
            try:
                out = method(self, *args, **kwargs)
            except StoreError as exc:
                if not transient(exc):
                    raise
                now = time.monotonic()
                since = getattr(self, "_outage_since", None)
                if since is None:
                    since = now
                    if hasattr(self, "_outage_since"):
                        self._outage_since = now
                left = since + getattr(self, "retry_budget_s", math.inf) - now
                if delay is None or left <= 0:
                    raise
                logger.info("%s; retrying in %g s", exc, min(delay, left))
                time.sleep(min(delay, left))
            else:
                if hasattr(self, "_outage_since"):
                    self._outage_since = None
                return out
        raise AssertionError("unreachable")  # pragma: no cover

    return cast(_F, wrapped)
