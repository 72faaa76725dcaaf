"""The fused-MoE config files of vLLM and SGLang: their names, reading them, and writing our winners as them.

A file ``E={E},N={N},device_name={device}[,dtype={dtype}][,block_shape={[bn, bk]}].json`` holds, for one
MoE layer (E experts on this rank, intermediate size N per shard) on one device, a JSON object mapping
M (the token count, as a string) to the Triton config of the fused MoE kernel: BLOCK_SIZE_M,
BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages and, on AMD, matrix_instr_nonkdim,
waves_per_eu and kpack. The two projects differ only in the name: vLLM writes the block shape without a
space (``[128,128]``) and calls every H200 ``NVIDIA_H200``; SGLang writes Python's ``str`` of the list
(``[128, 128]``) and the device name as it is. Both spellings are read.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from autotune.core.config import Config, Value
from autotune.core.problem import Problem
from autotune.core.result import Source, TrialResult, TrialStatus
from autotune.core.target import Target

from .foreign import ImportedFile, InteropError, device_name_of, device_target, infer_moe_shape
from .records import GpuRecord, TrialRecord
from .store import NewTrial, Store, StoreError

__all__ = [
    "AMD_KEYS",
    "FLAVORS",
    "FP8_BLOCK_SHAPE",
    "VLLM_BACKEND",
    "VLLM_KERNEL",
    "VLLM_KEYS",
    "VllmFileName",
    "check_vllm_config",
    "export_vllm",
    "fallback_config",
    "read_vllm",
    "vllm_json",
]

logger = logging.getLogger(__name__)

#: The keys of every config, in the order vLLM writes them.
VLLM_KEYS: tuple[str, ...] = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)
#: The keys ROCm files may add, in that order after `VLLM_KEYS`.
AMD_KEYS: tuple[str, ...] = ("matrix_instr_nonkdim", "waves_per_eu", "kpack")
#: Our kernel's knobs that vLLM's kernel lacks, with the value that means vLLM's behaviour: a config
#: read from a file gets them; only configs at these values are exported, and written without them.
OUR_KEYS: dict[str, int] = {"SPLIT_K": 1}
#: The block shape of FP8 weights with block scales: the only quantization besides none we model.
FP8_BLOCK_SHAPE: tuple[int, int] = (128, 128)
#: The backend and kernel name the configs are stored under (our Triton fused MoE takes vLLM's names).
VLLM_BACKEND = "triton"
VLLM_KERNEL = "moe.triton"
#: File-name flavours `export_vllm` writes.
FLAVORS: tuple[str, ...] = ("vllm", "sglang")

_FP8_DTYPE = "fp8_w8a8"
_UNQUANTIZED = ("bf16", "fp16")
_NAME_RE = re.compile(
    r"E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<device>[^,]+?)"
    r"(?:,dtype=(?P<dtype>[^,]+?))?(?:,block_shape=\[(?P<bn>\d+), ?(?P<bk>\d+)\])?\.json"
)
_M_KEY_RE = re.compile(r"[1-9][0-9]*")


@dataclass(frozen=True)
class VllmFileName:
    """The parts of a vLLM/SGLang fused-MoE config file name."""

    E: int
    N: int
    device_name: str
    dtype: str | None = None
    block_shape: tuple[int, int] | None = None

    @classmethod
    def parse(cls, name: str) -> VllmFileName:
        """The parts of file name `name`; InteropError if it is not such a name."""
        found = _NAME_RE.fullmatch(name)
        if found is None:
            raise InteropError(
                f"{name}: not a fused-MoE config file name: expected "
                "E={E},N={N},device_name={device}[,dtype={dtype}][,block_shape=[{n}, {k}]].json"
            )
        block = (int(found["bn"]), int(found["bk"])) if found["bn"] is not None else None
        return cls(int(found["E"]), int(found["N"]), found["device"], found["dtype"], block)

    @classmethod
    def of(cls, problem: Problem, target: Target, flavor: str = "vllm") -> VllmFileName:
        """The name of the file that holds `problem`'s config on `target`; InteropError for weights no
        such file can hold (anything but unquantized and FP8 with [128, 128] block scales)."""
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
        device = device_name_of(target)
        if flavor == "vllm" and "H200" in device.split("_"):
            device = "NVIDIA_H200"  # vLLM looks every H200 up under this one name
        if problem.dtype_b == problem.dtype_a and problem.dtype_a in _UNQUANTIZED:
            return cls(problem.E, problem.N, device)
        if problem.dtype_b in ("fp8e4m3", "fp8e4m3fnuz"):
            return cls(problem.E, problem.N, device, _FP8_DTYPE, FP8_BLOCK_SHAPE)
        raise InteropError(
            f"{problem}: a vLLM config file holds unquantized or FP8 block-scaled weights, "
            f"not {problem.dtype_b} weights with {problem.dtype_a} activations"
        )

    def filename(self, flavor: str = "vllm") -> str:
        """The file name, with the block shape spelled as `flavor` ("vllm" or "sglang") does."""
        name = f"E={self.E},N={self.N},device_name={self.device_name}"
        if self.dtype:
            name += f",dtype={self.dtype}"
        if self.block_shape:
            shape = str(list(self.block_shape))
            name += f",block_shape={shape.replace(' ', '') if flavor == 'vllm' else shape}"
        return name + ".json"

    def weights(self) -> str:
        """Our weight dtype for this file's dtype and block shape: "bf16" for unquantized weights,
        "fp8e4m3" for fp8_w8a8 with [128, 128] blocks; InteropError for anything else."""
        if self.dtype is None and self.block_shape is None:
            return "bf16"
        if self.dtype == _FP8_DTYPE and self.block_shape == FP8_BLOCK_SHAPE:
            return "fp8e4m3"
        got = f"dtype={self.dtype}" + (f", block_shape={list(self.block_shape)}" if self.block_shape else "")
        raise InteropError(
            f"{self.filename()}: {got} is not supported: only unquantized weights (no dtype) and "
            f"dtype={_FP8_DTYPE} with block_shape={list(FP8_BLOCK_SHAPE)} are"
        )


# -- reading -------------------------------------------------------------------------------------------


def _triton_major() -> int | None:
    """The major version of the installed Triton (any of its distributions), None if none is found."""
    for dist in ("triton", "pytorch-triton-rocm", "pytorch-triton"):
        try:
            return int(metadata.version(dist).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


def _pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def fallback_config(M: int, E: int, fp8_block: bool, *, rocm: bool = False) -> dict[str, int]:
    """The config vLLM's fused MoE runs when no file covers its (E, N, device): the rule of its
    `get_default_config` (vLLM sources of late 2025) for unquantized and FP8 128x128-block weights, with
    num_warps and num_stages filled in where the rule names none, as Triton's launch then takes them
    (4 warps; 3 stages, 2 on ROCm). M is the token count. What a user without a tuned file gets today."""
    if M < 1 or E < 1:
        raise ValueError(f"M and E must be positive, got M={M}, E={E}")
    stages = 2 if rocm else 3
    if fp8_block:  # BLOCK_SIZE_N and _K are the scale block's
        tiles = (64, FP8_BLOCK_SHAPE[0], FP8_BLOCK_SHAPE[1], 32)
    elif M <= E:  # few tokens per expert: narrow tiles
        tiles = (16, 32, 64, 1)
    else:
        tiles = (64, 64, 32, 8)
    return dict(zip(VLLM_KEYS, (*tiles, 4, stages), strict=True))


def check_vllm_config(
    values: Mapping[str, int], target: Target, triton_major: int | None = None
) -> list[str]:
    """Why the installed toolchain would reject `values` (a config of a vLLM file) on `target`: one
    reason per problem, none when it is fine. `triton_major` None means the current Triton."""
    reasons: list[str] = []
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps"):
        if not _pow2(values[key]):
            reasons.append(f"{key}={values[key]} is not a power of two, which Triton requires")
    if values["GROUP_SIZE_M"] < 1:
        reasons.append(f"GROUP_SIZE_M={values['GROUP_SIZE_M']} must be at least 1")
    if target.is_amd and values["num_stages"] < 1 and (triton_major is None or triton_major >= 3):
        reasons.append(
            f"num_stages={values['num_stages']} is rejected by Triton >= 3.0 on AMD "
            "(it needs num_stages >= 1)"
        )
    return reasons


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(Exception):
    pass


def _entry(name: str, m_key: str, entry: object) -> dict[str, int]:
    """The config of M key `m_key`, checked for shape: known keys, all required ones, integer values."""
    where = f"{name}: M={m_key}"
    if not isinstance(entry, dict):
        raise InteropError(f"{where}: the config must be a JSON object, got {type(entry).__name__}")
    unknown = [key for key in entry if key not in VLLM_KEYS and key not in AMD_KEYS]
    if unknown:
        raise InteropError(
            f"{where}: unknown parameter {unknown[0]!r} (known: {', '.join(VLLM_KEYS + AMD_KEYS)})"
        )
    missing = [key for key in VLLM_KEYS if key not in entry]
    if missing:
        raise InteropError(f"{where}: missing required parameter {missing[0]!r}")
    values: dict[str, int] = {}
    for key, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InteropError(f"{where}: {key} must be a non-negative integer, got {value!r}")
        values[key] = value
    return values


def read_vllm(
    path: Path, text: str, *, k: int | None = None, topk: int | None = None, source_hash: str
) -> ImportedFile:
    """The trials of one vLLM/SGLang config file (its name `path.name`, its content `text`).

    One OK trial per M, without a timing (a shipped config is no measurement), under kernel
    `VLLM_KERNEL` and `source_hash`, each config completed with `OUR_KEYS` (what vLLM's kernel does);
    configs the installed toolchain rejects (`check_vllm_config`) are
    stored as pruned with the reason. Raises InteropError naming the file (and M key and parameter) for
    a bad name, unknown device, bad JSON or config, or E and N whose K and top-k are unknown (see
    `infer_moe_shape`).
    """
    name = path.name
    parts = VllmFileName.parse(name)
    weights = parts.weights()
    try:
        target = device_target(parts.device_name)
    except InteropError as exc:
        raise InteropError(f"{name}: {exc}") from None
    K, top, how = infer_moe_shape(parts.E, parts.N, k=k, topk=topk, where=name)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise InteropError(
            f"{name}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except _DuplicateKey as exc:
        raise InteropError(f"{name}: key {exc.args[0]!r} appears twice in one object") from None
    if not isinstance(data, dict) or not data:
        raise InteropError(
            f"{name}: expected a JSON object mapping M (token count) to a config, got {text[:40]!r}"
        )
    for m_key in data:
        if not _M_KEY_RE.fullmatch(m_key):
            raise InteropError(f"{name}: M key {m_key!r} is not a positive integer")
    triton_major = _triton_major() if target.is_amd else None
    trials: list[NewTrial] = []
    flagged: list[tuple[str, str]] = []
    for m_key in sorted(data, key=int):
        values = _entry(name, m_key, data[m_key])
        reasons = check_vllm_config(values, target, triton_major)
        config = Config(backend=VLLM_BACKEND, **values, **OUR_KEYS)
        problem = Problem.moe(int(m_key), parts.N, K, parts.E, top, dtype="bf16", weights=weights)
        status = TrialStatus.PRUNED if reasons else TrialStatus.OK
        result = TrialResult(
            config, status, error="; ".join(reasons), extra={"file": name, "imported_from": "vllm"}
        )
        trials.append(NewTrial(target, VLLM_KERNEL, source_hash, problem, result, Source.IMPORTED))
        if reasons:
            flagged.append((f"M={m_key}", "; ".join(reasons)))
    summary = f"{target} E={parts.E} N={parts.N} K={K} topk={top} weights {weights}"
    if how:
        summary += f" (K and topk of {how})"
    return ImportedFile(path, "vllm", summary, tuple(trials), tuple(flagged))


# -- writing -------------------------------------------------------------------------------------------


def vllm_json(configs: Mapping[int, Mapping[str, Value]], amd: bool) -> str:
    """The text of a config file: M ascending, each config's keys in vLLM's order (`VLLM_KEYS`, then on
    AMD those of `AMD_KEYS` it has), indent 4, a final newline. InteropError for a config that lacks a
    required key, has one vLLM does not take, or a value that is no integer."""
    doc: dict[str, dict[str, int]] = {}
    for m in sorted(configs):
        config = configs[m]
        for key, plain in OUR_KEYS.items():
            if key in config and config[key] != plain:
                why = f"{key}={config[key]!r} has no place in a vLLM config (only {plain})"
                raise InteropError(f"M={m}: {why}")
        extra = [
            key
            for key in config
            if key != "backend" and key not in VLLM_KEYS and key not in AMD_KEYS and key not in OUR_KEYS
        ]
        if extra:
            raise InteropError(f"M={m}: parameter {extra[0]!r} has no place in a vLLM config")
        missing = [key for key in VLLM_KEYS if key not in config]
        if missing:
            raise InteropError(f"M={m}: the config lacks {missing[0]!r}")
        keys = VLLM_KEYS + tuple(key for key in AMD_KEYS if amd and key in config)
        entry: dict[str, int] = {}
        for key in keys:
            value = config[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InteropError(f"M={m}: {key}={value!r} is not an integer")
            entry[key] = value
        doc[str(m)] = entry
    return json.dumps(doc, indent=4) + "\n"


def _vllm_runs(config: Mapping[str, Value]) -> bool:
    """Whether vLLM's kernel runs `config` as ours does: every key of `OUR_KEYS` absent or plain."""
    return all(config.get(key, plain) == plain for key, plain in OUR_KEYS.items())


def _newest_version(records: list[TrialRecord]) -> list[TrialRecord]:
    """The records of the kernel version that appeared last (its first trial is the newest)."""
    first: dict[tuple[str, str], int] = {}
    for r in records:
        key = (r.kernel, r.source_hash)
        first[key] = min(first.get(key, r.id), r.id)
    newest = max(first, key=lambda key: first[key])
    return [r for r in records if (r.kernel, r.source_hash) == newest]


def _triton_choices(
    store: Store, fingerprint: str | None
) -> dict[tuple[int, str], tuple[GpuRecord, Problem, Config]]:
    """Per (GPU id, problem key) of moe problems, the Triton config to export: the measured winner, or the
    fastest measured Triton config that vLLM's kernel can run (`OUR_KEYS` at their plain values) where
    another backend or such a knob won; else the imported one (the fastest if timed, else the newest)."""
    chosen: dict[tuple[int, str], tuple[GpuRecord, Problem, Config]] = {}
    for w in store.winners(fingerprint):
        if w.problem.op != "moe":
            continue
        if w.best.backend == VLLM_BACKEND and _vllm_runs(w.best.config):
            chosen[(w.gpu.id, w.problem.key())] = (w.gpu, w.problem, w.best.config)
            continue
        records = store.trials(
            fingerprint=w.gpu.fingerprint, problem=w.problem, status=TrialStatus.OK, source=Source.MEASURED
        )
        timed = [
            r for r in records if r.backend == VLLM_BACKEND and r.time_us is not None and _vllm_runs(r.config)
        ]
        if not timed:
            logger.warning(
                "%s on %s: %s won and no Triton config vLLM can run was measured",
                w.problem, w.gpu, w.best.config.short(),
            )  # fmt: skip
            continue
        best = min(_newest_version(timed), key=lambda r: (r.time_us, r.id))
        chosen[(w.gpu.id, w.problem.key())] = (w.gpu, w.problem, best.config)
    imported: dict[tuple[int, str], TrialRecord] = {}
    for r in store.trials(fingerprint=fingerprint, status=TrialStatus.OK, source=Source.IMPORTED):
        key = (r.gpu.id, r.problem.key())
        if r.problem.op != "moe" or r.backend != VLLM_BACKEND or key in chosen:
            continue
        held = imported.get(key)
        rank = (r.time_us is None, r.time_us or 0.0, -r.id)
        if held is None or rank < (held.time_us is None, held.time_us or 0.0, -held.id):
            imported[key] = r
    for key, r in imported.items():
        chosen[key] = (r.gpu, r.problem, r.config)
    return chosen


def export_vllm(
    store: Store, out_dir: str | Path, fingerprint: str | None = None, flavor: str = "vllm"
) -> list[Path]:
    """Writes our moe winners as vLLM (or, `flavor` "sglang", SGLang) fused-MoE config files into
    `out_dir`: one file per (GPU, E, N, weights), M ascending, byte-stable.

    For each (GPU, moe problem) it takes the Triton config of `_triton_choices` (vLLM can launch no
    other backend). Everything is checked before the first file is written: InteropError when two
    groups would share one file (another K or top-k, or another GPU of the same name: pick one with
    `fingerprint`) or a config does not fit the format; StoreError when there is nothing to export or
    `out_dir` cannot be written. Each file is written to a temporary name and renamed.
    """
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
    chosen = _triton_choices(store, fingerprint)
    if not chosen:
        which = f" for GPU {fingerprint}" if fingerprint else ""
        raise StoreError(
            f"nothing to export: {store.display_url} holds no moe results with a Triton config{which}"
        )
    files: dict[str, tuple[tuple[Any, ...], str, GpuRecord, dict[int, Config]]] = {}
    for gpu, problem, config in sorted(chosen.values(), key=lambda c: (c[0].id, c[1])):
        try:
            name = VllmFileName.of(problem, gpu.target, flavor).filename(flavor)
        except InteropError as exc:
            logger.warning("not exported: %s", exc)
            continue
        ident = (gpu.fingerprint, problem.K, problem.topk, problem.dtype_a, problem.dtype_b)
        what = f"K={problem.K} topk={problem.topk} {problem.dtype_a}/{problem.dtype_b} on {gpu}"
        held = files.setdefault(name, (ident, what, gpu, {}))
        if held[0] != ident:
            raise InteropError(
                f"{name}: two groups of winners would share this file: {held[1]} and {what}; "
                "export them one at a time (--gpu) or drop one from the database"
            )
        held[3][problem.M] = config
    if not files:
        raise StoreError(f"nothing to export: no moe winner of {store.display_url} fits a vLLM config file")
    texts: dict[str, str] = {}
    for name, (_, what, gpu, configs) in files.items():
        try:
            texts[name] = vllm_json(configs, amd=gpu.target.is_amd)
        except InteropError as exc:
            raise InteropError(f"{name} ({what}): {exc}") from None
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create output directory {out}: {exc.strerror or exc}") from exc
    written: list[Path] = []
    for name in sorted(texts):
        path = out / name
        tmp = path.with_name(f".{name}.tmp")
        try:
            with tmp.open("w", encoding="utf-8", newline="\n") as f:
                f.write(texts[name])
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
        logger.info("wrote %s", path)
        written.append(path)
    return written
