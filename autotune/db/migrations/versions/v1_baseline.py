"""Schema version 1, the baseline: the tables as autotune shipped them before it adopted Alembic.

On an empty database this creates them all. On a database written before Alembic (``meta`` says 1, no
``alembic_version``) it adopts what is there: every table of version 1 must be present with all of its
columns, except static_features, which joined version 1 after it first shipped and is created where it
is missing. Anything else is refused, and the transaction of the upgrade rolls back.

The tables are a frozen copy of version 1, not `autotune.db.models`, which moves on with later versions.

Revision ID: v1_baseline
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "v1_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 1

#: Tables of version 1 that a database written before Alembic may lack.
_ADDITIVE = ("static_features",)

_V1 = sa.MetaData()


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer, primary_key=True)


def _created_at() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


sa.Table(
    "meta",
    _V1,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
)
sa.Table(
    "gpus",
    _V1,
    _id(),
    sa.Column("fingerprint", sa.String(16), nullable=False, unique=True),
    sa.Column("vendor", sa.String(32), nullable=False),
    sa.Column("arch", sa.String(32), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("cu_count", sa.Integer, nullable=False),
    sa.Column("xcds", sa.Integer, nullable=False),
    sa.Column("memory_bytes", sa.BigInteger, nullable=False),
    sa.Column("llc_bytes", sa.BigInteger, nullable=False),
    sa.Column("interpreter", sa.Boolean, nullable=False),
    sa.Column("toolchain", sa.Text, nullable=False),
    sa.Column("target_json", sa.Text, nullable=False),
    _created_at(),
)
sa.Table(
    "kernels",
    _V1,
    _id(),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("source_hash", sa.String(64), nullable=False),
    _created_at(),
    sa.UniqueConstraint("name", "source_hash", name="uq_kernels_name_hash"),
)
sa.Table(
    "problems",
    _V1,
    _id(),
    sa.Column("key", sa.String(255), nullable=False, unique=True),
    sa.Column("op", sa.String(32), nullable=False),
    sa.Column("m", sa.BigInteger, nullable=False),
    sa.Column("n", sa.BigInteger, nullable=False),
    sa.Column("k", sa.BigInteger, nullable=False),
    sa.Column("e", sa.Integer, nullable=False),
    sa.Column("topk", sa.Integer, nullable=False),
    sa.Column("dtype_a", sa.String(32), nullable=False),
    sa.Column("dtype_b", sa.String(32), nullable=False),
    sa.Column("dtype_out", sa.String(32), nullable=False),
    sa.Column("layout", sa.String(16), nullable=False),
)
sa.Table(
    "sweeps",
    _V1,
    _id(),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("spec_text", sa.Text, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False),
)
sa.Table(
    "trials",
    _V1,
    _id(),
    sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False),
    sa.Column("kernel_id", sa.Integer, sa.ForeignKey("kernels.id"), nullable=False),
    sa.Column("problem_id", sa.Integer, sa.ForeignKey("problems.id"), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("config_json", sa.Text, nullable=False),
    sa.Column("config_hash", sa.String(16), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("time_us", sa.Float, nullable=True),
    sa.Column("min_us", sa.Float, nullable=True),
    sa.Column("p20_us", sa.Float, nullable=True),
    sa.Column("p80_us", sa.Float, nullable=True),
    sa.Column("mean_us", sa.Float, nullable=True),
    sa.Column("std_us", sa.Float, nullable=True),
    sa.Column("runs", sa.Integer, nullable=True),
    sa.Column("timing_method", sa.String(16), nullable=True),
    sa.Column("rel_error", sa.Float, nullable=True),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("compile_s", sa.Float, nullable=False),
    sa.Column("measure_s", sa.Float, nullable=False),
    sa.Column("extra", sa.Text, nullable=False),
    _created_at(),
    sa.UniqueConstraint("gpu_id", "kernel_id", "problem_id", "config_hash", "source", name="uq_trials_key"),
    sa.Index("ix_trials_gpu_problem_status", "gpu_id", "problem_id", "status"),
)
sa.Table(
    "static_features",
    _V1,
    _id(),
    sa.Column("arch", sa.String(32), nullable=False),
    sa.Column("toolchain", sa.Text, nullable=False),
    sa.Column("toolchain_hash", sa.String(16), nullable=False),
    sa.Column("kernel_id", sa.Integer, sa.ForeignKey("kernels.id"), nullable=False),
    sa.Column("problem_id", sa.Integer, sa.ForeignKey("problems.id"), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("config_json", sa.Text, nullable=False),
    sa.Column("config_hash", sa.String(16), nullable=False),
    sa.Column("compiled", sa.Boolean, nullable=False),
    sa.Column("features_json", sa.Text, nullable=False),
    sa.Column("findings_json", sa.Text, nullable=False),
    sa.Column("compile_s", sa.Float, nullable=False),
    _created_at(),
    sa.UniqueConstraint(
        "arch", "toolchain_hash", "kernel_id", "problem_id", "config_hash", name="uq_static_features_key"
    ),
)


class NotVersion1Error(RuntimeError):
    """The database to adopt as version 1 does not hold version 1's tables."""


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    existing = set(inspector.get_table_names())
    if existing & set(_V1.tables):
        _check_version1(inspector, existing)
    _V1.create_all(bind, checkfirst=True)  # all of them on an empty database; else the additive ones
    meta = _V1.tables["meta"]
    if bind.scalar(sa.select(meta.c.value).where(meta.c.key == "schema_version")) is None:
        bind.execute(sa.insert(meta).values(key="schema_version", value=str(schema_version)))


def downgrade() -> None:
    raise NotImplementedError("version 1 is the baseline: there is nothing older to go back to")


def _check_version1(inspector: sa.Inspector, existing: set[str]) -> None:
    """Raises NotVersion1Error unless the tables are version 1's (static_features may be missing)."""
    missing = sorted(set(_V1.tables) - existing - set(_ADDITIVE))
    if missing:
        raise NotVersion1Error(
            f"it lacks the tables {', '.join(missing)} of schema version 1: it is damaged or not an "
            "autotune database"
        )
    for name, table in _V1.tables.items():
        if name not in existing:
            continue
        have = {col["name"] for col in inspector.get_columns(name)}
        lacking = [col.name for col in table.columns if col.name not in have]
        if lacking:
            raise NotVersion1Error(
                f"its table {name} lacks the columns {', '.join(lacking)} of schema version 1: it is damaged"
            )
    meta = _V1.tables["meta"]
    value = op.get_bind().scalar(sa.select(meta.c.value).where(meta.c.key == "schema_version"))
    if value != "1":
        raise NotVersion1Error(f"its meta table says schema version {value!r}, not '1'")
