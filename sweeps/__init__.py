"""Sweeps: the spec format (what to tune) and the orchestration that runs a spec through the Runner."""

from __future__ import annotations

from autotune.sweeps.run import SweepReport, plan, predict_sweep, run_sweep
from autotune.sweeps.spec import SpecError, SweepEntry, SweepSpec, load_spec, parse_spec, spec_from_untuned

__all__ = [
    "SpecError",
    "SweepEntry",
    "SweepReport",
    "SweepSpec",
    "load_spec",
    "parse_spec",
    "plan",
    "predict_sweep",
    "run_sweep",
    "spec_from_untuned",
]
