"""Importing the tuned configs other projects ship: `read_imports` and `import_files`.

The formats live in their own modules: `autotune.db.vllm` (the fused-MoE JSON configs of vLLM and
SGLang), `autotune.db.aiter` (aiter's tuned fused-MoE CSV), `autotune.db.aiter_gemm` (aiter's tuned GEMM
tables) and `autotune.db.tunableop` (PyTorch TunableOp results); what they share is in
`autotune.db.foreign`. Paths may be files or folders (searched recursively for ``.json`` and ``.csv``
files); a file's format is told by its content. Each file is its own unit, written in its own
transaction: a JSON file read and checked whole, then written (`Store.record_many`); a CSV streamed, its
trials written as they are read (`Store.record_stream`), so that a file of any size takes bounded
memory. Every value is checked against `autotune.db.bounds` first. A file that cannot be imported is
reported with the reason and never stops or rolls back another.
"""

from __future__ import annotations

import codecs
import csv
import gc
import io
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.registry import load_plugins
from autotune.core.result import TrialStatus

from .bounds import open_bounded, out_of_range, read_bounded
from .foreign import Found, ImportedFile, InteropError, moe_source_hash
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
    kind = "?"
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
    except Exception as exc:
        error = _read_error(path, kind, exc)
        if error is None:
            raise
        return ImportedFile(path, "?", "", (), error=error)
    return _within_bounds(read)


def _within_bounds(read: ImportedFile) -> ImportedFile:
    """`read` without the trials that hold a value out of bounds (`out_of_range`): those are skipped,
    with the reason, and no more counted as flagged; a file with no entry left is not imported."""
    found = Found(list(read.flagged), list(read.skipped))
    kept = tuple(_bounded(read.trials, found))
    if len(kept) == len(read.trials):
        return read
    error = _nothing_within(read.path, found, len(kept))
    if error:
        return ImportedFile(read.path, read.format, read.summary, (), error=error)
    return replace(read, trials=kept, flagged=tuple(found.flagged), skipped=tuple(found.skipped))


def _bounded(trials: Iterable[NewTrial], found: Found) -> Iterator[NewTrial]:
    """`trials` but those out of bounds, which go to `found.skipped` with the reason (and leave its
    flagged entries and counts)."""
    for trial in trials:
        why = out_of_range(trial)
        if why is None:
            yield trial
            continue
        label = _label(trial)
        if trial.result.status is TrialStatus.OK:
            found.n_ok = max(0, found.n_ok - 1)
        else:
            found.n_flagged = max(0, found.n_flagged - 1)
            if found.flagged and found.flagged[-1][0] == label:
                found.flagged.pop()
        found.skipped.append((label, f"{_OUT_OF_RANGE}{why}"))


_OUT_OF_RANGE = "out of range: "


def _nothing_within(path: Path, found: Found, kept: int) -> str:
    """Why the file `path` is not imported where every entry it has is out of bounds; "" otherwise."""
    out = [(e, r) for e, r in found.skipped if r.startswith(_OUT_OF_RANGE)]
    if kept or not out or len(out) != len(found.skipped):
        return ""
    entry, why = out[0]
    return f"{path}: no entry within bounds ({len(out)} out of range; {entry}: {why})"


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
    paths = _check_args(paths, k, topk)
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
    """Imports `paths` (files or folders) into `store`, each file on its own, in a transaction of its own
    (trials already stored are skipped, so importing twice writes nothing new): a vLLM/SGLang file read
    whole (`read_imports`), then written (`Store.record_many`); a CSV (aiter, TunableOp) streamed: its
    trials written as they are read, a chunk at a time (`Store.record_stream`), so that memory does not
    grow with the file; an error part-way rolls the whole file back. Returns the files with `written`
    set (None for one that was skipped; a streamed file keeps no trials, only their counts). Raises
    InteropError for no paths or a bad `k`/`topk`, StoreError for the database (files before it stay
    written)."""
    paths = _check_args(paths, k, topk)
    out: list[ImportedFile] = []
    with _heap_frozen(), _young_collections_rare():
        for path in expand_paths(paths):
            f = _import_one(store, path, k, topk, source_hash)
            if f.error:
                logger.info("skipped %s", f.error)  # the caller reports it
            out.append(f)
    total = sum(f.written or 0 for f in out)
    logger.info("imported %d new trials from %d files into %s", total, len(out), store.display_url)
    return out


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Runs the block with the objects alive before it left out of the garbage collector's passes
    (`gc.freeze`): the ops' modules (loaded first: every problem needs its op's rules) and torch's are
    many, and an import makes so many small objects that the collector would otherwise walk them all
    again and again. A heap frozen already, on purpose, is left as it is."""
    load_plugins()
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _young_collections_rare() -> Iterator[None]:
    """Runs the block with the collector's youngest generation collected only once `_YOUNG_THRESHOLD`
    more objects were made than freed (not 700): an import's objects (a row's, a chunk's) are freed by
    their reference counts, not by the collector, and a chunk holds fewer than that, so the collector
    would otherwise walk each chunk's objects again and again before they are freed. Garbage in cycles
    is still collected, at most that many objects later."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], _YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


