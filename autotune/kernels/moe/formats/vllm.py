"""The fused-MoE config files of vLLM and SGLang: reading them, and the rules their configs follow.

A file (named as `vllm_names` describes) holds, for one MoE layer (E experts on this rank,
intermediate size N per shard) on one device, a JSON object mapping M (the token count, as a string) to
the Triton config of the fused MoE kernel: BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
num_warps, num_stages and, on AMD, waves_per_eu, matrix_instr_nonkdim and kpack. vLLM's writer adds a
top-level ``"triton_version"`` (its loader drops it); SGLang keeps files in a ``triton_X_Y_Z`` folder
instead. Other keys (``SPLIT_K``, ``USE_TMA``, ...) appear in entries. Writing is `vllm_export`.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from autotune.core.config import Config
from autotune.core.result import Source, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db.bounds import MAX_M, out_of_range
from autotune.db.foreign import JSON_PROJECTS, Found, ImportedFile, InteropError, device_target
from autotune.db.json_members import JsonError, NotAnObject, object_members
from autotune.db.store import NewTrial
from autotune.db.triton_compat import installed_triton, num_stages_0_rejected, parse_version

from .shape import moe_problem, moe_shape_or_unknown
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
    "beyond_target",
    "check_vllm_config",
    "fallback_at",
    "fallback_config",
    "fallback_configs",
    "file_project",
    "kernel_project",
    "plain_keys",
    "project_kernel",
    "read_vllm",
    "sglang_folder_version",
    "vllm_trials",
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


def beyond_target(values: Mapping[str, int], target: Target) -> str | None:
    """Why `values` (a config of a vLLM file) can never launch on `target`, whatever the toolchain: more
    warps than a block holds (`MAX_THREADS` threads: 16 warps of 64 on AMD, 32 of 32 on NVIDIA), or
    more stages than its shared memory (LDS) holds even at one byte an element; None when it fits."""
    warps, most = values["num_warps"], max(1, MAX_THREADS // target.wave_size)
    if warps > most:
        return (
            f"num_warps={warps}: a block of {target.arch} holds at most {most} warps of {target.wave_size} "
            f"threads ({MAX_THREADS} threads)"
        )
    bm, bn, bk, stages = (values[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_stages"))
    need = max(stages - 1, 1) * (bm * bk + bk * bn)
    if need > target.lds_bytes:
        return (
            f"num_stages={stages}: {max(stages - 1, 1)} buffers of the {bm}x{bk} and {bk}x{bn} tiles need "
            f"{_kib(need)} of shared memory at the least (one byte an element); {target.name} has "
            f"{_kib(target.lds_bytes)}"
        )
    return None


#: Threads one block (workgroup) holds at most, on every GPU we know.
MAX_THREADS = 1024


def _kib(size: int) -> str:
    return f"{size >> 10} KiB" if size < 1 << 30 else f"~2**{size.bit_length() - 1} bytes"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(Exception):
    pass


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


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


def _members(name: str, text: IO[str]) -> Iterator[tuple[str, Any]]:
    """The members of the JSON object of file `name` (`object_members`); InteropError naming the file for
    text that is no JSON, of another value, or with a key twice in one object."""
    try:
        yield from object_members(text.read, _DECODER)
    except JsonError as exc:
        raise InteropError(
            f"{name}: not valid JSON: {exc.msg} (line {exc.line}, column {exc.column})"
        ) from None
    except NotAnObject as exc:
        raise InteropError(
            f"{name}: expected a JSON object mapping M (token count) to a config, got {exc.head!r}"
        ) from None
    except _DuplicateKey as exc:
        raise InteropError(f"{name}: key {exc.args[0]!r} appears twice in one object") from None


def _top_level(name: str, open_text: Callable[[], ContextManager[IO[str]]]) -> dict[str, Any]:
    """The top-level keys of file `name` that are no M (``triton_version``), read through the whole file
    once (`open_text` opens it): InteropError for what `_members` refuses, a key twice, an object with
    no member, or more than `_MOST_TOP_KEYS` such keys."""
    top: dict[str, Any] = {}
    seen = bytearray(MAX_M // 8 + 1)  # the M keys within bounds, one bit each
    others: set[str] = set()
    n = 0
    with open_text() as text:
        for key, value in _members(name, text):
            n += 1
            m = int(key) if _M_KEY_RE.fullmatch(key) and len(key) < 10 else 0
            if 0 < m <= MAX_M:
                if seen[m >> 3] & (1 << (m & 7)):
                    raise InteropError(f"{name}: key {key!r} appears twice in one object")
                seen[m >> 3] |= 1 << (m & 7)
                continue
            if key in others:
                raise InteropError(f"{name}: key {key!r} appears twice in one object")
            if len(others) < _OTHER_KEYS_KEPT:  # beyond: bad keys all the same, their repeats unsaid
                others.add(key)
            if not isinstance(value, dict) and not _M_KEY_RE.fullmatch(key):
                top[key] = value
                if len(top) > _MOST_TOP_KEYS:
                    raise InteropError(
                        f"{name}: more than {_MOST_TOP_KEYS} top-level keys that are no M: no config file"
                    )
    if not n:
        raise InteropError(f"{name}: expected a JSON object mapping M (token count) to a config, got '{{}}'")
    if n == len(top):
        raise InteropError(f"{name}: no M entries, only the keys {', '.join(map(repr, top))}")
    return top


#: The most top-level keys that are no M a config file may have (vLLM's writer adds one).
_MOST_TOP_KEYS = 64
#: The keys that are no M within bounds a file's first read remembers, to find one twice.
_OTHER_KEYS_KEPT = 10_000


def file_project(path: Path, parts: VllmFileName) -> str:
    """The project the config file `path` (its name's `parts`) comes from: told by its folders, nearest
    first (SGLang's ``triton_X_Y_Z`` or ``fused_moe_triton``; vLLM's ``fused_moe``; a folder named
    after a project, as ``sglang``, ``vllm-0.9`` or ``aiter_configs``), else by a name only SGLang
    writes (``per_channel_quant``, ``_down``, ``block_shape=[128, 128]`` with its space), else "vllm"."""
    for folder in reversed(path.parent.parts[-_FOLDERS_LOOKED_AT:]):
        lower = folder.lower()
        if _SGLANG_DIR_RE.fullmatch(folder) or lower == "fused_moe_triton":
            return "sglang"
        if lower == "fused_moe":
            return "vllm"
        named = _PROJECT_DIR_RE.match(lower)
        if named:
            return named[1]
    if parts.per_channel_quant or parts.down:
        return "sglang"
    return "sglang" if parts.filename("sglang") == path.name and parts.block_shape else "vllm"


#: How many of a file's folders, nearest first, may tell its project.
_FOLDERS_LOOKED_AT = 6
_PROJECT_DIR_RE = re.compile(rf"({'|'.join(JSON_PROJECTS)})(?![a-z])")


def project_kernel(kernel: str, project: str) -> str:
    """The kernel name the configs of `project`'s file of kernel `kernel` (`VllmFileName.kernel`) are
    stored under: `kernel` for vLLM's, ``{kernel}@{project}`` for another project's, so that two
    projects' files of one name are two records, never one."""
    return kernel if project == "vllm" else f"{kernel}@{project}"


def kernel_project(name: str) -> tuple[str, str]:
    """(`VllmFileName.kernel`, project) of a kernel name `project_kernel` made."""
    kernel, _, project = name.partition("@")
    return kernel, project or "vllm"


def read_vllm(
    path: Path,
    text: str,
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str,
    project: str | None = None,
) -> ImportedFile:
    """The trials of one vLLM/SGLang config file (its name `path.name`, its content `text`), read whole:
    `vllm_trials`."""
    found = Found()
    trials = vllm_trials(
        path, lambda: io.StringIO(text), found, k=k, topk=topk, source_hash=source_hash, project=project
    )
    return found.file(path, "vllm", trials)


def vllm_trials(
    path: Path,
    open_text: Callable[[], ContextManager[IO[str]]],
    found: Found,
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str,
    project: str | None = None,
) -> Iterator[NewTrial]:
    """The trials of one vLLM/SGLang config file (its name `path.name`; `open_text` opens its text), one
    at a time as read, in the file's order; what else it holds goes to `found`. The file is read twice,
    a chunk at a time (`object_members`): once for its top-level keys and to check it is JSON, then for
    its entries, so memory holds one chunk and one entry however large the file is.

    One trial per M, without a timing (a shipped config is no measurement), under the name's kernel
    (`VllmFileName.kernel`) of the file's project (`project`, else `file_project`; `project_kernel`)
    and `source_hash`, each config completed with `OUR_KEYS` (what vLLM's kernel does). K and top-k:
    given, else those of the one known model served with E and N, else unknown (`UNKNOWN_K`). Stored as
    pruned, with the reason: configs the toolchain would reject (`check_vllm_config`), configs of a
    variant our moe op cannot run, and SPLIT_K other than 1. The trial's extra keeps what a later export
    writes back: the file name, the project (``imported_from``), its entry's key order, its other keys,
    the file's top-level keys (``triton_version``) and its SGLang folder's version. Entries that are no
    config, or that can never launch on the device (`beyond_target`), are skipped as bad, with the
    reason. Raises InteropError naming the file for a bad name, an unknown dtype or device, or bad JSON.
    """
    name = path.name
    parts = VllmFileName.parse(name)
    weights = parts.weights()
    try:
        target = device_target(parts.device_name)
    except InteropError as exc:
        raise InteropError(f"{name}: {exc}") from None
    K, top, how = moe_shape_or_unknown(parts.E, parts.N, k=k, topk=topk, where=name)
    top_level = _top_level(name, open_text)
    folder = sglang_folder_version(path)
    file_triton = top_level.get("triton_version") or (folder.replace("_", ".") if folder else None)
    triton = installed_triton() or (str(file_triton) if file_triton else None)
    variant_reason = parts.why_not_runnable()
    project = found.project = project or file_project(path, parts)
    kernel = project_kernel(parts.kernel, project)
    base_extra: dict[str, Any] = {"file": name, "imported_from": project}
    if top_level:
        base_extra["top"] = top_level
    if folder:
        base_extra["triton_dir"] = folder
    if how.startswith("unknown"):
        base_extra["shape"] = "unknown"
    plain = plain_keys(target)
    base = moe_problem(1, parts.N, K, parts.E, top, dtype="bf16", weights=weights)
    configs: dict[tuple[tuple[str, int], ...], Config] = {}  # an import's entries share few configs
    with open_text() as text:
        for m_key, entry in _members(name, text):
            if m_key in top_level:
                continue
            if not _M_KEY_RE.fullmatch(m_key):
                found.bad(f"key {_shown(m_key)!r}", "not a positive integer M (token count)")
                continue
            try:
                values, other = _entry(m_key, entry)
            except InteropError as exc:
                found.bad(f"M={_shown(m_key)}", str(exc).split(": ", 1)[1])
                continue
            label = f"M={_shown(m_key)}"
            if len(m_key) > len(str(MAX_M)) or int(m_key) > MAX_M:
                found.bad(label, f"out of range: M={_shown(m_key)} is out of range (1 to {MAX_M})")
                continue
            key = tuple(values.items())
            config = configs.get(key)
            if config is None:
                if len(configs) >= _CONFIGS_KEPT:
                    configs.clear()
                config = configs[key] = Config(backend=VLLM_BACKEND, **values, **plain)
            extra = {**base_extra, "keys": list(entry)}
            if other:
                extra["other"] = other
            trial = NewTrial(target, kernel, source_hash, base.with_shape(int(m_key), parts.N, K),
                             TrialResult(config, TrialStatus.OK, extra=extra), Source.IMPORTED)  # fmt: skip
            beyond = out_of_range(trial) or beyond_target(values, target)
            if beyond:
                found.bad(label, f"out of range: {beyond}")
                continue
            reasons = check_vllm_config(values, target, triton)
            if other.get("SPLIT_K", 1) != 1:
                reasons.append(f"SPLIT_K={other['SPLIT_K']!r}: vLLM's fused MoE kernel has no split-K")
            if variant_reason:
                reasons.append(f"reference only: {variant_reason}")
            if reasons:
                why = "; ".join(reasons)
                trial = replace(trial, result=TrialResult(config, TrialStatus.PRUNED, error=why, extra=extra))
                found.flag(label, why)
            yield found.count(trial)
    summary = f"{target} E={parts.E} N={parts.N}"
    summary += f" K={K} topk={top}" if not how.startswith("unknown") else " K and topk unknown"
    summary += f" weights {weights}" + (f" [{parts.variant}]" if parts.variant else "")
    if how:
        summary += f" (K and topk {how})" if how.startswith("unknown") else f" (K and topk of {how})"
    elif k is not None and topk is not None:
        summary += " (K and topk given)"
    found.summary = summary + ("" if project == "vllm" else f", from {project}")


def _shown(key: str) -> str:
    """A key of a file as a report shows it: itself, or its head and length where it is long."""
    return key if len(key) <= 24 else f"{key[:12]}... ({len(key)} characters)"


#: The most configs one file's read keeps to share among its entries.
_CONFIGS_KEPT = 4096
