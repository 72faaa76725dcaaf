"""Verdicts: the first candidate whose binary passes the static checks, each binary compiled once per
process and kept on disk; nothing compiled where the target cannot be compiled for. CPU only: the
compiler is a fake that returns recorded features."""

from __future__ import annotations

import json
import random
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.static import StaticFeatures
from autotune.core.target import Target
from autotune.engine.verdicts import ENV_CACHE, ENV_CHECK, Verdicts, cache_dir, can_check

TARGET = Target.for_arch("gfx950")
PROBLEM = Problem.of("gemm", 256, 4096, 4096)


class _Backend:
    def __init__(self, library: bool, exempt: frozenset[str] = frozenset()) -> None:
        self.library, self._exempt = library, exempt

    def exempt(self, target: Target) -> frozenset[str]:
        return self._exempt


class FakeOp:
    """An op whose "torch" backend is a vendor library and whose "triton" configs are compiled (exempt
    from the checks `exempt`)."""

    name = "fake_gemm"

    def __init__(self, exempt: frozenset[str] = frozenset()) -> None:
        self.exempt = exempt

    def backend(self, name: str) -> _Backend:
        return _Backend(name == "torch", self.exempt)

    def source_hash(self, backend: str) -> str:
        return f"{backend}-v1"


def tile(bm: int, stages: int = 2) -> Config:
    return Config(backend="triton", BLOCK_M=bm, BLOCK_N=bm, num_warps=8, num_stages=stages)


def features(spills: int = 0, lds: int = 32 * 1024, occupancy: int = 2) -> StaticFeatures:
    return StaticFeatures(arch=TARGET.arch, spills=spills, scratch_bytes=4 * spills, lds_bytes=lds,
                          occupancy=occupancy, occupancy_unit="waves/SIMD")  # fmt: skip


class Compiler:
    """Records every compile; each config's features come from `table` (a failed compile where absent)."""

    def __init__(self, table: dict[Config, StaticFeatures]) -> None:
        self.table, self.calls = table, []

    def __call__(self, op: Any, problem: Problem, config: Config, target: Target) -> StaticFeatures:
        self.calls.append(config)
        return self.table.get(config) or StaticFeatures.failed(target.arch, "error: out of registers")


def key_of(op: Any, problem: Problem, config: Config, target: Target) -> str:
    """One binary per config whatever the problem's M (as when M only changes a runtime argument)."""
    return config.canonical()


def verdicts(compiler: Compiler, directory: Path | None = None, checkable: bool = True) -> Verdicts:
    return Verdicts(directory, features_of=compiler, key_of=key_of, checkable=lambda t: checkable)


def test_the_first_candidate_that_passes_every_check_is_the_default() -> None:
    big, deep, small, tiny = tile(256), tile(256, 1), tile(128), tile(64)
    compiler = Compiler({
        big: features(spills=21),  # spills
        deep: features(lds=278_464, occupancy=0),  # over gfx950's 160 KiB of LDS
        small: features(occupancy=0),  # under the occupancy floor
        tiny: features(),
    })  # fmt: skip
    v = verdicts(compiler)
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [big, deep, small, tiny]) == tiny
    assert compiler.calls == [big, deep, small, tiny]
    # a candidate that does not compile fails, and so does one whose launch refuses it
    failing = Compiler({tiny: features()})
    assert verdicts(failing).first_passing(FakeOp(), PROBLEM, TARGET, [big, tiny]) == tiny

    def refuses(op: Any, problem: Problem, config: Config, target: Target) -> str:
        if config == big:
            raise ValueError("the kernel refuses BLOCK_M 256")
        return config.canonical()

    v = Verdicts(None, features_of=Compiler({big: features(), tiny: features()}), key_of=refuses,
                 checkable=lambda t: True)  # fmt: skip
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [big, tiny]) == tiny


def test_a_backend_exempt_from_a_check_is_not_pruned_by_it() -> None:
    spilling, lds = tile(256), tile(256, 1)
    compiler = Compiler({spilling: features(spills=21), lds: features(lds=278_464)})
    v = verdicts(compiler)
    assert not v.passes(FakeOp(), PROBLEM, spilling, TARGET)
    assert v.passes(FakeOp(frozenset({"spills"})), PROBLEM, spilling, TARGET)
    assert not v.passes(FakeOp(frozenset({"spills"})), PROBLEM, lds, TARGET)  # only that check


def test_a_passing_first_candidate_is_kept_and_a_vendor_config_needs_no_compile() -> None:
    compiler = Compiler({tile(256): features()})
    v = verdicts(compiler)
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [tile(256), tile(128)]) == tile(256)
    assert compiler.calls == [tile(256)]
    vendor = Config(backend="torch")
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [vendor, tile(128)]) == vendor
    assert compiler.calls == [tile(256)]


