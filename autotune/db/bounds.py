"""What an imported entry may hold: the bounds every value read from another project's file is checked
against before it is stored (`out_of_range`), and the bounded read of such a file (`read_bounded`).

Rules. Problem sizes: 1 <= M <= `MAX_M`, 1 <= N, K <= `MAX_DIM`, and each integer parameter of the
problem's op (the fused MoE's experts and top-k) from 0 to `MAX_PARAM`. Config values: a tile size (a
parameter named ``BLOCK_*`` or ``block_*``) lies from 1 to `MAX_TILE` (one that is no power of two is
stored flagged, as the format's own checks say); any other integer lies within +-`MAX_INT`; a float is
finite. A timing's median is finite, positive and at most `MAX_US`. An entry that breaks one is not
stored (it is reported as skipped with the reason), so it is never exported or served. A file is read
only if it is a regular file (never a FIFO or a device, which could block or never end) of at most
`MAX_BYTES`.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from autotune.core.config import Config
    from autotune.core.problem import Problem

    from .store import NewTrial

__all__ = ["MAX_BYTES", "MAX_DIM", "MAX_INT", "MAX_M", "MAX_PARAM", "MAX_TILE", "MAX_US", "open_bounded",
           "out_of_range", "read_bounded"]  # fmt: skip

#: The largest M (tokens, rows) of an imported problem.
MAX_M = 1 << 24
#: The largest N and K of an imported problem.
MAX_DIM = 1 << 20
#: The largest integer parameter of an imported problem's op (`Problem.extra`: the MoE's experts).
MAX_PARAM = 1 << 12
#: The largest tile size of an imported config.
MAX_TILE = 1 << 10
#: The largest magnitude of any other integer of an imported config.
MAX_INT = 1 << 31
#: The longest imported time, in microseconds (a minute).
MAX_US = 6e7
#: The largest file an import reads.
MAX_BYTES = 1 << 30


def out_of_range(trial: NewTrial) -> str | None:
    """Why `trial` (read from an imported file) holds a value out of bounds; None when all are within."""
    p = trial.problem
    if not (1 <= p.M <= MAX_M and 1 <= p.N <= MAX_DIM and 1 <= p.K <= MAX_DIM) or p.extra:
        why = _size_out_of_range(p)
        if why is not None:
            return why
    why = _config_out_of_range(trial.result.config)
    if why is not None:
        return why
    timing = trial.result.timing
    if timing is not None and not (math.isfinite(timing.median_us) and 0 < timing.median_us <= MAX_US):
        return f"time {timing.median_us:g} us is not a positive time of at most {MAX_US:g} us"
    return None


def _size_out_of_range(p: Problem) -> str | None:
    """Why a size of `p` is out of bounds; None when all are within."""
    sizes: tuple[tuple[str, int, int, int], ...] = (
        ("M", p.M, 1, MAX_M),
        ("N", p.N, 1, MAX_DIM),
        ("K", p.K, 1, MAX_DIM),
        *((name, value, 0, MAX_PARAM) for name, value in p.extra if type(value) is int),
    )
    for name, size, low, high in sizes:
        if not low <= size <= high:
            return f"{name}={_short(size)} is out of range ({low} to {high})"
    return None


@functools.lru_cache(maxsize=1024)
def _config_out_of_range(config: Config) -> str | None:
    """Why `config` holds a value out of bounds; None when all are within (an import's rows share few
    configs: each is checked once)."""
    for key, value in config.items():
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"{key}={value} is not a finite number"
            continue
        if not isinstance(value, int):
            continue
        if key.lower().startswith("block_"):  # not a power of two: flagged by the format's own checks
            if not 1 <= value <= MAX_TILE:
                return f"{key}={_short(value)} is no tile size (1 to {MAX_TILE})"
        elif abs(value) > MAX_INT:
            return f"{key}={_short(value)} is out of range (at most {MAX_INT} in magnitude)"
    return None


def _kind(mode: int) -> str:
    """What a file of `mode` that is no regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode) else "no file"


def _short(value: int) -> str:
    """`value`, or its magnitude where it is too long to show."""
    text = str(value)
    return text if len(text) <= 24 else f"{'-' if value < 0 else ''}~2**{abs(value).bit_length() - 1}"


def open_bounded(path: Path, limit: int = MAX_BYTES) -> BinaryIO:
    """The regular file `path` opened for reading; OSError for anything else (a FIFO, a device, a
    folder: never opened, so never waited on) and for a file of more than `limit` bytes."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"it is {_kind(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    f = os.fdopen(fd, "rb")
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:  # swapped since the check, or too large
        f.close()
        if not stat.S_ISREG(st.st_mode):
            raise OSError("it is not a regular file")
        raise OSError(f"it is larger than the {limit >> 20} MiB an import reads")
    return f


def read_bounded(path: Path, limit: int = MAX_BYTES) -> bytes:
    """The content of the regular file `path` (`open_bounded`), read no further than `limit` bytes."""
    with open_bounded(path, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"it is larger than the {limit >> 20} MiB an import reads")
    return data
