"""Schema version 4: a problem is stored generically, whatever fields its op's problems have.

``problems`` keeps ``key``, ``op``, ``m``, ``n`` and ``k`` (now indexed on op, n, k, m: an op's shape
families) and holds every other field in ``params``, canonical JSON (sorted keys, no spaces), in place of
the columns ``e``, ``topk``, ``dtype_a``, ``dtype_b``, ``dtype_out`` and ``layout``. Every row is carried
over, its values unchanged; the downgrade puts the columns back from the JSON. SQLite changes the table in
place (3.35 and newer), not in batch mode: rebuilding ``problems`` would break the foreign keys of
``trials`` inside the upgrade's transaction.

Revision ID: v4_problem_params
Revises: v3_sweep_progress
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "v4_problem_params"
down_revision: str | None = "v3_sweep_progress"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 4

#: The columns of version 3 that `params` replaces: (column, field of the problem, type).
_COLUMNS = (
    ("e", "E", sa.Integer()),
    ("topk", "topk", sa.Integer()),
    ("dtype_a", "dtype_a", sa.String(32)),
    ("dtype_b", "dtype_b", sa.String(32)),
    ("dtype_out", "dtype_out", sa.String(32)),
    ("layout", "layout", sa.String(16)),
)
_INDEX = "ix_problems_shape"


def params_json(fields: dict[str, object]) -> str:
    """The canonical JSON of a problem's fields (as `Problem.params_json` writes it)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


def _drop_column(table: str, column: str) -> None:
    """Drops a plain column. SQLite (3.35 and newer) drops it in place: batch mode would rebuild the
    table, and a rebuilt ``problems`` breaks the foreign keys of ``trials`` inside the transaction."""
    if _sqlite():
        op.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    else:
        op.drop_column(table, column)


def upgrade() -> None:
    # NOT NULL with a default that every row gets and loses below: SQLite adds such a column in place
    op.add_column("problems", sa.Column("params", sa.Text(), nullable=False, server_default=""))
    bind = op.get_bind()
    columns = ", ".join(c for c, _, _ in _COLUMNS)
    for row in bind.execute(sa.text(f"SELECT id, {columns} FROM problems")).mappings().all():
        fields = {field: row[column] for column, field, _ in _COLUMNS}
        fields["E"], fields["topk"] = int(fields["E"]), int(fields["topk"])
        bind.execute(
            sa.text("UPDATE problems SET params = :p WHERE id = :id"),
            {"p": params_json(fields), "id": row["id"]},
        )
    if not _sqlite():
        op.alter_column("problems", "params", existing_type=sa.Text(), server_default=None)
    for column, _, _ in _COLUMNS:
        _drop_column("problems", column)
    op.create_index(_INDEX, "problems", ["op", "n", "k", "m"])
    _set_schema_version(schema_version)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="problems")
    for column, _, kind in _COLUMNS:
        default = "0" if isinstance(kind, sa.Integer) else ""
        op.add_column("problems", sa.Column(column, kind, nullable=False, server_default=default))
    bind = op.get_bind()
    for row in bind.execute(sa.text("SELECT id, params FROM problems")).mappings().all():
        fields = json.loads(row["params"])
        values = {column: fields[field] for column, field, _ in _COLUMNS}
        sets = ", ".join(f"{c} = :{c}" for c in values)
        bind.execute(sa.text(f"UPDATE problems SET {sets} WHERE id = :id"), {**values, "id": row["id"]})
    if not _sqlite():
        for column, _, kind in _COLUMNS:
            op.alter_column("problems", column, existing_type=kind, server_default=None)
    _drop_column("problems", "params")
    _set_schema_version(schema_version - 1)


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
