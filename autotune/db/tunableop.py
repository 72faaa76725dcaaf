"""PyTorch TunableOp results (``tunableop_results*.csv``): the solution TunableOp picked per GEMM, timed.

A file holds ``Validator,KEY,VALUE`` lines (PT_VERSION, ROCM_VERSION, HIPBLASLT_VERSION, ROCBLAS_VERSION,
GCN_ARCH_NAME ...), then one line per tuned GEMM: ``OpSignature,ParamSignature,Solution[,Time]``, the time
the solution's average in ms (optional; ``PYTORCH_TUNABLEOP_BLAS_LOG=1`` appends ``,BLAS_PARAMS: ...``).
The op signature is ``{Op}_{types}_{A}{B}``: ``GemmTunableOp_BFloat16_TN``, ``GemmAndBiasTunableOp_...``,
``GemmStridedBatchedTunableOp_...`` and ``ScaledGemmTunableOp_{A}_{B}_{C}_TN``. The parameter signature
is ``{a}{b}_{m}_{n}_{k}[_B_{batch}]_ld_{lda}_{ldb}_{ldc}``, ScaledGemm's with ``_rw_{0|1}_bias_{dtype|None}``
after it. These are column-major BLAS calls: PyTorch computes a row-major C (M, N) = A · B as Cᵀ = Bᵀ · Aᵀ,
so BLAS m is our N, n our M (the tokens of nn.Linear), and the first letter is B's: ``t`` is B as (N, K)
(our layout "nk", nn.Linear's weight), ``n`` B as (K, N) ("kn"); a second letter ``t`` is A stored
transposed, which our ops do not take. Which op's problems the results of each TunableOp op are, the ops
say of their own (`TunableOpRows`, one of their format parts: `autotune.db.formats`); this module names
no op.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.config import Config, Value
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.target import ARCH_LIMITS, Target

from .foreign import IMPORTED_SOURCE_HASH, Found, ImportedFile, InteropError, device_target
from .formats import parts
from .store import NewTrial

__all__ = [
    "TUNABLEOP_BACKEND",
    "TUNABLEOP_OPS",
    "TunableOpRows",
    "looks_like_tunableop",
    "read_tunableop",
    "tunableop_trials",
]

#: The backend imported TunableOp solutions are stored under (their config: the solution's name).
TUNABLEOP_BACKEND = "tunableop"
#: The TunableOp ops read: the GEMM (and its bias, batched variants) and the scaled FP8 GEMM.
TUNABLEOP_OPS: tuple[str, ...] = (
    "GemmTunableOp",
    "GemmAndBiasTunableOp",
    "GemmStridedBatchedTunableOp",
    "ScaledGemmTunableOp",
)

_OP_RE = re.compile(rf"(?P<op>{'|'.join(TUNABLEOP_OPS)})_(?P<types>.+)_(?P<a>[NT])(?P<b>[NT])")
_PARAMS_RE = re.compile(
    r"(?P<a>[nt])(?P<b>[nt])_(?P<m>\d+)_(?P<n>\d+)_(?P<k>\d+)(?:_B_(?P<batch>\d+))?"
    r"(?:_ld_(?P<lda>\d+)_(?P<ldb>\d+)_(?P<ldc>\d+))?(?P<rest>.*)",
    re.IGNORECASE,
)
_SCALED_RE = re.compile(r"_rw_(?P<rw>[01])_bias_(?P<bias>\w+)")
#: PyTorch's type names in op signatures, and ours ("" where no op of ours has the dtype).
_TYPES: dict[str, str] = {
    "BFloat16": "bf16",
    "Half": "fp16",
    "float": "fp32",
    "double": "",
    "c10::complex<float>": "",
    "c10::complex<double>": "",
    "Float8_e4m3fnuz": "fp8:gfx942",
    "Float8_e4m3fn": "fp8:gfx950",
    "Float8_e5m2fnuz": "",
    "Float8_e5m2": "",
}
_LINE_RE = re.compile(rf"(Validator|(?:{'|'.join(TUNABLEOP_OPS)})_\S+),")


def looks_like_tunableop(text: str) -> bool:
    """Whether `text` starts like a TunableOp results file (a Validator line or a result line)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return _LINE_RE.match(first.strip()) is not None


class _Skip(ValueError):
    """A result line no op of ours holds; the message says why."""


@dataclass(frozen=True)
class TunableOpRows:
    """An op's TunableOp results (a format part of the op: `autotune.db.formats`): the result lines of the
    TunableOp ops `signatures` (of `TUNABLEOP_OPS`) are problems of the op called `op`."""

    op: str
    signatures: tuple[str, ...]


def _op_of(signature: str) -> str:
    """The op whose problems the results of TunableOp op `signature` are (the ops' `TunableOpRows`);
    _Skip where no op holds them."""
    found = next((r.op for r in parts(TunableOpRows) if signature in r.signatures), None)
    if found is None:
        raise _Skip(f"{signature} results: no op of ours holds them")
    return found


