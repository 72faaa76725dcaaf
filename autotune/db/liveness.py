"""Whether a sweep is alive: its heartbeat, its lease on the problems it holds, and its process.

Rules. A running sweep writes a heartbeat every `heartbeat_s()` seconds (10 by default,
``$AUTOTUNE_HEARTBEAT_S`` to change it); the lease on each problem it holds runs `lease_s()` from its
last heartbeat (4.5 heartbeats), after which any process of the same sweep takes the problem over. A
sweep marked running reads ``interrupted`` where it ran on this host and its process is gone, and
``stale`` elsewhere once its heartbeat is older than `stale_after_s()` (also 4.5 heartbeats: under a
minute by default). Hosts' clocks are taken to agree within a few seconds.
"""

from __future__ import annotations

import functools
import os
import socket

__all__ = ["HEARTBEAT_ENV", "HOST_ENV", "heartbeat_s", "host", "lease_s", "pid_alive", "stale_after_s"]

#: Environment variable overriding the heartbeat interval, in seconds.
HEARTBEAT_ENV = "AUTOTUNE_HEARTBEAT_S"
#: Environment variable naming this host where its hostname does not tell it apart (containers).
HOST_ENV = "AUTOTUNE_HOST"
_DEFAULT_HEARTBEAT_S = 10.0
#: Missed heartbeats after which a lease runs out and a sweep of another host reads stale.
_MISSED = 4.5


def heartbeat_s() -> float:
    """Seconds between two heartbeats of a running sweep (positive)."""
    try:
        value = float(os.environ.get(HEARTBEAT_ENV, "") or _DEFAULT_HEARTBEAT_S)
    except ValueError:
        return _DEFAULT_HEARTBEAT_S
    return value if 0 < value < 3600 else _DEFAULT_HEARTBEAT_S


def lease_s() -> float:
    """Seconds a claim on a problem lasts after its holder's last heartbeat."""
    return _MISSED * heartbeat_s()


def stale_after_s() -> float:
    """Seconds without a heartbeat after which a running sweep of another host reads stale."""
    return _MISSED * heartbeat_s()


@functools.cache
def host() -> str:
    """This host's name, as `trials.host` and `sweeps.host` record it: ``$AUTOTUNE_HOST``, else its
    hostname. Processes that share a name must share a process table (pids are checked by it)."""
    return os.environ.get(HOST_ENV, "").strip() or socket.gethostname()


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True
