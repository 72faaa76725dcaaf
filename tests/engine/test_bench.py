"""The Benchmarker's correctness gate, error classification and wall-clock timing (CPU interpreter)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from autotune import Config, Problem, Target
from autotune.core.result import TrialStatus
from autotune.core.target import interpreting
from autotune.engine.bench import Benchmarker, BenchSettings, DeviceFault, classify_error, rel_error
from autotune.kernels import GEMM, Launch

needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)

PROBLEM = Problem.of("gemm", 16, 32, 32, "bf16")
GOOD = Config(
    backend="triton", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=1
)


class FakeGemm:
    """GEMM with a sabotaged `prepare`: a config's "mode" picks what its launch does to `out`."""

    name = "gemm"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, attr: str) -> Any:
        return getattr(GEMM, attr)

    def prepare(
        self,
        problem: Problem,
        config: Config,
        target: Target,
        inputs: Sequence[torch.Tensor],
        out: torch.Tensor,
    ) -> Launch:
        mode = str(config.get("mode", "real"))
        ref = GEMM.reference(problem, inputs)
        if mode == "raise_in_prepare":
            raise ValueError("cannot build launch arguments")

        def launch() -> None:
            self.calls.append(mode)
            if mode == "noop":
                return
            if mode == "scaled":
                out.copy_(ref * 1.05)
            elif mode == "partial":
                out[:-1].copy_(ref[:-1])  # the last row is never written
            elif mode == "inf":
                out.copy_(ref)
                out[0, 0] = float("inf")
            elif mode == "value_error":
                raise ValueError("bad launch argument")
            elif mode == "oom":
                raise OutOfResources(300000, 65536, "shared memory")
            elif mode == "fault":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            else:  # "real", "pinned"
                out.copy_(ref)

        if mode == "pinned":
            launch.extra = {"tunableop": {"solution": "Gemm_Hipblaslt_1_9"}}  # type: ignore[attr-defined]
        return launch


def fake_config(mode: str) -> Config:
    return Config(backend="triton", mode=mode)


@pytest.fixture
def interp() -> Target:
    return Target.interpreter_target()


@pytest.fixture
def fake_bench(interp: Target) -> Benchmarker:
    return Benchmarker(FakeGemm(), interp)  # type: ignore[arg-type]


# -- rel_error and classify_error ---------------------------------------------------------------------


def test_rel_error_values() -> None:
    ref = torch.tensor([[3.0, 4.0]])
    assert rel_error(ref.to(torch.bfloat16), ref) == 0.0
    assert rel_error(torch.tensor([[3.0, 4.5]]), ref) == pytest.approx(0.1)
    assert rel_error(torch.tensor([[0.5]]), torch.zeros(1, 1)) == pytest.approx(0.5)  # zero ref: absolute
    for bad in (float("nan"), float("inf"), -float("inf")):
        assert rel_error(torch.tensor([[3.0, bad]]), ref) == math.inf


def test_classify_error() -> None:
    assert classify_error(OutOfResources(300000, 65536, "shared memory")) is TrialStatus.OUT_OF_RESOURCES
    assert classify_error(torch.cuda.OutOfMemoryError("CUDA out of memory")) is TrialStatus.OUT_OF_RESOURCES
    assert classify_error(CompilationError("def f(): pass", None, "boom")) is TrialStatus.COMPILE_ERROR
    assert classify_error(RuntimeError("PassManager::run failed")) is TrialStatus.COMPILE_ERROR
    assert classify_error(RuntimeError("ptxas fatal: bad register")) is TrialStatus.COMPILE_ERROR
    assert classify_error(RuntimeError("an illegal memory access was encountered")) is TrialStatus.CRASHED
    assert classify_error(RuntimeError("device-side assert triggered")) is TrialStatus.CRASHED
    assert classify_error(ValueError("something else")) is TrialStatus.RUNTIME_ERROR
    assert all(s.failed for s in TrialStatus if s is not TrialStatus.OK) and not TrialStatus.OK.failed


