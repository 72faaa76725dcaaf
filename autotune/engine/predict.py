"""Compile-only tuning: rank a problem's space with the cost model, compile the best candidates for the
target, prune what the static checks flag, and predict the survivors' times (no GPU needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import is_vendor
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.core.static import StaticFeatures, StaticFinding, valu_outliers
from autotune.core.target import Target

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.engine.checker import StaticChecker

__all__ = ["Candidate", "ProblemCheck", "check_problem", "model_result"]

#: How many rounds of `candidates` configs are compiled at most while looking for `keep` survivors.
MAX_ROUNDS = 4


@dataclass
class Candidate:
    """One config the model ranked: its prediction and, when compiled, its features, the findings that
    prune it and the warnings (`autotune.core.static.WARNINGS`) that do not."""

    config: Config
    predicted_us: float
    features: StaticFeatures | None = None
    findings: list[StaticFinding] = field(default_factory=list)
    warnings: list[StaticFinding] = field(default_factory=list)

    @property
    def pruned(self) -> bool:
        return bool(self.findings)


@dataclass
class ProblemCheck:
    """What a compile-only check of one problem found."""

    problem: Problem
    target: Target
    space_size: int
    raw_size: int
    constraint_pruned: dict[str, int]
    compiled: list[Candidate] = field(default_factory=list)
    vendor: Candidate | None = None

    @property
    def static_pruned(self) -> dict[str, int]:
        """Configs pruned by the static checks, each counted once, by the first check it fails."""
        return dict(Counter(c.findings[0].check for c in self.compiled if c.findings))

    @property
    def static_warned(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for c in self.compiled:
            counts.update({f.check for f in c.warnings})
        return dict(counts)

    @property
    def n_pruned(self) -> int:
        return sum(c.pruned for c in self.compiled)

    @property
    def n_failed_compile(self) -> int:
        return sum(1 for c in self.compiled if c.features is not None and not c.features.compiled)

    def survivors(self) -> list[Candidate]:
        """Compiled configs no check prunes, fastest predicted first (ties keep the model's order)."""
        ok = [c for c in self.compiled if not c.pruned]
        return sorted(ok, key=lambda c: c.predicted_us)

    def best(self, n: int = 5) -> list[Candidate]:
        """The `n` best predicted configs, the vendor library among them where it ranks."""
        pool = self.survivors() + ([self.vendor] if self.vendor is not None else [])
        return sorted(pool, key=lambda c: c.predicted_us)[:n]

    def to_dict(self) -> dict[str, Any]:
        def cand(c: Candidate) -> dict[str, Any]:
            return {
                "config": dict(c.config.items()),
                "backend": c.config.backend,
                "predicted_us": round(c.predicted_us, 3),
                "features": None if c.features is None else _features_dict(c.features),
                "findings": [{"check": f.check, "reason": f.reason} for f in c.findings],
                "warnings": [{"check": f.check, "reason": f.reason} for f in c.warnings],
            }

        return {
            "problem": self.problem.key(),
            "target": self.target.arch,
            "space_size": self.space_size,
            "raw_size": self.raw_size,
            "constraint_pruned": self.constraint_pruned,
            "compiled": len(self.compiled),
            "compile_errors": self.n_failed_compile,
            "static_pruned": self.static_pruned,
            "pruned_configs": [cand(c) for c in self.compiled if c.pruned],
            "static_warned": self.static_warned,
            "warned_configs": [cand(c) for c in self.compiled if c.warnings],
            "best": [cand(c) for c in self.best()],
        }


def _features_dict(features: StaticFeatures) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(features.to_json())
    data.pop("toolchain", None)
    return data


def check_problem(
    op: TunableOp,
    problem: Problem,
    checker: StaticChecker,
    *,
    candidates: int = 8,
    keep: int = 5,
    everything: bool = False,
    backends: Sequence[str] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ProblemCheck:
    """Ranks the space of `problem` with the cost model, compiles the best `candidates` (the whole space
    with `everything`) on the checker's pool and re-ranks the compiled ones with their features.

    More rounds of `candidates` are compiled (at most MAX_ROUNDS) until `keep` configs survive the checks.
    The compiled configs are then compared with each other for warnings (`valu_outliers`). `on_step` is
    told each step as it starts ("ranking 18385 configs", "compiling 8 configs") and each compile as it
    ends ("compiled 3/8").
    """
    from autotune.engine.model import predict_us, rank

    target = checker.target
    keep = min(keep, candidates)
    space = op.space(problem, target, backends)
    report = ProblemCheck(problem, target, len(space), space.raw_size(), space.prune_summary())
    if on_step is not None:
        on_step(f"ranking {report.space_size} configs")
    ranked = rank(problem, space.configs(), target)
    order = _spread([(c, t) for c, t in ranked if not is_vendor(problem.op, c.backend)])
    vendor = next((c for c, _ in ranked if is_vendor(problem.op, c.backend)), None)
    if vendor is not None:
        report.vendor = Candidate(vendor, predict_us(problem, vendor, target))
    step = len(order) if everything else candidates
    pos, rounds = 0, 0
    while pos < len(order) and rounds < (1 if everything else MAX_ROUNDS):
        batch = order[pos : pos + step]
        pos += len(batch)
        rounds += 1
        for config, (features, findings) in _compiled(checker, op, problem, batch, on_step).items():
            exempt = op.backend(config.backend).exempt(target)
            failed = [f for f in findings if f.check == "compile"]
            pruning = failed or checker.policy.pruning(findings, exempt)
            predicted = predict_us(problem, config, target, features)
            report.compiled.append(Candidate(config, predicted, features, pruning))
        if len(report.survivors()) >= keep:
            break
    compiled = {c.config: c.features for c in report.compiled if c.features is not None}
    outliers = valu_outliers(compiled)
    for cand in report.compiled:
        if cand.config in outliers:
            cand.warnings.append(outliers[cand.config])
    return report


def _compiled(
    checker: StaticChecker,
    op: TunableOp,
    problem: Problem,
    batch: Sequence[Config],
    on_step: Callable[[str], None] | None,
) -> dict[Config, tuple[StaticFeatures, list[StaticFinding]]]:
    """`checker.features` of `batch`, telling `on_step` of each compile waited for."""
    if on_step is None:
        return checker.features(op, problem, batch)
    on_step(f"compiling {len(batch)} configs")
    checker.prefetch(op, problem, batch)  # all queued at once (the compile processes start if need be)
    out = {}
    for i, config in enumerate(batch):
        out.update(checker.features(op, problem, [config]))
        on_step(f"compiled {i + 1}/{len(batch)}")
    return out


#: Knobs that decide a config's shape of work; configs equal in these and in predicted time differ only in
#: knobs the model barely sees (waves_per_eu, kpack, GROUP_M when everything fits in cache).
_SHAPE_KNOBS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages", "PERSISTENT")


def _spread(ranked: list[tuple[Config, float]]) -> list[Config]:
    """The ranked configs with one of each (shape of work, predicted time) first, in rank order, and the
    near-duplicates after them: the compile budget goes to configs the model can tell apart."""
    seen: set[tuple[object, ...]] = set()
    first: list[Config] = []
    later: list[Config] = []
    for config, t in ranked:
        key = (config.backend, round(t, 3), *(config.get(k) for k in _SHAPE_KNOBS))
        (later if key in seen else first).append(config)
        seen.add(key)
    return first + later


def model_result(candidate: Candidate, extra: dict[str, Any] | None = None) -> TrialResult:
    """A candidate as a stored trial: `ok` with the predicted time (timing method "model"), or `pruned`
    with the reasons."""
    from autotune.engine.checker import finding_text
    from autotune.engine.model import MODEL_VERSION

    info = {"model": MODEL_VERSION, **(extra or {})}
    compile_s = candidate.features.compile_s if candidate.features else 0.0
    if candidate.pruned:
        info["static"] = sorted({f.check for f in candidate.findings})
        return TrialResult(candidate.config, TrialStatus.PRUNED, error=finding_text(candidate.findings),
                           compile_s=compile_s, extra=info)  # fmt: skip
    t = candidate.predicted_us
    timing = Timing(median_us=t, min_us=t, p20_us=t, p80_us=t, mean_us=t, std_us=0.0, runs=0, method="model")
    return TrialResult(candidate.config, TrialStatus.OK, timing=timing, compile_s=compile_s, extra=info)
