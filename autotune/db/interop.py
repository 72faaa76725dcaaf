"""Importing the tuned configs other projects ship: `read_imports` and `import_files`.

A file's format is told here (`_detect`); its reader is the op's that owns the format (a `JsonReader` or
`CsvReader` of the ops' format parts, `autotune.db.formats`: the fused-MoE JSON configs of vLLM and
SGLang, aiter's tuned fused-MoE CSV), or, for a table whose rows several ops share, a reader of the
database's own whose rows the ops claim (`autotune.db.aiter_gemm`: aiter's tuned GEMM tables;
`autotune.db.tunableop`: PyTorch TunableOp results); what they share is in `autotune.db.foreign`. Paths
may be files or folders (searched recursively for ``.json`` and ``.csv``
files; one of those that is no regular file, as a FIFO or a looping link, is reported, never passed
over); a file's format is told by its content. Each file is its own unit, written in its own
transaction, streamed: its trials written as they are read (`Store.record_stream`), so that a file of
any size takes bounded memory (a JSON config file is read a chunk at a time,
`autotune.db.json_members`). Every value is checked against `autotune.db.bounds` first. A file that
cannot be imported is reported with the reason and never stops or rolls back another; one whose every
entry is bad fails as an unreadable one does.

Each file keeps the project it came from (told by its folders and name, or `project` given): two
projects' config files of one name are two records, and where they hold different configs for one M the
import says so (`ImportedFile.warnings`). K and top-k of the vLLM-style files come from `ShapeFlag`s
(per shape or file), else from `k` and `topk`, else from the file's E and N; one flag set applied to
files of different E and N is warned of.
"""

from __future__ import annotations

import codecs
import csv
import fnmatch
import functools
import gc
import io
import itertools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from autotune.core.registry import load_plugins
from autotune.core.result import TrialStatus

from .bounds import open_bounded, out_of_range, read_bounded
from .foreign import JSON_PROJECTS, Found, ImportedFile, InteropError
from .formats import CsvReader, JsonReader, parts
from .tunableop import looks_like_tunableop

if TYPE_CHECKING:
    from autotune.core.config import Config

    from .store import NewTrial, Store

__all__ = ["ImportedFile", "InteropError", "ShapeFlag", "expand_paths", "import_files", "read_imports"]

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
    if "token" not in header and ({"M", "N", "K"} <= header or len(header & _GEMM_COLUMNS) >= 2):
        if "cu_num" not in header:
            raise InteropError(f"{path}: an aiter tuned-GEMM CSV, but it lacks the column cu_num (the GPU)")
        return "aiter-gemm"  # whose reader says which of its columns it lacks
    if "cu_num" in header or (not head and path.suffix.lower() == ".csv"):
        return "aiter"
    raise InteropError(
        f"{path}: cannot tell its format: expected a vLLM/SGLang fused-MoE config (.json), an aiter tuned "
        "CSV (fused MoE or GEMM) or PyTorch TunableOp results (.csv)"
    )


#: Columns only aiter's tuned-GEMM tables have (two of them tell one that lacks M, N or K).
_GEMM_COLUMNS = frozenset(
    ("M", "N", "K", "kernelName", "solidx", "kernelId", "splitK", "libtype", "outdtype")
)


def expand_paths(paths: Sequence[str | Path]) -> Iterator[Path]:
    """Each path of `paths`, a folder as its ``.json`` and ``.csv`` entries (recursively, sorted; hidden
    ones left out) but its folders: those that are no regular file (a FIFO, a device, a link that loops
    or leads nowhere) too, so that reading them reports them. A path that does not exist is yielded as
    it is (reading it reports it)."""
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_dir():
            yield path
            continue
        for found in sorted(path.rglob("*")):
            hidden = any(part.startswith(".") for part in found.relative_to(path).parts)
            if found.suffix.lower() in _SUFFIXES and not hidden and not found.is_dir():
                yield found


