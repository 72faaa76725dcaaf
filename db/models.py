"""SQLAlchemy models: the tables of the autotune database (schema version `SCHEMA_VERSION`).

Any change to the existing tables bumps `SCHEMA_VERSION` and adds an upgrade step; a Store refuses to
open a database of another version. Adding a whole new table is additive and keeps the version: such a
table is listed in `ADDITIVE_TABLES`, and a Store that opens a database of this version without it
creates it (older code ignores tables it does not know).
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ADDITIVE_TABLES",
    "SCHEMA_VERSION",
    "Base",
    "GpuModel",
    "KernelModel",
    "MetaModel",
    "ProblemModel",
    "StaticFeaturesModel",
    "SweepModel",
    "TrialModel",
    "utcnow",
]

#: Version of the tables below; stored in `meta` under the key "schema_version".
SCHEMA_VERSION = 1

#: Tables added to schema version 1 after it first shipped: opening a version-1 database that lacks one
#: creates it; any other missing table means the database is damaged.
ADDITIVE_TABLES: tuple[str, ...] = ("static_features",)

#: Sweep statuses.
SWEEP_STATUSES: tuple[str, ...] = ("running", "finished", "interrupted", "failed")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base of the autotune tables."""


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
    """One version of one kernel: its name (``gemm.triton``) and the hash of its source."""

    __tablename__ = "kernels"
    __table_args__ = (UniqueConstraint("name", "source_hash", name="uq_kernels_name_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    source_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ProblemModel(Base):
    """One problem shape, keyed by `Problem.key()`."""

    __tablename__ = "problems"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    op: Mapped[str] = mapped_column(String(32))
    m: Mapped[int] = mapped_column(BigInteger)
    n: Mapped[int] = mapped_column(BigInteger)
    k: Mapped[int] = mapped_column(BigInteger)
    e: Mapped[int] = mapped_column(Integer)
    topk: Mapped[int] = mapped_column(Integer)
    dtype_a: Mapped[str] = mapped_column(String(32))
    dtype_b: Mapped[str] = mapped_column(String(32))
    dtype_out: Mapped[str] = mapped_column(String(32))
    layout: Mapped[str] = mapped_column(String(16))


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


class TrialModel(Base):
    """One measured (or imported, or modelled) trial of one config on one problem, kernel and GPU.

    The trial key is (gpu_id, kernel_id, problem_id, config_hash, source): at most one row each.
    """

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("gpu_id", "kernel_id", "problem_id", "config_hash", "source", name="uq_trials_key"),
        Index("ix_trials_gpu_problem_status", "gpu_id", "problem_id", "status"),
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


class StaticFeaturesModel(Base):
    """What the compiler reports for one config of one kernel version and problem, on one target arch and
    toolchain (`autotune.static.StaticFeatures`), with the findings of the static checks.

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
