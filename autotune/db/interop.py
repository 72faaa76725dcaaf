"""Importing the tuned configs other projects ship: `read_imports` and `import_files`.

The formats live in their own modules: `autotune.db.vllm` (the fused-MoE JSON configs of vLLM and
SGLang), `autotune.db.aiter` (aiter's tuned fused-MoE CSV), `autotune.db.aiter_gemm` (aiter's tuned GEMM
tables) and `autotune.db.tunableop` (PyTorch TunableOp results); what they share is in
`autotune.db.foreign`. Paths may be files or folders (searched recursively for ``.json`` and ``.csv``
files); a file's format is told by its content. Each file is its own unit: read and checked, then
written in its own transaction (`Store.record_many`); a file that cannot be imported is reported with
the reason and never stops or rolls back another.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .bounds import out_of_range, read_bounded
from .foreign import ImportedFile, InteropError, moe_source_hash
from .tunableop import looks_like_tunableop

if TYPE_CHECKING:
    from .store import NewTrial, Store

__all__ = ["ImportedFile", "InteropError", "expand_paths", "import_files", "read_imports"]

logger = logging.getLogger(__name__)

_SUFFIXES = (".json", ".csv")


def _detect(path: Path, text: str) -> str:
    """The format of `text`: "vllm" (a JSON object, or a .json file), "tunableop" (Validator or result
    lines), "aiter-gemm" (a header with cu_num, M, N and K), "aiter" (aiter's fused-MoE CSV: a header with
    cu_num and token; an empty or cu_num-headed .csv, whose reader then says what it lacks)."""
    head = text.lstrip()
    if path.suffix.lower() == ".json" or head.startswith("{"):
        return "vllm"
    if looks_like_tunableop(text):
        return "tunableop"
    header = {c.strip() for c in (head.splitlines()[0] if head else "").split(",")}
    if "cu_num" in header and {"M", "N", "K"} <= header and "token" not in header:
        return "aiter-gemm"
    if "cu_num" in header or (not head and path.suffix.lower() == ".csv"):
        return "aiter"
    raise InteropError(
        f"{path}: cannot tell its format: expected a vLLM/SGLang fused-MoE config (.json), an aiter tuned "
        "CSV (fused MoE or GEMM) or PyTorch TunableOp results (.csv)"
    )


def expand_paths(paths: Sequence[str | Path]) -> Iterator[Path]:
    """Each path of `paths`, a folder as its ``.json`` and ``.csv`` files (recursively, sorted; hidden
    ones left out); a path that does not exist is yielded as it is (reading it reports it)."""
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_dir():
            yield path
            continue
        for found in sorted(path.rglob("*")):
            hidden = any(part.startswith(".") for part in found.relative_to(path).parts)
            if found.is_file() and found.suffix.lower() in _SUFFIXES and not hidden:
                yield found


def _read_one(path: Path, k: int | None, topk: int | None, source_hash: str | None) -> ImportedFile:
    from .aiter import read_aiter
    from .aiter_gemm import read_aiter_gemm
    from .tunableop import read_tunableop
    from .vllm import read_vllm

    try:
        text = read_bounded(path).decode("utf-8")
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        why = f"{path}: cannot read it: {exc.strerror or exc}"
        return ImportedFile(path, "?", "", (), error=why, readable=False)
    try:
        kind = _detect(path, text)
        if kind == "vllm":
            read = read_vllm(path, text, k=k, topk=topk, source_hash=source_hash or moe_source_hash("triton"))
        elif kind == "tunableop":
            read = read_tunableop(path, text)
        elif kind == "aiter-gemm":
            read = read_aiter_gemm(path, text)
        else:
            read = read_aiter(path, text)
    except InteropError as exc:
        return ImportedFile(path, "?", "", (), error=str(exc))
    except RecursionError:
        return ImportedFile(path, "?", "", (), error=f"{path}: nested too deeply to be a config file")
    except (csv.Error, ValueError, OverflowError, MemoryError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return ImportedFile(path, "?", "", (), error=f"{path}: cannot read it as {kind}: {why}")
    return _within_bounds(read)


def _within_bounds(read: ImportedFile) -> ImportedFile:
    """`read` without the trials that hold a value out of bounds (`out_of_range`): those are skipped,
    with the reason, and no more counted as flagged; a file with no entry left is not imported."""
    kept: list[NewTrial] = []
    out: list[tuple[str, str]] = []
    for trial in read.trials:
        why = out_of_range(trial)
        if why is None:
            kept.append(trial)
        else:
            out.append((_label(trial), f"out of range: {why}"))
    if not out:
        return read
    if not kept and not read.skipped:
        entry, why = out[0]
        error = f"{read.path}: no entry within bounds ({len(out)} out of range; {entry}: {why})"
        return ImportedFile(read.path, read.format, read.summary, (), error=error)
    gone = {label for label, _ in out}
    flagged = tuple((e, r) for e, r in read.flagged if e not in gone)
    return replace(read, trials=tuple(kept), flagged=flagged, skipped=(*read.skipped, *out))


def _label(trial: NewTrial) -> str:
    """How a report names the entry of `trial`: its row or line where the file has them, else its M."""
    extra = trial.result.extra
    for key, word in (("row", "row"), ("line", "line")):
        if isinstance(extra.get(key), int):
            return f"{word} {extra[key]}"
    return f"M={trial.problem.M}"


def read_imports(
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
) -> list[ImportedFile]:
    """Reads and checks every file of `paths` (files or folders; vLLM/SGLang .json, aiter's tuned fused-MoE
    and GEMM .csv, PyTorch TunableOp .csv; told apart by content) without writing anything: one
    ImportedFile per file, with `error` set (and `readable` False where it could not be read at all) for
    one that cannot be imported.

    `k` and `topk` are the hidden size and experts per token of the vLLM files (which lack both); where
    absent they are inferred from the file's E and N, else left unknown (`moe_shape_or_unknown`).
    `source_hash` is that of the Triton kernel the vLLM configs are stored under (default: our moe op's,
    see `moe_source_hash`). Raises InteropError for no paths or a bad `k` or `topk`.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InteropError("no files to import")
    if k is not None and k <= 0:
        raise InteropError(f"--k (hidden size) must be a positive integer, got {k}")
    if topk is not None and topk < 1:
        raise InteropError(f"--topk (experts per token) must be at least 1, got {topk}")
    if source_hash is None:
        source_hash = moe_source_hash("triton")
    return [_read_one(path, k, topk, source_hash) for path in expand_paths(paths)]


def import_files(
    store: Store,
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
) -> list[ImportedFile]:
    """Imports `paths` (files or folders) into `store`, each file on its own: `read_imports`, then each
    readable file's trials in a transaction of its own (`Store.record_many`; trials already stored are
    skipped, so importing twice writes nothing new). Returns the files with `written` set (None for one
    that was skipped). Raises InteropError for no paths or a bad `k`/`topk`, StoreError for the
    database (files before it stay written)."""
    files = read_imports(paths, k=k, topk=topk, source_hash=source_hash)
    out: list[ImportedFile] = []
    for f in files:
        if f.error:
            logger.info("skipped %s", f.error)  # the caller reports it
            out.append(f)
            continue
        written = store.record_many(list(f.trials))
        out.append(replace(f, written=sum(written)))
    total = sum(f.written or 0 for f in out)
    logger.info("imported %d new trials from %d files into %s", total, len(out), store.display_url)
    return out
