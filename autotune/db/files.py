"""Files the exporters write: whole or not at all."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .store import StoreError

__all__ = ["write_atomically"]


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a temporary file beside `path`, which then replaces `path` in one step; on an OS error
    the temporary file is removed and StoreError names `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
