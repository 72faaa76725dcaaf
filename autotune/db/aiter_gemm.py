"""aiter's tuned GEMM tables: the tables (`AITER_GEMM_KINDS`), reading them, and the short config names our
own rows carry (`config_name`, `config_of_name`). Which op's problems a table's rows are, each op says of
its own rows (`AiterRows`, one of its format parts: `autotune.db.formats`); this module names no op.

aiter keeps one CSV per GEMM family, a row per (GPU, shape) with the kernel its tuner picked and the time it
measured (µs): ``bf16_tuned_gemm.csv`` (keyed by gfx, cu_num, M, N, K, bias, dtype, outdtype, scaleAB,
bpreshuffle; the kernel as libtype, solidx, splitK, kernelName), ``a8w8_tuned_gemm.csv`` (per-token and
per-channel scales, keyed by gfx, cu_num, M, N, K, q_dtype_w; the kernel as [libtype,] kernelId, splitK,
kernelName), ``a8w8_blockscale_tuned_gemm.csv`` and the pre-shuffled-weight tables
``a8w8_bpreshuffle_tuned_gemm.csv`` and ``a8w8_blockscale_bpreshuffle_tuned_gemm.csv``. Older files lack
gfx (cu_num alone names the GPU), libtype, q_dtype_w or the tflops, bw and error columns; the oldest bf16
files call the time ``soltimes``. Every GEMM is C (M, N) = A (M, K) · Bᵀ with B as (N, K): our layout "nk".
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.core.config import Config, Value
from autotune.core.problem import Problem, normalize_dtype
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import Target

from .aiter import AITER_BACKEND, AITER_CU_DEVICES
from .foreign import IMPORTED_SOURCE_HASH, Found, ImportedFile, InteropError, JsonForm, device_target
from .formats import parts
from .store import NewTrial

__all__ = [
    "AITER_GEMM_KINDS",
    "MAX_ERROR_RATIO",
    "OUR_LIBTYPE_PREFIX",
    "AiterRows",
    "GemmKind",
    "aiter_gemm_trials",
    "aiter_target",
    "config_name",
    "config_of_name",
    "fp8_column",
    "gemm_kind_of",
    "kind_for_op",
    "op_of",
    "read_aiter_gemm",
]

BF16_COLUMNS: tuple[str, ...] = (
    "gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle",
    "libtype", "solidx", "splitK", "us", "kernelName", "err_ratio", "tflops", "bw",
)  # fmt: skip
A8W8_COLUMNS: tuple[str, ...] = (
    "gfx", "cu_num", "M", "N", "K", "q_dtype_w",
    "libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio",
)  # fmt: skip
BLOCKSCALE_COLUMNS: tuple[str, ...] = (
    "gfx", "cu_num", "M", "N", "K",
    "libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio",
)  # fmt: skip

#: Why a table of pre-shuffled weights is a reference only.
PRESHUFFLED = "weights pre-shuffled (bpreshuffle): a layout we do not run"


@dataclass(frozen=True)
class GemmKind:
    """One aiter GEMM table: its file name, the columns aiter writes today (what `autotune export --format
    aiter` writes), whether its rows are FP8 GEMMs (`fp8`; the bf16 table's are of floating-point inputs,
    some of FP8 ones with scalar scales), and `flag`: why every row is a reference record only ("" when
    the op runs what the row measured). Its op is the one whose `AiterRows` hold its rows (`op_of`)."""

    name: str
    file: str
    columns: tuple[str, ...]
    fp8: bool
    flag: str = ""

    @property
    def op(self) -> str | None:
        """The op its own rows are problems of (`op_of`), None where no op holds them."""
        return op_of(self)


#: aiter's GEMM tables: bf16 (and fp16, fp32; FP8 with scalar scales), a8w8 (FP8 per-token and per-channel
#: scales, or int8), blockscale (FP8, 1x128 scales of A, 128x128 of B), and the bpreshuffle tables of
#: pre-shuffled weights (flagged). Rows of int8 (the a8w8 tables' other dtype, and every row of an a8w8
#: file without q_dtype_w) have no op of ours: skipped.
AITER_GEMM_KINDS: dict[str, GemmKind] = {
    k.name: k
    for k in (
        GemmKind("bf16", "bf16_tuned_gemm.csv", BF16_COLUMNS, fp8=False),
        GemmKind("a8w8", "a8w8_tuned_gemm.csv", A8W8_COLUMNS, fp8=True),
        GemmKind("a8w8_blockscale", "a8w8_blockscale_tuned_gemm.csv", BLOCKSCALE_COLUMNS, fp8=True),
        GemmKind("a8w8_bpreshuffle", "a8w8_bpreshuffle_tuned_gemm.csv", A8W8_COLUMNS, True, PRESHUFFLED),
        GemmKind(
            "a8w8_blockscale_bpreshuffle",
            "a8w8_blockscale_bpreshuffle_tuned_gemm.csv",
            BLOCKSCALE_COLUMNS,
            True,
            PRESHUFFLED,
        ),
    )
}


@dataclass(frozen=True)
class AiterRows:
    """An op's rows of aiter's GEMM tables (a format part of the op: `autotune.db.formats`): the rows of
    the tables named `tables` whose inputs are FP8 (`fp8`), or floating point (not `fp8`), are problems
    of the op called `op`."""

    op: str
    tables: tuple[str, ...]
    fp8: bool


def op_of(kind: GemmKind, fp8: bool | None = None) -> str | None:
    """The op whose problems the rows of table `kind` with FP8 inputs (`fp8`; default: the table's own
    rows, `GemmKind.fp8`) are, as the ops' `AiterRows` say; None where no op holds them."""
    want = kind.fp8 if fp8 is None else fp8
    return next((r.op for r in parts(AiterRows) if kind.name in r.tables and r.fp8 == want), None)


