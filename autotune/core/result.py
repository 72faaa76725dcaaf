"""Trial statuses and results: a failed configuration is a value, not an exception."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from autotune.core.config import Config

__all__ = ["Source", "Timing", "TrialResult", "TrialStatus", "root_cause"]


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of `exc`'s cause chain: a compile error inside a nested @triton.jit
    function arrives as a chain whose outer links only point at call sites."""
    for _ in range(16):
        if exc.__cause__ is None:
            break
        exc = exc.__cause__
    return exc


class TrialStatus(str, enum.Enum):
    """What became of one (problem, config) trial."""

    OK = "ok"
    PRUNED = "pruned"  # removed before any GPU time, with a reason
    COMPILE_ERROR = "compile_error"
    OUT_OF_RESOURCES = "out_of_resources"  # shared memory / registers / device memory
    WRONG_RESULT = "wrong_result"  # failed the correctness gate (including NaN or unwritten output)
    RUNTIME_ERROR = "runtime_error"  # any other error raised while launching
    CRASHED = "crashed"  # the worker process died
    TIMEOUT = "timeout"

    @property
    def failed(self) -> bool:
        return self is not TrialStatus.OK


#: The name of an op's vendor baseline (torch.mm: cuBLAS, hipBLASLt; torch._scaled_mm), the backend every
#: winner is compared with: the op's library backend of this name (`autotune.core.registry.is_vendor`).
VENDOR_BACKEND = "torch"


class Source(str, enum.Enum):
    """Where a stored result came from; never mixed when picking winners."""

    MEASURED = "measured"
    MODEL = "model"
    IMPORTED = "imported"
    #: The final round of a search: its finalists and the vendor library timed again head to head, in
    #: interleaved rounds (`Runner`), each stored with the median of its rounds. Picking the fastest of
    #: many noisy single timings favours a config that was timed lucky; the final round's times are
    #: what the emitted table and the export compare.
    FINAL = "final"
    #: A shape family's candidates timed at a ladder of M after its buckets were tuned
    #: (`autotune.sweeps.profile`), the way they run when served: what `autotune emit` builds M ranges from.
    PROFILE = "profile"


@dataclass(frozen=True)
class Timing:
    """Statistics of the timed runs of one launch, in microseconds."""

    median_us: float
    min_us: float
    p20_us: float
    p80_us: float
    mean_us: float
    std_us: float
    runs: int
    method: str  # "events", "graph" or "wallclock"

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: relative spread of the runs."""
        return (self.p80_us - self.p20_us) / self.median_us if self.median_us > 0 else 0.0


@dataclass(frozen=True)
class TrialResult:
    """The outcome of one trial. `time_us` is the median for OK trials and None otherwise."""

    config: Config
    status: TrialStatus
    timing: Timing | None = None
    rel_error: float | None = None
    error: str = ""
    compile_s: float = 0.0
    measure_s: float = 0.0
    cached: bool = False  # True when read back from the database instead of run
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def time_us(self) -> float | None:
        return self.timing.median_us if self.timing is not None and self.ok else None

    def score(self) -> float:
        """The value strategies minimise: the median time, or +inf for any failure."""
        t = self.time_us
        return t if t is not None else float("inf")