# -- the correctness gate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, infinite",
    [("noop", True), ("partial", True), ("inf", True), ("scaled", False)],
)
def test_wrong_output_is_wrong_result(fake_bench: Benchmarker, mode: str, infinite: bool) -> None:
    """Unwritten (NaN poison), partly written, overflowed or inaccurate output fails the gate, untimed."""
    result = fake_bench.run(PROBLEM, fake_config(mode))
    assert result.status is TrialStatus.WRONG_RESULT and not result.ok
    assert result.timing is None and result.time_us is None and result.score() == math.inf
    assert "wrong result: relative error" in result.error
    assert result.rel_error is not None
    if infinite:
        assert result.rel_error == math.inf and "NaN/inf" in result.error
    else:
        assert result.rel_error == pytest.approx(0.05, rel=0.05)
        assert f"> {GEMM.tolerance(PROBLEM):g}" in result.error
    assert fake_bench.op.calls == [mode]  # type: ignore[attr-defined]  # checked once, never timed


def test_output_is_poisoned_before_the_check(fake_bench: Benchmarker) -> None:
    """A launch that writes nothing fails even when the buffer holds a previous config's right answer."""
    first = fake_bench.run(PROBLEM, fake_config("real"))
    assert first.status is TrialStatus.OK and first.rel_error is not None
    assert first.rel_error <= GEMM.tolerance(PROBLEM)
    assert bool(torch.isfinite(fake_bench._states[PROBLEM].outputs[0].float()).all())
    second = fake_bench.run(PROBLEM, fake_config("noop"))
    assert second.status is TrialStatus.WRONG_RESULT and second.rel_error == math.inf


@pytest.mark.parametrize(
    "mode, status, text",
    [
        ("value_error", TrialStatus.RUNTIME_ERROR, "ValueError during compile: bad launch argument"),
        ("raise_in_prepare", TrialStatus.RUNTIME_ERROR, "ValueError during compile: cannot build launch"),
        ("oom", TrialStatus.OUT_OF_RESOURCES, "OutOfResources during compile: out of resource"),
    ],
)
def test_failures_are_values(fake_bench: Benchmarker, mode: str, status: TrialStatus, text: str) -> None:
    result = fake_bench.run(PROBLEM, fake_config(mode))
    assert result.status is status and result.timing is None and result.time_us is None
    assert text in result.error


def test_device_fault_raises(fake_bench: Benchmarker) -> None:
    """A fault that leaves the device unusable is the one failure that raises."""
    with pytest.raises(DeviceFault, match="illegal memory access"):
        fake_bench.run(PROBLEM, fake_config("fault"))


# -- real configs in the interpreter ------------------------------------------------------------------


@needs_interpreter
@pytest.mark.parametrize("config", [GOOD, GOOD.replace(SPLIT_K=2), Config(backend="torch")], ids=str)
def test_real_config_is_ok_and_timed(interp: Target, config: Config) -> None:
    bench = Benchmarker(GEMM, interp)
    assert bench.device == "cpu" and bench.settings == BenchSettings.for_interpreter()
    result = bench.run(PROBLEM, config)
    assert result.status is TrialStatus.OK, result.error
    assert result.error == "" and result.rel_error is not None
    assert 0 < result.rel_error <= GEMM.tolerance(PROBLEM) or config.backend == "torch"
    timing = result.timing
    assert timing is not None and timing.method == "wallclock"
    assert timing.runs == BenchSettings.for_interpreter().min_reps
    assert 0 < timing.min_us <= timing.median_us and timing.median_us == result.time_us == result.score()
    assert result.compile_s > 0 and result.measure_s > 0


@needs_interpreter
def test_uncompilable_config_is_a_failed_status(interp: Target) -> None:
    """BLOCK_M=12 (tl.arange needs a power of 2) fails as a value; the interpreter raises it at launch
    (InterpreterError), which is classified as a runtime error, not a compile error."""
    bench = Benchmarker(GEMM, interp)
    result = bench.run(PROBLEM, GOOD.replace(BLOCK_M=12))
    assert result.status is TrialStatus.RUNTIME_ERROR
    assert "power of 2" in result.error and result.timing is None
    # The Benchmarker stays usable afterwards.
    assert bench.run(PROBLEM, GOOD).status is TrialStatus.OK


