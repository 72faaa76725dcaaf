"""Benchmarker: checks a config's output against the reference, then times it cold on one device."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Timing, TrialResult, TrialStatus, root_cause
from autotune.core.target import Target

if TYPE_CHECKING:
    import torch

    from autotune.core.op import Launch, TunableOp

__all__ = [
    "BenchSettings",
    "Benchmarker",
    "DeviceFault",
    "L2Flush",
    "ServedTiming",
    "classify_error",
    "flushed_event_us",
    "graph_replays",
    "interleaved_medians",
    "rel_error",
    "runs_for_precision",
]

log = logging.getLogger(__name__)

_FATAL_MARKERS = (
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "illegal instruction",
    "hipErrorLaunchFailure",
)


#: Problem states (inputs, reference, timing method, racing bound) a Benchmarker keeps at once.
KEEP_STATES = 2


class DeviceFault(RuntimeError):
    """The device is unusable after a fault (illegal address, ...): no later trial can run in this process."""


@dataclass(frozen=True)
class BenchSettings:
    """How to time. Defaults suit a GPU; `for_interpreter()` suits Triton's CPU interpreter."""

    warmup: int = 3  # launches after the first (compiling) one, before timing
    min_reps: int = 10
    max_reps: int = 200
    target_time_s: float = 0.15  # aim for this much timed kernel time per config
    graph_threshold_us: float = 40.0  # below this, replay a graph: launch overhead would dominate events
    graph_launches: int = 20  # launches captured per graph
    max_input_sets: int = 32  # rotating input sets (so each run starts cold in the last-level cache)
    flush: bool = True
    method: str = "auto"  # "graph", "events", or "auto": decided per problem by the first config timed
    lead_cycles: int = 200_000  # GPU spin before each timed run (~100 µs at 2 GHz), hides launch latency
    #: Racing: a config whose first `min_reps` timed runs already have a median over `race` × the best
    #: median of this problem so far stops there (stored with those runs, `extra["raced"]`): it cannot
    #: win, and the time goes to configs that can. None times every config fully.
    race: float | None = 1.5
    #: Precision: a config is timed until the standard error of its median, estimated from the spread
    #: of its first runs, is about this fraction of the median (at least 2 × `min_reps` runs, at most
    #: what `target_time_s` and `max_reps` allow). None times every config to that most.
    precision: float | None = 0.003

    def as_served(self) -> BenchSettings:
        """These settings for timing configs the way they run when served (`ServedTiming`): every launch
        in CUDA-graph replays, back to back over rotating input sets (no cache flush, no idle spin between
        launches), whatever its length: a flush and an idle spin before each launch let the GPU run at
        another clock than launches back to back, as a serving engine runs them, and configs of long
        kernels rank differently at the two (docs/notes/2026-11-27-served-timing.md). Each timed run is a
        replay of 10 launches, at least 3 runs and about 20 ms of replays: a final round and an M profile
        time many configs, and what varies between runs of back-to-back launches is the clock, which more
        samples of one run do not average out. Fewer replays (stopped at 1% precision) let configs that
        lose to the vendor when served look faster in a profile (docs/notes/2026-11-27-profile-cost.md).
        No flushed event runs come first: the method is fixed, and the replays' first runs size the rest."""
        return dataclasses.replace(
            self,
            method="graph",
            min_reps=min(self.min_reps, 3),
            graph_launches=min(self.graph_launches, 10),
            target_time_s=min(self.target_time_s, 0.02),
        )

    @classmethod
    def for_interpreter(cls) -> BenchSettings:
        """One timed run after the correctness check's launch, no warm-up: the interpreter's timings say
        nothing about a GPU, and each launch runs every program instance in Python (seconds a launch)."""
        return cls(
            warmup=0,
            min_reps=1,
            max_reps=1,
            target_time_s=0.0,
            graph_threshold_us=0.0,
            flush=False,
            max_input_sets=1,
            race=None,
            precision=None,
        )


