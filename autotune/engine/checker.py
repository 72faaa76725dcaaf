"""StaticChecker: compiles configs ahead on every CPU core, keeps their static features, and says which
configs a sweep should prune before spending any GPU time on them."""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol

from autotune.core import crashpoints
from autotune.core.config import Config
from autotune.core.op import kernel_versions
from autotune.core.problem import Problem
from autotune.core.registry import backend_of
from autotune.core.static import StaticFeatures, StaticFinding, StaticPolicy, check_features
from autotune.core.target import Target, toolchain_versions
from autotune.engine.compile import CompilePool, _result

if TYPE_CHECKING:
    from autotune.core.op import TunableOp

__all__ = ["FeatureStore", "StaticChecker"]

log = logging.getLogger(__name__)

Findings = list[StaticFinding]


class FeatureStore(Protocol):
    """What the checker needs of a store (autotune.db.Store implements it)."""

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
        findings: Sequence[tuple[str, str]] = (),
    ) -> bool: ...

    def features(
        self,
        *,
        arch: str,
        toolchain: Mapping[str, str],
        problem: Problem,
        kernels: Mapping[str, tuple[str, str]],
    ) -> dict[str, tuple[StaticFeatures, list[tuple[str, str]]]]: ...


class StaticChecker:
    """Static features and findings of configs on one target, computed once each.

    Features come from the store when it already holds them (same arch, toolchain, kernel source, problem
    and config: everything that changes the binary), else from compiling on a CompilePool of `workers`
    processes; new ones are written to the store. `prefetch` queues compiles without waiting, so the
    pool compiles ahead while the GPU measures; `findings` waits for one config. Vendor-library configs
    have nothing to compile and never have findings. Thread-safe: the runners of a sweep on several GPUs
    share one checker (and its pool); a thread waiting for a compile holds no lock.
    """

    def __init__(
        self,
        target: Target,
        policy: StaticPolicy | None = None,
        *,
        store: FeatureStore | None = None,
        workers: int | None = None,
    ) -> None:
        self.target = target
        self.policy = policy or StaticPolicy()
        self.store = store
        self.workers = workers
        self.toolchain = dict(toolchain_versions())
        self._pool: CompilePool | None = None
        self._known: dict[tuple[str, str], StaticFeatures] = {}
        self._inflight: dict[tuple[str, str], Future[StaticFeatures]] = {}
        self._loaded: set[str] = set()
        #: Findings per check of the configs checked so far, by problem key.
        self.pruned: dict[str, Counter[str]] = {}
        self.compiled: Counter[str] = Counter()
        self._lock = threading.RLock()

    @property
    def pool(self) -> CompilePool:
        with self._lock:
            if self._pool is None:
                self._pool = CompilePool(self.target, self.workers)
            return self._pool

    @property
    def lookahead(self) -> int:
        """How many configs to keep queued: four per compile process, so that a slow compile starts early
        and compiled configs are there to measure while it runs."""
        return 4 * (self._pool.workers if self._pool else (self.workers or os.cpu_count() or 1))

    def warm_up(self) -> None:
        """Starts the compile pool's processes now, without waiting (see CompilePool.warm_up)."""
        self.pool.warm_up()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> StaticChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public ---------------------------------------------------------------------------------------

    def prefetch(self, op: TunableOp, problem: Problem, configs: Iterable[Config]) -> None:
        """Queue compiles of `configs` whose features are not known yet; returns at once. The first
        ones (one per compile process) are queued in the order given, since the GPU needs them first;
        the rest slowest-looking first (`compile_weight`), so that a long compile starts early."""
        with self._lock:
            self._load(op, problem)
            todo: dict[tuple[str, str], Config] = {}
            for config in configs:
                key = (problem.key(), config.digest())
                if _compiles(problem, config) and key not in self._known and key not in self._inflight:
                    todo[key] = config
            head = self.pool.workers
            items = list(todo.items())
            for key, config in items[:head] + sorted(items[head:], key=lambda kc: -compile_weight(kc[1])):
                self._inflight[key] = self.pool.submit(op, problem, config)

    def features(
        self, op: TunableOp, problem: Problem, configs: Sequence[Config]
    ) -> dict[Config, tuple[StaticFeatures, Findings]]:
        """Features and all findings of every compilable config in `configs`, compiling in parallel."""
        self.prefetch(op, problem, configs)
        return {c: self._wait(op, problem, c) for c in configs if _compiles(problem, c)}

    def ready(self, problem: Problem, config: Config) -> bool:
        """Whether `config`'s features are known or its compile has finished (waiting costs nothing)."""
        if not _compiles(problem, config):
            return True
        key = (problem.key(), config.digest())
        with self._lock:
            if key in self._known:
                return True
            future = self._inflight.get(key)
        return future is not None and future.done()

    def findings(self, op: TunableOp, problem: Problem, config: Config) -> Findings:
        """The findings of `config` that prune it under the policy (empty: measure it). The config is
        compiled (or read from the store) whatever the policy, so its features are always kept."""
        if not _compiles(problem, config):
            return []
        self.prefetch(op, problem, [config])
        _, found = self._wait(op, problem, config)
        pruning = self.policy.pruning(found, op.backend(config.backend).exempt(self.target))
        if pruning:
            with self._lock:
                counts = self.pruned.setdefault(problem.key(), Counter())
                counts.update({f.check for f in pruning})
        return pruning

    # -- internals ------------------------------------------------------------------------------------

    def _load(self, op: TunableOp, problem: Problem) -> None:
        """Read what the store already knows of `problem` (once per problem)."""
        if self.store is None or problem.key() in self._loaded:
            return
        self._loaded.add(problem.key())
        kernels = kernel_versions(op, op.backends(self.target))
        stored = self.store.features(arch=self.target.arch, toolchain=self.toolchain, problem=problem,
                                     kernels=kernels)  # fmt: skip
        for digest, (features, _) in stored.items():
            self._known[(problem.key(), digest)] = features

    def _check(self, features: StaticFeatures, config: Config) -> Findings:
        # Recomputed, not read back: the occupancy floor may differ from the run that stored them.
        return check_features(features, config, self.target, min_occupancy=self.policy.min_occupancy)

    def _wait(self, op: TunableOp, problem: Problem, config: Config) -> tuple[StaticFeatures, Findings]:
        key = (problem.key(), config.digest())
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                return known, self._check(known, config)
            future = self._inflight.get(key)
            if future is None:
                future = self._inflight[key] = self.pool.submit(op, problem, config)
        features = _result(future, self.target)  # no lock held while waiting
        found = self._check(features, config)
        with self._lock:
            if self._inflight.pop(key, None) is None:
                return features, found  # another thread waited for the same compile and kept it
            self._known[key] = features
            self.compiled[problem.key()] += 1
        if self.store is not None:
            crashpoints.point("compile.done", f"{problem.key()} {config.digest()}")
            name, source_hash = kernel_versions(op, [config.backend])[config.backend]
            self.store.record_features(
                arch=self.target.arch,
                toolchain=self.toolchain,
                kernel=name,
                source_hash=source_hash,
                problem=problem,
                config=config,
                features=features,
                findings=[(f.check, f.reason) for f in found],
            )
        if not features.compiled:
            log.info("%s does not compile for %s: %s", config.short(), self.target.arch, features.error[:200])
        return features, found


def compile_weight(config: Config) -> float:
    """How long `config` looks to compile, relatively: its accumulator elements per warp (large tiles on
    few warps, such as 128x128 or 128x256 on 4, compile several times longer than most configs)."""
    rows = config.get("BLOCK_M", config.get("BLOCK_SIZE_M", 1))
    cols = config.get("BLOCK_N", config.get("BLOCK_SIZE_N", 1))
    warps = config.get("num_warps", 4)
    try:
        return float(rows) * float(cols) / max(float(warps), 1.0)
    except (TypeError, ValueError):
        return 0.0


def _compiles(problem: Problem, config: Config) -> bool:
    """Every config of a backend that runs kernels of ours goes through the compiler; a library backend's
    (the vendor baseline, TunableOp's pin, aiter) has no kernel calls, so nothing to compile or prune."""
    return not backend_of(problem.op, config.backend).library


def finding_text(findings: Iterable[StaticFinding]) -> str:
    """The findings as one line, for a pruned trial's error."""
    return "; ".join(f"{f.check}: {f.reason}" for f in findings)
