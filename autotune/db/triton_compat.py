"""What a Triton version accepts of a shipped fused-MoE config: `num_stages` 0 on AMD, by version.

Triton's AMD backend refused ``num_stages=0`` from 3.0 to 3.2 (it asks for at least one stage) and
compiles it again for gfx942 and gfx950 from 3.3 on (one stage); NVIDIA takes it in every version. The
version asked about is the installed Triton's where one is installed, else the one the file names (its
``triton_version`` key, or SGLang's ``triton_X_Y_Z`` folder); with none known nothing is flagged. A test
compiles ``num_stages=0`` for gfx942 with the installed Triton and checks it against this table.
"""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["NUM_STAGES_0_REJECTED", "installed_triton", "num_stages_0_rejected", "parse_version"]

#: Triton versions [from, to) whose AMD backend rejects num_stages=0.
NUM_STAGES_0_REJECTED: tuple[tuple[int, int], tuple[int, int]] = ((3, 0), (3, 3))

_DISTRIBUTIONS = ("triton", "pytorch-triton-rocm", "pytorch-triton")
_VERSION_RE = re.compile(r"(\d+)[._](\d+)")


def installed_triton() -> str | None:
    """The version of the installed Triton (any of its distributions), None if none is installed."""
    for dist in _DISTRIBUTIONS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def parse_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of "3.5.0", "3.5.x", "3_4_0" or "triton_3_4_0"; None if it names none."""
    found = _VERSION_RE.search(text or "")
    return (int(found[1]), int(found[2])) if found else None


def num_stages_0_rejected(version: tuple[int, int] | None) -> bool:
    """Whether Triton `version` rejects num_stages=0 on AMD (False for an unknown version)."""
    if version is None:
        return False
    low, high = NUM_STAGES_0_REJECTED
    return low <= version < high