class ServedTiming:
    """`op` timed the way its configs run when served: a Benchmarker of it times with
    `BenchSettings.as_served()` whatever settings it is given, and a worker keeps one of its own (its own
    inputs too) beside `op`'s. Everything else is `op`'s: the wrapper delegates every attribute, so kernel
    versions, spaces and launches are the op's. `race` replaces the settings' racing factor (None keeps
    it): an M profile stops a config early once it is clearly behind, a final round does not. Immutable;
    pickles with its op (worker processes receive it)."""

    def __init__(self, op: TunableOp, race: float | None = None) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "race", race)

    def __getattr__(self, name: str) -> Any:
        if name in ("op", "race"):  # while unpickling, before __setstate__: no recursion
            raise AttributeError(name)
        return getattr(self.op, name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ServedTiming is immutable")

    def __getstate__(self) -> dict[str, Any]:
        return {"op": self.op, "race": self.race}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "op", state["op"])
        object.__setattr__(self, "race", state.get("race"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServedTiming) and (other.op, other.race) == (self.op, self.race)

    def __hash__(self) -> int:
        return hash(("served", self.op, self.race))

    def __repr__(self) -> str:
        race = "" if self.race is None else f", race={self.race:g}"
        return f"ServedTiming({self.op!r}{race})"


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in fp64; NaN or inf anywhere in `out` gives +inf."""
    import torch

    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.inf
    r = ref.double()
    denom = float(r.norm())
    return float((o - r).norm()) / (denom if denom > 0 else 1.0)


def classify_error(exc: BaseException) -> TrialStatus:
    """Maps an exception raised while compiling or launching a config to a trial status."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = str(exc)
    low = text.lower()
    if name == "OutOfResources" or "outofmemory" in name.lower() or "out of resource" in low:
        return TrialStatus.OUT_OF_RESOURCES
    if any(m.lower() in low for m in _FATAL_MARKERS):
        return TrialStatus.CRASHED
    if (
        name in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError", "MLIRCompilationError")
        or module.startswith("triton.compiler")
        or "passmanager" in low
        or "ptxas" in low
    ):
        return TrialStatus.COMPILE_ERROR
    return TrialStatus.RUNTIME_ERROR


def timing_of(samples_us: Sequence[float], method: str) -> Timing:
    """The statistics of timed runs (µs) taken by `method`."""
    xs = sorted(samples_us)
    n = len(xs)

    def q(p: float) -> float:
        return xs[min(n - 1, max(0, round(p * (n - 1))))]

    return Timing(
        median_us=statistics.median(xs),
        min_us=xs[0],
        p20_us=q(0.2),
        p80_us=q(0.8),
        mean_us=statistics.fmean(xs),
        std_us=statistics.pstdev(xs) if n > 1 else 0.0,
        runs=n,
        method=method,
    )


class _ProblemState:
    """Inputs, reference and outputs of one problem, built once and reused for every config."""

    def __init__(self, op: TunableOp, problem: Problem, device: str, n_sets: int, seed: int) -> None:
        self.problem = problem
        self.inputs = [op.make_inputs(problem, device, seed + i) for i in range(n_sets)]
        self.outputs = [op.make_output(problem, device) for _ in range(n_sets)]
        self.reference = op.reference(problem, self.inputs[0])
        self.method: str | None = None  # "graph" or "events", fixed by the first config timed
        self.best_us: float | None = None  # the best median timed fully so far (the racing bound)


class Benchmarker:
    """Times configs of one op on one device.

    For each config: (1) the correctness gate: the output is filled with NaN, the config runs once (this
    first call compiles) and ‖out − ref‖ / ‖ref‖ must be under the op's tolerance, NaN never passes;
    (2) warm-up; (3) timed runs, each starting cold: with device events and a last-level-cache flush
    between runs, or, for launches shorter than `graph_threshold_us`, graph replays over rotating input
    sets sized from the device's cache. On the CPU interpreter a wall clock is used.

    Failures become TrialResults with a status (compile_error, out_of_resources, wrong_result,
    runtime_error); only a device fault that leaves the device unusable raises (DeviceFault). Not
    thread-safe; one Benchmarker per device.

    Racing (`settings.race`): once a config of the problem was timed, a later config whose first
    `min_reps` runs are already `race` times slower stops there. Precision (`settings.precision`): a
    config is timed until its median is that precise, not longer. `run(..., full=True)` does neither:
    side by side comparisons time every variant as long as the settings allow.
    """

    def __init__(
        self,
        op: TunableOp,
        target: Target,
        *,
        device: str | None = None,
        settings: BenchSettings | None = None,
        seed: int = 0,
    ) -> None:
        self.op = op
        self.target = target
        self.device = device or ("cpu" if target.interpreter else "cuda")
        self.settings = settings or (
            BenchSettings.for_interpreter() if target.interpreter else BenchSettings()
        )
        if isinstance(op, ServedTiming):  # its configs are timed the way they run when served
            self.settings = self.settings.as_served()
            if op.race is not None:
                self.settings = dataclasses.replace(self.settings, race=op.race)
        self.seed = seed
        #: The problems' states, most recently used last; `KEEP_STATES` are kept (a sweep may have two
        #: problems in flight on one worker, measured in turns).
        self._states: dict[Problem, _ProblemState] = {}
        self._l2_flush: L2Flush | None = None
        self.on_gpu = self.device != "cpu"
        #: Called with "compile", "check" and "time" as a trial enters each phase (a worker process
        #: reports them, so a crash or hang is stored with the phase it happened in).
        self.on_phase: Callable[[str], None] | None = None

    def _enter(self, phase: str) -> str:
        if self.on_phase is not None:
            self.on_phase(phase)
        return phase

    # -- set-up -------------------------------------------------------------------------------------
    def method_for(self, problem: Problem) -> str | None:
        """The timing method fixed for `problem` ("graph" or "events"), once a config of it was timed."""
        state = self._states.get(problem)
        return state.method if state is not None else None

    def share_problem(self, other: Benchmarker, problem: Problem) -> None:
        """Times `problem` from now on with `other`'s inputs, outputs, reference and timing method (the same
        tensors, not copies), so that two ops, or two launch paths of one op, are compared on the very same
        buffers. Both must be on one device."""
        if other.device != self.device:
            raise ValueError(f"cannot share a problem's buffers between {other.device} and {self.device}")
        state = other._state_for(problem)
        self._states.pop(problem, None)
        self._make_room()
        self._states[problem] = state

    def _make_room(self) -> None:
        """Drops the least recently used problems' states (their tensors) until one more fits."""
        while len(self._states) >= KEEP_STATES:
            del self._states[next(iter(self._states))]

    def _state_for(self, problem: Problem) -> _ProblemState:
        state = self._states.pop(problem, None)
        if state is None:
            self._make_room()
            n_sets = 1
            if self.on_gpu and self.target.llc_bytes > 0:
                n_sets = math.ceil(2 * self.target.llc_bytes / max(problem.min_bytes(), 1))
            n_sets = max(1, min(n_sets, self.settings.max_input_sets))
            state = _ProblemState(self.op, problem, self.device, n_sets, self.seed)
        self._states[problem] = state
        return state

    def _flush(self) -> None:
        """Evicts the last-level cache, then keeps the GPU busy a little longer so that the host has
        enqueued the timed launch before the start event runs (else launch latency is timed)."""
        if not self.on_gpu:
            return
        import torch

        if self.settings.flush:
            if self._l2_flush is None:
                self._l2_flush = L2Flush(max(2 * self.target.llc_bytes, 64 << 20), self.device)
            self._l2_flush()
        torch.cuda._sleep(self.settings.lead_cycles)

    def _sync(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize()

    # -- the public entry point -----------------------------------------------------------------------
    def run(self, problem: Problem, config: Config, *, full: bool = False) -> TrialResult:
        """Checks and times `config` on `problem`; never raises for a bad config (see class docstring).
        `full` times it fully: no racing, no stop at the precision target."""
        state = self._state_for(problem)
        phase = self._enter("compile")
        t0 = time.perf_counter()
        compile_s = 0.0
        try:
            launches = [
                self.op.prepare(problem, config, self.target, inp, out)
                for inp, out in zip(state.inputs, state.outputs, strict=True)
            ]
            out0 = state.outputs[0]
            out0.fill_(float("nan"))
            self._sync()
            t0 = time.perf_counter()
            launches[0]()
            self._sync()
            compile_s = time.perf_counter() - t0
            phase = self._enter("check")
            err = rel_error(out0, state.reference)
            tol = self.op.tolerance(problem)
            if not err <= tol:
                why = (
                    "output has NaN/inf (unwritten or overflowed)"
                    if math.isinf(err)
                    else f"{err:.3g} > {tol:g}"
                )
                return TrialResult(
                    config,
                    TrialStatus.WRONG_RESULT,
                    rel_error=err,
                    compile_s=compile_s,
                    error=f"wrong result: relative error {why}",
                )
            phase = self._enter("time")
            t1 = time.perf_counter()
            bound = None
            if not full and self.settings.race is not None and state.best_us is not None:
                bound = self.settings.race * state.best_us
            timing, raced = self._time(launches, state, bound, None if full else self.settings.precision)
            if not raced and (state.best_us is None or timing.median_us < state.best_us):
                state.best_us = timing.median_us
            extra = {"raced": f"{self.settings.race:g}x"} if raced else {}
            extra.update(getattr(launches[0], "extra", None) or {})  # what the launch found (a pin)
            return TrialResult(
                config,
                TrialStatus.OK,
                timing=timing,
                rel_error=err,
                compile_s=compile_s,
                measure_s=time.perf_counter() - t1,
                extra=extra,
            )
        except Exception as exc:  # a failed config is a value
            status = classify_error(exc)
            root = root_cause(exc)
            cause = "" if root is exc else f"{type(root).__name__}: {str(root).strip()[:500]}; raised at "
            text = f"{type(exc).__name__} during {phase}: {cause}{str(exc).strip()[:2000]}"
            if phase == "compile" and compile_s == 0.0:
                compile_s = time.perf_counter() - t0
            if status is TrialStatus.CRASHED:
                raise DeviceFault(text) from exc
            log.debug("config %s failed: %s", config.short(), text)
            return TrialResult(config, status, error=text, compile_s=compile_s)

    # -- timing -------------------------------------------------------------------------------------
    def _time(
        self,
        launches: Sequence[Launch],
        state: _ProblemState,
        bound_us: float | None = None,
        precision: float | None = None,
    ) -> tuple[Timing, bool]:
        """Times with one method per problem (so every config of a problem is compared alike): graph
        replay when the fastest of the first config's probe runs is shorter than `graph_threshold_us`,
        else events (the fastest, not the median: a run can only be slowed, by a GPU that is still
        raising its clocks or a late host, and slowed runs would send short launches to events).
        With `bound_us`, stops after `min_reps` runs whose median is over it; True then (raced)."""
        if not self.on_gpu:
            return self._time_wallclock(launches[0]), False
        for i in range(self.settings.warmup):
            launches[i % len(launches)]()
        self._sync()
        s = self.settings
        if s.method == "graph" and state.method in (None, "graph"):  # no probe: the replays size themselves
            state.method = "graph"
            return self._time_graph(launches, None, bound_us, precision)
        probe = self._event_samples(launches, s.min_reps)
        probe_us = statistics.median(probe)
        if state.method is None:
            if s.method in ("graph", "events"):
                state.method = s.method
            else:
                state.method = "graph" if min(probe) < s.graph_threshold_us else "events"
        if state.method == "graph":
            return self._time_graph(launches, probe_us, bound_us, precision)
        # The probe's runs are the first runs of the events method: cold, one launch each.
        more = functools.partial(self._event_samples, launches)
        return _staged(more, probe, self._reps(probe_us), bound_us, "events", precision)

    def _time_graph(
        self,
        launches: Sequence[Launch],
        probe_us: float | None,
        bound_us: float | None,
        precision: float | None,
    ) -> tuple[Timing, bool]:
        """Graph replays: `min_reps` first, then as many as the time target allows at the launch time
        `probe_us` (µs a launch; without it, the first replays' median)."""
        s = self.settings
        try:
            sample, n = self._graph_sampler(launches)
        except Exception as exc:  # this launch cannot be captured: time it with events, and say so
            log.warning("graph capture failed (%s: %s); timing with events", type(exc).__name__, exc)
            reps = self._reps(probe_us) if probe_us is not None else s.min_reps
            t = self._time_events(launches, reps)
            return dataclasses.replace(t, method="events (graph capture failed)"), False
        first = sample(s.min_reps)
        per_launch = statistics.median(first) if probe_us is None else probe_us
        total = max(s.min_reps, min(s.max_reps, self._reps(per_launch * n)))
        return _staged(sample, first, total, bound_us, "graph", precision)

    def _reps(self, est_us: float) -> int:
        s = self.settings
        want = int(s.target_time_s * 1e6 / max(est_us, 1e-3))
        return max(s.min_reps, min(s.max_reps, want))

    def _time_wallclock(self, launch: Launch) -> Timing:
        for _ in range(self.settings.warmup):
            launch()
        samples = []
        for _ in range(self.settings.min_reps):
            t = time.perf_counter()
            launch()
            samples.append((time.perf_counter() - t) * 1e6)
        return timing_of(samples, "wallclock")

    def _time_events(self, launches: Sequence[Launch], reps: int) -> Timing:
        return timing_of(self._event_samples(launches, reps), "events")

    def _event_samples(self, launches: Sequence[Launch], reps: int) -> list[float]:
        """`reps` timed runs (µs), each after a cache flush, rotating over the input sets."""
        import torch

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self._flush()
            starts[i].record()
            launches[i % len(launches)]()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]

    def _graph_sampler(self, launches: Sequence[Launch]) -> tuple[Callable[[int], list[float]], int]:
        """Captures `n` launches (rotating over the input sets) in a CUDA graph; returns a function timing
        `count` replays (µs per launch each), and n."""
        n = max(self.settings.graph_launches, len(launches))
        return graph_replays(launches, n), n


def _staged(
    sample: Callable[[int], list[float]],
    first: list[float],
    total: int,
    bound_us: float | None,
    method: str,
    precision: float | None,
) -> tuple[Timing, bool]:
    """The `first` samples, then more up to `total` (fewer where `precision` is reached sooner), unless
    their median is already over `bound_us` (then True: raced)."""
    samples = list(first)
    if bound_us is not None and statistics.median(samples) > bound_us:
        return timing_of(samples, method), True
    want = total
    if precision is not None:
        want = min(total, max(2 * len(samples), runs_for_precision(samples, precision)))
    if want > len(samples):
        samples += sample(want - len(samples))
    return timing_of(samples, method), False


def runs_for_precision(samples: Sequence[float], precision: float) -> int:
    """Runs needed for the median's standard error to be `precision` × the median, with the spread
    estimated robustly from `samples` (σ ≈ (p80 − p20) / 1.683; the median's standard error is
    1.2533 σ / √n for a normal distribution)."""
    xs = sorted(samples)
    med = statistics.median(xs)
    if med <= 0 or len(xs) < 2:
        return len(xs)
    n = len(xs)
    sigma = (xs[round(0.8 * (n - 1))] - xs[round(0.2 * (n - 1))]) / 1.683
    return math.ceil((1.2533 * sigma / (precision * med)) ** 2)


_side_streams: dict[int, Any] = {}


def _side_stream() -> Any:
    """One side stream per device for the warm-up before a capture. Not a new stream per capture:
    buffers kept per stream (`autotune.kernels.scratch`) would pile up, one set per config timed."""
    import torch

    device = torch.cuda.current_device()
    stream = _side_streams.get(device)
    if stream is None:
        stream = _side_streams[device] = torch.cuda.Stream()
    return stream


def graph_replays(launches: Sequence[Callable[[], object]], n: int) -> Callable[[int], list[float]]:
    """Captures `n` calls of `launches` (cycled) in one CUDA graph, after a warm-up on a side stream as
    capture requires; returns a function timing `count` replays with events, in µs per call each."""
    import torch

    stream = _side_stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for launch in launches:
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            launches[i % len(launches)]()
    graph.replay()
    torch.cuda.synchronize()

    def replays(count: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 / n for s, e in zip(starts, ends, strict=True)]

    return replays


class L2Flush:
    """`flush()` evicts the last-level cache by reading a buffer of `nbytes` (at least twice the cache)
    into a one-element sum; it writes nothing the timed kernel would then have to write back.

    Why reading: a flush that writes the buffer (`zero_()`, the usual way) leaves the cache full of dirty
    lines, and the next kernel's misses write them back to memory while it runs. A memory-bound kernel
    then pays for up to a cache's worth of writes that are not its own
    (docs/notes/2026-11-22-flush-method.md)."""

    def __init__(self, nbytes: int, device: Any) -> None:
        import torch

        self.buf = torch.zeros(max(nbytes, 4) // 4, dtype=torch.int32, device=device)
        self.sink = torch.empty((), dtype=torch.int64, device=device)

    def __call__(self) -> None:
        import torch

        torch.sum(self.buf, dim=0, out=self.sink)


def flushed_event_us(launch: Callable[[], object], flush: Callable[[], object], reps: int) -> float:
    """Median µs of `reps` runs of `launch`, each timed with CUDA events right after `flush()` (which
    evicts L2: an `L2Flush`): the simple method of the kernel benchmarks that compare a handful of
    variants outside the Benchmarker."""
    import torch

    times = []
    for _ in range(reps):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def interleaved_medians(
    bench: Benchmarker,
    problem: Problem,
    configs: dict[str, Config],
    rounds: int,
    others: Mapping[str, tuple[Benchmarker, Config]] | None = None,
    *,
    precision: float | None = None,
    max_rounds: int | None = None,
) -> dict[str, tuple[float, str]]:
    """Times every named config `rounds` times, interleaved (so drift hits all alike), and gives per name
    the median of its medians (NaN if it never ran) and "ok", or the status and error of a failed run.
    `others` are timed in the same rounds, after `configs`, each by its own Benchmarker. With `precision`,
    rounds go on (up to `max_rounds`) while some name's round medians spread so much that the standard
    error of their median exceeds `precision` × the median (`runs_for_precision`): a kernel whose speed
    varies from run to run (e.g. cuBLAS's clustered tiles, placed differently per launch) then
    gets as many rounds as its spread needs, and the others no more than `rounds`."""
    runs = {name: (bench, config) for name, config in configs.items()} | dict(others or {})
    samples: dict[str, list[float]] = {k: [] for k in runs}
    status = dict.fromkeys(runs, "ok")

    def spread_out() -> bool:
        return precision is not None and any(
            len(v) >= 2 and runs_for_precision(v, precision) > len(v) for v in samples.values()
        )

    done = 0
    while done < rounds or (done < (max_rounds or rounds) and spread_out()):
        for name, (timer, config) in runs.items():
            r = timer.run(problem, config, full=True)
            if r.ok and r.time_us is not None:
                samples[name].append(r.time_us)
            else:
                status[name] = f"{r.status.value}: {r.error[:200]}"
        done += 1
    return {k: (statistics.median(v) if v else math.nan, status[k]) for k, v in samples.items()}
