"""Writing moe configs as vLLM's and SGLang's fused-MoE config files: `vllm_json` and `export_vllm`.

A file is written as vLLM's writer writes it: ``json.dumps(doc, indent=4)`` and a newline, top-level
keys first (vLLM's ``triton_version``), then M ascending. An entry's keys are in vLLM's order
(`VLLM_KEYS`, then on AMD `AMD_KEYS`), or, for an imported entry, in its file's order with its other
keys (``SPLIT_K``, ``USE_TMA``, ...) as they were. SGLang looks its files up in
``configs/triton_X_Y_Z/`` (X_Y_Z: the running Triton's version), so ``flavor`` "sglang" writes there
and writes no top-level key (SGLang's loader takes every key for an M).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.config import Config, Value
from autotune.core.problem import Problem
from autotune.core.result import Source, TrialStatus

from .files import write_atomically
from .foreign import InteropError
from .records import GpuRecord, TrialRecord
from .store import Store, StoreError
from .triton_compat import installed_triton
from .vllm import AMD_KEYS, OUR_KEYS, VLLM_BACKEND, VLLM_KEYS
from .vllm_names import FLAVORS, VLLM_KERNEL, VllmFileName

__all__ = ["export_vllm", "sglang_dir", "vllm_json"]

logger = logging.getLogger(__name__)


def sglang_dir(version: str) -> str:
    """SGLang's folder of Triton `version` ("3.4.0" or "3_4_0"): ``triton_3_4_0``."""
    return "triton_" + version.strip().removeprefix("triton_").replace(".", "_")


def _entry(m: int, config: Mapping[str, Value], amd: bool) -> dict[str, Any]:
    """The entry of a measured config, in vLLM's key order; InteropError for what vLLM cannot take."""
    for key, plain in OUR_KEYS.items():
        if key in config and config[key] != plain:
            raise InteropError(f"M={m}: {key}={config[key]!r} has no place in a vLLM config (only {plain})")
    known = (*VLLM_KEYS, *AMD_KEYS, *OUR_KEYS, "backend")
    extra = [key for key in config if key not in known]
    if extra:
        raise InteropError(f"M={m}: parameter {extra[0]!r} has no place in a vLLM config")
    missing = [key for key in VLLM_KEYS if key not in config]
    if missing:
        raise InteropError(f"M={m}: the config lacks {missing[0]!r}")
    entry: dict[str, Any] = {}
    for key in VLLM_KEYS + tuple(key for key in AMD_KEYS if amd and key in config):
        value = config[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InteropError(f"M={m}: {key}={value!r} is not an integer")
        entry[key] = value
    return entry


def vllm_json(
    configs: Mapping[int, Mapping[str, Value]], amd: bool, top: Mapping[str, Any] | None = None
) -> str:
    """The text of a config file of measured `configs` (M → config), as vLLM's writer writes it: `top`
    keys first, M ascending, each entry in vLLM's key order, indent 4, a final newline. InteropError for
    a config that lacks a required key, has one vLLM does not take, or a value that is no integer."""
    doc: dict[str, Any] = dict(top or {})
    for m in sorted(configs):
        doc[str(m)] = _entry(m, configs[m], amd)
    return json.dumps(doc, indent=4) + "\n"


def _imported_entry(record: TrialRecord) -> dict[str, Any]:
    """An imported entry as its file had it: its keys in their order, vLLM's from the config."""
    other = record.extra.get("other", {})
    keys = record.extra.get("keys") or [k for k in (*VLLM_KEYS, *AMD_KEYS) if k in record.config]
    return {key: other[key] if key in other else record.config[key] for key in keys}


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


def _measured(store: Store, fingerprint: str | None) -> list[tuple[GpuRecord, Problem, Config]]:
    """Per (GPU, moe problem) measured, the Triton config to export: the winner, or the fastest measured
    Triton config that vLLM's kernel can run where another backend or such a knob won."""
    chosen: list[tuple[GpuRecord, Problem, Config]] = []
    for w in store.winners(fingerprint):
        if w.problem.op != "moe":
            continue
        if w.best.backend == VLLM_BACKEND and _vllm_runs(w.best.config):
            chosen.append((w.gpu, w.problem, w.best.config))
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
        chosen.append((w.gpu, w.problem, best.config))
    return chosen


@dataclass
class _File:
    """One file to write: who it is for, its top-level keys, its entries, its SGLang folder version."""

    ident: tuple[Any, ...]
    what: str
    gpu: GpuRecord
    top: dict[str, Any] = field(default_factory=dict)
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)
    triton: str | None = None
    flagged: list[str] = field(default_factory=list)


def _imported(
    store: Store, fingerprint: str | None, flavor: str, drop_flagged: bool
) -> dict[str, dict[int, TrialRecord]]:
    """Per file name (spelled as `flavor`), the newest imported record of each M, flagged ones too
    unless `drop_flagged`."""
    out: dict[str, dict[int, TrialRecord]] = {}
    for r in store.trials(fingerprint=fingerprint, source=Source.IMPORTED):
        if r.backend != VLLM_BACKEND or r.kernel.split(":")[0] != VLLM_KERNEL or "file" not in r.extra:
            continue
        if r.status not in (TrialStatus.OK, TrialStatus.PRUNED) or (drop_flagged and not r.ok):
            continue
        try:
            name = VllmFileName.parse(r.extra["file"]).spelled(flavor).filename(flavor)
        except InteropError:
            continue
        held = out.setdefault(f"{r.gpu.id}/{name}", {})
        if r.problem.M not in held or r.id > held[r.problem.M].id:
            held[r.problem.M] = r
    return out