@needs_interpreter
def test_amd_knob_and_unknown_backend_are_failed_statuses(interp: Target) -> None:
    bench = Benchmarker(GEMM, interp)
    amd = bench.run(PROBLEM, GOOD.replace(kpack=2))
    assert amd.status is TrialStatus.RUNTIME_ERROR and "only on AMD" in amd.error
    unknown = bench.run(PROBLEM, Config(backend="cuda"))
    assert unknown.status is TrialStatus.RUNTIME_ERROR and "unknown gemm backend 'cuda'" in unknown.error


# -- racing: the GPU timing paths, with the device's clock replaced by each config's nominal time ------


class _ClockedGemm(FakeGemm):
    """Writes the right output; each launch sets `now_us` to the config's nominal time `us`."""

    def __init__(self) -> None:
        super().__init__()
        self.now_us = 0.0

    def prepare(self, problem: Problem, config: Config, target: Target, inputs: Any, out: Any) -> Launch:
        mode = "pinned" if config.get("mode") == "pinned" else "real"
        inner = super().prepare(problem, config.replace(mode=mode), target, inputs, out)

        def launch() -> None:
            inner()
            self.now_us = float(config["us"])

        if hasattr(inner, "extra"):
            launch.extra = inner.extra  # type: ignore[attr-defined]
        return launch


class _FakeGpuBench(Benchmarker):
    """The GPU timing paths (probe, events, graph replays, racing) run on the CPU: a timed run "takes"
    the nominal time of the config just launched, with ±2% seeded jitter."""

    def __init__(self, settings: BenchSettings, jitter: float = 0.02) -> None:
        super().__init__(_ClockedGemm(), Target.interpreter_target(), device="cpu", settings=settings)  # type: ignore[arg-type]
        self.on_gpu = True
        self.runs = 0  # timed runs, all methods
        self.jitter = jitter
        import random

        self._rng = random.Random(5)

    def _flush(self) -> None:
        pass

    def _sync(self) -> None:
        pass

    def _tick(self, launch: Launch) -> float:
        launch()
        self.runs += 1
        return self.op.now_us * (1 + self._rng.uniform(-self.jitter, self.jitter))  # type: ignore[attr-defined]

    def _event_samples(self, launches: Sequence[Launch], reps: int) -> list[float]:
        return [self._tick(launches[i % len(launches)]) for i in range(reps)]

    def _graph_sampler(self, launches: Sequence[Launch]) -> Any:
        return (lambda count: [self._tick(launches[0]) for _ in range(count)]), 4


def test_what_a_launch_found_is_stored_with_its_trial() -> None:
    bench = _FakeGpuBench(BenchSettings(method="events", min_reps=5, max_reps=5, precision=None))
    result = bench.run(PROBLEM, Config(backend="triton", mode="pinned", us=10.0))
    assert result.ok and result.extra["tunableop"] == {"solution": "Gemm_Hipblaslt_1_9"}
    plain = bench.run(PROBLEM, Config(backend="triton", mode="real", us=10.0))
    assert plain.ok and "tunableop" not in plain.extra


def _timed(bench: _FakeGpuBench, us: float, problem: Problem = PROBLEM, **kw: Any) -> tuple[Any, int]:
    before = bench.runs
    result = bench.run(problem, Config(backend="triton", mode="real", us=us), **kw)
    assert result.ok, result.error
    return result, bench.runs - before


@pytest.mark.parametrize("method", ["events", "graph"])
def test_racing_stops_configs_clearly_slower_than_the_best(method: str) -> None:
    settings = BenchSettings(
        method=method, min_reps=10, max_reps=200, target_time_s=1.0, race=1.5, precision=None
    )
    bench = _FakeGpuBench(settings)
    first, runs_first = _timed(bench, 100.0)
    assert "raced" not in first.extra and first.timing.runs == 200
    slow, runs_slow = _timed(bench, 300.0)  # 3x the best: stops after min_reps timed runs
    assert slow.extra["raced"] == "1.5x" and slow.timing.runs == 10
    assert slow.timing.method == method and slow.time_us == pytest.approx(300.0, rel=0.03)
    assert runs_slow < runs_first / 5
    close, _ = _timed(bench, 140.0)  # within 1.5x: timed fully
    assert "raced" not in close.extra and close.timing.runs == 200
    faster, _ = _timed(bench, 80.0)  # the new best lowers the bound to 120 us
    assert "raced" not in faster.extra
    now_slow, _ = _timed(bench, 130.0)
    assert now_slow.extra["raced"] == "1.5x" and now_slow.timing.runs == 10
    # Side by side comparisons time every variant fully.
    full, _ = _timed(bench, 300.0, full=True)
    assert "raced" not in full.extra and full.timing.runs == 200
    # The bound is per problem: a new problem starts with none.
    other = Problem.of("gemm", 16, 32, 48, "bf16")
    fresh, _ = _timed(bench, 300.0, problem=other)
    assert "raced" not in fresh.extra and fresh.timing.runs == 200


