"""Static verdicts of configs, cached per toolchain and target: how each op's heuristic default is chosen.

An op proposes its default as an ordered list of candidate configs (`TunableOp.default_candidates`: its
rule's pick first, then configs that take fewer registers and less LDS); `first_passing` returns the first
candidate whose compiled binary passes the static checks (`autotune.core.static.check_features` under
`StaticPolicy()`: it compiles, no spills, LDS within the target's, occupancy at or above the floor).

A verdict comes from compiling the candidate for the target in this process (`compile_features`), once:
the features are kept in memory and on disk (`cache_dir()`), keyed by the Triton version, the target,
the op, the config and what Triton keys the binary by (`launch_key`: many problems share one binary), so
no process compiles a binary a verdict is known for. Where this process cannot compile for the target
(Triton's CPU interpreter, a Triton without the target's backend, `AUTOTUNE_CHECK_DEFAULTS=0`) nothing
is compiled or read from disk and the first candidate is the default: the rule's pick, as before
verdicts existed. Thread-safe.

Two ways to pay less for compiling: `prefetch` compiles, on a CompilePool, what `first_passing` would
compile for many problems, round by round, all of a round at once (a sweep before it builds its spaces);
within `known_only()` nothing is compiled at all and the default is the first candidate not known to
fail (`autotune plan`, whose estimates need no verdict).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from autotune.core.config import Config
from autotune.core.op import TunableOp
from autotune.core.problem import Problem
from autotune.core.static import FEATURES_VERSION, StaticFeatures, StaticPolicy, check_features
from autotune.core.target import Target, TargetError, interpreting, toolchain_versions

__all__ = [
    "ENV_CACHE",
    "ENV_CHECK",
    "Verdicts",
    "cache_dir",
    "can_check",
    "first_passing",
    "known_only",
    "verdicts",
]

log = logging.getLogger(__name__)

#: "0", "off", "false" or "no": never compile a candidate; every default is its op's first candidate.
ENV_CHECK = "AUTOTUNE_CHECK_DEFAULTS"
#: The on-disk cache's folder; "off" (or "0", "false", "no") keeps verdicts in memory only.
ENV_CACHE = "AUTOTUNE_VERDICT_CACHE"
_OFF = ("0", "off", "false", "no")

#: (op, problem, config, target) -> the static features of the binary.
FeatureSource = Callable[[TunableOp, Problem, Config, Target], StaticFeatures]
#: (op, problem, config, target) -> what identifies the binary (equal keys: one binary).
KeySource = Callable[[TunableOp, Problem, Config, Target], str]
#: (op, problem, target, the op's default candidates): one default `prefetch` settles.
Ask = tuple[TunableOp, Problem, Target, Sequence[Config]]


class Compiler(Protocol):
    """What `prefetch` compiles on (autotune.engine.compile.CompilePool is one): one target's compiles,
    each a Future of its features."""

    target: Target

    def submit(self, op: TunableOp, problem: Problem, config: Config) -> Future[StaticFeatures]: ...


_known_only = threading.local()


@contextmanager
def known_only() -> Iterator[None]:
    """Within it (in this thread), `first_passing` compiles nothing: the default is the first candidate
    not known to fail (verdicts in memory or on disk), the rule's pick where none is known."""
    depth = getattr(_known_only, "depth", 0)
    _known_only.depth = depth + 1
    try:
        yield
    finally:
        _known_only.depth = depth


def _compiling() -> bool:
    return not getattr(_known_only, "depth", 0)


def cache_dir() -> Path | None:
    """The on-disk verdict cache: $AUTOTUNE_VERDICT_CACHE, else $XDG_CACHE_HOME/autotune/verdicts, else
    ~/.cache/autotune/verdicts; None where $AUTOTUNE_VERDICT_CACHE turns it off."""
    env = os.environ.get(ENV_CACHE, "").strip()
    if env.lower() in _OFF:
        return None
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "autotune" / "verdicts"


