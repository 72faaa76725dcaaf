"""The Runner with a fake benchmarker: resume, device faults, budgets; no kernel runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.db import Store
from autotune.engine.bench import DeviceFault
from autotune.engine.runner import Runner
from autotune.engine.strategies import Budget
from autotune.kernels import GEMM

TARGET = Target.for_arch("sm_90")
PROBLEM = Problem.of("gemm", 16, 4096, 4096)


class FakeBench:
    """Replays a made-up time per config; raises DeviceFault on the `fault_at`-th call."""

    def __init__(self, fault_at: int | None = None) -> None:
        self.calls: list[Config] = []
        self.fault_at = fault_at

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls.append(config)
        if self.fault_at is not None and len(self.calls) == self.fault_at:
            raise DeviceFault("illegal memory access (simulated)")
        t = 10.0 + (hash(config.canonical()) % 1000) / 100
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


def _runner(store: Store, bench: FakeBench) -> Runner:
    return Runner(store, TARGET, bench)  # type: ignore[arg-type]


def test_resume_reads_back_and_runs_only_the_rest(tmp_path: Path) -> None:
    with Store(str(tmp_path / "r.db")) as store:
        first = FakeBench()
        rep1 = _runner(store, first).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=5))
        assert rep1.ran == 5 and rep1.cached == 0
        second = FakeBench()
        rep2 = _runner(store, second).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=8))
        assert rep2.cached == 5 and rep2.ran == 3
        assert not set(first.calls) & set(second.calls)
        assert len(store.trials()) == 8
        assert rep2.vendor is not None and rep2.best is not None


def test_a_device_fault_is_stored_as_crashed_and_never_rerun(tmp_path: Path) -> None:
    with Store(str(tmp_path / "f.db")) as store:
        bench = FakeBench(fault_at=3)
        with pytest.raises(DeviceFault):
            _runner(store, bench).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
        faulty = bench.calls[2]
        crashed = store.trials(status=TrialStatus.CRASHED)
        assert [t.config for t in crashed] == [faulty] and "illegal memory access" in crashed[0].error
        again = FakeBench()
        rep = _runner(store, again).tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
        assert faulty not in again.calls and rep.cached == 3 and rep.ran == 3 and rep.failed == 1


class FakeChecker:
    """Compiles nothing; `ready` says which configs' compiles have finished."""

    lookahead = 8

    def __init__(self) -> None:
        self.ready_set: set[Config] = set()

    def prefetch(self, op: object, problem: Problem, configs: object) -> None:
        pass

    def findings(self, op: object, problem: Problem, config: Config) -> list[object]:
        self.ready_set.add(config)  # waited for: compiled now
        return []

    def ready(self, problem: Problem, config: Config) -> bool:
        return config in self.ready_set


def test_a_compiled_config_is_measured_before_one_still_compiling(tmp_path: Path) -> None:
    from autotune.engine.strategies import make_strategy

    space = GEMM.space(PROBLEM, TARGET)
    order = make_strategy("exhaustive", space, Budget(trials=6)).upcoming(6)
    checker = FakeChecker()
    checker.ready_set = {order[0], order[4]}  # the 5th finished compiling before the 2nd to the 4th
    bench = FakeBench()
    with Store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, TARGET, bench, checker=checker)  # type: ignore[arg-type]
        report = runner.tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
    assert report.ran == 6
    assert bench.calls[:2] == [order[0], order[4]]  # the ready one jumped the queue
    assert sorted(c.canonical() for c in bench.calls) == sorted(c.canonical() for c in order)  # same set


