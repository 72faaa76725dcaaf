"""Schema version 6: why a sweep failed, and its trials found by sweep.

``sweeps.error`` (nullable text): the reason a sweep ended ``failed`` (the database lost mid-sweep
included: a later process of the same host closes the row with it). Index ``ix_trials_sweep`` on
``trials.sweep_id``: ``autotune status`` counts each sweep's trials from the rows. Both are altered in
place (SQLite 3.35+ drops a column itself: no copy of the table, which the claims' foreign key forbids).

Revision ID: v6_sweep_error
Revises: v5_claims
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v6_sweep_error"
down_revision: str | None = "v5_claims"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 6


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("error", sa.Text(), nullable=True))
    op.create_index("ix_trials_sweep", "trials", ["sweep_id"])
    _set_schema_version(schema_version)


def downgrade() -> None:
    op.drop_index("ix_trials_sweep", table_name="trials")
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE sweeps DROP COLUMN error"))
    else:
        op.drop_column("sweeps", "error")
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
