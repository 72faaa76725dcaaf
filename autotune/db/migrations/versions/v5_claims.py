"""Schema version 5: ``claims``, the problems of a shared sweep and the sweep that holds each.

Several processes or hosts running the same spec on the same kind of GPU divide its problems: each
problem is claimed with a lease (``lease_until``) that the holder's heartbeat keeps alive; ``done``
marks a problem whose trials are all stored.

Revision ID: v5_claims
Revises: v4_problem_params
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v5_claims"
down_revision: str | None = "v4_problem_params"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 5


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("work", sa.String(32), nullable=False),
        sa.Column("item", sa.String(255), nullable=False),
        sa.Column("sweep_id", sa.Integer(), sa.ForeignKey("sweeps.id"), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("work", "item", name="uq_claims_work_item"),
    )
    _set_schema_version(schema_version)


def downgrade() -> None:
    op.drop_table("claims")
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
