"""Sweeps: the spec format (what to tune), model catalogs (model, TP, EP → shapes) and the orchestration that
runs a spec through the Runner."""

from __future__ import annotations

from autotune.sweeps.catalog import M_PRESETS, MODELS, ModelSpec, model_problems
from autotune.sweeps.estimate import plan
from autotune.sweeps.run import SweepReport, predict_sweep, run_sweep
from autotune.sweeps.spec import SpecError, SweepEntry, SweepSpec, load_spec, parse_spec, spec_from_untuned

__all__ = [
    "MODELS",
    "M_PRESETS",
    "ModelSpec",
    "SpecError",
    "SweepEntry",
    "SweepReport",
    "SweepSpec",
    "load_spec",
    "model_problems",
    "parse_spec",
    "plan",
    "predict_sweep",
    "run_sweep",
    "spec_from_untuned",
]
