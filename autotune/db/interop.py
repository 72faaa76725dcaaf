"""Importing the tuned MoE configs other projects ship: `read_imports` and `import_files`.

The formats live in their own modules: `autotune.db.vllm` (the fused-MoE JSON configs of vLLM and
SGLang, read and written) and `autotune.db.aiter` (aiter's tuned fused-MoE CSV, read); what they share
is in `autotune.db.foreign`. Files are imported all or nothing: every file is read
and checked first, then every trial is written in one transaction (`Store.record_many`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .foreign import ImportedFile, InteropError, moe_source_hash

if TYPE_CHECKING:
    from .store import Store

__all__ = ["ImportedFile", "InteropError", "import_files", "read_imports"]

logger = logging.getLogger(__name__)


def _detect(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "vllm"
    if suffix == ".csv":
        return "aiter"
    head = text.lstrip()
    if head.startswith("{"):
        return "vllm"
    first = head.splitlines()[0] if head else ""
    if "cu_num" in first and "token" in first:
        return "aiter"
    raise InteropError(
        f"{path}: cannot tell its format: expected a vLLM/SGLang fused-MoE config (.json) or an aiter "
        "tuned fused-MoE CSV (.csv)"
    )


def read_imports(
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
) -> list[ImportedFile]:
    """Reads and checks every file of `paths` (vLLM/SGLang .json or aiter .csv, by extension, else by
    content) without writing anything.

    `k` and `topk` are the hidden size and experts per token of the vLLM files (which lack both); where
    absent they are inferred from the file's E and N (`infer_moe_shape`). `source_hash` is that of the
    Triton kernel the vLLM configs are stored under (default: our moe op's, see `moe_source_hash`).
    Raises InteropError, naming the file (and key or row), at the first problem.
    """
    from .aiter import read_aiter
    from .vllm import read_vllm

    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InteropError("no files to import")
    if k is not None and k <= 0:
        raise InteropError(f"--k (hidden size) must be a positive integer, got {k}")
    if topk is not None and topk < 1:
        raise InteropError(f"--topk (experts per token) must be at least 1, got {topk}")
    out: list[ImportedFile] = []
    triton_hash: str | None = source_hash
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InteropError(f"{path}: not a UTF-8 text file") from None
        except OSError as exc:
            raise InteropError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        if _detect(path, text) == "vllm":
            if triton_hash is None:
                triton_hash = moe_source_hash("triton")
            out.append(read_vllm(path, text, k=k, topk=topk, source_hash=triton_hash))
        else:
            out.append(read_aiter(path, text))
    return out


def import_files(
    store: Store,
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
) -> list[ImportedFile]:
    """Imports `paths` into `store`, all or nothing: `read_imports`, then every trial of every file in
    one transaction (`Store.record_many`; trials already stored are skipped, so importing twice writes
    nothing new). Returns the files with `written` set. Raises InteropError (a bad file) or StoreError
    (the database), and then nothing was written."""
    files = read_imports(paths, k=k, topk=topk, source_hash=source_hash)
    written = store.record_many([t for f in files for t in f.trials])
    out: list[ImportedFile] = []
    start = 0
    for f in files:
        n = len(f.trials)
        out.append(replace(f, written=sum(written[start : start + n])))
        start += n
    logger.info("imported %d new trials from %d files into %s", sum(written), len(files), store.display_url)
    return out