#: The libtype of rows `autotune export --format aiter` writes: ``autotune-{backend}``.
OUR_LIBTYPE_PREFIX = "autotune-"

#: aiter's other GEMM families (file-name parts): FP4, FP6, MX formats and batched GEMMs; not imported.
_OTHER_FAMILIES = re.compile(r"(a4w4|a4w6|a6w4|a6w6|a16w8|a8w4|mxfp|fp4|bmm)", re.IGNORECASE)
_TORCH_FP8 = {"float8_e4m3fnuz": "gfx942", "float8_e4m3fn": "gfx950"}


def kind_for_op(op: str) -> GemmKind | None:
    """The table our winners of `op` are written to (the unflagged table whose own rows are the op's), None
    for none."""
    return next((k for k in AITER_GEMM_KINDS.values() if not k.flag and op_of(k) == op), None)


@functools.lru_cache(maxsize=64)
def aiter_target(cu_num: int, gfx: str | None = None) -> Target:
    """The GPU of an aiter row: its CU count (304 MI300X, 80 MI308X, 256 MI355X), checked against its gfx
    where the file has one. InteropError for a GPU we do not know."""
    device = AITER_CU_DEVICES.get(cu_num)
    target = device_target(device) if device else None
    if target is None or (gfx and gfx.strip().lower() != target.arch):
        known = ", ".join(f"{device_target(d).arch} with {cu} CUs" for cu, d in AITER_CU_DEVICES.items())
        what = f"{gfx.strip()} with {cu_num} CUs" if gfx else f"cu_num {cu_num}"
        raise InteropError(f"{what} is no GPU we know ({known})")
    return target


def fp8_column(dtype: str, arch: str) -> str:
    """aiter's q_dtype_w of our FP8 dtype on `arch`: e4m3fnuz on gfx942, e4m3fn elsewhere."""
    fnuz = dtype == "fp8e4m3fnuz" or arch == "gfx942"
    return "torch.float8_e4m3fnuz" if fnuz else "torch.float8_e4m3fn"