def test_served_timing_races_by_its_own_factor_and_pickles_with_it() -> None:
    import pickle

    from autotune.engine.bench import ServedTiming

    plain, profiled = ServedTiming(GEMM), ServedTiming(GEMM, race=1.05)
    assert plain != profiled and hash(plain) != hash(profiled)
    again, plain_again = pickle.loads(pickle.dumps(profiled)), pickle.loads(pickle.dumps(plain))
    assert (again.race, plain_again.race) == (1.05, None)
    assert type(again.op) is type(GEMM) and repr(again).endswith("race=1.05)")
    gpu = Target.for_arch("sm_90")
    settings = BenchSettings(race=1.5)
    assert Benchmarker(plain, gpu, device="cpu", settings=settings).settings.race == 1.5
    bench = Benchmarker(profiled, gpu, device="cpu", settings=settings)
    assert bench.settings.race == 1.05 and bench.settings.method == "graph"  # still timed as served


def test_the_sweeps_profile_races_its_timings() -> None:
    """The profile's measurer is the served timing with PROFILE_RACE, a tighter bound than the final
    round's (which compares close finalists); a config whose first replays are over it stops there."""
    from autotune.sweeps.profile import PROFILE_RACE

    assert 1.0 < PROFILE_RACE < BenchSettings().race  # type: ignore[operator]
    settings = BenchSettings(
        method="graph", min_reps=3, max_reps=200, target_time_s=1.0, race=PROFILE_RACE, precision=None
    )
    bench = _FakeGpuBench(settings, jitter=0.005)
    _timed(bench, 100.0)  # the vendor, timed first at an M
    behind, _ = _timed(bench, 108.0)
    assert behind.extra["raced"] == f"{PROFILE_RACE:g}x" and behind.timing.runs == 3
    near, _ = _timed(bench, 103.0)
    assert "raced" not in near.extra and near.timing.runs == 200


def test_racing_off_times_every_config_fully() -> None:
    settings = BenchSettings(
        method="events", min_reps=10, max_reps=50, target_time_s=1.0, race=None, precision=None
    )
    bench = _FakeGpuBench(settings)
    _timed(bench, 100.0)
    slow, _ = _timed(bench, 1000.0)
    assert "raced" not in slow.extra and slow.timing.runs == 50
    assert BenchSettings.for_interpreter().race is None


@pytest.mark.parametrize("method", ["events", "graph"])
def test_timing_stops_once_the_median_is_precise_enough(method: str) -> None:
    def runs(jitter: float, precision: float | None) -> int:
        settings = BenchSettings(
            method=method, min_reps=10, max_reps=400, target_time_s=1.0, race=None, precision=precision
        )
        result, _ = _timed(_FakeGpuBench(settings, jitter=jitter), 50.0)
        assert result.time_us == pytest.approx(50.0, rel=jitter + 1e-9)
        return result.timing.runs

    assert runs(0.001, 0.003) == 20  # a steady kernel: 2 x min_reps
    noisy = runs(0.05, 0.003)  # sigma ~2.9%: some 100 runs (estimated from the first 10)
    assert 30 < noisy < 400
    assert runs(0.2, 0.003) == 400  # capped by max_reps
    assert runs(0.001, None) == 400  # no precision target: as many runs as the time target allows
    settings = BenchSettings(method=method, min_reps=10, max_reps=400, target_time_s=1.0, precision=0.003)
    full, _ = _timed(_FakeGpuBench(settings, jitter=0.001), 50.0, full=True)
    assert full.timing.runs == 400  # side by side comparisons: timed fully