def test_promote_changes_the_order_never_the_configs() -> None:
    from autotune.engine.strategies import make_strategy

    space = GEMM.space(PROBLEM, TARGET)
    search = make_strategy("random", space, Budget(trials=5), seed=3)
    planned = search.upcoming(5)
    assert search.promote(planned[3]) and not search.promote(planned[3])  # already next: no change
    asked = []
    while (config := search.ask()) is not None:
        asked.append(config)
        search.tell(config, TrialResult(config, TrialStatus.OK, timing=Timing(1, 1, 1, 1, 1, 0, 1, "events")))
    assert asked[0] == planned[3] and set(asked) == set(planned) and len(asked) == 5
    optuna = make_strategy("optuna", space, Budget(trials=5))
    assert not optuna.promote(planned[0])  # a learning strategy keeps its own order


class LuckyBench(FakeBench):
    """The vendor takes 10 µs every time; `lucky` took 9 µs the first time it ran and 12 µs after that;
    every other config 11 µs or more."""

    def __init__(self, lucky: Config | None = None) -> None:
        super().__init__()
        self.lucky = lucky

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls.append(config)
        if config.backend == "torch":
            t = 10.0
        elif config == self.lucky:
            t = 9.0 if self.calls.count(config) == 1 else 12.0
        else:
            t = 11.0 + (hash(config.canonical()) % 100) / 100
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


class FastBench(FakeBench):
    """1 µs for every config of our backends, 10 µs for the vendor's."""

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls.append(config)
        t = 10.0 if config.backend == "torch" else 1.0
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


def _lucky_setup(store: Store, rounds: int = 3) -> tuple[LuckyBench, Config]:
    from autotune.engine.strategies import make_strategy

    order = make_strategy("exhaustive", GEMM.space(PROBLEM, TARGET), Budget(trials=6)).upcoming(6)
    lucky = next(c for c in order if c.backend != "torch")
    bench = LuckyBench(lucky)
    runner = Runner(store, TARGET, bench, final_rounds=rounds)  # type: ignore[arg-type]
    report = runner.tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
    assert report.best is not None and report.best.config == lucky  # the search's pick: a lucky timing
    return bench, lucky


def test_the_final_round_times_the_finalists_again_and_its_medians_pick_the_winner(tmp_path: Path) -> None:
    from autotune.core.result import Source
    from autotune.dispatch.emit import emit_table

    with Store(str(tmp_path / "f.db")) as store:
        bench, lucky = _lucky_setup(store)
        finals = store.trials(source=Source.FINAL)
        second = sorted(store.trials(source=Source.MEASURED), key=lambda t: t.time_us or 0.0)[2].config
        assert {t.config for t in finals} == {lucky, Config(backend="torch"), second}
        assert bench.calls[6:] == [lucky, second, Config(backend="torch")] * 3  # interleaved rounds
        by_config = {t.config: t for t in finals}
        assert by_config[lucky].time_us == 12.0 and by_config[lucky].extra["round_us"] == [12.0] * 3
        assert by_config[Config(backend="torch")].time_us == 10.0
        winner = next(iter(store.winners(final=True)))
        assert winner.best.config == Config(backend="torch") and winner.best.source is Source.FINAL
        assert store.winners()[0].best.config == lucky  # the search's own timings alone
        assert emit_table(store).lookup("gemm", 16, 4096, 4096) == Config(backend="torch")


def test_without_a_final_round_the_lucky_config_is_emitted(tmp_path: Path) -> None:
    from autotune.core.result import Source
    from autotune.dispatch.emit import emit_table

    with Store(str(tmp_path / "n.db")) as store:
        bench, lucky = _lucky_setup(store, rounds=0)
        assert len(bench.calls) == 6 and store.trials(source=Source.FINAL) == []
        assert emit_table(store).lookup("gemm", 16, 4096, 4096) == lucky


