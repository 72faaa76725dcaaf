"""aiter's tuned fused-MoE CSV (``tuned_fmoe.csv``): one row per (GPU, shape, quantization) with the
kernels aiter picked and the time it measured.

The columns we read: cu_num (the GPU: 304 MI300X, 256 MI355X, 80 MI308X), token (M), model_dim (K),
inter_dim (N), expert (E), topk, dtype (the activations'), q_dtype_w and q_type (the weights'
quantization), block_m, ksplit, kernelName1, kernelName2, run_1stage and us (the total time in µs);
act_type, use_g1u1 and doweight_stage1 where present. Rows become trials of backend "aiter" with source
"imported" and aiter's time as their timing.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune.core.config import Config, Value
from autotune.core.problem import normalize_dtype
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.db.aiter import AITER_BACKEND, AITER_CU_DEVICES
from autotune.db.foreign import IMPORTED_SOURCE_HASH, Found, ImportedFile, InteropError, device_target
from autotune.db.store import NewTrial

from .shape import MOE_OP, moe_problem

__all__ = ["AITER_BACKEND", "AITER_COLUMNS", "AITER_CU_DEVICES", "AITER_KERNEL", "aiter_trials", "read_aiter"]

#: The kernel name of aiter's fused MoE (backend `AITER_BACKEND`, a vendor library: its source is not ours).
AITER_KERNEL = f"{MOE_OP}.{AITER_BACKEND}"
#: Columns a tuned fused-MoE CSV must have.
AITER_COLUMNS: tuple[str, ...] = (
    "cu_num",
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "dtype",
    "q_dtype_w",
    "q_type",
    "block_m",
    "ksplit",
    "us",
    "kernelName1",
    "kernelName2",
    "run_1stage",
)
_INT_COLUMNS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "block_m", "ksplit")
_TRUE, _FALSE = ("1", "true"), ("0", "false", "")


def _flag(value: str) -> bool | None:
    """A boolean column ("1"/"True", "0"/"False"), None if it is neither."""
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def _weights(row: dict[str, str], dtype: str) -> str | None:
    """Our weight dtype for the row's quantization: `dtype` for none, "fp8e4m3" for FP8 weights with
    128x128 block scales (q_type per_1x128); None for what our problems cannot express."""
    q_type = row["q_type"].strip().rsplit(".", 1)[-1].lower()
    q_w = row["q_dtype_w"].strip().removeprefix("torch.").lower()
    if q_type == "no":
        return dtype
    if q_type == "per_1x128" and q_w.startswith("float8_e4m3"):
        return "fp8e4m3"
    return None


def _variant(row: dict[str, str]) -> str | None:
    """Why the row's MLP is not the one our moe problems model (gated SiLU, weights applied after the
    down projection), None when it is."""
    act = row.get("act_type", "").strip()
    if act and act.rsplit(".", 1)[-1].lower() != "silu":
        return f"activation {act} (only SiLU is modelled)"
    if "use_g1u1" in row and _flag(row["use_g1u1"]) is False:
        return "use_g1u1=0: no fused gate and up projection"
    if _flag(row.get("doweight_stage1", "0")) is True:
        return "doweight_stage1=1: routing weights applied before the down projection"
    return None


def read_aiter(path: Path, text: str) -> ImportedFile:
    """The trials of one aiter tuned fused-MoE CSV (its content `text`), read whole: `aiter_trials`."""
    found = Found()
    return found.file(path, "aiter", aiter_trials(path, io.StringIO(text), found))


def aiter_trials(path: Path, lines: Iterable[str], found: Found) -> Iterator[NewTrial]:
    """The trials of one aiter tuned fused-MoE CSV (its lines `lines`), one at a time as read; what else
    it holds goes to `found`.

    One trial per row, on the GPU its cu_num names, with the row's `us` as the timing (runs 0, method
    "imported"); a row without a usable time is stored as pruned with the reason. Rows of a quantization
    or MLP variant our moe problems cannot express are skipped (reported, not stored). Raises
    InteropError naming the file (and row) for missing columns, a value that is not a number, an unknown
    cu_num, or an impossible shape (topk < 1, E < topk).
    """
    name = path.name
    reader = csv.DictReader(lines)
    header = [c.strip() for c in reader.fieldnames or []]
    if not header:
        raise InteropError(f"{name}: empty file, expected an aiter tuned fused-MoE CSV")
    reader.fieldnames = header
    missing = [c for c in AITER_COLUMNS if c not in header]
    if missing:
        raise InteropError(
            f"{name}: not an aiter tuned fused-MoE CSV: it lacks the columns {', '.join(missing)}"
        )
    devices: set[str] = set()
    for row in reader:
        line = reader.line_num
        where = f"{name}: row {line}"
        if None in row or any(row[c] is None for c in AITER_COLUMNS):
            raise InteropError(f"{where}: its number of fields differs from the header's ({len(header)})")
        ints: dict[str, int] = {}
        for col in _INT_COLUMNS:
            try:
                ints[col] = int(row[col].strip())
            except ValueError:
                raise InteropError(f"{where}: {col} is {row[col]!r}, not an integer") from None
        try:
            us = float(row["us"].strip())
        except ValueError:
            raise InteropError(f"{where}: us is {row['us']!r}, not a number") from None
        device = AITER_CU_DEVICES.get(ints["cu_num"])
        if device is None:
            known = ", ".join(f"{cu} ({d.rsplit('_', 1)[-1]})" for cu, d in AITER_CU_DEVICES.items())
            raise InteropError(f"{where}: cu_num {ints['cu_num']} is no GPU we know ({known})")
        E, topk = ints["expert"], ints["topk"]
        if topk < 1 or topk > E:
            raise InteropError(f"{where}: expert={E} and topk={topk} are no MoE (need 1 <= topk <= expert)")
        try:
            dtype = normalize_dtype(row["dtype"].strip())
        except ValueError as exc:
            raise InteropError(f"{where}: dtype: {exc}") from None
        weights = _weights(row, dtype)
        variant = _variant(row)
        if weights is None or variant is not None:
            why = variant or f"quantization {row['q_type'].strip()} with {row['q_dtype_w'].strip()} weights"
            found.skip(f"row {line}", f"{why} is not modelled")
            continue
        run_1stage = _flag(row["run_1stage"])
        if run_1stage is None:
            raise InteropError(f"{where}: run_1stage is {row['run_1stage']!r}, not 0/1 or True/False")
        try:
            problem = moe_problem(
                ints["token"], ints["inter_dim"], ints["model_dim"], E, topk, dtype, weights
            )
        except ValueError as exc:
            raise InteropError(f"{where}: {exc}") from None
        values: dict[str, Value] = dict(
            kernelName1=row["kernelName1"].strip(),
            kernelName2=row["kernelName2"].strip(),
            block_m=ints["block_m"],
            ksplit=ints["ksplit"],
            run_1stage=int(run_1stage),
        )
        config = Config(backend=AITER_BACKEND, **values)
        extra = {"file": name, "imported_from": "aiter", "row": line}
        extra.update({c: row[c].strip() for c in ("us1", "us2", "err1", "err2") if row.get(c)})
        if math.isfinite(us) and us > 0:
            timing = Timing(us, us, us, us, us, 0.0, 0, "imported")
            result = TrialResult(config, TrialStatus.OK, timing=timing, extra=extra)
        else:
            reason = f"aiter recorded no usable time (us={row['us'].strip()})"
            result = TrialResult(config, TrialStatus.PRUNED, error=reason, extra=extra)
            found.flag(f"row {line}", reason)
        target = device_target(device)
        devices.add(str(target))
        yield found.count(
            NewTrial(target, AITER_KERNEL, IMPORTED_SOURCE_HASH, problem, result, Source.IMPORTED)
        )
    if not found.n_ok + found.n_flagged and not found.skipped:
        raise InteropError(f"{name}: the CSV has a header but no rows")
    found.summary = f"aiter tuned fused MoE on {', '.join(sorted(devices)) or 'no modelled rows'}"
