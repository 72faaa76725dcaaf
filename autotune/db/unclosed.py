"""Sweep ends that could not be written: a sweep whose database was lost cannot mark its own row
"failed"; it leaves the end here, on its host, and the next sweep of that host against the same database
writes it (`Store.start_sweep`).

One small JSON file per sweep, in $AUTOTUNE_UNCLOSED_DIR, else $XDG_CACHE_HOME/autotune/unclosed, else
~/.cache/autotune/unclosed, named by the database URL's digest and the sweep id. Writing one never raises
(a sweep that is already failing reports its own error); a file that cannot be read is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_VAR", "Unclosed", "forget_unclosed", "leave_unclosed", "read_unclosed", "unclosed_dir"]

ENV_VAR = "AUTOTUNE_UNCLOSED_DIR"


@dataclass(frozen=True)
class Unclosed:
    """The end of sweep `sweep_id` that its process could not write."""

    sweep_id: int
    status: str
    error: str | None


def unclosed_dir() -> Path:
    """Where the ends wait (module docstring)."""
    chosen = os.environ.get(ENV_VAR, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "autotune" / "unclosed"


def _prefix(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def leave_unclosed(url: str, sweep_id: int, status: str, error: str | None) -> None:
    """Keeps the end of sweep `sweep_id` of the database at `url` for the next sweep of this host."""
    with contextlib.suppress(OSError):
        folder = unclosed_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_prefix(url)}-{sweep_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"sweep_id": sweep_id, "status": status, "error": error}))
        os.replace(tmp, path)


def read_unclosed(url: str) -> dict[int, Unclosed]:
    """The ends waiting for the database at `url`, by sweep id."""
    out: dict[int, Unclosed] = {}
    folder = unclosed_dir()
    if not folder.is_dir():
        return out
    for path in folder.glob(f"{_prefix(url)}-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            end = Unclosed(int(data["sweep_id"]), str(data["status"]), data.get("error"))
            out[end.sweep_id] = end
    return out


def forget_unclosed(url: str, ends: dict[int, Unclosed]) -> None:
    """Removes the ends of `ends` (written to the database now)."""
    for sweep_id in ends:
        with contextlib.suppress(OSError):
            (unclosed_dir() / f"{_prefix(url)}-{sweep_id}.json").unlink()
