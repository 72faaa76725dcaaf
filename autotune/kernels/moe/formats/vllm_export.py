"""Writing moe configs as vLLM's and SGLang's fused-MoE config files: `vllm_json` and `export_vllm_files`
(which also says what each file holds and what was left out; `autotune export --format vllm` and
`autotune.db.export_vllm` find it as this op's `Exporter`).

A file is written as vLLM's writer writes it: ``json.dumps(doc, indent=4)`` and a newline, top-level
keys first (vLLM's ``triton_version``), then M ascending. An entry's keys are in vLLM's order
(`VLLM_KEYS`, then on AMD `AMD_KEYS`), or, for an imported entry, in its file's order with its other
keys (``SPLIT_K``, ``USE_TMA``, ...) as they were. SGLang looks its files up in
``configs/triton_X_Y_Z/`` (X_Y_Z: the running Triton's version), so ``flavor`` "sglang" writes there
and writes no top-level key (SGLang's loader takes every key for an M).

Rules for imported files. Each project's file (a record's ``imported_from``) is written whole, from its
own records, never merged with another project's file of the same name: where several projects' files
share a name, the flavor's own project's is written (SGLang's for "sglang", vLLM's for "vllm"), else
vLLM's, else the newest; the others are named in the notes, with the Ms where their configs differ (a
conflict). vLLM never reads SGLang's ``_down`` and ``per_channel_quant`` files: flavor "vllm" leaves
them out, saying so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.config import Config, Value
from autotune.core.problem import Problem
from autotune.core.result import Source, TrialStatus
from autotune.db.export import predicted_winners
from autotune.db.files import write_atomically
from autotune.db.foreign import InteropError
from autotune.db.formats import Export
from autotune.db.records import GpuRecord, TrialRecord
from autotune.db.store import Store, StoreError
from autotune.db.triton_compat import installed_triton

from .shape import MOE_OP, experts
from .vllm import AMD_KEYS, OUR_KEYS, VLLM_BACKEND, VLLM_KEYS, kernel_project
from .vllm_names import FLAVORS, VLLM_KERNEL, VllmFileName

__all__ = ["VllmExport", "export_vllm_files", "sglang_dir", "vllm_json"]

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


def _measured(
    store: Store, fingerprint: str | None, predicted: bool
) -> list[tuple[GpuRecord, Problem, Config, bool]]:
    """Per (GPU, moe problem) measured (and, with `predicted`, per one only predicted there: the cost
    model's pick of a compile-only sweep), the Triton config to export and whether it is a prediction:
    the winner, or the fastest Triton config that vLLM's kernel can run where another backend or such a
    knob won."""
    chosen: list[tuple[GpuRecord, Problem, Config, bool]] = []
    measured = store.winners(fingerprint)
    winners = [(w, w.gpu, Source.MEASURED) for w in measured]
    if predicted:  # under the measured GPU of their device, where there is one
        winners += [(w, gpu, Source.MODEL) for w, gpu in predicted_winners(store, fingerprint, measured)]
    for w, gpu, source in winners:
        if w.problem.op != MOE_OP:
            continue
        guess = source is Source.MODEL
        if w.best.backend == VLLM_BACKEND and _vllm_runs(w.best.config):
            chosen.append((gpu, w.problem, w.best.config, guess))
            continue
        records = store.trials(
            fingerprint=w.gpu.fingerprint, problem=w.problem, status=TrialStatus.OK, source=source
        )
        timed = [
            r for r in records if r.backend == VLLM_BACKEND and r.time_us is not None and _vllm_runs(r.config)
        ]
        if not timed:
            logger.warning(
                "%s on %s: %s won and no Triton config vLLM can run was %s",
                w.problem, w.gpu, w.best.config.short(), "predicted" if guess else "measured",
            )  # fmt: skip
            continue
        best = min(_newest_version(timed), key=lambda r: (r.time_us, r.id))
        chosen.append((gpu, w.problem, best.config, guess))
    return chosen


@dataclass
class _File:
    """One file to write: who it is for, its top-level keys, its entries, its SGLang folder version, the
    Ms of its flagged entries and of its predicted ones, and what it holds in words."""

    ident: tuple[Any, ...]
    what: str
    gpu: GpuRecord
    top: dict[str, Any] = field(default_factory=dict)
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)
    triton: str | None = None
    flagged: list[str] = field(default_factory=list)
    predicted: list[int] = field(default_factory=list)
    holds: str = ""


@dataclass
class _Imported:
    """One project's imported file of one name on one GPU: the newest record of each M, the Ms where an
    older import of it held another config, and the id of its newest record."""

    project: str
    records: dict[int, TrialRecord] = field(default_factory=dict)
    replaced: set[int] = field(default_factory=set)
    newest: int = 0

    def add(self, record: TrialRecord) -> None:
        held = self.records.get(record.problem.M)
        if held is not None and _imported_entry(held) != _imported_entry(record):
            self.replaced.add(record.problem.M)
        if held is None or record.id > held.id:
            self.records[record.problem.M] = record
        self.newest = max(self.newest, record.id)

    def entries(self) -> dict[int, dict[str, Any]]:
        return {m: _imported_entry(r) for m, r in self.records.items()}


def _imported(
    store: Store, fingerprint: str | None, flavor: str, drop_flagged: bool
) -> dict[str, list[_Imported]]:
    """Per file name (spelled as `flavor`), each project's imported file of that name (per GPU): the
    newest record of each M, flagged ones too unless `drop_flagged`."""
    out: dict[str, dict[tuple[int, str], _Imported]] = {}
    for r in store.trials(fingerprint=fingerprint, source=Source.IMPORTED):
        kernel, project = kernel_project(r.kernel)
        if r.backend != VLLM_BACKEND or kernel.split(":")[0] != VLLM_KERNEL or "file" not in r.extra:
            continue
        if r.status not in (TrialStatus.OK, TrialStatus.PRUNED) or (drop_flagged and not r.ok):
            continue
        try:
            name = VllmFileName.parse(r.extra["file"]).spelled(flavor).filename(flavor)
        except InteropError:
            continue
        project = str(r.extra.get("imported_from") or project)
        held = out.setdefault(name, {})
        held.setdefault((r.gpu.id, project), _Imported(project)).add(r)
    return {name: list(files.values()) for name, files in out.items()}


def _ms(ms: Iterable[int]) -> str:
    """Ms as a report lists them: the first eight."""
    shown = sorted(ms)
    return ", ".join(map(str, shown[:8])) + (", ..." if len(shown) > 8 else "")


def _pick(name: str, candidates: list[_Imported], flavor: str, notes: list[str]) -> _Imported:
    """The one of `candidates` (projects' files of one name) that is written as `flavor`: its own
    project's, else vLLM's, else the newest; every other is named in `notes`, with the Ms where its
    configs differ from the one written (a conflict)."""
    ranked = sorted(
        candidates, key=lambda c: (c.project != flavor, c.project != "vllm", -c.newest, c.project)
    )
    chosen = ranked[0]
    mine = chosen.entries()
    for other in ranked[1:]:
        theirs = other.entries()
        differ = [m for m in theirs if m in mine and theirs[m] != mine[m]]
        only = [m for m in theirs if m not in mine]
        hint = f" (`--format {other.project}` writes it)" if other.project in FLAVORS else ""
        what = f"{other.project}'s file of this name" + (
            " (of another GPU of that name)" if other.project == chosen.project else ""
        )
        if differ:
            notes.append(
                f"conflict: {name}: {chosen.project}'s file written; {what} holds other configs at "
                f"{len(differ)} M ({_ms(differ)}) and is not written here{hint}"
            )
        else:
            more = f", and {len(only)} M it alone holds ({_ms(only)})" if only else ""
            notes.append(
                f"{name}: {chosen.project}'s file written; {what}, the same at every M both hold{more}, "
                f"is not written here{hint}"
            )
    if chosen.replaced:
        notes.append(
            f"{name}: {chosen.project}'s file was imported more than once, with other configs at "
            f"{len(chosen.replaced)} M ({_ms(chosen.replaced)}): the newest import of each M is written"
        )
    return chosen


def _vllm_never_reads(name: str) -> str:
    """Why vLLM never reads the file `name` (SGLang's alone: ``_down``, ``per_channel_quant``); "" where
    it does."""
    parts = VllmFileName.parse(name)
    if parts.down:
        return "the second GEMM's configs (_down)"
    return "per-channel quantized weights (per_channel_quant)" if parts.per_channel_quant else ""


def _plan(
    store: Store,
    fingerprint: str | None,
    flavor: str,
    triton_version: str | None,
    drop_flagged: bool,
    predicted: bool,
    notes: list[str],
) -> dict[str, _File]:
    files: dict[str, _File] = {}
    chosen = sorted(_measured(store, fingerprint, predicted), key=lambda c: (c[0].id, c[1]))
    for gpu, problem, config, guess in chosen:
        try:
            name = VllmFileName.of(problem, gpu.target, flavor).filename(flavor)
        except InteropError as exc:
            logger.warning("not exported: %s", exc)
            continue
        topk = experts(problem)[1]
        ident = (gpu.fingerprint, problem.K, topk, problem.dtype_a, problem.dtype_b)
        what = f"K={problem.K} topk={topk} {problem.dtype_a}/{problem.dtype_b} on {gpu}"
        triton = triton_version or gpu.target.toolchain.get("triton")
        top = {"triton_version": triton} if triton and flavor == "vllm" else {}
        holds = f"measured on {gpu}, K={problem.K} topk={topk}"
        held = files.setdefault(name, _File(ident, what, gpu, top, triton=triton, holds=holds))
        if held.ident != ident:
            raise InteropError(
                f"{name}: two groups of winners would share this file: {held.what} and {what}; "
                "export them one at a time (--gpu) or drop one from the database"
            )
        try:
            held.entries[problem.M] = _entry(problem.M, config, gpu.target.is_amd)
        except InteropError as exc:
            raise InteropError(f"{name} ({what}): {exc}") from None
        if guess:
            held.predicted.append(problem.M)
    for file in files.values():
        if file.predicted:
            n, total = len(file.predicted), len(file.entries)
            file.holds += f"; {n} of its {total} entries predicted by the cost model, not measured"
    for name, candidates in sorted(_imported(store, fingerprint, flavor, drop_flagged).items()):
        if name in files:
            notes.append(f"{name}: measured configs are written; the imported file of this name is not")
            continue
        never = _vllm_never_reads(name) if flavor == "vllm" else ""
        if never:
            projects = " and ".join(sorted({c.project for c in candidates}))
            notes.append(
                f"{name}: {projects}'s file not written: vLLM never reads {never} "
                "(`--format sglang` writes it)"
            )
            continue
        pick = _pick(name, candidates, flavor, notes)
        first = pick.records[min(pick.records)]
        top = dict(first.extra.get("top", {})) if flavor == "vllm" else {}
        triton = (
            triton_version
            or first.extra.get("triton_dir")
            or first.extra.get("top", {}).get("triton_version")
        )
        holds = f"{pick.project}'s file imported"
        if first.extra.get("shape") == "unknown":
            holds += "; K and topk unknown: its E and N fit several models, or none known"
        file = _File(("imported", name), f"imported {first.extra['file']}", first.gpu, top, triton=triton)
        for m, r in sorted(pick.records.items()):
            file.entries[m] = _imported_entry(r)
            if not r.ok:
                file.flagged.append(f"M={m}")
        if file.flagged:
            holds += f"; {len(file.flagged)} flagged entries"
            notes.append(
                f"{name}: {len(file.flagged)} flagged entries ({', '.join(file.flagged)}) written as the "
                "file had them; --drop-flagged leaves them out"
            )
        file.holds = holds
        files[name] = file
    return files


def _write(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8", newline="\n")

    write_atomically(path, write)


#: What `export_vllm_files` wrote: each file with what it holds in words (measured, predicted by the cost
#: model, a project's imported file, K and topk unknown, flagged entries), and the notes of what was left
#: out or conflicts.
VllmExport = Export


def export_vllm_files(
    store: Store,
    out_dir: str | Path,
    fingerprint: str | None = None,
    flavor: str = "vllm",
    *,
    triton_version: str | None = None,
    drop_flagged: bool = False,
    predicted: bool = False,
) -> VllmExport:
    """Writes moe configs as vLLM (or, `flavor` "sglang", SGLang) fused-MoE config files into `out_dir`:
    one file per (GPU, E, N, weights, variant), M ascending, byte-stable.

    Measured moe problems give the Triton config of their winner (the fastest one vLLM's kernel runs
    where another backend or split-K won); with `predicted`, problems only predicted (a compile-only
    sweep) the cost model's pick, said so in what the file holds. Imported files give their entries as
    they were (flagged ones too, with a note, unless `drop_flagged`), one project's file whole (the
    module's rules: never two projects' merged; conflicts noted). A file both measured and imported is
    written from the measurements. SGLang files go into ``triton_X_Y_Z/`` of `triton_version`, else
    the imported file's folder (or its ``triton_version``), else the measuring GPU's Triton, else the
    installed one. Everything is checked before the first file is written: InteropError when two
    measured groups would share one file (another K or top-k, or another GPU of the same name: pick one
    with `fingerprint`), a config does not fit the format, or no Triton version names an SGLang folder;
    StoreError when there is nothing to export (naming `predicted` where predictions are stored) or
    `out_dir` cannot be written.
    """
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
    notes: list[str] = []
    files = _plan(store, fingerprint, flavor, triton_version, drop_flagged, predicted, notes)
    if not files:
        which = f" for GPU {fingerprint}" if fingerprint else ""
        holdings = store.holdings(MOE_OP, fingerprint=fingerprint)
        hint = (
            "; add --predicted to export the cost model's picks of compile-only sweeps"
            if not predicted and holdings.counts.get(("model", TrialStatus.OK.value))
            else ""
        )
        raise StoreError(
            f"nothing to export: {store.display_url} holds no moe configs of a Triton kernel{which}"
            f"; it holds {holdings.describe()}: run `autotune sweep` or `autotune import` to add some{hint}"
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
    written: list[tuple[Path, str]] = []
    for name in sorted(files, key=lambda n: str(paths[n])):
        file = files[name]
        doc: dict[str, Any] = {**file.top, **{str(m): file.entries[m] for m in sorted(file.entries)}}
        _write(paths[name], json.dumps(doc, indent=4) + "\n")
        logger.info("wrote %s", paths[name])
        written.append((paths[name], file.holds))
    return VllmExport(tuple(written), tuple(notes))
