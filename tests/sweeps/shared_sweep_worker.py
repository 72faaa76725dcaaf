"""One process of a shared sweep, for tests/sweeps/test_shared_sweep.py: runs the spec at argv[1]
against the database argv[2] with a fake benchmarker that takes `SECONDS` per trial, appending
``<problem key> <config hash>`` to the file argv[3] as each trial starts (flushed: a process killed
mid-trial leaves its last start there), and prints ``ran <n>`` at the end."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import VENDOR_BACKEND, Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store
from autotune.sweeps import parse_spec, run_sweep

SECONDS = float(os.environ.get("SHARED_TRIAL_S", "0.1"))


class SlowBench:
    """Answers every config OK after `SECONDS`, its time drawn from the config's hash; the vendor
    library's slower than every other's (so a profile times every M it considers)."""

    def __init__(self, starts: Path) -> None:
        self.starts = starts
        self.on_phase: Any = None

    def run(self, problem: Problem, config: Config) -> TrialResult:
        with self.starts.open("a") as f:
            f.write(f"{problem.key()} {config.digest()}\n")
            f.flush()
            os.fsync(f.fileno())
        time.sleep(SECONDS)
        us = 5.0 + int(config.digest()[:6], 16) % 1000 / 100
        if config.backend == VENDOR_BACKEND:
            us = 20.0
        return TrialResult(config, TrialStatus.OK, timing=Timing(us, us, us, us, us, 0.0, 3, "events"))


def main() -> None:
    spec_path, url, starts = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    spec = parse_spec(Path(spec_path).read_text())
    with Store(url) as store:
        report = run_sweep(
            spec, store, Target.interpreter_target(), benchmarker_for=lambda _: SlowBench(starts)
        )
    print(f"ran {report.trials_run}", flush=True)


if __name__ == "__main__":
    main()
