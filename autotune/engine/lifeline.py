"""Processes that die with the sweep that started them, whatever kills it (kill -9 included).

Every process a sweep starts (its trial workers, its compile processes and their fork server) holds a
lifeline to its parent:

- `die_with_parent()`: on Linux, the kernel sends the process SIGKILL when its parent goes
  (``PR_SET_PDEATHSIG``); it holds even while the process is busy in native code (a compiler, a kernel
  launch) and cannot run Python.
- `watch_parent()`: a daemon thread that ends the process once its parent is gone (its parent process id
  changes), for the cases the kernel's signal does not cover: platforms without it, and a parent thread
  that ends before its process (``PR_SET_PDEATHSIG`` follows the thread that started the child).
- `start_from_main(start)`: starts a child from a thread that lives as long as this process (the main
  thread where the caller is on it, else one kept for the purpose), so that the kernel's signal of the
  child follows the process, not a worker thread that may end first.

- `reap_descendants()`: for processes started by a library this code does not control (a local Ray
  cluster: its agents outlive their raylet by a minute), a small reaper process that kills every
  descendant of this process still alive once this process is gone.

A fork server started by the compile pool is told by `PARENT_ENV` to die with its parent, which it asks for
from `autotune.engine.fork_server`, the first module it imports; it forks the compile processes, which
die with it in turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = [
    "PARENT_ENV",
    "die_with_parent",
    "parent_from_env",
    "reap_descendants",
    "start_from_main",
    "watch_parent",
]

log = logging.getLogger(__name__)

#: Set in the environment a fork server starts with: the process id of the sweep it must die with.
PARENT_ENV = "AUTOTUNE_WATCH_PARENT"
#: How often a watching thread looks at its parent, in seconds.
WATCH_S = 0.25

_PR_SET_PDEATHSIG = 1
_T = TypeVar("_T")


def die_with_parent(parent: int | None = None) -> None:
    """Linux: this process gets SIGKILL when its parent dies; a parent already gone kills it now. `parent`:
    the process id of the parent that started it, where the child knows it (a multiprocessing child:
    `multiprocessing.parent_process().pid`), so that a parent that died before this call (a child slow
    to start, on a busy machine) is caught too; by default the current parent."""
    if not sys.platform.startswith("linux"):
        return
    if parent is None:
        parent = os.getppid()
    elif os.getppid() != parent:  # the parent died before this process could ask for the signal
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(parent: int | None = None, interval_s: float = WATCH_S) -> None:
    """Ends this process (exit code 1, at once) when `parent` (default: the current parent) is no longer
    its parent, checked every `interval_s` seconds on a daemon thread."""
    expected = os.getppid() if parent is None else parent
    if os.getppid() != expected:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != expected:
                os._exit(1)

    threading.Thread(target=watch, name="autotune-lifeline", daemon=True).start()


_keeper: list[ThreadPoolExecutor] = []
_keeper_lock = threading.Lock()


def start_from_main(start: Callable[[], _T]) -> _T:
    """`start()` (which starts a child process) run on the main thread if this is it, else on a thread
    kept for the life of this process; its result, or its exception."""
    if threading.current_thread() is threading.main_thread():
        return start()
    with _keeper_lock:
        if not _keeper:
            _keeper.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-spawner"))
        pool = _keeper[0]
    return pool.submit(start).result()


def parent_from_env() -> None:
    """In a fork server: die with the parent named by `PARENT_ENV` (the kernel's signal: the server waits
    in native code, and must start no thread since it forks), or now where that parent is gone already."""
    wanted = os.environ.get(PARENT_ENV, "")
    with contextlib.suppress(ValueError):
        if wanted and int(wanted) != os.getppid():  # the sweep died while this server started
            os._exit(1)
        if wanted:
            die_with_parent()


#: The reaper: reads lists of "pid start-time" lines (each list ended by "."), and once its input ends (its
#: parent is gone) kills every process of the last list that still runs with the same start time (a
#: process id reused meanwhile is left alone).
_REAPER = """
import os, signal, sys
def start(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None
known, batch = {}, {}
for line in sys.stdin:
    line = line.strip()
    if line == ".":
        known, batch = batch, {}
    elif line:
        pid, began = line.split()
        batch[int(pid)] = began
for pid, began in known.items():
    if pid != os.getpid() and start(pid) == began:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""
#: How often the reaper is told the descendants of this process, in seconds.
REAP_EVERY_S = 1.0


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, start time) of every live descendant of `root`, read from /proc."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = (int(fields[1]), fields[19])
    out, frontier = [], {root}
    while frontier:
        found = [(pid, began) for pid, (ppid, began) in parents.items() if ppid in frontier]
        out.extend(found)
        frontier = {pid for pid, _ in found}
    return out


def reap_descendants() -> None:
    """Starts the reaper (Linux; once per process): every `REAP_EVERY_S` it is told the descendants of
    this process, and once this process is gone (kill -9 included) it kills those still alive."""
    import subprocess

    if not sys.platform.startswith("linux") or _reaper:
        return
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _REAPER], stdin=subprocess.PIPE, start_new_session=True, text=True
    )
    _reaper.append(proc)
    me = os.getpid()

    def tell() -> None:
        assert proc.stdin is not None
        while True:
            lines = [f"{pid} {began}" for pid, began in _descendants(me) if pid != proc.pid]
            try:
                proc.stdin.write("\n".join([*lines, "."]) + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                return
            time.sleep(REAP_EVERY_S)

    threading.Thread(target=tell, name="autotune-reaper", daemon=True).start()


_reaper: list[object] = []