def test_each_binary_is_compiled_once_per_process() -> None:
    rng = random.Random(7)
    configs = [tile(bm, s) for bm in (256, 128, 64) for s in (2, 1)]
    table = {c: features(spills=rng.randint(1, 300)) for c in configs[:-1]} | {configs[-1]: features()}
    compiler = Compiler(table)
    v = verdicts(compiler)
    for m in rng.sample(range(1, 8193), 25):  # problems of one binary: compiled once, whatever their M
        assert v.first_passing(FakeOp(), PROBLEM.with_m(m), TARGET, configs) == configs[-1]
    assert sorted(compiler.calls, key=configs.index) == configs
    assert v.compiled == len(configs)


def test_verdicts_persist_on_disk_and_a_failed_compile_does_not(tmp_path: Path) -> None:
    good, bad = tile(64), tile(256)
    first = Compiler({good: features(spills=0, lds=40_000)})
    assert verdicts(first, tmp_path).first_passing(FakeOp(), PROBLEM, TARGET, [bad, good]) == good
    stored = list(tmp_path.rglob("*.json"))
    assert len(stored) == 1 and "triton-" in str(stored[0].parent.parent.name)
    assert json.loads(stored[0].read_text())["config"] == good.canonical()
    # a new process reads the good verdict back and compiles only the candidate that failed to compile
    second = Compiler({good: features(spills=99)})  # would fail, were it compiled again
    assert verdicts(second, tmp_path).first_passing(FakeOp(), PROBLEM, TARGET, [bad, good]) == good
    assert second.calls == [bad]
    # an unreadable file is compiled again
    stored[0].write_text("{not json")
    third = Compiler({good: features()})
    assert verdicts(third, tmp_path).features(FakeOp(), PROBLEM, good, TARGET) == features()
    assert third.calls == [good]


def test_no_compile_where_the_target_cannot_be_compiled_for() -> None:
    compiler = Compiler({})
    v = verdicts(compiler, checkable=False)
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [tile(256), tile(128)]) == tile(256)
    assert compiler.calls == []
    with pytest.raises(ValueError, match="no candidate"):
        v.first_passing(FakeOp(), PROBLEM, TARGET, [])


def test_none_passing_keeps_the_first_candidate(caplog: pytest.LogCaptureFixture) -> None:
    compiler = Compiler({tile(256): features(spills=3), tile(128): features(spills=1)})
    assert verdicts(compiler).first_passing(FakeOp(), PROBLEM, TARGET, [tile(256), tile(128)]) == tile(256)
    assert "no candidate default" in caplog.text


def test_reading_features_that_raises_keeps_the_first_candidate() -> None:
    def broken(op: Any, problem: Problem, config: Config, target: Target) -> StaticFeatures:
        raise RuntimeError("cuobjdump printed no resource usage")

    v = Verdicts(None, features_of=broken, key_of=key_of, checkable=lambda t: True)
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [tile(256), tile(128)]) == tile(256)