def _fp8_of(value: str, arch: str) -> str:
    """Our FP8 dtype of aiter's `value` (a torch dtype name) on `arch`: "fp8e4m3", the target's own e4m3
    (e4m3fnuz on gfx942, e4m3fn on gfx950). ValueError (the reason) for what our FP8 ops cannot run."""
    name = value.strip().removeprefix("torch.")
    if name not in _TORCH_FP8:
        raise ValueError(f"{value.strip()} has no op of ours (our FP8 GEMMs take e4m3)")
    if _TORCH_FP8[name] != arch:
        raise ValueError(f"{value.strip()} on {arch}: {arch}'s FP8 is the other e4m3 flavour")
    return "fp8e4m3"


# -- our rows: the config's short form as the kernel name ------------------------------------------------

_ABBREV: dict[str, str] = {
    "BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K", "G": "GROUP_M", "SK": "SPLIT_K", "w": "num_warps",
    "s": "num_stages", "mi": "matrix_instr_nonkdim", "wpe": "waves_per_eu", "kp": "kpack", "xcd": "NUM_XCDS",
}  # fmt: skip
_TRAILING_VALUE = re.compile(r"(?P<name>.*?[A-Za-z_])(?P<value>-?\d+(?:\.\d+)?(?:e-?\d+)?|True|False)")


def _value(text: str) -> Value:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def config_of_name(name: str) -> Config:
    """The config of one of our rows' kernel names: the backend, then one token per parameter, either
    ``Config.short()``'s (``BM64``: an abbreviation or a name with its value appended) or
    ``NAME=VALUE``. ValueError for a name that is none."""
    backend, *tokens = name.split() or [""]
    if not backend or "=" in backend:
        raise ValueError(f"{name!r} does not start with a backend")
    values: dict[str, Value] = {"backend": backend}
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep:
            abbrev = next(
                (a for a in sorted(_ABBREV, key=len, reverse=True) if token.startswith(a) and token != a), ""
            )
            rest = token[len(abbrev) :]
            if abbrev and not isinstance(_value(rest), str):
                key, raw = _ABBREV[abbrev], rest
            elif (found := _TRAILING_VALUE.fullmatch(token)) is not None:
                key, raw = found["name"], found["value"]
            else:
                raise ValueError(f"{token!r} in {name!r} is no parameter and value")
        if key in values:
            raise ValueError(f"{key} appears twice in {name!r}")
        values[key] = _value(raw)
    return Config(values)


def config_name(config: Config) -> str:
    """The kernel name of our `config` in an aiter table: ``Config.short()`` where `config_of_name` reads
    it back to the same config, else ``backend NAME=VALUE ...``. ValueError for a value that cannot be
    written so (a text with a space, a comma or an equals sign, or one that reads as a number)."""
    short = config.short()
    try:
        if config_of_name(short) == config:
            return short
    except ValueError:
        pass
    parts = [config.backend]
    for key, value in config.items():
        if key == "backend":
            continue
        text = str(value)
        back = _value(text)
        if any(c.isspace() or c in ",=" for c in text) or type(back) is not type(value) or back != value:
            raise ValueError(f"config parameter {key}={value!r} cannot be written in a kernel name")
        parts.append(f"{key}={text}")
    return " ".join(parts)


# -- reading ------------------------------------------------------------------------------------------------


