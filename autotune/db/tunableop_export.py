"""`export --format tunableop`: the stored TunableOp solutions as the results files PyTorch reads.

One file per device and validator set, ``tunableop_results_device_name={device}.csv`` (a second set of
validators on one device: ``..._2.csv``): the Validator lines TunableOp wrote where it tuned (they must
match the reading process's, or PyTorch refuses the whole file), then one line per GEMM, the newest trial's
solution per TunableOp signature. What is written: the "tunableop" trials of the sweeps (their pins,
`autotune.kernels.dense.tunableop`) and of imported TunableOp files, OK ones only; the time field is the
stored median in ms. `import` reads these files back (the device from GCN_ARCH_NAME, else from the name).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.result import Source, TrialStatus

from .foreign import device_name_of
from .tunableop import TUNABLEOP_BACKEND

if TYPE_CHECKING:
    from .records import TrialRecord
    from .store import Store

__all__ = ["export_tunableop", "tunableop_line"]


def tunableop_line(trial: TrialRecord) -> tuple[dict[str, str], tuple[str, str, str, float]] | None:
    """The validators and results line of one stored trial, or None where it holds no TunableOp solution."""
    if trial.backend != TUNABLEOP_BACKEND or trial.status is not TrialStatus.OK or trial.time_us is None:
        return None
    pin = trial.extra.get("tunableop")
    if isinstance(pin, dict):  # a sweep's trial
        op_sig, params, solution = pin.get("op_signature"), pin.get("param_signature"), pin.get("solution")
        validators: Any = pin.get("validators", {})
    else:  # an imported TunableOp line
        op_sig, params = trial.extra.get("op_signature"), trial.extra.get("param_signature")
        solution, validators = trial.config.get("solution"), trial.extra.get("validators", {})
    if not (isinstance(op_sig, str) and isinstance(params, str) and isinstance(solution, str)):
        return None
    if not isinstance(validators, dict):
        return None
    return {str(k): str(v) for k, v in validators.items()}, (op_sig, params, solution, trial.time_us / 1000.0)


def export_tunableop(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes the TunableOp results files of every device (of `fingerprint`'s only) into `out_dir` and
    returns their paths. ValueError where the database holds no TunableOp solution (of that GPU)."""
    files: dict[tuple[str, str], dict[tuple[str, str], tuple[int, tuple[str, str, str, float]]]] = {}
    validator_sets: dict[tuple[str, str], dict[str, str]] = {}
    for source in (Source.MEASURED, Source.PROFILE, Source.IMPORTED):
        for trial in store.trials(fingerprint=fingerprint, status=TrialStatus.OK, source=source):
            found = tunableop_line(trial)
            if found is None:
                continue
            validators, line = found
            key = (device_name_of(trial.gpu.target), repr(sorted(validators.items())))
            validator_sets[key] = validators
            lines = files.setdefault(key, {})
            held = lines.get((line[0], line[1]))
            if held is None or trial.id > held[0]:
                lines[(line[0], line[1])] = (trial.id, line)
    if not files:
        where = f" of GPU {fingerprint}" if fingerprint else ""
        raise ValueError(
            f'no TunableOp solutions{where} in the database: sweep with backends = ["tunableop"] or import '
            "a tunableop_results*.csv first"
        )
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    per_device: dict[str, int] = {}
    for key in sorted(files):
        device = key[0]
        per_device[device] = per_device.get(device, 0) + 1
        suffix = "" if per_device[device] == 1 else f"_{per_device[device]}"
        path = out / f"tunableop_results_device_name={device}{suffix}.csv"
        rows = [f"Validator,{k},{v}" for k, v in validator_sets[key].items()]
        for _, (op_sig, params, solution, ms) in sorted(files[key].values(), key=lambda r: r[1][:2]):
            rows.append(f"{op_sig},{params},{solution},{ms:.9g}")
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        written.append(path)
    return written
