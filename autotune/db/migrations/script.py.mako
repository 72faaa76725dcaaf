"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}
#: The schema version this revision makes; set SCHEMA_VERSION and REVISIONS in db/models.py to match.
schema_version = 0  # FIXME


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}
    _set_schema_version(schema_version)


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(
        sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version))
    )
