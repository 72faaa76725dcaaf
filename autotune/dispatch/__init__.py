"""autotune.dispatch: pinned tuned-config tables and the run-time lookup a serving process uses.

Imports only the standard library and autotune's core types (never sqlalchemy, optuna or pandas); torch
is imported lazily, only to detect the running GPU.

Example::

    from autotune import dispatch

    dispatch.load_tables("tables/")          # or set $AUTOTUNE_TABLES
    config = dispatch.lookup(op, M, N, K, dtype="bf16")   # op: its name; None: untuned, use a default
"""

from __future__ import annotations

from autotune.dispatch.dispatcher import (
    Dispatcher,
    UntunedShapeWarning,
    default_dispatcher,
    install_dispatcher,
    load_tables,
    lookup,
    read_untuned_log,
    untuned_log_path,
)
from autotune.dispatch.table import M_POLICIES, Bucket, Entry, Table, TableError

__all__ = [
    "M_POLICIES",
    "Bucket",
    "Dispatcher",
    "Entry",
    "Table",
    "TableError",
    "UntunedShapeWarning",
    "default_dispatcher",
    "install_dispatcher",
    "load_tables",
    "lookup",
    "read_untuned_log",
    "untuned_log_path",
]