#: Objects made and not yet freed after which an import's young generation is collected.
_YOUNG_THRESHOLD = 100_000


def _import_one(
    store: Store, path: Path, k: int | None, topk: int | None, source_hash: str | None
) -> ImportedFile:
    """Imports one file: read whole and written (vLLM JSON), or streamed (the CSV formats)."""
    from .aiter import aiter_trials
    from .aiter_gemm import aiter_gemm_trials
    from .tunableop import tunableop_trials

    try:
        with open_bounded(path) as raw:  # a character the head cuts in two is decoded with the rest
            head = codecs.getincrementaldecoder("utf-8")().decode(raw.read(_HEAD_BYTES), final=False)
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        why = f"{path}: cannot read it: {exc.strerror or exc}"
        return ImportedFile(path, "?", "", (), error=why, readable=False)
    try:
        kind = _detect(path, head)
    except InteropError as exc:
        return ImportedFile(path, "?", "", (), error=str(exc))
    if kind == "vllm":  # our moe op's version, where a file needs it: it imports the kernels
        f = _read_one(path, k, topk, source_hash or moe_source_hash("triton"))
        return f if f.error else replace(f, written=sum(store.record_many(list(f.trials))))
    readers = {"tunableop": tunableop_trials, "aiter-gemm": aiter_gemm_trials, "aiter": aiter_trials}
    found = Found()
    try:
        with open_bounded(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as lines:
            written = store.record_stream(_bounded(readers[kind](path, lines, found), found))
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        return ImportedFile(
            path, "?", "", (), error=f"{path}: cannot read it: {exc.strerror or exc}", readable=False
        )
    except Exception as exc:
        error = _read_error(path, kind, exc)
        if error is None:
            raise
        return ImportedFile(path, "?", "", (), error=error)
    error = _nothing_within(path, found, found.n_ok + found.n_flagged)
    if error:
        return ImportedFile(path, "?", "", (), error=error)
    fmt = "tunableop" if kind == "tunableop" else "aiter"
    notes = (tuple(found.flagged), tuple(found.skipped))
    return ImportedFile(
        path, fmt, found.summary, (), *notes, written=written, streamed=(found.n_ok, found.n_flagged)
    )


#: How much of a file its format is told by.
_HEAD_BYTES = 1 << 16


def _read_error(path: Path, kind: str, exc: BaseException) -> str | None:
    """Why `path` (of format `kind`) cannot be imported, where `exc` says it of the file's content; None
    for an error of another kind (the database's, a bug)."""
    if isinstance(exc, InteropError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return f"{path}: nested too deeply to be a config file"
    if isinstance(exc, (csv.Error, ValueError, OverflowError, MemoryError)):
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"{path}: cannot read it as {kind}: {why}"
    return None


def _check_args(paths: Sequence[str | Path], k: int | None, topk: int | None) -> Sequence[str | Path]:
    """`paths` as a sequence; InteropError for none, or a bad `k` or `topk`."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InteropError("no files to import")
    if k is not None and k <= 0:
        raise InteropError(f"--k (hidden size) must be a positive integer, got {k}")
    if topk is not None and topk < 1:
        raise InteropError(f"--topk (experts per token) must be at least 1, got {topk}")
    return paths
