"""The tuned-config database: SQLAlchemy models, the Store, and exporters.

SQLAlchemy is imported with this package; pandas only when `export_csv` is called.
"""

from __future__ import annotations

from pathlib import Path

from .models import SCHEMA_VERSION
from .records import GpuRecord, GpuSummary, Summary, TrialRecord, Winner
from .store import Store, StoreError, resolve_url

__all__ = [
    "SCHEMA_VERSION",
    "GpuRecord",
    "GpuSummary",
    "Store",
    "StoreError",
    "Summary",
    "TrialRecord",
    "Winner",
    "export_csv",
    "resolve_url",
]


def export_csv(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes one tuned CSV per GPU into `out_dir`; see `autotune.db.export.export_csv`."""
    from .export import export_csv as _export_csv

    return _export_csv(store, out_dir, fingerprint)