def gemm_kind_of(name: str, header: list[str], first_kernel: str = "") -> GemmKind:
    """The kind of an aiter GEMM table named `name` with columns `header` (and a first row's kernelName):
    bf16 by its columns; the a8w8 tables by their name, else by aiter's kernel names. InteropError for a
    family we do not import or a file we cannot place."""
    lower = name.lower()
    if {"dtype", "outdtype"} <= set(header):
        return AITER_GEMM_KINDS["bf16"]
    other = _OTHER_FAMILIES.search(lower)
    if other:
        raise InteropError(
            f"{name}: aiter's {other[0]} GEMM tables are not imported (only bf16 and a8w8: "
            f"{', '.join(k.file for k in AITER_GEMM_KINDS.values())})"
        )
    hint = lower if "a8w8" in lower else first_kernel.lower()  # the name, else aiter's kernel name
    if "a8w8" in hint or "i8gemm" in hint:
        key = "a8w8" + ("_blockscale" if "blockscale" in hint else "")
        return AITER_GEMM_KINDS[key + ("_bpreshuffle" if "preshuffle" in hint else "")]
    raise InteropError(
        f"{name}: cannot tell which aiter GEMM table this is: name it as aiter does "
        f"({', '.join(k.file for k in AITER_GEMM_KINDS.values())})"
    )


def _bool(row: Mapping[str, str], column: str, where: str) -> bool:
    text = (row.get(column) or "False").strip().lower()
    if text in ("1", "true"):
        return True
    if text in ("0", "false", ""):
        return False
    raise InteropError(f"{where}: {column} is {row[column]!r}, not True or False")


def _int(row: Mapping[str, str], column: str, where: str, default: int | None = None) -> int:
    """An integer column ("5", or pandas' "5.0"); `default` where it is empty."""
    text = (row.get(column) or "").strip()
    if text.isdecimal():  # the common case, as the pattern below reads it
        return int(text)
    if not text and default is not None:
        return default
    found = re.fullmatch(r"(-?\d+)(?:\.0*)?", text)
    if found is None:
        raise InteropError(f"{where}: {column} is {text!r}, not an integer")
    return int(found[1])


def _problem(
    kind: GemmKind, row: Mapping[str, str], arch: str, shape: tuple[int, int, int], where: str
) -> tuple[Problem, list[str]]:
    """The problem a row measured (of the op `op_of` gives), and why it is a reference only (none: the op
    runs it). ValueError (the reason) for a row no op of ours can hold."""
    M, N, K = shape
    flags = [kind.flag] if kind.flag else []
    if kind.fp8:
        q_w = (row.get("q_dtype_w") or "").strip()
        if not q_w and "q_dtype_w" in kind.columns:
            raise ValueError(
                "no q_dtype_w column: aiter's a8w8 tables of that format hold int8 GEMMs, no op of ours"
            )
        fp8 = _fp8_of(q_w, arch) if q_w else "fp8e4m3"
        return Problem.of(_op(kind, True), M, N, K, "bf16", fp8), flags
    dtype, out = row["dtype"].strip(), row["outdtype"].strip()
    if _bool(row, "bias", where):
        flags.append("bias=True: our GEMMs have no bias epilogue")
    if _bool(row, "bpreshuffle", where):
        flags.append(PRESHUFFLED)
    out_dtype = normalize_dtype(out)
    if dtype.removeprefix("torch.") in _TORCH_FP8:
        return Problem.of(_op(kind, True), M, N, K, out_dtype, _fp8_of(dtype, arch)), flags
    in_dtype = normalize_dtype(dtype)
    op = _op(kind, False)
    if _bool(row, "scaleAB", where):
        flags.append(f"scaleAB=True: a scaled {in_dtype} GEMM")
    if out_dtype != in_dtype:
        flags.append(f"{out_dtype} output of {in_dtype} inputs: our {op} writes its input dtype")
    problem = Problem(op, M, N, K, dtype_a=in_dtype, dtype_b=in_dtype, dtype_out=out_dtype, layout="nk")
    return problem, flags


def _op(kind: GemmKind, fp8: bool) -> str:
    """`op_of`; ValueError (the reason) where no op holds those rows."""
    op = op_of(kind, fp8)
    if op is None:
        inputs = "FP8" if fp8 else "floating-point"
        raise ValueError(f"{inputs} rows of aiter's {kind.name} table: no op of ours holds them")
    return op


