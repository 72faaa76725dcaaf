"""SQLAlchemy models: the tables of the autotune database (schema version `SCHEMA_VERSION`).

Versions and migrations. The version of record is ``meta.schema_version`` (an integer, the key every
autotune release reads first, so that an older autotune refuses a newer database with a clear message).
Each schema version is exactly one Alembic revision (`REVISIONS`), kept in Alembic's own
``alembic_version`` table; the revisions live in `autotune.db.migrations` and every one of them updates
``meta.schema_version`` in the transaction that changes the tables, so the two never disagree:

    version 1  ``v1_baseline``     the tables as first shipped, static_features included
    version 2  ``v2_trials_host``  ``trials.host``: the host that recorded the trial (nullable)
    version 3  ``v3_sweep_progress``  ``sweeps``: pid, heartbeat, progress counts, workers and log file
    version 4  ``v4_problem_params``  ``problems``: op, m, n, k (indexed) and ``params`` (JSON) in place
                                      of the columns e, topk, dtype_a, dtype_b, dtype_out and layout
    version 5  ``v5_claims``       ``claims``: which sweep holds which problem of a shared sweep, and
                                      until when its lease runs
    version 6  ``v6_sweep_error``  ``sweeps.error``: why a sweep failed; ``trials.sweep_id`` indexed
    version 7  ``v7_moe_params``   ``problems``: the MoE's E and topk are its own parameters (in
                                      ``params["extra"]``), out of every other problem's params and
                                      out of every key (the claims' items too)

A new database is created at the head directly (``create_all``, ``meta`` and ``alembic_version`` in one
transaction). A Store refuses a database of an older version, naming ``autotune db upgrade``, which runs
the revisions; databases written before Alembic was adopted have no ``alembic_version`` and are taken as
revision ``v1_baseline`` when ``meta`` says 1 and their tables are version 1's.

Changing the tables: edit the models, bump `SCHEMA_VERSION`, add a revision to `autotune.db.migrations`
(its ``schema_version`` attribute says which version it makes, and it updates ``meta``), and add it to
`REVISIONS`; tests/db/test_migrations.py checks that they all agree. `ADDITIVE_TABLES` predates Alembic:
static_features joined version 1 after it first shipped, so a Store still creates it where a database of
the current version lacks it (older code ignores tables it does not know); new tables get a revision.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ADDITIVE_TABLES",
    "ALEMBIC_VERSION",
    "BASE_VERSION",
    "HEAD_REVISION",
    "REVISIONS",
    "SCHEMA_VERSION",
    "Base",
    "ClaimModel",
    "GpuModel",
    "KernelModel",
    "MetaModel",
    "ProblemModel",
    "StaticFeaturesModel",
    "SweepModel",
    "TrialModel",
    "utcnow",
]

#: Version of the tables below; stored in `meta` under the key "schema_version" (the version of record).
SCHEMA_VERSION = 7
#: The oldest schema version `autotune db upgrade` migrates from (the Alembic baseline).
BASE_VERSION = 1
#: The Alembic revision of each schema version (``alembic_version.version_num``).
REVISIONS: dict[int, str] = {
    1: "v1_baseline",
    2: "v2_trials_host",
    3: "v3_sweep_progress",
    4: "v4_problem_params",
    5: "v5_claims",
    6: "v6_sweep_error",
    7: "v7_moe_params",
}
#: The revision of `SCHEMA_VERSION`: what a new database is stamped with.
HEAD_REVISION = REVISIONS[SCHEMA_VERSION]

#: Tables added to schema version 1 after it first shipped: opening a database of the current version
#: that lacks one creates it; any other missing table means the database is damaged.
ADDITIVE_TABLES: tuple[str, ...] = ("static_features",)

#: Sweep statuses.
SWEEP_STATUSES: tuple[str, ...] = ("running", "finished", "interrupted", "failed")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base of the autotune tables."""


#: Alembic's version table, as Alembic itself creates it (not part of `Base.metadata`): a Store stamps a
#: new database with `HEAD_REVISION` here without importing Alembic, and reads it back when opening one.
ALEMBIC_VERSION = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


