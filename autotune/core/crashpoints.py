"""Crash points: named places where a test can kill this process with SIGKILL, the way SQLite's tests
inject faults at every write.

Production code marks the places where a crash would matter (`point("db.commit")` before a transaction
commits, `point("trial.measured")` after a measurement and before it is stored, ...). Unless armed they
cost one global read. Two environment variables arm them, read once per process:

- `AUTOTUNE_CRASH_AT`: ``NAME:N`` kills the process at the N-th time (from 1) a point named NAME is
  passed; ``*:N`` at the N-th point of any name. Several, comma-separated: the first reached kills.
- `AUTOTUNE_CRASH_JOURNAL`: a file to which every point passed appends a line ``NAME<TAB>DETAIL`` (the
  killing one included, before the kill), so that a harness can count the points of a run and tell what
  ran twice.

Thread-safe: points are counted under a lock, so with several threads the N-th point is one point.
Child processes (trial workers, compile processes) inherit the variables but pass no points: only the
sweep's own process marks them.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["CRASH_ENV", "JOURNAL_ENV", "armed", "point"]

CRASH_ENV = "AUTOTUNE_CRASH_AT"
JOURNAL_ENV = "AUTOTUNE_CRASH_JOURNAL"


class _Armed:
    def __init__(self, spec: str, journal: str) -> None:
        self.at: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, n = part.rpartition(":")
            if not name or not n.isdigit() or int(n) < 1:
                raise ValueError(f"{CRASH_ENV}: expected NAME:N with N >= 1, got {part!r}")
            self.at[name] = int(n)
        self.seen: dict[str, int] = {}
        self.total = 0
        self.journal = journal
        self.lock = threading.Lock()

    def passed(self, name: str, detail: str) -> None:
        with self.lock:
            self.total += 1
            count = self.seen[name] = self.seen.get(name, 0) + 1
            if self.journal:
                line = f"{name}\t{detail}".replace("\n", " ") + "\n"
                fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            if self.at.get(name) == count or self.at.get("*") == self.total:
                os.kill(os.getpid(), signal.SIGKILL)


_state: list[_Armed | None] = []


def armed() -> bool:
    """Whether this process has crash points armed (or journaled)."""
    if not _state:
        spec, journal = os.environ.get(CRASH_ENV, ""), os.environ.get(JOURNAL_ENV, "")
        _state.append(_Armed(spec, journal) if spec or journal else None)
    return _state[0] is not None


def point(name: str, detail: str = "") -> None:
    """A crash point: nothing unless armed (module docstring); else journaled, and the process killed
    with SIGKILL if this is the point asked for."""
    if _state and _state[0] is None:
        return
    if armed():
        state = _state[0]
        assert state is not None
        state.passed(name, detail)