def _plan(
    store: Store, fingerprint: str | None, flavor: str, triton_version: str | None, drop_flagged: bool
) -> dict[str, _File]:
    files: dict[str, _File] = {}
    for gpu, problem, config in sorted(_measured(store, fingerprint), key=lambda c: (c[0].id, c[1])):
        try:
            name = VllmFileName.of(problem, gpu.target, flavor).filename(flavor)
        except InteropError as exc:
            logger.warning("not exported: %s", exc)
            continue
        ident = (gpu.fingerprint, problem.K, problem.topk, problem.dtype_a, problem.dtype_b)
        what = f"K={problem.K} topk={problem.topk} {problem.dtype_a}/{problem.dtype_b} on {gpu}"
        triton = triton_version or gpu.target.toolchain.get("triton")
        top = {"triton_version": triton} if triton and flavor == "vllm" else {}
        held = files.setdefault(name, _File(ident, what, gpu, top, triton=triton))
        if held.ident != ident:
            raise InteropError(
                f"{name}: two groups of winners would share this file: {held.what} and {what}; "
                "export them one at a time (--gpu) or drop one from the database"
            )
        try:
            held.entries[problem.M] = _entry(problem.M, config, gpu.target.is_amd)
        except InteropError as exc:
            raise InteropError(f"{name} ({what}): {exc}") from None
    for key, by_m in sorted(_imported(store, fingerprint, flavor, drop_flagged).items()):
        name = key.split("/", 1)[1]
        first = by_m[min(by_m)]
        if name in files:
            logger.warning("%s: measured configs are exported; the imported file is not", name)
            continue
        top = dict(first.extra.get("top", {})) if flavor == "vllm" else {}
        triton = (
            triton_version
            or first.extra.get("triton_dir")
            or first.extra.get("top", {}).get("triton_version")
        )
        file = _File(("imported", key), f"imported {first.extra['file']}", first.gpu, top, triton=triton)
        for m, r in sorted(by_m.items()):
            file.entries[m] = _imported_entry(r)
            if not r.ok:
                file.flagged.append(f"M={m}")
        files[name] = file
    return files


def _write(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8", newline="\n")

    write_atomically(path, write)


def export_vllm(
    store: Store,
    out_dir: str | Path,
    fingerprint: str | None = None,
    flavor: str = "vllm",
    *,
    triton_version: str | None = None,
    drop_flagged: bool = False,
) -> list[Path]:
    """Writes moe configs as vLLM (or, `flavor` "sglang", SGLang) fused-MoE config files into `out_dir`:
    one file per (GPU, E, N, weights, variant), M ascending, byte-stable.

    Measured moe problems give the Triton config of their winner (the fastest one vLLM's kernel runs
    where another backend or split-K won), imported files their entries as they were (flagged ones
    too, with a warning, unless `drop_flagged`), the newest record of each M; a file both measured and
    imported is written from the measurements. SGLang files go into ``triton_X_Y_Z/`` of
    `triton_version`, else the imported file's folder (or its ``triton_version``), else the measuring
    GPU's Triton, else the installed one. Everything is checked before the first file is written:
    InteropError when two measured groups would share one file (another K or top-k, or another GPU of
    the same name: pick one with `fingerprint`), a config does not fit the format, or no Triton version
    names an SGLang folder; StoreError when there is nothing to export or `out_dir` cannot be written.
    """
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
    files = _plan(store, fingerprint, flavor, triton_version, drop_flagged)
    if not files:
        which = f" for GPU {fingerprint}" if fingerprint else ""
        held = store.holdings("moe", fingerprint=fingerprint).describe()
        raise StoreError(
            f"nothing to export: {store.display_url} holds no moe configs of a Triton kernel{which}"
            f"; it holds {held}: run `autotune sweep` or `autotune import` to add some"
        )
    out = Path(out_dir).expanduser()
    paths: dict[str, Path] = {}
    installed = installed_triton()
    for name, file in files.items():
        if flavor == "sglang":
            version = file.triton or installed
            if not version:
                raise InteropError(
                    f"{name}: no Triton version names its SGLang folder triton_X_Y_Z: Triton is not "
                    "installed here; give --triton-version"
                )
            paths[name] = out / sglang_dir(version) / name
        else:
            paths[name] = out / name
    written: list[Path] = []
    for name in sorted(files, key=lambda n: str(paths[n])):
        file = files[name]
        if file.flagged:
            logger.warning(
                "%s: %d flagged entries (%s) written as the file had them; --drop-flagged leaves them out",
                name, len(file.flagged), ", ".join(file.flagged),
            )  # fmt: skip
        doc: dict[str, Any] = {**file.top, **{str(m): file.entries[m] for m in sorted(file.entries)}}
        _write(paths[name], json.dumps(doc, indent=4) + "\n")
        logger.info("wrote %s", paths[name])
        written.append(paths[name])
    return written