def test_a_stored_final_round_is_reused_and_a_new_one_replaces_it(tmp_path: Path) -> None:
    from autotune.core.result import Source

    with Store(str(tmp_path / "r.db")) as store:
        _lucky_setup(store)
        first = {t.id for t in store.trials(source=Source.FINAL)}
        again = LuckyBench()
        report = Runner(store, TARGET, again, final_rounds=3).tune(  # type: ignore[arg-type]
            GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6)
        )
        assert again.calls == [] and report.final and report.final[0].config == Config(backend="torch")
        assert {t.id for t in store.trials(source=Source.FINAL)} == first
        # a longer search whose new configs all beat the stored ones: other finalists, a new round that
        # replaces the whole earlier one
        more = FastBench()
        Runner(store, TARGET, more, final_rounds=2).tune(  # type: ignore[arg-type]
            GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=40)
        )
        finals = store.trials(source=Source.FINAL)
        assert not {t.id for t in finals} & first and all(t.extra["final_rounds"] == 2 for t in finals)


def test_a_sweep_stopped_in_its_final_round_stores_none_of_it(tmp_path: Path) -> None:
    from autotune.core.result import Source
    from autotune.engine.runner import SweepStopped

    with Store(str(tmp_path / "s.db")) as store:
        bench = FakeBench()
        runner = Runner(store, TARGET, bench, final_rounds=3, should_stop=lambda: len(bench.calls) >= 8)  # type: ignore[arg-type]
        with pytest.raises(SweepStopped):
            runner.tune(GEMM, PROBLEM, strategy="exhaustive", budget=Budget(trials=6))
        assert len(store.trials(source=Source.MEASURED)) == 6 and store.trials(source=Source.FINAL) == []


def test_a_newer_measured_best_outranks_an_older_final_round(tmp_path: Path) -> None:
    from autotune.core.result import Source

    with Store(str(tmp_path / "w.db")) as store:
        _lucky_setup(store)
        fast = Config(backend="triton", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_stages=9)  # a later sweep's
        old = next(t for t in store.trials() if t.backend == "triton")
        result = TrialResult(fast, TrialStatus.OK, timing=Timing(5.0, 5.0, 5.0, 5.0, 5.0, 0.0, 5, "events"))
        store.record(target=TARGET, kernel=old.kernel, source_hash=old.source_hash, problem=PROBLEM,
                     result=result)  # fmt: skip
        winner = store.winners(final=True)[0]
        assert winner.best.config == fast and winner.best.source is Source.MEASURED


def test_a_final_round_after_searches_that_split_the_backends_takes_finalists_from_all(
    tmp_path: Path,
) -> None:
    from autotune.core.result import Source

    LARGE = Problem.of("gemm", 256, 4096, 4096)  # the TMA kernel's space is empty at M = 16
    with Store(str(tmp_path / "b.db")) as store:
        for backends in (
            ("torch", "triton"),
            ("torch", "triton_tma"),
        ):  # as benchmarks/gemm.py tunes M >= 256
            Runner(store, TARGET, FakeBench(), final_rounds=2).tune(  # type: ignore[arg-type]
                GEMM, LARGE, strategy="exhaustive", budget=Budget(trials=6), backends=backends
            )
        measured = sorted(store.trials(source=Source.MEASURED), key=lambda t: t.time_us or 0.0)
        ours = [t.config for t in measured if t.backend != "torch"]
        last = {t.config for t in store.trials(source=Source.FINAL)}  # the second search's round
        assert last == {*[c for c in ours if c.backend == "triton_tma"][:2], Config(backend="torch")}
        winner = store.winners(final=True)[0]
        if measured[0].config in last:  # the round holds the fastest measured config: it decides
            assert winner.best.source is Source.FINAL
        else:  # it does not (a pointer-kernel config was fastest): passed over, the measured timings decide
            assert winner.best.source is Source.MEASURED and winner.best.config == measured[0].config
        bench = FakeBench()
        final = Runner(store, TARGET, bench, final_rounds=2).final_round(GEMM, LARGE)  # type: ignore[arg-type]
        want = {ours[0], ours[1], Config(backend="torch")}
        assert {r.config for r in final} == want == {t.config for t in store.trials(source=Source.FINAL)}
        assert set(bench.calls) == (set() if want == last else want)  # the same finalists: reused
        assert store.winners(final=True)[0].best.source is Source.FINAL
