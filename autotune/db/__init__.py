"""The tuned-config database: SQLAlchemy models, the Store, exporters and importers.

SQLAlchemy is imported with this package; pandas only when `export_csv` is called. Other projects' files
are read by `autotune.db.interop`, which tells a file's format and finds its reader among the ops' format
parts (`autotune.db.formats`: vLLM/SGLang's fused-MoE JSON and aiter's fused-MoE CSV are the MoE's) or
its own readers of tables several ops share (`autotune.db.aiter_gemm`, `autotune.db.tunableop`), imported
when `import_files`, `export_vllm` or `export_aiter` is first called. Schema migrations (Alembic) live in
`autotune.db.migrations`, imported when `upgrade_schema` is first called.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .models import SCHEMA_VERSION
from .records import GpuRecord, GpuSummary, Holdings, Summary, SweepRecord, TrialRecord, Winner
from .store import NewTrial, Store, StoreError, resolve_url

if TYPE_CHECKING:
    from .interop import ImportedFile
    from .migrations import Upgrade

__all__ = [
    "SCHEMA_VERSION",
    "GpuRecord",
    "GpuSummary",
    "Holdings",
    "NewTrial",
    "Store",
    "StoreError",
    "Summary",
    "SweepRecord",
    "TrialRecord",
    "Winner",
    "export_aiter",
    "export_csv",
    "export_vllm",
    "import_files",
    "resolve_url",
    "upgrade_schema",
]

logger = logging.getLogger(__name__)


def export_aiter(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes our measured GEMM winners as aiter's tuned-GEMM tables into `out_dir`; see
    `autotune.db.aiter_export.export_aiter`."""
    from .aiter_export import export_aiter as _export_aiter

    return _export_aiter(store, out_dir, fingerprint)


def export_csv(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes one tuned CSV per GPU into `out_dir`; see `autotune.db.export.export_csv`."""
    from .export import export_csv as _export_csv

    return _export_csv(store, out_dir, fingerprint)


def export_vllm(
    store: Store,
    out_dir: str | Path,
    fingerprint: str | None = None,
    flavor: str = "vllm",
    *,
    triton_version: str | None = None,
    drop_flagged: bool = False,
    predicted: bool = False,
) -> list[Path]:
    """Writes the configs of vLLM's (or SGLang's) fused-MoE config files, the notes of what was left out
    or conflicts logged as warnings; the paths written. The exporter is the op's whose configs those
    files hold (`autotune.db.formats.exporter`)."""
    from .formats import exporter

    done = exporter("vllm").write(
        store, out_dir, fingerprint, flavor,
        triton_version=triton_version, drop_flagged=drop_flagged, predicted=predicted,
    )  # fmt: skip
    for note in done.notes:
        logger.warning("%s", note)
    return done.paths


def import_files(
    store: Store,
    paths: Sequence[str | Path],
    *,
    k: int | None = None,
    topk: int | None = None,
    source_hash: str | None = None,
) -> list[ImportedFile]:
    """Imports vLLM/SGLang config files, aiter CSVs and TunableOp results (files or folders), each file on
    its own; see `autotune.db.interop.import_files`."""
    from .interop import import_files as _import_files

    return _import_files(store, paths, k=k, topk=topk, source_hash=source_hash)


def upgrade_schema(url: str | None = None) -> Upgrade:
    """Migrates the database at `url` to the current schema version (``autotune db upgrade``); see
    `autotune.db.migrations.upgrade`."""
    from .migrations import upgrade

    return upgrade(url)