class MetaModel(Base):
    """Key/value facts about the database itself, e.g. ``schema_version``."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class GpuModel(Base):
    """One GPU + toolchain, keyed by `Target.fingerprint()`."""

    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(16), unique=True)
    vendor: Mapped[str] = mapped_column(String(32))
    arch: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(255))
    cu_count: Mapped[int] = mapped_column(Integer)
    xcds: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    llc_bytes: Mapped[int] = mapped_column(BigInteger)
    interpreter: Mapped[bool] = mapped_column(Boolean)
    toolchain: Mapped[str] = mapped_column(Text)  # JSON: torch, triton, cuda | hip versions
    target_json: Mapped[str] = mapped_column(Text)  # JSON of Target.to_dict()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class KernelModel(Base):
    """One version of one kernel: its name (``OP.BACKEND``) and the hash of its source."""

    __tablename__ = "kernels"
    __table_args__ = (UniqueConstraint("name", "source_hash", name="uq_kernels_name_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    source_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ProblemModel(Base):
    """One problem, keyed by `Problem.key()`: its op, M, N and K (indexed on op, N, K, M: an op's shape
    families), and every other field as canonical JSON (`Problem.params_json`), whatever fields the op's
    problems have (schema version 4)."""

    __tablename__ = "problems"
    __table_args__ = (Index("ix_problems_shape", "op", "n", "k", "m"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    op: Mapped[str] = mapped_column(String(32))
    m: Mapped[int] = mapped_column(BigInteger)
    n: Mapped[int] = mapped_column(BigInteger)
    k: Mapped[int] = mapped_column(BigInteger)
    params: Mapped[str] = mapped_column(Text)


class SweepModel(Base):
    """One run of a sweep spec on one GPU."""

    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    spec_text: Mapped[str] = mapped_column(Text)
    host: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    # Schema version 3: where the sweep runs and how far it got, for `autotune status` on any host.
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    problems_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    problems_done: Mapped[int | None] = mapped_column(Integer, nullable=True)
    trials_done: Mapped[int | None] = mapped_column(Integer, nullable=True)
    workers: Mapped[int | None] = mapped_column(Integer, nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Schema version 6: why it failed.
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class ClaimModel(Base):
    """One problem of a shared sweep (schema version 5): the sweep that holds it and until when.

    Keyed by (`work`, `item`): `work` is the digest of the spec and the GPU fingerprint (every process
    that runs the same spec on the same kind of GPU shares it), `item` the problem's key. A holder keeps
    its lease alive with its heartbeat; a claim whose lease has run out is taken over; a `done` claim is
    never run again by a sweep of the same work.
    """

    __tablename__ = "claims"
    __table_args__ = (UniqueConstraint("work", "item", name="uq_claims_work_item"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    work: Mapped[str] = mapped_column(String(32))
    item: Mapped[str] = mapped_column(String(255))
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id"))
    lease_until: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    done: Mapped[bool] = mapped_column(Boolean, default=False)
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TrialModel(Base):
    """One measured (or imported, or modelled) trial of one config on one problem, kernel and GPU.

    The trial key is (gpu_id, kernel_id, problem_id, config_hash, source): at most one row each.
    """

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("gpu_id", "kernel_id", "problem_id", "config_hash", "source", name="uq_trials_key"),
        Index("ix_trials_gpu_problem_status", "gpu_id", "problem_id", "status"),
        Index("ix_trials_sweep", "sweep_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id"), nullable=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id"))
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    backend: Mapped[str] = mapped_column(String(64))
    config_json: Mapped[str] = mapped_column(Text)
    config_hash: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(16), default="measured")
    time_us: Mapped[float | None] = mapped_column(Float, nullable=True)  # median
    min_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    p20_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    p80_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    std_us: Mapped[float | None] = mapped_column(Float, nullable=True)
    runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    timing_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")
    compile_s: Mapped[float] = mapped_column(Float, default=0.0)
    measure_s: Mapped[float] = mapped_column(Float, default=0.0)
    extra: Mapped[str] = mapped_column(Text, default="{}")  # JSON object
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Schema version 2: the host (socket.gethostname()) that recorded the trial; NULL for older rows.
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)


class StaticFeaturesModel(Base):
    """What the compiler reports for one config of one kernel version and problem, on one target arch and
    toolchain (`autotune.core.static.StaticFeatures`), with the findings of the static checks.

    Keyed by arch and toolchain, not by GPU fingerprint: a cross-compile for gfx942 needs no GPU. The key
    is (arch, toolchain_hash, kernel_id, problem_id, config_hash): at most one row each.
    """

    __tablename__ = "static_features"
    __table_args__ = (
        UniqueConstraint(
            "arch", "toolchain_hash", "kernel_id", "problem_id", "config_hash", name="uq_static_features_key"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    arch: Mapped[str] = mapped_column(String(32))
    toolchain: Mapped[str] = mapped_column(Text)  # JSON object, sort_keys: torch, triton, cuda | hip versions
    toolchain_hash: Mapped[str] = mapped_column(String(16))  # first 16 hex digits of its sha256
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id"))
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    backend: Mapped[str] = mapped_column(String(64))
    config_json: Mapped[str] = mapped_column(Text)
    config_hash: Mapped[str] = mapped_column(String(16))
    compiled: Mapped[bool] = mapped_column(Boolean)
    features_json: Mapped[str] = mapped_column(Text)  # StaticFeatures.to_json()
    findings_json: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of [check, reason] pairs
    compile_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