_compilable: dict[str, bool] = {}


def can_check(target: Target) -> bool:
    """Whether this process compiles candidates for `target`: not switched off ($AUTOTUNE_CHECK_DEFAULTS),
    a GPU arch (not the interpreter), kernels that are JIT functions here (TRITON_INTERPRET unset), and a
    Triton with the target's backend."""
    if os.environ.get(ENV_CHECK, "").strip().lower() in _OFF:
        return False
    if target.interpreter or interpreting():
        return False
    known = _compilable.get(target.arch)
    if known is None:
        from autotune.engine.compile import check_compilable

        try:
            check_compilable(target)
            known = True
        except TargetError as exc:
            log.info("defaults for %s are not checked: %s", target.arch, exc)
            known = False
        _compilable[target.arch] = known
    return known


def _launch_key(op: TunableOp, problem: Problem, config: Config, target: Target) -> str:
    from autotune.engine.compile import launch_key

    return "+".join(launch_key(call, target) for call in op.kernel_calls(problem, config, target))


def _compile(op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures:
    from autotune.engine.compile import compile_features

    return compile_features(op, problem, config, target)


class Verdicts:
    """Static features of candidate configs, compiled once each, in memory and (with `directory`) on disk.

    `features_of` compiles (default `compile_features`); `key_of` names the binary without compiling
    (default: the Triton cache keys of the config's launches); `checkable` says whether this process
    compiles for a target at all (default `can_check`). A config whose key cannot be computed (its
    launch refuses it) fails; a config that fails to compile is kept in memory only, so that a broken
    toolchain leaves nothing behind on disk. Thread-safe: one compile per key at a time.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        policy: StaticPolicy | None = None,
        features_of: FeatureSource = _compile,
        key_of: KeySource = _launch_key,
        checkable: Callable[[Target], bool] = can_check,
    ) -> None:
        self.directory = directory
        self.policy = policy or StaticPolicy()
        self.features_of = features_of
        self.key_of = key_of
        self.checkable = checkable
        self.compiled = 0
        self._known: dict[str, StaticFeatures] = {}
        self._known_archs: set[str] = set()  # the archs of the verdicts in memory
        self._keys: dict[tuple[object, ...], str | None] = {}
        self._picks: dict[tuple[object, ...], Config] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    def key(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> str | None:
        """The verdict's key: Triton's version, the target, the op, the config and the binary's key; None
        where the config's launches cannot even be bound (the launcher refuses the config). Kept once
        computed (binding the launches takes milliseconds)."""
        memo = (op.name, problem, config, target)
        with self._lock:
            if memo in self._keys:
                return self._keys[memo]
        found = self._key(op, problem, config, target)
        with self._lock:
            if len(self._keys) >= 65536:
                self._keys.clear()
            self._keys[memo] = found
        return found

    def _key(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> str | None:
        try:
            binary = self.key_of(op, problem, config, target)
        except Exception as exc:  # a launcher's ValueError, a binder's TypeError: no binary at all
            log.debug("%s has no launch on %s: %s", config.short(), target.arch, exc)
            return None
        fields = {
            "features": FEATURES_VERSION,
            "triton": toolchain_versions().get("triton", ""),
            "arch": target.arch,
            "lds_bytes": target.lds_bytes,
            "op": op.name,
            "source": op.source_hash(config.backend),
            "config": config.canonical(),
            "binary": binary,
        }
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def features(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures:
        """The static features of `config` on `target`: from memory, from disk, or compiled (then kept)."""
        key = self.key(op, problem, config, target)
        if key is None:
            return _refused(config, target)
        with self._lock:
            known = self._known.get(key)
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        if known is not None:
            return known
        with key_lock:  # another thread compiling the same binary finishes first
            known = self._recall(target, key)
            if known is None:
                known = self.features_of(op, problem, config, target)
                self._keep(target, key, op, config, known)
        return known

    def known(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures | None:
        """The static features of `config` where they are known without compiling (in memory, on disk; a
        config whose launch refuses it fails); None where only compiling would tell, at once where no
        verdict of `target`'s arch is known at all (its key is not computed then)."""
        if self._none_known(target):
            return None
        key = self.key(op, problem, config, target)
        return _refused(config, target) if key is None else self._recall(target, key)

    def passes(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> bool:
        """Whether `config` passes every static check of the policy on `target` (a vendor backend, with
        nothing to compile, always does)."""
        if op.backend(config.backend).library:
            return True
        return self._passing(op, self.features(op, problem, config, target), config, target)

    def _passing(self, op: TunableOp, features: StaticFeatures, config: Config, target: Target) -> bool:
        found = check_features(features, config, target, min_occupancy=self.policy.min_occupancy)
        return not self.policy.pruning(found, op.backend(config.backend).exempt(target))

    def first_passing(
        self, op: TunableOp, problem: Problem, target: Target, candidates: Iterable[Config]
    ) -> Config:
        """The first of `candidates` that passes (`passes`); the first one where none does (logged) or
        where this process cannot compile for `target` (`checkable`: then only the first is drawn from
        `candidates`, which may be lazy). Within `known_only()`: the first not known to fail, compiling
        nothing. ValueError for no candidates."""
        drawn = iter(candidates)
        first = next(drawn, None)
        if first is None:
            raise ValueError(f"{op.name}: no candidate configs for {problem}")
        if not self.checkable(target):
            return first
        candidates = (first, *drawn)
        if len(candidates) == 1:
            return first
        memo = (op.name, problem, target, candidates)
        with self._lock:
            pick = self._picks.get(memo)
        if pick is not None:
            return pick
        if not _compiling():
            return self._first_known(op, problem, target, candidates)
        try:
            pick = next((c for c in candidates if self.passes(op, problem, c, target)), None)
        except Exception as exc:  # reading features failed (no cuobjdump, ...): the first, as if unchecked
            log.warning("cannot check the defaults of %s on %s: %s", op.name, target.arch, exc)
            pick = candidates[0]
        if pick is None:
            log.warning(
                "no candidate default of %s on %s passes the static checks; keeping %s",
                op.name, target.arch, candidates[0].short(),
            )  # fmt: skip
            pick = candidates[0]
        with self._lock:
            if len(self._picks) >= 4096:
                self._picks.clear()
            self._picks[memo] = pick
        return pick

    def _first_known(
        self, op: TunableOp, problem: Problem, target: Target, candidates: Sequence[Config]
    ) -> Config:
        """The first of `candidates` not known to fail (no verdict: not known to), compiling nothing; the
        first where all are known to fail. Not memoized: a later `first_passing` may compile."""
        for config in candidates:
            if op.backend(config.backend).library:
                return config
            found = self.known(op, problem, config, target)
            if found is None or self._passing(op, found, config, target):
                return config
        return candidates[0]

    def prefetch(self, asks: Iterable[Ask], compiler: Compiler) -> int:
        """Compiles on `compiler` what `first_passing` would compile for each ask, round by round: in each
        round, the first candidate without a verdict of every ask that no known verdict settles yet
        (one compile per binary), all at once; then the next round for those whose compiled candidate
        failed. The same compiles as the asks' `first_passing` one after another, on every worker of
        `compiler`. Asks for another target than `compiler`'s, or one this process does not check, are
        left alone; a compile whose future raises ends the prefetch (`first_passing` compiles what is
        left itself). Returns the number of binaries compiled."""
        chosen = [
            (op, problem, target, tuple(candidates))
            for op, problem, target, candidates in asks
            if target == compiler.target and len(candidates) > 1 and self.checkable(target)
        ]
        keys: dict[tuple[int, int], str | None] = {}
        unsettled = list(range(len(chosen)))
        compiled = 0
        while unsettled:
            jobs: dict[str, tuple[TunableOp, Problem, Config]] = {}
            waiting = []
            for n in unsettled:
                op, problem, target, candidates = chosen[n]
                for i, config in enumerate(candidates):
                    if op.backend(config.backend).library:
                        break
                    if (n, i) not in keys:
                        keys[n, i] = self.key(op, problem, config, target)
                    key = keys[n, i]
                    found = _refused(config, target) if key is None else self._recall(target, key)
                    if found is None:
                        assert key is not None
                        jobs.setdefault(key, (op, problem, config))
                        waiting.append(n)
                        break
                    if self._passing(op, found, config, target):
                        break
            futures = {key: (job, compiler.submit(*job)) for key, job in jobs.items()}
            for key, ((op, _, config), future) in futures.items():
                try:
                    features = future.result()
                except Exception as exc:  # a broken pool: what is left is `first_passing`'s
                    log.info("prefetching the verdict of %s failed: %s", config.short(), exc)
                    waiting = []
                    continue
                self._keep(compiler.target, key, op, config, features)
                compiled += 1
            unsettled = waiting
        return compiled

    def _none_known(self, target: Target) -> bool:
        """Whether no verdict of `target`'s arch is in memory and its folder on disk holds none."""
        with self._lock:
            if target.arch in self._known_archs:
                return False
        folder = self._path(target, "x")
        return folder is None or not folder.parent.is_dir()

    def _recall(self, target: Target, key: str) -> StaticFeatures | None:
        """The verdict of `key` from memory, else from disk (then kept in memory); None where unknown."""
        with self._lock:
            known = self._known.get(key)
        if known is None:
            known = self._read(target, key)
            if known is not None:
                with self._lock:
                    self._known[key] = known
                    self._known_archs.add(target.arch)
        return known

    def _keep(
        self, target: Target, key: str, op: TunableOp, config: Config, features: StaticFeatures
    ) -> None:
        """A compiled verdict, counted and kept in memory, and on disk where it compiled."""
        with self._lock:
            self.compiled += 1
            self._known[key] = features
            self._known_archs.add(target.arch)
        if features.compiled:
            self._write(target, key, op, config, features)

    # -- the on-disk cache: one small JSON file per verdict, written whole or not at all ----------------

    def _path(self, target: Target, key: str) -> Path | None:
        if self.directory is None:
            return None
        triton = toolchain_versions().get("triton", "none")
        return self.directory / f"triton-{triton}" / target.arch / f"{key}.json"

    def _read(self, target: Target, key: str) -> StaticFeatures | None:
        path = self._path(target, key)
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
            return StaticFeatures.from_json(json.dumps(data["features"]))
        except (OSError, ValueError, KeyError, TypeError):  # absent, or unreadable: compile again
            return None

    def _write(
        self, target: Target, key: str, op: TunableOp, config: Config, features: StaticFeatures
    ) -> None:
        path = self._path(target, key)
        if path is None:
            return
        record = {"op": op.name, "config": config.canonical(), "features": json.loads(features.to_json())}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
                json.dump(record, f, sort_keys=True)
            os.replace(f.name, path)
        except OSError as exc:  # a read-only home, a full disk: the verdict stays in memory
            log.info("cannot write the verdict cache %s: %s", path, exc)


def _refused(config: Config, target: Target) -> StaticFeatures:
    """The verdict of a config whose launch refuses it: failed, nothing to compile."""
    return StaticFeatures.failed(target.arch, f"the launch of {config.short()} refuses it")


_verdicts: Verdicts | None = None
_verdicts_lock = threading.Lock()


def verdicts() -> Verdicts:
    """This process's verdicts (created on first use, with the on-disk cache of `cache_dir()`)."""
    global _verdicts
    with _verdicts_lock:
        if _verdicts is None:
            _verdicts = Verdicts(cache_dir())
        return _verdicts


def first_passing(op: TunableOp, problem: Problem, target: Target, candidates: Iterable[Config]) -> Config:
    """The first of `candidates` whose binary passes the static checks on `target` (see the module)."""
    return verdicts().first_passing(op, problem, target, candidates)