def _types(text: str) -> list[str]:
    """The PyTorch type names of an op signature's types part, in order."""
    out: list[str] = []
    rest = text
    while rest:
        name = next((t for t in sorted(_TYPES, key=len, reverse=True) if rest.startswith(t)), None)
        if name is None or rest[len(name) :][:1] not in ("", "_"):
            raise _Skip(f"unknown type {rest.split('_')[0]!r} in the op signature")
        out.append(name)
        rest = rest[len(name) + 1 :]
    return out


def _fp8(name: str, arch: str) -> str:
    ours = _TYPES[name]
    if not ours.startswith("fp8:"):
        raise _Skip(f"{name}: our FP8 GEMMs take e4m3")
    if ours != ("fp8:gfx942" if arch == "gfx942" else "fp8:gfx950"):  # fnuz on gfx942, OCP elsewhere
        raise _Skip(f"{name} on {arch}: {arch}'s FP8 is the other e4m3 flavour")
    return "fp8e4m3"


def _result(op_sig: str, params: str, arch: str) -> tuple[Problem, dict[str, Value], list[str]]:
    """The problem of one result line, its config's own keys (beside backend and solution), and why it is
    a reference only (none where our op runs what it timed). _Skip for a line no op of ours holds."""
    op_match = _OP_RE.fullmatch(op_sig)
    if op_match is None:
        raise _Skip(f"op {op_sig!r} is no TunableOp GEMM we read ({', '.join(TUNABLEOP_OPS)})")
    found = _PARAMS_RE.fullmatch(params)
    if found is None:
        raise _Skip(f"parameter signature {params!r} is no {{a}}{{b}}_m_n_k[...]")
    op, letters = op_match["op"], (found["a"].lower(), found["b"].lower())
    if letters != (op_match["a"].lower(), op_match["b"].lower()):
        raise _Skip(f"the parameter signature's transposes {params[:2]} differ from the op's {op_sig[-2:]}")
    m, n, k = int(found["m"]), int(found["n"]), int(found["k"])
    batch = int(found["batch"] or 1)
    if batch > 1:
        raise _Skip(f"batched GEMM (B={batch}): our ops have no batch")
    if letters[1] == "t":
        raise _Skip("A stored transposed (the second letter T): our ops read A as (M, K) rows")
    layout = "nk" if letters[0] == "t" else "kn"
    flags: list[str] = []
    if found["lda"] is not None:
        ld = (int(found["lda"]), int(found["ldb"]), int(found["ldc"]))
        dense = (k if letters[0] == "t" else m, k, m)
        if ld != dense:
            flags.append(f"strided operands: ld {ld[0]}, {ld[1]}, {ld[2]} where dense ones are {dense[0]}, "
                         f"{dense[1]}, {dense[2]}")  # fmt: skip
    types = _types(op_match["types"])
    rest: str = found["rest"]
    own: dict[str, Value] = {}
    if op == "ScaledGemmTunableOp":
        if len(types) != 3 or types[0] != types[1]:
            raise _Skip(f"scaled GEMM of {', '.join(types)}: our FP8 GEMMs take one e4m3 for A and B")
        fp8, out = _fp8(types[0], arch), _TYPES[types[2]]
        if out not in ("bf16", "fp16"):
            raise _Skip(f"scaled GEMM writing {types[2]}: our FP8 GEMMs write bf16 or fp16")
        if layout != "nk":
            raise _Skip("B as (K, N) (the first letter N): our FP8 GEMMs take B as (N, K)")
        scaled = _SCALED_RE.match(rest)
        if scaled is not None:
            own["scaling"] = "rowwise" if scaled["rw"] == "1" else "tensor"
            if scaled["bias"] != "None":
                own["bias"] = True
                flags.append(f"bias epilogue ({scaled['bias']}): our GEMMs have none")
            rest = rest[scaled.end() :]
        problem = Problem.of(_op_of(op), n, m, k, out, fp8)
    else:
        name = "_".join(types)
        dtype = _TYPES.get(name, "")
        if dtype not in ("bf16", "fp16", "fp32"):
            raise _Skip(f"{name} GEMM: no op of ours")
        if op == "GemmAndBiasTunableOp":
            own["bias"] = True
            flags.append("bias epilogue (GemmAndBias): our GEMMs have none")
        problem = Problem.of(_op_of(op), n, m, k, dtype, layout=layout)
    if rest:
        flags.append(f"signature fields we do not read: {rest.lstrip('_')}")
    return problem, own, flags


_DEVICE_RE = re.compile(r"device_name=([^,/]+?)(?:_\d+)?\.csv$")