def _config(kind: GemmKind, row: Mapping[str, str], header: list[str], where: str) -> tuple[Config, str]:
    """The row's config and the kernel it is stored under (aiter's kernel, or ours for a row we wrote)."""
    libtype = (row.get("libtype") or "ck").strip()
    kernel_name = (row.get("kernelName") or "").strip()
    if libtype.startswith(OUR_LIBTYPE_PREFIX):
        try:
            config = config_of_name(kernel_name)
        except ValueError as exc:
            raise ValueError(f"libtype {libtype}: kernelName {exc}") from None
        if config.backend != libtype.removeprefix(OUR_LIBTYPE_PREFIX):
            raise ValueError(
                f"libtype {libtype} but kernelName {kernel_name!r} names backend {config.backend}"
            )
        return config, config.backend
    index = "solidx" if "solidx" in header else "kernelId"
    values: dict[str, Value] = dict(
        libtype=libtype,
        kernelName=kernel_name,
        splitK=_int(row, "splitK", where, 0),
        **{index: _int(row, index, where)},
    )
    if kind.name == "bf16":
        values.update({c: True for c in ("bias", "scaleAB", "bpreshuffle") if _bool(row, c, where)})
    return Config(backend=AITER_BACKEND, **values), AITER_BACKEND


def read_aiter_gemm(path: Path, text: str) -> ImportedFile:
    """The trials of one aiter tuned GEMM table (its content `text`), read whole: `aiter_gemm_trials`."""
    found = Found()
    return found.file(path, "aiter", aiter_gemm_trials(path, io.StringIO(text), found))


def aiter_gemm_trials(path: Path, lines: Iterable[str], found: Found) -> Iterator[NewTrial]:
    """The trials of one aiter tuned GEMM table (its lines `lines`), one at a time as read; what else it
    holds goes to `found`.

    One trial per row, on the GPU its gfx and cu_num name (`aiter_target`), of the problem and op
    `AITER_GEMM_KINDS` gives, with the row's time in µs (runs 0, method "imported"): backend "aiter" with
    libtype, solidx or kernelId, splitK and kernelName as its config, or, for a row of ours (libtype
    ``autotune-{backend}``), the config its kernelName spells. Flagged (pruned with the reason, time kept):
    rows our op does not run as measured (the bpreshuffle tables, bias, scaleAB, another output dtype) and
    rows without a usable time; stored as wrong_result, the ratio as their relative error: rows whose
    error ratio (``errRatio``, ``err_ratio``) is above `MAX_ERROR_RATIO`. Skipped with the reason: rows no
    op of ours holds (int8, an unknown GPU, a shape the op refuses). Raises InteropError naming the file
    (and row) for a missing column, a value that is no number, or a table we do not import.
    """
    name = path.name
    reader = csv.reader(lines)
    header = [c.strip() for c in next(reader, [])]
    rows = (fields for fields in reader if fields)  # a blank line is no row
    first = next(rows, None)
    first_kernel = dict(zip(header, first or [], strict=False)).get("kernelName") or ""
    kind = gemm_kind_of(name, header, first_kernel)
    time_column = "soltimes" if "soltimes" in header and "us" not in header else "us"
    needed = ["cu_num", "M", "N", "K", time_column, "kernelName"]
    needed += ["dtype", "outdtype", "solidx"] if kind.name == "bf16" else ["kernelId"]
    missing = [c for c in needed if c not in header]
    if missing:
        raise InteropError(
            f"{name}: not an aiter {kind.name} tuned GEMM table: it lacks the columns {', '.join(missing)}"
        )
    kinds = _RowKinds(name, kind, header)
    devices: set[str] = set()
    for number, fields in enumerate(itertools.chain([first] if first else [], rows), start=2):
        if len(fields) != len(header):
            raise InteropError(
                f"{name}: row {number}: its number of fields differs from the header's ({len(header)})"
            )
        columns = dict(zip(header, map(str.strip, fields), strict=True))
        m, n, k, cu = columns["M"], columns["N"], columns["K"], columns["cu_num"]
        if m.isdecimal() and n.isdecimal() and k.isdecimal() and cu.isdecimal():  # as `_int` reads them
            shape, cu_num = (int(m), int(n), int(k)), int(cu)
        else:
            where = f"{name}: row {number}"
            shape = (_int(columns, "M", where), _int(columns, "N", where), _int(columns, "K", where))
            cu_num = _int(columns, "cu_num", where)
        raw_us = columns[time_column]
        try:
            us = float(raw_us)
        except ValueError:
            raise InteropError(f"{name}: row {number}: {time_column} is {raw_us!r}, not a number") from None
        try:
            row_kind, problem = kinds.of(fields, cu_num, shape, number)
        except (InteropError, ValueError) as exc:
            found.skip(f"row {number}", str(exc).removeprefix(f"{name}: row {number}: "))
            continue
        extra = _extra(name, kind, number, columns)
        ratio = _error_ratio(columns)
        if ratio is not None and not ratio <= MAX_ERROR_RATIO:  # NaN too
            result = _wrong(row_kind, us, ratio, extra)
            found.flag(f"row {number}", result.error)
        elif 0.0 < us < math.inf and not row_kind.flags:  # the common case: a time, nothing to flag
            timing = Timing(us, us, us, us, us, 0.0, 0, "imported")
            result = TrialResult(row_kind.config, TrialStatus.OK, timing=timing, extra=extra)
        else:
            result = _flagged(row_kind, us, f"{time_column}={raw_us}", extra)
            found.flag(f"row {number}", result.error)
        devices.add(row_kind.device)
        yield found.count(
            NewTrial(
                row_kind.target,
                row_kind.kernel,
                IMPORTED_SOURCE_HASH,
                problem,
                result,
                Source.IMPORTED,
                extra_json=kinds.extra_json(row_kind, number, columns),
            )
        )
    if not found.n_ok + found.n_flagged and not found.skipped:
        raise InteropError(f"{name}: the table has a header but no rows")
    on = ", ".join(sorted(devices)) or "no GPU of ours"
    found.summary = f"aiter {kind.name} tuned GEMM ({kind.op}) on {on}"


