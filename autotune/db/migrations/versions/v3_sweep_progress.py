"""Schema version 3: sweep progress in ``sweeps``, so ``autotune status`` shows running sweeps of any host.

New nullable columns: ``pid`` (the sweep's process on its host), ``heartbeat_at`` (updated while it
runs; a running sweep whose heartbeat stopped was killed), ``problems_total``, ``problems_done``,
``trials_done``, ``workers`` (GPU workers) and ``log_path`` (the sweep's log file on its host). Older
rows keep NULL. SQLite alters the table in batch mode.

Revision ID: v3_sweep_progress
Revises: v2_trials_host
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v3_sweep_progress"
down_revision: str | None = "v2_trials_host"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 3

_COLUMNS = (
    ("pid", sa.Integer()),
    ("heartbeat_at", sa.DateTime(timezone=True)),
    ("problems_total", sa.Integer()),
    ("problems_done", sa.Integer()),
    ("trials_done", sa.Integer()),
    ("workers", sa.Integer()),
    ("log_path", sa.Text()),
)


def upgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        for name, kind in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    _set_schema_version(schema_version)


def downgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
