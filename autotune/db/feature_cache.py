"""FeatureCache: the static features of compiled configs, kept so that a config is compiled once."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.static import FEATURES_VERSION, StaticFeatures, StaticFinding

from .database import Database
from .engine import StoreError, error_cause
from .models import KernelModel, ProblemModel, StaticFeaturesModel
from .retry import retrying

__all__ = ["FeatureCache"]

logger = logging.getLogger(__name__)


class FeatureCache(Database):
    """The static features (registers, spills, LDS, instruction mix) of configs compiled for an arch with
    a toolchain, and the findings of the static checks on them.

    Keyed by (arch, toolchain with the version of the extraction, kernel name + source hash, problem,
    config hash): features an older extraction read (`FEATURES_VERSION`) or of another kernel source are
    not read back. `record_features` is idempotent on its key, also when processes race; each call is one
    transaction, retried through a transient outage.
    """

    @retrying
    def record_features(
        self,
        *,
        arch: str,
        toolchain: Mapping[str, str],
        kernel: str,
        source_hash: str,
        problem: Problem,
        config: Config,
        features: StaticFeatures,
        findings: Sequence[tuple[str, str] | StaticFinding] = (),
    ) -> bool:
        """Writes the static features of one config compiled for `arch` with `toolchain`, and the findings
        of the static checks on them (``(check, reason)`` pairs or StaticFindings), and commits.

        Returns False (writing nothing) if the key (arch, toolchain, kernel name + source hash, problem,
        config hash) is already stored, also when another process stored it first. Raises ValueError
        when `features` are of another arch or an argument cannot be stored.
        """
        if not arch or features.arch != arch:
            raise ValueError(f"features of arch {features.arch!r} cannot be recorded for arch {arch!r}")
        toolchain_json, toolchain_hash = _toolchain_key(toolchain)
        pairs = _finding_pairs(findings)
        kernel_row, problem_row = self.kernel_id(kernel, source_hash), self.problem_id(problem)
        digest = config.digest()
        m = StaticFeaturesModel
        key = (
            m.arch == arch,
            m.toolchain_hash == toolchain_hash,
            m.kernel_id == kernel_row,
            m.problem_id == problem_row,
            m.config_hash == digest,
        )
        with self._session(write=True) as session:
            if session.scalar(select(m.id).where(*key)) is not None:
                return False
            session.add(
                m(
                    arch=arch,
                    toolchain=toolchain_json,
                    toolchain_hash=toolchain_hash,
                    kernel_id=kernel_row,
                    problem_id=problem_row,
                    backend=config.backend,
                    config_json=config.canonical(),
                    config_hash=digest,
                    compiled=bool(features.compiled),
                    features_json=features.to_json(),
                    findings_json=json.dumps(pairs),
                    compile_s=float(features.compile_s),
                )
            )
            try:
                session.flush()
            except IntegrityError as exc:
                session.rollback()
                if session.scalar(select(m.id).where(*key)) is not None:
                    return False  # another process recorded the same features first
                raise StoreError(
                    f"cannot record static features of {config.short()} of {problem}: {error_cause(exc)}"
                ) from exc
        logger.debug("recorded static features %s %s %s on %s", kernel, problem, config.short(), arch)
        return True

    @retrying
    def features(
        self,
        *,
        arch: str,
        toolchain: Mapping[str, str],
        problem: Problem,
        kernels: Mapping[str, tuple[str, str]],
    ) -> dict[str, tuple[StaticFeatures, list[tuple[str, str]]]]:
        """Stored static features of `problem` on `arch` with `toolchain`, as config hash → (features,
        findings).

        `kernels` maps backend → (kernel name, source hash); only features of that kernel version count,
        as in `finished`, so a changed kernel source is compiled afresh.
        """
        if not kernels:
            return {}
        _, toolchain_hash = _toolchain_key(toolchain)
        m = StaticFeaturesModel
        stmt = (
            select(m, KernelModel.name, KernelModel.source_hash)
            .join(KernelModel, m.kernel_id == KernelModel.id)
            .join(ProblemModel, m.problem_id == ProblemModel.id)
            .where(
                m.arch == arch,
                m.toolchain_hash == toolchain_hash,
                ProblemModel.key == problem.key(),
                KernelModel.name.in_({name for name, _ in kernels.values()}),
            )
            .order_by(m.id)
        )
        out: dict[str, tuple[StaticFeatures, list[tuple[str, str]]]] = {}
        with self._session() as session:
            for row, name, source_hash in session.execute(stmt):
                if kernels.get(row.backend) == (name, source_hash):
                    found = [(str(c), str(r)) for c, r in json.loads(row.findings_json or "[]")]
                    out[row.config_hash] = (StaticFeatures.from_json(row.features_json), found)
        return out


def _toolchain_key(toolchain: Mapping[str, str]) -> tuple[str, str]:
    """The canonical JSON of `toolchain` (keys sorted), and the first 16 hex digits of the sha256 of that
    JSON with the version of the features' extraction added (`FEATURES_VERSION`): the key under which
    features are stored, so that features an older extraction read are compiled again."""
    try:
        text = json.dumps(dict(toolchain), sort_keys=True)
        keyed = json.dumps({**toolchain, "features": FEATURES_VERSION}, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"toolchain {toolchain!r} is not a JSON-serializable mapping: {exc}") from exc
    return text, hashlib.sha256(keyed.encode()).hexdigest()[:16]


def _finding_pairs(findings: Sequence[tuple[str, str] | StaticFinding]) -> list[tuple[str, str]]:
    """`findings` as (check, reason) pairs of strings."""
    pairs: list[tuple[str, str]] = []
    for finding in findings:
        pair = (finding.check, finding.reason) if isinstance(finding, StaticFinding) else tuple(finding)
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ValueError(f"a finding must be a (check, reason) pair of strings, got {finding!r}")
        pairs.append((pair[0], pair[1]))
    return pairs