#: The largest error ratio (the share of output elements out of tolerance) of a correct row: aiter's
#: tuners drop candidates above it (their ``errRatio`` option's default).
MAX_ERROR_RATIO = 0.05


def _error_ratio(columns: Mapping[str, str]) -> float | None:
    """The row's error ratio (``errRatio``, ``err_ratio``), None where it has none or it is no number."""
    text = columns.get("errRatio") or columns.get("err_ratio") or ""
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _wrong(row_kind: _RowKind, us: float, ratio: float, extra: dict[str, Any]) -> TrialResult:
    """The wrong_result of a row of kind `row_kind` whose error ratio `ratio` is above `MAX_ERROR_RATIO`:
    the ratio as its relative error, its time kept where usable."""
    timing = Timing(us, us, us, us, us, 0.0, 0, "imported") if math.isfinite(us) and us > 0 else None
    why = (
        f"aiter's error ratio {ratio:g} is above {MAX_ERROR_RATIO:g}: its output was wrong in that share "
        "of elements"
    )
    flags = "; ".join([why, *row_kind.flags])
    return TrialResult(
        row_kind.config, TrialStatus.WRONG_RESULT, timing=timing, rel_error=ratio, error=flags, extra=extra
    )


def _flagged(row_kind: _RowKind, us: float, time_text: str, extra: dict[str, Any]) -> TrialResult:
    """The pruned result of a row of kind `row_kind` and time `us` (`time_text`: as the file has it) that
    is a reference only or has no usable time, the reasons as its error; its time kept where usable."""
    flags = list(row_kind.flags)
    timing = None
    if math.isfinite(us) and us > 0:
        timing = Timing(us, us, us, us, us, 0.0, 0, "imported")
    else:
        flags.append(f"aiter recorded no usable time ({time_text})")
    return TrialResult(
        row_kind.config, TrialStatus.PRUNED, timing=timing, error="; ".join(flags), extra=extra
    )


