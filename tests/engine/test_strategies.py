"""Every strategy on the CPU, replaying a recorded-style measurement table instead of timing anything."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from autotune import Config, Problem, Target, TrialResult, TrialStatus
from autotune.core.result import Timing
from autotune.core.space import Constraint, SearchSpace, SubSpace
from autotune.engine.strategies import Budget, Exhaustive, OptunaTPE, RandomSearch, make_strategy


def _space() -> SearchSpace:
    params = dict(
        BLOCK_M=(16, 32, 64, 128), BLOCK_N=(32, 64, 128, 256), BLOCK_K=(32, 64, 128), SPLIT_K=(1, 2, 4)
    )
    too_big = Constraint(
        "too_big",
        "BLOCK_M {BLOCK_M} x BLOCK_N {BLOCK_N} too big",
        lambda c: c["BLOCK_M"] * c["BLOCK_N"] <= 128 * 128,
    )
    first = (Config(backend="triton", BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, SPLIT_K=1),)
    return SearchSpace([SubSpace("torch"), SubSpace("triton", params, [too_big], first=first)])


def _table(seed: int = 7) -> dict[Config, float]:
    """A replayed 'measurement' table: a smooth landscape with noise, a few failures, one clear optimum."""
    rng = random.Random(seed)
    table: dict[Config, float] = {Config(backend="torch"): 50.0}
    for c in _space().configs():
        if c.backend != "triton":
            continue
        t = 20 + abs(math.log2(c["BLOCK_M"] / 64)) * 6 + abs(math.log2(c["BLOCK_N"] / 128)) * 5
        t += abs(math.log2(c["BLOCK_K"] / 64)) * 3 + (c["SPLIT_K"] - 1) * 2 + rng.uniform(0, 1.5)
        table[c] = t
    table[Config(backend="triton", BLOCK_M=128, BLOCK_N=32, BLOCK_K=32, SPLIT_K=4)] = math.inf  # a failure
    return table


def _result(config: Config, t: float) -> TrialResult:
    if math.isinf(t):
        return TrialResult(config, TrialStatus.COMPILE_ERROR, error="replayed failure")
    timing = Timing(t, t, t, t, t, 0.0, 10, "replay")
    return TrialResult(config, TrialStatus.OK, timing=timing)


def _drive(strategy, table: dict[Config, float]) -> list[Config]:
    asked = []
    while (c := strategy.ask()) is not None:
        assert c in table, f"asked for a config outside the space: {c}"
        asked.append(c)
        strategy.tell(c, _result(c, table[c]))
    return asked


def test_exhaustive_visits_every_valid_config_once_anchors_first() -> None:
    space, table = _space(), _table()
    asked = _drive(Exhaustive(space), table)
    assert len(asked) == len(set(asked)) == len(space.configs()) == len(table)
    assert asked[0] == Config(backend="torch")
    assert asked[1] == space.subspace("triton").first[0]
    best = min(table, key=table.__getitem__)
    assert Exhaustive(space).space is space
    s = Exhaustive(space)
    _drive(s, table)
    assert s.best is not None and s.best[0] == best


@pytest.mark.parametrize("cls", [RandomSearch, OptunaTPE])
def test_budget_in_trials_and_no_repeats(cls) -> None:
    space, table = _space(), _table()
    asked = _drive(cls(space, Budget(trials=25), seed=3), table)
    assert len(asked) == 25 and len(set(asked)) == 25
    assert asked[0] == Config(backend="torch")  # the vendor baseline always comes first


def test_budget_in_seconds_with_a_fake_clock() -> None:
    now = [0.0]
    s = RandomSearch(_space(), Budget(seconds=10), seed=1, clock=lambda: now[0])
    n = 0
    while (c := s.ask()) is not None:
        s.tell(c, _result(c, 1.0))
        now[0] += 3.0  # each trial "takes" 3 s
        n += 1
    assert n == 4  # asked at t = 0, 3, 6, 9; at 12 the budget is spent


def test_random_is_seeded() -> None:
    table = _table()
    a = _drive(RandomSearch(_space(), Budget(trials=15), seed=5), table)
    b = _drive(RandomSearch(_space(), Budget(trials=15), seed=5), table)
    c = _drive(RandomSearch(_space(), Budget(trials=15), seed=6), table)
    assert a == b and a != c


def test_tpe_beats_random_on_replayed_landscape() -> None:
    """Over several seeds TPE's best within 40 trials is at least as good as random's, on average."""
    table = _table()
    optimum = min(table.values())
    tpe, rnd = [], []
    for seed in range(4):
        for cls, out in ((OptunaTPE, tpe), (RandomSearch, rnd)):
            s = cls(_space(), Budget(trials=40), seed=seed)
            _drive(s, table)
            assert s.best is not None
            out.append(s.best[1].score() / optimum)
    assert sum(tpe) / len(tpe) <= sum(rnd) / len(rnd) + 0.02
    assert max(tpe) < 1.15  # within 15% of the exhaustive optimum every time


def test_tpe_exhausts_a_small_space_without_looping() -> None:
    table = _table()
    asked = _drive(OptunaTPE(_space(), Budget(trials=10_000), seed=0), table)
    assert sorted(map(str, asked)) == sorted(map(str, table))


def _drive_looking_ahead(
    strategy, table: dict[Config, float], n: int, promote_every: int = 0
) -> list[Config]:
    """As `_drive`, but asks for `upcoming(n)` before every ask, as a sweep compiling ahead does, and now
    and then promotes the last config named; every ask must be one of the configs just named."""
    asked = []
    while True:
        ahead = strategy.upcoming(n)
        assert len(ahead) == len(set(ahead)) <= n
        assert not set(ahead) & set(asked), "named a config already asked"
        if promote_every and len(asked) % promote_every == 0 and len(ahead) > 1:
            strategy.promote(ahead[-1])
            ahead = strategy.upcoming(n)
        c = strategy.ask()
        if c is None:
            break
        assert not ahead or c == ahead[0], (c, ahead[:2])
        assert c in table
        asked.append(c)
        strategy.tell(c, _result(c, table[c]))
    return asked


def test_tpe_samples_ahead_and_asks_what_it_named() -> None:
    table = _table()
    s = OptunaTPE(_space(), Budget(trials=30), seed=1, n_startup=6, lookahead=3)
    first = s.upcoming(100)
    # the anchors (vendor, default), then every random start-up trial and 3 more: all valid and untried
    assert first[:2] == [Config(backend="torch"), _space().subspace("triton").first[0]]
    assert len(first) == 2 + 6 + 3 and all(_space().check(c) is None for c in first)
    assert s.upcoming(4) == first[:4]  # naming again samples nothing new
    asked = _drive_looking_ahead(s, table, n=100, promote_every=5)
    assert [first[0], first[1]] == asked[:2]
    assert len(asked) == len(set(asked)) == 30
    assert s.best is not None and s.best[1].score() / min(table.values()) < 1.3


def test_tpe_looking_ahead_exhausts_a_small_space_and_keeps_the_budget() -> None:
    table = _table()
    asked = _drive_looking_ahead(OptunaTPE(_space(), Budget(trials=10_000), seed=0), table, n=8)
    assert sorted(map(str, asked)) == sorted(map(str, table))
    s = OptunaTPE(_space(), Budget(trials=5), seed=0)
    assert len(s.upcoming(50)) == 5
    assert len(_drive_looking_ahead(s, table, n=50)) == 5


def test_tpe_promotes_only_sampled_configs_after_the_anchors() -> None:
    s = OptunaTPE(_space(), Budget(trials=20), seed=2, n_startup=4, lookahead=2)
    ahead = s.upcoming(10)
    assert not s.promote(ahead[-1]), "the anchors go first"
    for c in ahead[:2]:  # the vendor baseline and the default
        assert s.ask() == c
        s.tell(c, _result(c, 30.0))
    ahead = s.upcoming(10)
    assert s.promote(ahead[-1]) and s.upcoming(10)[0] == ahead[-1]
    assert not s.promote(Config(backend="torch"))
    assert s.ask() == ahead[-1]


def test_ask_tell_protocol_is_enforced() -> None:
    s = Exhaustive(_space())
    c = s.ask()
    assert c is not None
    with pytest.raises(RuntimeError, match="before asking again"):
        s.ask()
    with pytest.raises(RuntimeError, match="pending config"):
        s.tell(Config(backend="nope"), _result(c, 1.0))


def test_make_strategy_and_bad_budgets() -> None:
    assert isinstance(make_strategy("tpe", _space()), OptunaTPE)
    with pytest.raises(ValueError, match="unknown strategy 'grid'"):
        make_strategy("grid", _space())
    with pytest.raises(ValueError, match="trial budget must be positive"):
        Budget(trials=0)


def test_failures_are_told_not_raised() -> None:
    space, table = _space(), _table()
    s = Exhaustive(space)
    _drive(s, table)
    failed = [r for _, r in s.history if not r.ok]
    assert len(failed) == 1 and failed[0].status is TrialStatus.COMPILE_ERROR
    assert s.best is not None and s.best[1].ok


def test_strategies_on_the_real_gemm_space() -> None:
    """The gemm space of a decode shape on sm_90 drives every strategy without stray configs."""
    from autotune.kernels import GEMM

    space = GEMM.space(Problem.of("gemm", 16, 4096, 4096), Target.for_arch("sm_90"))
    valid = set(space.configs())
    for name in ("exhaustive", "random", "optuna"):
        s = make_strategy(name, space, Budget(trials=20), seed=0)
        seen = []
        for i in itertools.count():
            c = s.ask()
            if c is None:
                break
            assert c in valid
            seen.append(c)
            s.tell(c, _result(c, 10.0 + i % 7))
        assert len(seen) == 20 == len(set(seen))