def test_runs_for_precision() -> None:
    from autotune.engine.bench import runs_for_precision

    flat = [100.0] * 10
    assert runs_for_precision(flat, 0.003) == 0
    spread = [float(x) for x in range(95, 106)]  # p20..p80 = 97..103: sigma 3.57 us on a 100 us median
    assert runs_for_precision(spread, 0.01) == math.ceil((1.2533 * 6 / 1.683 / 1.0) ** 2)
    assert runs_for_precision([5.0], 0.01) == 1


def test_two_problems_measured_in_turns_keep_their_states() -> None:
    settings = BenchSettings(method="events", max_reps=50, target_time_s=1.0, race=1.5, precision=None)
    bench = _FakeGpuBench(settings)
    a, b, c = PROBLEM, Problem.of("gemm", 16, 32, 48, "bf16"), Problem.of("gemm", 16, 48, 32, "bf16")
    _timed(bench, 100.0, problem=a)
    state_a = bench._states[a]
    _timed(bench, 100.0, problem=b)
    slow, _ = _timed(bench, 300.0, problem=a)  # a's inputs and racing bound outlived b's trial
    assert slow.extra.get("raced") and bench._states[a] is state_a
    _timed(bench, 100.0, problem=c)  # a third problem: the least recently used one (b) is dropped
    assert set(bench._states) == {a, c}


class _ScriptedTimer:
    """Stands in for a Benchmarker: gives the next scripted time for each config, logging every call."""

    def __init__(self, times: dict[str, list[float]], log: list[str]) -> None:
        self.times, self.log = times, log

    def run(self, problem: Problem, config: Config, full: bool = False) -> Any:
        from autotune import Timing, TrialResult

        name = str(config["name"])
        self.log.append(name)
        t = self.times[name].pop(0)
        if math.isnan(t):
            return TrialResult(config, TrialStatus.WRONG_RESULT, error="mismatch")
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "events"))


def test_interleaved_medians_times_others_in_the_same_rounds() -> None:
    from autotune.engine.bench import interleaved_medians

    log: list[str] = []
    main = _ScriptedTimer({"a": [3.0, 1.0, 2.0], "b": [5.0, math.nan, 4.0]}, log)
    other = _ScriptedTimer({"c": [7.0, 9.0, 8.0]}, log)
    res = interleaved_medians(
        main,  # type: ignore[arg-type]
        Problem.of("gemm", 1, 16, 16),
        {"a": Config(backend="x", name="a"), "b": Config(backend="x", name="b")},
        3,
        others={"c": (other, Config(backend="y", name="c"))},  # type: ignore[dict-item]
    )
    assert log == ["a", "b", "c"] * 3
    assert res["a"] == (2.0, "ok") and res["c"] == (8.0, "ok")
    assert res["b"][0] == 4.5 and res["b"][1].startswith("wrong")


def test_the_cache_flush_reads_its_buffer_and_writes_nothing_there() -> None:
    """A flush that wrote its buffer would leave dirty lines for the timed kernel to write back."""
    from autotune.engine.bench import L2Flush

    flush = L2Flush(1 << 20, "cpu")
    assert flush.buf.numel() * flush.buf.element_size() == 1 << 20
    flush.buf[7] = 3  # (a test's own write) the sum shows that the flush read the whole buffer
    flush.buf[-1] = 4
    version = flush.buf._version
    flush()
    flush()
    assert flush.buf._version == version  # torch counts every in-place write of a tensor
    assert int(flush.sink) == 7


def test_auto_picks_graph_replay_by_the_fastest_probe_run() -> None:
    """A 20 µs launch whose first probe runs were slowed (clocks still rising) is still timed by graph
    replay; one whose every run takes 60 µs is timed with events."""

    class SlowStart(_FakeGpuBench):
        def __init__(self, settings: BenchSettings, slow_runs: int) -> None:
            super().__init__(settings, jitter=0.0)
            self.slow_runs = slow_runs

        def _tick(self, launch: Launch) -> float:
            us = super()._tick(launch)
            return 3 * us if self.runs <= self.slow_runs else us

    settings = BenchSettings(min_reps=10, max_reps=40, target_time_s=0.001, precision=None)
    slowed = SlowStart(settings, slow_runs=7)  # 7 of the 10 probe runs at 60 µs: their median is 60
    result, _ = _timed(slowed, 20.0)
    assert result.timing.method == "graph" and slowed.method_for(PROBLEM) == "graph"
    steady = SlowStart(settings, slow_runs=0)
    result, _ = _timed(steady, 60.0)
    assert result.timing.method == "events"