#: Columns of an aiter GEMM table that differ from row to row whatever the row's kernel and problem kind:
#: the shape, the time and what aiter derives from them. Rows equal in every other column are of one kind
#: (`_RowKind`), read once for all of them.
_PER_ROW = frozenset(("M", "N", "K", "us", "soltimes", "tflops", "bw", "err_ratio", "errRatio"))
#: The most row kinds one table's read keeps (the oldest make way: its memory stays bounded).
_KINDS_KEPT = 1024


def _extra(name: str, kind: GemmKind, row: int | str, columns: dict[str, str]) -> dict[str, Any]:
    """The extra of a row (`row`: its number) of the table `name` of kind `kind`: where it came from and
    its columns (stripped), kept for export."""
    return {"file": name, "imported_from": "aiter", "table": kind.name, "row": row, "columns": columns}


@dataclass(frozen=True)
class _RowKind:
    """What the rows of one kind share: the GPU (and its name in the file's summary), the problem at the
    shape of the first such row, why it is a reference only, the config and the kernel it is stored
    under, and the JSON of their extras (`_extra`) but the row's number and `_PER_ROW` columns (made once
    a second row of the kind is read; None before)."""

    target: Target
    device: str
    problem: Problem
    flags: tuple[str, ...]
    config: Config
    kernel: str
    extra: JsonForm | None = None


class _RowKinds:
    """The kinds of the rows of the table `name` of kind `kind` with columns `header`, each read once."""

    def __init__(self, name: str, kind: GemmKind, header: list[str]) -> None:
        self.name, self.kind, self.header = name, kind, header
        self._keyed = [i for i, c in enumerate(header) if c not in _PER_ROW]
        self._per_row = [c for c in dict.fromkeys(header) if c in _PER_ROW]
        self._kept: dict[tuple[str, ...], _RowKind] = {}

    def extra_json(self, row_kind: _RowKind, number: int, columns: dict[str, str]) -> str:
        """The JSON of the extra of the row `number` of kind `row_kind` with columns `columns`; "" where
        the kind has no form yet (the Store encodes it)."""
        if row_kind.extra is None:
            return ""
        return row_kind.extra.text([number, *[columns[c] for c in self._per_row]])

    def of(
        self, fields: list[str], cu_num: int, shape: tuple[int, int, int], number: int
    ) -> tuple[_RowKind, Problem]:
        """The kind of the row `fields`, the `number`-th of the file (its CU count and shape read), and
        its problem. InteropError or ValueError, the reason, for a row no op of ours holds."""
        key = tuple([fields[i] for i in self._keyed])
        known = self._kept.get(key)
        if known is not None:
            if known.extra is None:  # a second row of its kind: its extras are worth a form
                known = self._kept[key] = replace(known, extra=self._extra_form(fields))
            return known, known.problem.with_shape(*shape)
        row, where = dict(zip(self.header, fields, strict=True)), f"{self.name}: row {number}"
        target = aiter_target(cu_num, row.get("gfx"))
        problem, flags = _problem(self.kind, row, target.arch, shape, where)
        config, backend = _config(self.kind, row, self.header, where)
        if len(self._kept) >= _KINDS_KEPT:
            del self._kept[next(iter(self._kept))]
        kernel = f"{problem.op}.{backend}"
        row_kind = self._kept[key] = _RowKind(target, str(target), problem, tuple(flags), config, kernel)
        return row_kind, problem

    def _extra_form(self, fields: list[str]) -> JsonForm:
        """The form of the extras of the rows of the kind of the row `fields`."""
        slots = {c: JsonForm.slot(i) for i, c in enumerate(self._per_row, start=1)}
        columns = {c: slots.get(c) or v.strip() for c, v in zip(self.header, fields, strict=True)}
        return JsonForm(_extra(self.name, self.kind, JsonForm.slot(0), columns))