@dataclass(frozen=True)
class ShapeFlag:
    """K and top-k for the vLLM-style files a pattern names (``--shape PATTERN:K,TOPK``): ``E=128,N=384``
    names the files of those E and N; anything else a file (its path or name) or a folder above it, or a
    glob of either."""

    pattern: str
    k: int
    topk: int

    @classmethod
    def parse(cls, text: str) -> ShapeFlag:
        """``PATTERN:K,TOPK`` (or ``PATTERN:K=..,topk=..``); InteropError for anything else."""
        pattern, sep, shape = text.rpartition(":")
        found = _SHAPE_RE.fullmatch(shape.replace(" ", ""))
        if not sep or not pattern or found is None:
            raise InteropError(
                f"--shape {text!r}: expected PATTERN:K,TOPK, e.g. E=128,N=384:2048,8 or qwen3-30b/:2048,8"
            )
        k, topk = int(found["k"]), int(found["topk"])
        if k <= 0 or topk < 1:
            raise InteropError(f"--shape {text!r}: K must be positive and TOPK at least 1")
        return cls(pattern, k, topk)

    def matches(self, path: Path) -> bool:
        """Whether the file `path` is one this flag names."""
        en = _EN_RE.fullmatch(self.pattern)
        if en is not None:
            name = _EN_RE.match(path.name)
            return name is not None and name.group(0) == en.group(0)
        pattern = self.pattern.rstrip("/") or "/"
        where = str(path)
        if where == pattern or path.name == pattern or f"/{pattern}/" in f"/{where}":
            return True
        return fnmatch.fnmatchcase(path.name, pattern) or fnmatch.fnmatchcase(where, pattern)

    def __str__(self) -> str:
        return f"K={self.k}, topk={self.topk} (--shape {self.pattern}:{self.k},{self.topk})"


_SHAPE_RE = re.compile(r"(?:K=)?(?P<k>\d+),(?:topk=)?(?P<topk>\d+)", re.IGNORECASE)
_EN_RE = re.compile(r"E=\d+,N=\d+")


def _shapes(
    files: Sequence[Path],
    k: int | None,
    topk: int | None,
    flags: Sequence[ShapeFlag],
    warn: Callable[[str], None],
) -> dict[Path, tuple[int | None, int | None, list[str]]]:
    """(K, top-k, warnings) of each config file of `files` that `flags` (else `k` and `topk`) name, as the
    JSON readers plan them (`JsonReader.plan`)."""
    out: dict[Path, tuple[int | None, int | None, list[str]]] = {}
    for reader in _json_readers().values():
        out.update(reader.plan(files, k, topk, flags, warn))
    return out


def _read_one(
    path: Path, k: int | None, topk: int | None, source_hash: str | None, project: str | None
) -> ImportedFile:
    """Reads and checks one file, as `_import_one` would import it, keeping its trials."""
    try:
        head = _head(path)
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        why = f"{path}: cannot read it: {exc.strerror or exc}"
        return ImportedFile(path, "?", "", (), error=why, readable=False)
    kind = "?"
    found = Found()
    try:
        kind = _detect(path, head)
        json_reader = _json_readers().get(kind)
        if json_reader is not None:
            opener = functools.partial(_open_text, path)
            trials = json_reader.trials(
                path, opener, found, k=k, topk=topk, source_hash=source_hash, project=project
            )
        else:
            text = read_bounded(path).decode("utf-8")
            trials = _csv_reader(path, kind)(path, io.StringIO(text), found)
        read = found.file(path, _FORMATS[kind], _bounded(trials, found))
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        why = f"{path}: cannot read it: {exc.strerror or exc}"
        return ImportedFile(path, "?", "", (), error=why, readable=False)
    except Exception as exc:
        error = _read_error(path, kind, exc)
        if error is None:
            raise
        return ImportedFile(path, "?", "", (), error=error)
    if found.all_bad(path):
        return ImportedFile(path, read.format, read.summary, (), error=found.all_bad(path), all_bad=True)
    return read


#: The format an ImportedFile names, of each kind `_detect` tells.
_FORMATS = {"vllm": "vllm", "tunableop": "tunableop", "aiter-gemm": "aiter", "aiter": "aiter"}


def _json_readers() -> dict[str, JsonReader]:
    """The reader of each JSON format the ops read, by the kind `_detect` tells."""
    return {reader.format: reader for reader in reversed(parts(JsonReader))}


def _csv_reader(path: Path, kind: str) -> Callable[[Path, Iterable[str], Found], Iterator[NewTrial]]:
    """The streaming reader of the CSV kind `kind` (as `_detect` tells it) of the file `path`: the
    database's own for a table whose rows several ops share, else the op's that reads it; InteropError
    where no op reads it."""
    from .aiter_gemm import aiter_gemm_trials
    from .tunableop import tunableop_trials

    shared = {"tunableop": tunableop_trials, "aiter-gemm": aiter_gemm_trials}
    readers = {**{reader.format: reader.trials for reader in reversed(parts(CsvReader))}, **shared}
    if kind not in readers:
        raise InteropError(f"{path}: no op of ours reads {kind} files")
    return readers[kind]