def test_a_shared_problem_is_timed_on_the_same_buffers(interp: Target) -> None:
    """Two Benchmarkers (two launch paths of one op) sharing a problem see the very same input and output
    tensors, reference and timing method; the other problems of each stay their own."""
    first = FakeGemm()
    seen: list[tuple[int, int]] = []

    class Recording(FakeGemm):
        def prepare(self, problem: Problem, config: Config, target: Target, inputs: Any, out: Any) -> Launch:
            seen.append((inputs[0].data_ptr(), out.data_ptr()))
            return FakeGemm.prepare(self, problem, config, target, inputs, out)

    main = Benchmarker(first, interp)  # type: ignore[arg-type]
    other = Benchmarker(Recording(), interp)  # type: ignore[arg-type]
    assert main.run(PROBLEM, fake_config("real")).ok
    other.share_problem(main, PROBLEM)
    assert other.run(PROBLEM, fake_config("real")).ok
    state = main._states[PROBLEM]
    assert other._states[PROBLEM] is state
    assert seen == [(state.inputs[0][0].data_ptr(), state.outputs[0].data_ptr())]
    elsewhere = Problem.of("gemm", 16, 48, 32, "bf16")
    assert other.run(elsewhere, fake_config("real")).ok
    assert elsewhere not in main._states and other._states[elsewhere] is not state
    with pytest.raises(ValueError, match="cannot share"):
        Benchmarker(first, interp, device="meta").share_problem(main, PROBLEM)  # type: ignore[arg-type]


def test_interleaved_medians_add_rounds_until_the_spread_allows_the_precision() -> None:
    from autotune.engine.bench import interleaved_medians

    log: list[str] = []
    steady = [10.0, 10.01, 9.99, 10.0, 10.0, 10.01, 9.99, 10.0, 10.0, 10.0]
    jumpy = [10.0, 12.0, 9.0, 11.5, 9.5, 10.2, 10.1, 9.9, 10.0, 10.05]
    timer = _ScriptedTimer({"steady": list(steady), "jumpy": list(jumpy)}, log)
    configs = {"steady": Config(backend="x", name="steady"), "jumpy": Config(backend="x", name="jumpy")}
    p = Problem.of("gemm", 1, 16, 16)
    res = interleaved_medians(timer, p, configs, 3, precision=0.01, max_rounds=8)  # type: ignore[arg-type]
    assert log == ["steady", "jumpy"] * 8  # the jumpy one's spread asked for more than 8 rounds: capped
    assert res["jumpy"] == (statistics.median(jumpy[:8]), "ok")
    log.clear()
    timer = _ScriptedTimer({"steady": list(steady), "jumpy": list(steady)}, log)
    interleaved_medians(timer, p, configs, 3, precision=0.01, max_rounds=8)  # type: ignore[arg-type]
    assert log == ["steady", "jumpy"] * 3  # both steady: the first rounds were enough


@pytest.mark.parametrize("jitter, runs", [(0.0005, (6, 6)), (0.2, (7, 50))])
def test_served_timing_replays_graphs_only_until_the_median_is_precise(
    jitter: float, runs: tuple[int, int]
) -> None:
    """As served: no flushed event runs (the method is fixed), at least 2 x 3 replays, and more only
    while the spread leaves the median less precise than 0.3%, up to the time target (20 ms at 400 µs
    a replay of 4 launches: 50)."""
    settings = BenchSettings().as_served()
    assert settings.method == "graph" and settings.precision == 0.003 and settings.min_reps == 3
    bench = _FakeGpuBench(settings, jitter=jitter)
    events: list[int] = []
    sample_events = bench._event_samples
    bench._event_samples = lambda launches, reps: events.append(reps) or sample_events(launches, reps)  # type: ignore[method-assign]
    result, _ = _timed(bench, 100.0)
    assert events == [] and result.timing.method == "graph"
    assert runs[0] <= result.timing.runs <= runs[1]
    assert result.time_us == pytest.approx(100.0, rel=jitter + 0.01)