def test_switches_and_the_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "v"))
    assert cache_dir() == tmp_path / "v"
    monkeypatch.setenv(ENV_CACHE, "off")
    assert cache_dir() is None
    monkeypatch.delenv(ENV_CACHE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "autotune" / "verdicts"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv(ENV_CHECK, "0")
    assert not can_check(TARGET)
    monkeypatch.delenv(ENV_CHECK)
    assert not can_check(Target.interpreter_target())
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the kernels are interpreter objects: nothing compiles
    assert not can_check(TARGET)


def test_known_only_compiles_nothing_and_takes_the_first_candidate_not_known_to_fail(tmp_path: Path) -> None:
    from autotune.engine.verdicts import known_only

    rng = random.Random(3)
    big, mid, small = tile(256), tile(128), tile(64)
    compiler = Compiler({big: features(spills=rng.randint(1, 300)), mid: features(), small: features()})
    v = verdicts(compiler, tmp_path)
    with known_only():
        assert v.first_passing(FakeOp(), PROBLEM, TARGET, [big, mid, small]) == big  # nothing known yet
    assert compiler.calls == []
    v.features(FakeOp(), PROBLEM, big, TARGET)  # big's verdict (it spills) is known from now on
    fresh = verdicts(Compiler({}), tmp_path)  # another process: the verdict is on disk
    with known_only():
        assert fresh.first_passing(FakeOp(), PROBLEM, TARGET, [big, mid, small]) == mid
        assert fresh.first_passing(FakeOp(), PROBLEM, TARGET, [big, tile(256, 1)]) == tile(256, 1)
    assert fresh.compiled == 0
    # not memoized: outside, the default is checked by compiling
    assert v.first_passing(FakeOp(), PROBLEM, TARGET, [big, mid, small]) == mid
    assert compiler.calls == [big, mid]


class _Waited(Future):  # type: ignore[type-arg]
    """A finished Future that logs when its result is read."""

    def __init__(self, log: list[str], value: StaticFeatures) -> None:
        super().__init__()
        self.log = log
        self.set_result(value)

    def result(self, timeout: float | None = None) -> StaticFeatures:
        self.log.append("wait")
        value: StaticFeatures = super().result(timeout)
        return value


class Pool:
    """A CompilePool stand-in: logs each submit (config's BLOCK_M and the problem's M) and each wait."""

    def __init__(self, table: dict[Config, StaticFeatures], target: Target = TARGET) -> None:
        self.table, self.target, self.log = table, target, []

    def submit(self, op: Any, problem: Problem, config: Config) -> Future:  # type: ignore[type-arg]
        self.log.append(f"{problem.M}:{config['BLOCK_M']}")
        found = self.table.get(config) or StaticFeatures.failed(self.target.arch, "error: out of registers")
        return _Waited(self.log, found)


def test_prefetch_compiles_what_first_passing_would_round_by_round_all_at_once(tmp_path: Path) -> None:
    rng = random.Random(5)
    big, mid, small = tile(256), tile(128), tile(64)
    table = {big: features(spills=rng.randint(1, 300)), mid: features(occupancy=0), small: features()}

    def per_problem(op: Any, problem: Problem, config: Config, target: Target) -> str:
        return f"{problem.M}/{config.canonical()}"  # each problem its own binaries

    m1, m2, m3 = rng.sample(range(1, 4097), 3)
    asks = [
        (FakeOp(), PROBLEM.with_m(m1), TARGET, (big, mid, small)),  # three rounds
        (FakeOp(), PROBLEM.with_m(m2), TARGET, (small, big)),  # passes in the first
        (FakeOp(), PROBLEM.with_m(m3), Target.for_arch("gfx942"), (big, small)),  # another target: left
    ]
    pool = Pool(table)
    v = Verdicts(tmp_path, features_of=Compiler({}), key_of=per_problem, checkable=lambda t: True)
    assert v.prefetch(asks, pool) == 4
    assert pool.log == [f"{m1}:256", f"{m2}:64", "wait", "wait", f"{m1}:128", "wait", f"{m1}:64", "wait"]
    # first_passing then compiles nothing, and picks what it would have picked compiling one by one
    assert v.first_passing(FakeOp(), PROBLEM.with_m(m1), TARGET, [big, mid, small]) == small
    assert v.first_passing(FakeOp(), PROBLEM.with_m(m2), TARGET, [small, big]) == small
    assert v.compiled == 4
    one_by_one = Compiler(table)
    sequential = Verdicts(None, features_of=one_by_one, key_of=per_problem, checkable=lambda t: True)
    for op, problem, target, candidates in asks[:2]:
        sequential.first_passing(op, problem, target, candidates)
    assert sorted(map(str, one_by_one.calls)) == sorted(map(str, [big, mid, small, small]))
    # known verdicts (on disk) settle an ask without a compile; a vendor candidate needs none
    again = Pool(table)
    fresh = Verdicts(tmp_path, features_of=Compiler({}), key_of=per_problem, checkable=lambda t: True)
    vendor = Config(backend="torch")
    assert fresh.prefetch([*asks[:2], (FakeOp(), PROBLEM.with_m(m3), TARGET, (vendor, big))], again) == 0
    assert again.log == []


def test_keys_are_computed_once_and_not_at_all_where_nothing_of_the_arch_is_known(tmp_path: Path) -> None:
    rng = random.Random(13)
    bound: list[Config] = []

    def counted(op: Any, problem: Problem, config: Config, target: Target) -> str:
        bound.append(config)  # binding the launches: milliseconds each
        return config.canonical()

    configs = [tile(bm, s) for bm in (256, 128) for s in (1, 2)]
    v = Verdicts(tmp_path, features_of=Compiler({c: features() for c in configs}), key_of=counted,
                 checkable=lambda t: True)  # fmt: skip
    problem = PROBLEM.with_m(rng.randint(1, 8192))
    assert all(v.known(FakeOp(), problem, c, TARGET) is None for c in configs) and bound == []
    v.features(FakeOp(), problem, configs[0], TARGET)  # now one verdict of gfx950 is known
    assert v.known(FakeOp(), problem, configs[0], TARGET) == features()
    assert v.known(FakeOp(), problem, configs[1], TARGET) is None
    v.key(FakeOp(), problem, configs[1], TARGET)
    assert bound == configs[:2]  # each key once
    assert v.known(FakeOp(), problem, configs[0], Target.for_arch("gfx942")) is None  # another arch: none
