"""Warm start: configs the database already knows for a shape are tried first (no kernel runs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.core.result import Source
from autotune.db import Store
from autotune.engine.runner import Runner, with_seeds
from autotune.engine.strategies import Budget
from autotune.kernels import GEMM
from autotune.sweeps.spec import parse_spec

TARGET = Target.for_arch("sm_90")
OTHER_GPU = dataclasses.replace(TARGET, pci_id="0000:99:00.0", name="another H100")
IMPORTED = dataclasses.replace(TARGET, toolchain={"source": "imported"})
PROBLEM = Problem.of("gemm", 16, 4096, 4096)


class FakeBench:
    """Records the configs asked; times are made up."""

    def __init__(self) -> None:
        self.calls: list[Config] = []

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls.append(config)
        t = 10.0 + (hash(config.canonical()) % 1000) / 100
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


def _store(store: Store, target: Target, m: int, config: Config, us: float, source: Source) -> None:
    # imported configs come untimed, as vLLM's files carry no times
    timing = None if source == Source.IMPORTED else Timing(us, us, us, us, us, 0.0, 5, "events")
    store.record(
        target=target,
        kernel=f"gemm.{config.backend}",
        source_hash="h",
        problem=dataclasses.replace(PROBLEM, M=m),
        result=TrialResult(config, TrialStatus.OK, timing=timing),
        source=source,
    )


def _picks() -> tuple[Config, ...]:
    configs = [c for c in GEMM.space(PROBLEM, TARGET).configs() if c.backend == "triton"]
    return configs[7], configs[19], configs[31], configs[43], configs[55]


def _fill(store: Store) -> tuple[Config, ...]:
    imported, near, far, slower, elsewhere = _picks()
    _store(store, IMPORTED, 8, imported, 50.0, Source.IMPORTED)  # vLLM's bucket nearest to M = 16
    _store(store, IMPORTED, 1024, elsewhere, 50.0, Source.IMPORTED)  # a farther bucket: not taken
    _store(store, TARGET, 64, near, 20.0, Source.MEASURED)  # the winner at M = 64 ...
    _store(store, TARGET, 64, slower, 25.0, Source.MEASURED)  # ... not this slower one
    _store(store, TARGET, 4096, far, 90.0, Source.MEASURED)
    _store(store, OTHER_GPU, 32, elsewhere, 5.0, Source.MEASURED)  # another GPU: not a hint here
    _store(store, TARGET, 16, slower, 30.0, Source.MEASURED)  # this very M: already done, not a seed
    big = Config(backend="triton", BLOCK_M=256, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1,
                 num_warps=8, num_stages=3)  # fmt: skip
    _store(store, TARGET, 2048, big, 80.0, Source.MEASURED)  # not in M = 16's space (BLOCK_M 256)
    return imported, near, far, big


def test_known_configs_are_the_imported_bucket_then_winners_at_the_nearest_m(tmp_path: Path) -> None:
    with Store(str(tmp_path / "k.db")) as store:
        imported, near, far, big = _fill(store)
        known = store.known_configs(PROBLEM, fingerprint=TARGET.fingerprint())
        assert known == [imported, near, big, far]  # M 64, 2048, 4096: nearest first on a log scale
        assert store.known_configs(PROBLEM, fingerprint=TARGET.fingerprint(), limit=1) == [imported, near]
        unrelated = Problem.of("gemm", 16, 4096, 8192)
        assert store.known_configs(unrelated, fingerprint=TARGET.fingerprint()) == []


def test_the_runner_tries_known_configs_right_after_the_anchors(tmp_path: Path) -> None:
    with Store(str(tmp_path / "r.db")) as store:
        imported, near, _far, big = _fill(store)
        bench = FakeBench()
        runner = Runner(store, TARGET, bench)  # type: ignore[arg-type]
        report = runner.tune(GEMM, PROBLEM, strategy="random", budget=Budget(trials=6), seed=1)
        default = GEMM.default_config(PROBLEM, TARGET)
        assert bench.calls[:4] == [Config(backend="torch"), default, imported, near]
        assert big not in bench.calls  # outside this problem's space: skipped, not run
        assert report.seeded == 3  # imported, near and far; not big

        fresh = Problem.of("gemm", 32, 4096, 4096)
        space = GEMM.space(fresh, TARGET)
        anchors = [Config(backend="torch"), GEMM.default_config(fresh, TARGET)]
        plain = next(c for c in space.configs() if c not in anchors)  # the exhaustive order's first
        cold = FakeBench()
        Runner(store, TARGET, cold, warm_start=False).tune(  # type: ignore[arg-type]
            GEMM, fresh, strategy="exhaustive", budget=Budget(trials=3)
        )
        assert cold.calls == [*anchors, plain]
        p48 = Problem.of("gemm", 48, 4096, 4096)
        known = store.known_configs(p48, fingerprint=TARGET.fingerprint())
        seed = next(c for c in known if GEMM.space(p48, TARGET).check(c) is None)
        warm = FakeBench()
        Runner(store, TARGET, warm).tune(  # type: ignore[arg-type]
            GEMM, p48, strategy="exhaustive", budget=Budget(trials=3)
        )
        assert warm.calls[2] == seed != GEMM.space(p48, TARGET).configs()[2]


def test_with_seeds_keeps_the_space_and_its_order() -> None:
    space = GEMM.space(PROBLEM, TARGET)
    imported, near, _far, _slower, _else = _picks()
    big = Config(backend="triton", BLOCK_M=256, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1,
                 num_warps=8, num_stages=3)  # fmt: skip
    seeded, added = with_seeds(space, [near, imported, big, near])
    assert added == 2
    assert set(seeded.configs()) == set(space.configs())
    assert list(seeded.subspace("triton").first)[-2:] == [near, imported]
    assert with_seeds(space, [])[0] is space


def test_warm_start_is_a_spec_option() -> None:
    text = 'name = "w"\n[[sweep]]\nop = "gemm"\nm = [16]\nnk = [[64, 64]]\n'
    assert parse_spec(text).entries[0].warm_start is True
    assert parse_spec(text + "warm_start = false\n").entries[0].warm_start is False
