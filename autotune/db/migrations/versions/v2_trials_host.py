"""Schema version 2: ``trials.host``, the host that recorded the trial (nullable: NULL for older rows).

A fleet of hosts shares one PostgreSQL database; sweeps already named their host, trials recorded outside
a sweep (imports, ``Store.record`` from scripts) did not. SQLite alters the table in batch mode.

Revision ID: v2_trials_host
Revises: v1_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v2_trials_host"
down_revision: str | None = "v1_baseline"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 2


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("host", sa.String(255), nullable=True))
    _set_schema_version(schema_version)


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("host")
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