def _target(name: str, validators: dict[str, str]) -> Target:
    """The GPU of the file: the device its name gives (``device_name=...``, what `export --format
    tunableop` writes), else the flagship of its GCN_ARCH_NAME's arch (TunableOp records no CU count). A
    name's device must be of the GCN_ARCH_NAME's arch."""
    gcn = validators.get("GCN_ARCH_NAME", "")
    arch = gcn.split(":")[0].strip().lower()
    named = _DEVICE_RE.search(name)
    if named is not None:
        target = device_target(named.group(1))
        if arch and target.arch != arch:
            raise InteropError(f"{name}: the name's device {target.name} is no {arch} (GCN_ARCH_NAME {gcn})")
        return target
    if not arch:
        raise InteropError(
            f"{name}: no Validator GCN_ARCH_NAME and no device_name= in the file name: the GPU its times "
            "were taken on is unknown (ROCm builds of PyTorch write GCN_ARCH_NAME; name a CUDA build's "
            "file tunableop_results_device_name=NVIDIA_H100_80GB_HBM3.csv, say)"
        )
    if arch not in ("gfx942", "gfx950"):
        raise InteropError(f"{name}: GCN_ARCH_NAME {gcn} is no GPU we know (gfx942, gfx950)")
    return device_target(str(ARCH_LIMITS[arch]["name"]))


def read_tunableop(path: Path, text: str) -> ImportedFile:
    """The trials of one TunableOp results file (its content `text`), read whole: `tunableop_trials`."""
    found = Found()
    return found.file(path, "tunableop", tunableop_trials(path, io.StringIO(text), found))


def tunableop_trials(path: Path, lines: Iterable[str], found: Found) -> Iterator[NewTrial]:
    """The trials of one TunableOp results file (its lines `lines`), one at a time as read; what else it
    holds goes to `found`.

    One trial per result line that maps to an op of ours, on the arch's flagship GPU (GCN_ARCH_NAME;
    gfx942 → MI300X, gfx950 → MI355X), with backend "tunableop" and the solution as its config (and, for
    ScaledGemm, the scaling: rowwise or tensor), the time in µs (the file's ms x 1000, runs 0, method
    "imported"), of the op whose `TunableOpRows` hold the line's TunableOp op: GemmTunableOp (and
    GemmStridedBatched of one batch) the dense GEMM's; ScaledGemmTunableOp of e4m3 inputs the row-wise
    FP8 GEMM's (per-tensor scales are its special case). Flagged: bias epilogues,
    strided operands, signature fields we do not read, and lines without a time. Skipped with the reason:
    batched GEMMs, A transposed, dtypes no op of ours takes. The validators (which TunableOp writes
    first) are kept in each trial's extra. Raises InteropError naming the file for no or an unknown
    GCN_ARCH_NAME, a bad Validator line, or a Validator line after the first result line.
    """
    name = path.name
    validators: dict[str, str] = {}
    target: Target | None = None
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line.rstrip("\r\n")
        if not line.strip():
            continue
        if line.startswith("Validator,"):
            if target is not None:
                raise InteropError(f"{name}: line {number}: a Validator line after the results")
            parts = line.split(",", 2)
            if len(parts) < 3:
                raise InteropError(f"{name}: line {number}: a Validator line is Validator,KEY,VALUE")
            validators[parts[1].strip()] = parts[2].strip()
            continue
        if target is None:
            target = _target(name, validators)
        trial = _line_trial(name, target, validators, number, line, found)
        if trial is not None:
            yield found.count(trial)
    if target is None:
        target = _target(name, validators)
    if not found.n_ok + found.n_flagged and not found.skipped:
        raise InteropError(f"{name}: no result lines, only Validator lines")
    versions = ", ".join(f"{k} {v}" for k, v in validators.items() if k.endswith("_VERSION"))
    found.summary = f"PyTorch TunableOp results on {target}" + (f" ({versions})" if versions else "")


def _line_trial(
    name: str, target: Target, validators: dict[str, str], number: int, line: str, found: Found
) -> NewTrial | None:
    """The trial of result line `number`, or None (the reason in `found`) for one that is skipped."""
    entry = f"line {number}"
    fields = line.split(",", 4)
    if len(fields) < 3:
        found.bad(entry, "not a result line (OpSignature,ParamSignature,Solution[,Time])")
        return None
    op_sig, params, solution = (f.strip() for f in fields[:3])
    raw = fields[3].strip() if len(fields) > 3 else ""
    try:
        ms = float(raw) if raw else 0.0
    except ValueError:
        found.bad(entry, f"time {raw!r} is not a number (ms)")
        return None
    try:
        problem, own, flags = _result(op_sig, params, target.arch)
    except ValueError as exc:  # _Skip, or a shape our problem refuses
        found.skip(entry, str(exc))
        return None
    timing = None
    if math.isfinite(ms) and ms > 0:
        us = ms * 1000.0
        timing = Timing(us, us, us, us, us, 0.0, 0, "imported")
    else:
        flags.append("TunableOp recorded no time")
    extra: dict[str, Any] = {"file": name, "imported_from": "tunableop", "line": number}
    extra.update(op_signature=op_sig, param_signature=params, validators=validators)
    if len(fields) > 4:
        extra["more"] = fields[4].strip()
    config = Config(backend=TUNABLEOP_BACKEND, solution=solution, **own)
    status = TrialStatus.PRUNED if flags else TrialStatus.OK
    result = TrialResult(config, status, timing=timing, error="; ".join(flags), extra=extra)
    if flags:
        found.flag(entry, "; ".join(flags))
    kernel = f"{problem.op}.{TUNABLEOP_BACKEND}"
    return NewTrial(target, kernel, IMPORTED_SOURCE_HASH, problem, result, Source.IMPORTED)