def _head(path: Path) -> str:
    """The first `_HEAD_BYTES` of the file `path`, decoded (a character they cut in two is left out)."""
    with open_bounded(path) as raw:
        return codecs.getincrementaldecoder("utf-8")().decode(raw.read(_HEAD_BYTES), final=False)


@contextmanager
def _open_text(path: Path) -> Iterator[IO[str]]:
    """The regular file `path` (`open_bounded`) as UTF-8 text."""
    with open_bounded(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as text:
        yield text


def _bounded(trials: Iterable[NewTrial], found: Found) -> Iterator[NewTrial]:
    """`trials` but those out of bounds, which go to `found.skipped` as bad, with the reason (and leave
    its flagged entries and counts)."""
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
            found.unflag(label)
        found.bad(label, f"out of range: {why}")


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
    shapes: Sequence[ShapeFlag] = (),
    project: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[ImportedFile]:
    """Reads and checks every file of `paths` (files or folders; vLLM/SGLang .json, aiter's tuned fused-MoE
    and GEMM .csv, PyTorch TunableOp .csv; told apart by content) without writing anything: one
    ImportedFile per file, with `error` set (and `readable` False where it could not be read at all,
    `all_bad` True where every entry was bad) for one that cannot be imported.

    `shapes`, `k` and `topk` give the hidden size and experts per token of the vLLM files (which lack
    both): the first of `shapes` that names a file, else `k` and `topk`; where absent they are inferred
    from the file's E and N, else left unknown. `project` is the project the vLLM files come from
    (default: told by their folders and names). `source_hash` is that of the Triton kernel the vLLM
    configs are stored under (default: the reader's, our own kernel's). `warn` is told what concerns more
    than one file (one flag set applied to files of different E and N; default: logged as a warning).
    Raises InteropError for no paths or a bad `k`, `topk` or `project`.
    """
    paths = _check_args(paths, k, topk, project)
    files = list(expand_paths(paths))
    plan = _shapes(files, k, topk, shapes, warn or _log_warning)
    out = []
    for path in files:
        fk, ftopk, warnings = plan.get(path, (k, topk, []))
        f = _read_one(path, fk, ftopk, source_hash, project)
        out.append(replace(f, warnings=(*warnings, *f.warnings)) if warnings else f)
    return out


def import_files(
    store: Store,
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
    shapes: Sequence[ShapeFlag] = (),
    project: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[ImportedFile]:
    """Imports `paths` (files or folders) into `store`, each file on its own, in a transaction of its own
    (trials already stored are skipped, so importing twice writes nothing new), streamed: its trials
    written as they are read, a chunk at a time (`Store.record_stream`), so that memory does not grow
    with the file; an error part-way rolls the whole file back. `shapes`, `k`, `topk`, `project`,
    `source_hash` and `warn` as `read_imports` takes them. A vLLM-style file whose configs differ, at
    some M, from those another project's file of the same name holds here is imported all the same (a
    record of its own project) and says so in its `warnings`. Returns the files with `written` set (None
    for one that was skipped; a streamed file keeps no trials, only their counts). Raises InteropError
    for no paths or a bad `k`/`topk`/`project`, StoreError for the database (files before it stay
    written)."""
    paths = _check_args(paths, k, topk, project)
    out: list[ImportedFile] = []
    with _heap_frozen(), _young_collections_rare():
        files = list(expand_paths(paths))
        plan = _shapes(files, k, topk, shapes, warn or _log_warning)
        for path in files:
            fk, ftopk, warnings = plan.get(path, (k, topk, []))
            f = _import_one(store, path, fk, ftopk, source_hash, project)
            if f.error:
                logger.info("skipped %s", f.error)  # the caller reports it
            out.append(replace(f, warnings=(*warnings, *f.warnings)) if warnings else f)
    total = sum(f.written or 0 for f in out)
    logger.info("imported %d new trials from %d files into %s", total, len(out), store.display_url)
    return out


def _log_warning(message: str) -> None:
    logger.warning("%s", message)


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Runs the block with the objects alive before it left out of the garbage collector's passes
    (`gc.freeze`): the ops' modules and their format parts (loaded first: every problem needs its op's
    rules, every file its format's reader) and torch's are many, and an import makes so many small
    objects that the collector would otherwise walk them all again and again. A heap frozen already, on
    purpose, is left as it is."""
    load_plugins()
    parts(object)
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
    store: Store, path: Path, k: int | None, topk: int | None, source_hash: str | None, project: str | None
) -> ImportedFile:
    """Imports one file, streamed: its trials written as they are read."""
    try:
        head = _head(path)
    except UnicodeDecodeError:
        return ImportedFile(path, "?", "", (), error=f"{path}: not a UTF-8 text file", readable=False)
    except OSError as exc:
        why = f"{path}: cannot read it: {exc.strerror or exc}"
        return ImportedFile(path, "?", "", (), error=why, readable=False)
    try:
        kind = _detect(path, head)
    except InteropError as exc:
        return ImportedFile(path, "?", "", (), error=str(exc))
    found = Found()
    conflicts: dict[str, list[int]] = {}
    try:
        json_reader = _json_readers().get(kind)
        if json_reader is not None:
            opener = functools.partial(_open_text, path)
            trials = json_reader.trials(
                path, opener, found, k=k, topk=topk, source_hash=source_hash, project=project
            )
            first = next(trials, None)  # the file read through once, checked, before the write begins
            if first is not None:
                others = json_reader.held(store, first)
                trials = _conflicting(itertools.chain([first], trials), others, conflicts)
            written = store.record_stream(_bounded(trials, found))
        else:
            if project and project != _CSV_PROJECTS[kind]:
                theirs = _CSV_PROJECTS[kind]
                found.warnings.append(
                    f"--project {project} is for config files, not applied: this is {theirs}'s"
                )
            read = _csv_reader(path, kind)
            with open_bounded(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as lines:
                written = store.record_stream(_bounded(read(path, lines, found), found))
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
    fmt = _FORMATS[kind]
    if found.all_bad(path):
        return ImportedFile(path, fmt, found.summary, (), error=found.all_bad(path), all_bad=True)
    warnings = [*found.warnings, *(_conflict_note(p, ms) for p, ms in sorted(conflicts.items()))]
    return ImportedFile(
        path, fmt, found.summary, (), tuple(found.flagged), tuple(found.skipped), written=written,
        streamed=(found.n_ok, found.n_flagged), project=found.project or _CSV_PROJECTS.get(kind, ""),
        warnings=tuple(warnings), more=found.more,
    )  # fmt: skip


#: The project of each CSV format.
_CSV_PROJECTS = {"tunableop": "tunableop", "aiter-gemm": "aiter", "aiter": "aiter"}


def _conflicting(
    trials: Iterable[NewTrial], others: dict[str, dict[int, Config]], conflicts: dict[str, list[int]]
) -> Iterator[NewTrial]:
    """`trials`, noting in `conflicts` (by project) each M where another project's file (`others`) holds
    another config."""
    for trial in trials:
        for project, held in others.items():
            config = held.get(trial.problem.M)
            if config is not None and config != trial.result.config:
                conflicts.setdefault(project, []).append(trial.problem.M)
        yield trial


def _conflict_note(project: str, ms: list[int]) -> str:
    """What an import says of the Ms `ms` where `project`'s file of the same name holds other configs."""
    shown = ", ".join(map(str, ms[:8])) + (", ..." if len(ms) > 8 else "")
    return (
        f"conflict: {project}'s file of this name holds other configs at {len(ms)} M ({shown}); both are "
        "kept, each its own project's (autotune export writes each to its project's layout)"
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


def _check_args(
    paths: Sequence[str | Path], k: int | None, topk: int | None, project: str | None = None
) -> Sequence[str | Path]:
    """`paths` as a sequence; InteropError for none, or a bad `k`, `topk` or `project`."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InteropError("no files to import")
    if k is not None and k <= 0:
        raise InteropError(f"--k (hidden size) must be a positive integer, got {k}")
    if topk is not None and topk < 1:
        raise InteropError(f"--topk (experts per token) must be at least 1, got {topk}")
    if project is not None and project not in JSON_PROJECTS:
        raise InteropError(f"--project {project!r}: config files come from {', '.join(JSON_PROJECTS)}")
    return paths
