"""The spec a sweep runs, where the command line shapes it: --untuned's logged shapes, --profile-m."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.common import CliError

if TYPE_CHECKING:
    import argparse

    from autotune.core.target import Target
    from autotune.sweeps import SweepSpec


def with_profile_m(spec: SweepSpec, text: str) -> SweepSpec:
    """`spec` with every entry's profile_m set from --profile-m."""
    from autotune.core.ladder import SERVING, parse_ladder

    if text.strip().lower() == SERVING:
        value: str | tuple[int, ...] = SERVING
    else:
        try:
            value = parse_ladder(text, max_m=1)
        except ValueError as exc:
            raise CliError(f"--profile-m: {exc}") from None
    entries = tuple(dataclasses.replace(e, profile_m=value) for e in spec.entries)
    return dataclasses.replace(spec, entries=entries)


def untuned_spec(args: argparse.Namespace, target: Target) -> SweepSpec:
    """A spec of the shapes autotune.kernels logged as untuned on `target` (--untuned LOG, else the
    default log), with --strategy and --trials (default optuna, 60 trials per shape). Shapes logged by a
    process that ran on no GPU (no device key) are not `target`'s: they are left out, and said so."""
    from autotune.dispatch import read_untuned_log, untuned_log_path
    from autotune.sweeps import SpecError, spec_from_untuned

    log_path = args.untuned or str(untuned_log_path())
    if not Path(log_path).is_file():
        raise CliError(f"{log_path}: no untuned-shapes log there (autotune.kernels writes it)")
    records = read_untuned_log(log_path)
    keyed = [r for r in records if r.get("device_key")]
    unkeyed = len(records) - len(keyed)
    note = (
        f"{unkeyed} logged shape{'s' * (unkeyed != 1)} came from a process that ran on no GPU (no device "
        "key) and are left out: they were not served on this GPU; tune such shapes from a spec"
    )
    try:
        spec = spec_from_untuned(
            keyed,
            device_key=target.device_key(),
            strategy=args.strategy or "optuna",
            trials=args.trials or 60,
            source=log_path,
        )
    except SpecError as exc:
        raise CliError(f"{exc}" + (f"; {note}" if unkeyed else "")) from None
    if unkeyed:
        print(f"note: {note}")
    return spec
