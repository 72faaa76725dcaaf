"""The fused-MoE config files of vLLM and SGLang: reading them, and the rules their configs follow.

A file (named as `autotune.db.vllm_names` describes) holds, for one MoE layer (E experts on this rank,
intermediate size N per shard) on one device, a JSON object mapping M (the token count, as a string) to
the Triton config of the fused MoE kernel: BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
num_warps, num_stages and, on AMD, waves_per_eu, matrix_instr_nonkdim and kpack. vLLM's writer adds a
top-level ``"triton_version"`` (its loader drops it); SGLang keeps files in a ``triton_X_Y_Z`` folder
instead. Other keys (``SPLIT_K``, ``USE_TMA``, ...) appear in entries. Writing is `autotune.db.vllm_export`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, TrialResult, TrialStatus
from autotune.core.target import Target

from .foreign import ImportedFile, InteropError, device_target, moe_shape_or_unknown
from .store import NewTrial
from .triton_compat import installed_triton, num_stages_0_rejected, parse_version
from .vllm_names import FLAVORS, FP8_BLOCK_SHAPE, VLLM_KERNEL, VllmFileName
from .vllm_rules import (
    AMD_KEYS,
    OUR_KEYS,
    VLLM_BACKEND,
    VLLM_KEYS,
    fallback_at,
    fallback_config,
    fallback_configs,
    plain_keys,
)

__all__ = [
    "AMD_KEYS",
    "FLAVORS",
    "FP8_BLOCK_SHAPE",
    "OUR_KEYS",
    "VLLM_BACKEND",
    "VLLM_KERNEL",
    "VLLM_KEYS",
    "VllmFileName",
    "check_vllm_config",
    "fallback_at",
    "fallback_config",
    "fallback_configs",
    "plain_keys",
    "read_vllm",
    "sglang_folder_version",
]

logger = logging.getLogger(__name__)

_M_KEY_RE = re.compile(r"[1-9][0-9]*")
_SGLANG_DIR_RE = re.compile(r"triton_(\d+)_(\d+)_(\w+)")


def sglang_folder_version(path: Path) -> str | None:
    """The Triton version of SGLang folder ``triton_X_Y_Z`` that holds `path` ("X_Y_Z"), else None."""
    found = _SGLANG_DIR_RE.fullmatch(path.parent.name)
    return found[0].removeprefix("triton_") if found else None


def _pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def check_vllm_config(
    values: Mapping[str, int], target: Target, triton_version: str | None = None
) -> list[str]:
    """Why Triton `triton_version` (None: unknown) would reject `values` (a config of a vLLM file) on
    `target`: one reason per problem, none when it is fine (`autotune.db.triton_compat`)."""
    reasons: list[str] = []
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps"):
        if not _pow2(values[key]):
            reasons.append(f"{key}={values[key]} is not a power of two, which Triton requires")
    if values["GROUP_SIZE_M"] < 1:
        reasons.append(f"GROUP_SIZE_M={values['GROUP_SIZE_M']} must be at least 1")
    if target.is_amd and values["num_stages"] < 1 and num_stages_0_rejected(parse_version(triton_version)):
        reasons.append(
            f"num_stages={values['num_stages']} is rejected on AMD by Triton {triton_version} "
            "(Triton 3.0 to 3.2 need num_stages >= 1)"
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


def _entry(m_key: str, entry: object) -> tuple[dict[str, int], dict[str, Any]]:
    """(vLLM's keys, other keys) of the config of M key `m_key`; InteropError (naming the M key and the
    parameter) for an entry that is no object, lacks a required key or has a vLLM key that is no
    non-negative integer. Other keys (SPLIT_K, USE_TMA, ...) are kept as they are."""
    where = f"M={m_key}"
    if not isinstance(entry, dict):
        raise InteropError(f"{where}: the config must be a JSON object, got {type(entry).__name__}")
    missing = [key for key in VLLM_KEYS if key not in entry]
    if missing:
        raise InteropError(f"{where}: missing required parameter {missing[0]!r}")
    values: dict[str, int] = {}
    other: dict[str, Any] = {}
    for key, value in entry.items():
        if key not in VLLM_KEYS and key not in AMD_KEYS:
            other[key] = value
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InteropError(f"{where}: {key} must be a non-negative integer, got {value!r}")
        else:
            values[key] = value
    return values, other


def _load(name: str, text: str) -> dict[str, Any]:
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
    return data


def _flavor(path: Path, parts: VllmFileName) -> str:
    """ "sglang" for a file in a ``triton_X_Y_Z`` folder or with a name only SGLang writes, else "vllm"."""
    if sglang_folder_version(path) or parts.per_channel_quant or parts.down:
        return "sglang"
    return "sglang" if parts.filename("sglang") == path.name and parts.block_shape else "vllm"


def read_vllm(
    path: Path, text: str, *, k: int | None = None, topk: int | None = None, source_hash: str
) -> ImportedFile:
    """The trials of one vLLM/SGLang config file (its name `path.name`, its content `text`).

    One trial per M, without a timing (a shipped config is no measurement), under the name's kernel
    (`VllmFileName.kernel`) and `source_hash`, each config completed with `OUR_KEYS` (what vLLM's kernel
    does). K and top-k: given, else those of the one known model served with E and N, else unknown
    (`UNKNOWN_K`). Stored as pruned, with the reason: configs the toolchain would reject
    (`check_vllm_config`), configs of a variant our moe op cannot run, and SPLIT_K other than 1. The
    trial's extra keeps what a later export writes back: the file name, its entry's key order, its
    other keys, the file's top-level keys (``triton_version``) and its SGLang folder's version.
    Entries that are no config are skipped, with the reason. Raises InteropError naming the file for a
    bad name, an unknown dtype or device, or bad JSON.
    """
    name = path.name
    parts = VllmFileName.parse(name)
    weights = parts.weights()
    try:
        target = device_target(parts.device_name)
    except InteropError as exc:
        raise InteropError(f"{name}: {exc}") from None
    K, top, how = moe_shape_or_unknown(parts.E, parts.N, k=k, topk=topk, where=name)
    data = _load(name, text)
    folder = sglang_folder_version(path)
    top_level = {
        key: value
        for key, value in data.items()
        if not isinstance(value, dict) and not _M_KEY_RE.fullmatch(key)
    }
    file_triton = top_level.get("triton_version") or (folder.replace("_", ".") if folder else None)
    triton = installed_triton() or (str(file_triton) if file_triton else None)
    variant_reason = parts.why_not_runnable()
    base_extra: dict[str, Any] = {"file": name, "imported_from": _flavor(path, parts)}
    if top_level:
        base_extra["top"] = top_level
    if folder:
        base_extra["triton_dir"] = folder
    if how.startswith("unknown"):
        base_extra["shape"] = "unknown"
    trials: list[NewTrial] = []
    flagged: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    plain = plain_keys(target)
    m_keys = [key for key in data if key not in top_level]
    for m_key in [key for key in m_keys if not _M_KEY_RE.fullmatch(key)]:
        skipped.append((f"key {m_key!r}", "not a positive integer M (token count)"))
    for m_key in sorted((key for key in m_keys if _M_KEY_RE.fullmatch(key)), key=int):
        try:
            values, other = _entry(m_key, data[m_key])
        except InteropError as exc:
            skipped.append((f"M={m_key}", str(exc).split(": ", 1)[1]))
            continue
        reasons = check_vllm_config(values, target, triton)
        if other.get("SPLIT_K", 1) != 1:
            reasons.append(f"SPLIT_K={other['SPLIT_K']!r}: vLLM's fused MoE kernel has no split-K")
        if variant_reason:
            reasons.append(f"reference only: {variant_reason}")
        config = Config(backend=VLLM_BACKEND, **values, **plain)
        problem = Problem.moe(int(m_key), parts.N, K, parts.E, top, dtype="bf16", weights=weights)
        extra = {**base_extra, "keys": list(data[m_key])}
        if other:
            extra["other"] = other
        status = TrialStatus.PRUNED if reasons else TrialStatus.OK
        result = TrialResult(config, status, error="; ".join(reasons), extra=extra)
        trials.append(NewTrial(target, parts.kernel, source_hash, problem, result, Source.IMPORTED))
        if reasons:
            flagged.append((f"M={m_key}", "; ".join(reasons)))
    if not trials and not skipped:
        raise InteropError(f"{name}: no M entries, only the keys {', '.join(map(repr, top_level))}")
    summary = f"{target} E={parts.E} N={parts.N}"
    summary += f" K={K} topk={top}" if not how.startswith("unknown") else " K and topk unknown"
    summary += f" weights {weights}" + (f" [{parts.variant}]" if parts.variant else "")
    if how:
        summary += f" (K and topk {how})" if how.startswith("unknown") else f" (K and topk of {how})"
    return ImportedFile(path, "vllm", summary, tuple(trials), tuple(flagged), tuple(skipped))
