"""Plan a sweep before running it: per problem the space after pruning, the trials left to run, and an
estimated duration from the cost model, the benchmarker's settings, what compiling costs and the trial
timeout."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from autotune.core.problem import Problem
from autotune.core.registry import is_vendor, rules_of
from autotune.core.result import Source
from autotune.core.target import Target
from autotune.engine.bench import BenchSettings
from autotune.engine.checker import compile_weight
from autotune.sweeps.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

    from autotune.core.space import SearchSpace
    from autotune.db import Store
    from autotune.sweeps.spec import SweepSpec

__all__ = [
    "PlanRow",
    "compile_seconds",
    "interpreter_launch_s",
    "makespan",
    "plan",
    "plan_sweep",
    "timed_out_s",
    "trial_seconds",
]

#: Per measured trial, besides timed runs: correctness check against the reference, graph capture or
#: event set-up, Python bookkeeping and the database write (seen on the H100: 20-40 ms).
FIXED_TRIAL_S = 0.03
#: Per timed run: the GPU spin that hides launch latency (`lead_cycles` at ~2 GHz) plus launch cost.
RUN_OVERHEAD_S = 110e-6
#: One kernel of `KERNEL_SRC_REF` characters of Triton source compiled for a GPU on one CPU core (0.2-0.35 s
#: seen on the H100's host; 0.3-0.45 s cross-compiling the dense GEMM's for gfx942 on a loaded 2-core host):
#: compiles run ahead on every core while the GPU measures.
COMPILE_S = {"nvidia": 0.3, "amd": 0.45}
KERNEL_SRC_REF = 2200
#: A config compiles in `COMPILE_S` x the source its launches compile (in `KERNEL_SRC_REF` units: the
#: compiler's work grows with the kernel's code) x (1 + its `compile_weight` / `COMPILE_WEIGHT_REF`): larger
#: tiles on fewer warps a little longer. Fitted on two compile-only sweeps for gfx942 on two loaded cores:
#: `llama3-8b` (the GEMM, one kernel of 2,205 characters: 0.3-0.45 s a config at any tile) took 84 s,
#: planned 104 s; `moe-mixtral-8x7b` (the fused MoE, two kernels of 3,842: 1.0 s a config at 16 x 64 tiles
#: on 4 warps, 2.3 s at 64-128 x 128 on 8, 3.8 s at 128 x 128 on 4) took 59 s, planned 50 s.
COMPILE_WEIGHT_REF = 8192.0
#: A compile-only sweep compiles this many rounds of candidates at most per problem.
PREDICT_ROUNDS = 1
#: The compile processes of a compile-only sweep start before its first compile: a fork server imports
#: torch, Triton and the kernels (2.8 s seen on a 2-core x86 host).
POOL_START_S = 3.0
#: A trial estimated at over this fraction of the trial timeout is counted as running into it: the
#: estimate is not closer than that (`sweep smoke --interpret`: a GEMV trial estimated at 178 s was
#: killed at the 300 s timeout), and the worker killed then is started again (`WORKER_START_S`).
TIMEOUT_RISK = 0.5
WORKER_START_S = 5.0
#: Triton's CPU interpreter runs each program instance of a launch in Python, one after another: a launch
#: costs about `INTERPRETER_LAUNCH_S`, plus `INTERPRETER_PROGRAM_S` per program and `INTERPRETER_ITER_S`
#: per K step of each (seen on a 2-core x86 host: 16 programs of 32 K steps, 0.43 s); a library backend
#: runs on the CPU at `INTERPRETER_LIBRARY_FLOPS` FLOP/s.
INTERPRETER_LAUNCH_S = 0.025
INTERPRETER_PROGRAM_S = 0.010
INTERPRETER_ITER_S = 0.0006
INTERPRETER_LIBRARY_FLOPS = 2e10


@dataclass(frozen=True)
class PlanRow:
    """One problem of a planned sweep."""

    problem: Problem
    valid: int  # configs left after the space's constraints
    raw: int  # configs of the full product of knobs
    trials: int  # configs the sweep will try (the budget caps it)
    done: int  # of those, already stored (a resumed sweep skips them)
    est_s: float  # estimated seconds for what is left

    def to_dict(self) -> dict[str, Any]:
        p = self.problem
        return dict(problem=p.key(), M=p.M, N=p.N, K=p.K, valid=self.valid, raw=self.raw, trials=self.trials,
                    done=self.done, est_s=round(self.est_s, 1))  # fmt: skip


def trial_seconds(kernel_us: float, settings: BenchSettings, flush_s: float, raced: bool = False) -> float:
    """Wall time of measuring one config whose launch takes `kernel_us`: warm-up and the timed runs the
    benchmarker's settings ask for (`min_reps` when `raced`; with a precision target, 2 × `min_reps`, what
    a steady kernel gets), each with its cache flush and spin, plus a fixed cost."""
    t = max(kernel_us, 1.0) * 1e-6
    reps = max(settings.min_reps, min(settings.max_reps, int(settings.target_time_s / t)))
    if settings.precision is not None:
        reps = min(reps, 2 * settings.min_reps)
    if raced:
        reps = settings.min_reps
    per_run = t + RUN_OVERHEAD_S + (flush_s if settings.flush else 0.0)
    return FIXED_TRIAL_S + (settings.warmup + 1) * t + reps * per_run


def plan_sweep(
    spec: SweepSpec,
    target: Target,
    *,
    store: Store | None = None,
    workers: int | None = None,
    compile_only: bool = False,
    settings: BenchSettings | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    trial_timeout_s: float | None = None,
) -> list[PlanRow]:
    """Every problem of `spec` on `target` with its estimated duration (SpecError for a bad backend);
    `on_problem` is called as each problem is planned.

    Measured sweeps: each config costs the larger of its measurement (the cost model's time for the
    kernel, timed as the settings say; a config the model puts over `settings.race` times the problem's
    best counts as raced) and its share of compiling on `workers` cores; with `trial_timeout_s`, a trial
    costs at most the timeout, and the whole of it with a worker's restart where its estimate is over
    `TIMEOUT_RISK` of it (`timed_out_s`). Compile-only sweeps: `candidates` compiles per problem on
    `workers` cores, a wave of `workers` at a time, each config as long as the problem's default takes
    (`compile_seconds`, its kernels' source counted), and the compile processes' start before the first. Both:
    the defaults whose verdicts are not known here yet (`autotune.engine.verdicts`) are compiled before
    the sweep starts, shared on `workers` cores. With a `store`, configs already stored for this target
    and kernel version count as done and cost nothing.
    """
    from autotune.core.op import kernel_versions

    settings = settings or (BenchSettings.for_interpreter() if target.interpreter else BenchSettings())
    cores = max(1, workers or os.cpu_count() or 1)
    flush_s = target.llc_bytes / (target.mem_gbps * 1e9) if target.mem_gbps > 0 else 0.0
    spaces = _spaces(spec, target, on_problem)  # every problem's, so that a bad backend fails first
    defaults = _unchecked_defaults(spec, target)
    rows: list[PlanRow] = []
    for (entry, problem), space in zip(spec.problems(), spaces, strict=True):
        op = entry.op_for(problem)
        valid = len(space)
        kernels = kernel_versions(op, space.backends)
        source = Source.MODEL if compile_only else Source.MEASURED
        stored = (
            store.finished(target=target, problem=problem, kernels=kernels, source=source) if store else {}
        )
        # what compiling one config of this problem costs: its default's, a stand-in for the configs tried
        typical = next((c for c in space.head(2) if not is_vendor(problem.op, c.backend)), None)
        launched = 1.0 if typical is None else _compiled_source(op, problem, typical, target)
        unchecked = defaults.get(problem)
        ahead = 0.0 if unchecked is None else compile_seconds(target, problem, unchecked, launched) / cores
        if compile_only:
            n = min(valid, spec.static.candidates * PREDICT_ROUNDS)
            done = n if stored else 0
            wave = 0.0 if typical is None else compile_seconds(target, problem, typical, launched)
            est = 0.0 if stored else math.ceil(n / cores) * wave
            rows.append(PlanRow(problem, valid, space.raw_size(), n, done, est + ahead))
            continue
        n = min(valid, entry.budget.trials or valid)
        todo = [c for c in space.head(n) if c.digest() not in stored]
        if target.interpreter:
            trials = [_interpreter_trial_s(problem, c, settings) for c in todo]
        else:
            trials = _measured_s(problem, todo, target, settings, flush_s, cores, launched)
        est = sum(timed_out_s(t, trial_timeout_s) for t in trials)
        if entry.budget.seconds is not None:
            est = min(est, entry.budget.seconds)
        rows.append(PlanRow(problem, valid, space.raw_size(), n, n - len(todo), est + ahead))
    if compile_only:
        starts = next((i for i, r in enumerate(rows) if r.est_s > 0), None)
        if starts is not None:
            rows[starts] = replace(rows[starts], est_s=rows[starts].est_s + POOL_START_S)
    return rows


def compile_seconds(target: Target, problem: Problem, config: Any, source: float = 1.0) -> float:
    """Seconds one CPU core takes to compile `config` of `problem` for `target`, whose launches compile
    `source` units of Triton source (`KERNEL_SRC_REF` characters each; `COMPILE_S` a unit, more for larger
    tiles on fewer warps: `COMPILE_WEIGHT_REF`); none for a vendor library's config, or for the
    interpreter, which compile nothing."""
    if target.interpreter or is_vendor(problem.op, config.backend):
        return 0.0
    each = COMPILE_S.get(target.vendor, 0.45) * (1.0 + compile_weight(config) / COMPILE_WEIGHT_REF)
    return each * max(source, 0.1)


def _compiled_source(op: Any, problem: Problem, config: Any, target: Target) -> float:
    """The Triton source one launch of `config` compiles, in `KERNEL_SRC_REF` units: each captured
    launch's kernel source (a launch whose source cannot be read, one unit; 1 where the launches
    cannot be captured here)."""
    try:
        calls = op.kernel_calls(problem, config, target)
    except Exception:  # a launcher that refuses the config, a backend this host lacks: one unit
        return 1.0
    sizes = [len(_source(call.fn)) for call in calls]
    return max(1.0, sum(size / KERNEL_SRC_REF if size else 1.0 for size in sizes))


def _source(fn: Any) -> str:
    """The Triton source of a JIT function (or of the interpreter's stand-in for one); "" where unknown."""
    import inspect

    src = getattr(fn, "src", None)
    if isinstance(src, str):
        return src
    try:
        return inspect.getsource(getattr(fn, "fn", fn))
    except (OSError, TypeError):
        return ""


def timed_out_s(estimate_s: float, timeout_s: float | None) -> float:
    """What a trial estimated at `estimate_s` costs under the trial timeout `timeout_s` (None: none): the
    estimate, or, over `TIMEOUT_RISK` of the timeout, the whole timeout and a worker's restart."""
    if timeout_s is None or estimate_s <= TIMEOUT_RISK * timeout_s:
        return estimate_s
    return timeout_s + WORKER_START_S


def _unchecked_defaults(spec: SweepSpec, target: Target) -> dict[Problem, Any]:
    """Per problem whose default a sweep will compile first (its first candidate has no verdict known
    here: `autotune.engine.verdicts`), that candidate; one problem per op, config and shape but M (M is
    mostly a run-time argument: one binary). None where this process does not check defaults for
    `target`."""
    from autotune.engine.verdicts import can_check, verdicts

    if target.interpreter or not can_check(target):
        return {}
    known, out = verdicts(), {}
    seen: set[tuple[object, ...]] = set()
    for entry, problem in spec.problems():
        op = entry.op_for(problem)
        try:
            candidates = op.default_candidates(problem, target)
        except ValueError:  # no default here: the space said so already
            continue
        first = candidates[0] if candidates else None
        if first is None or len(candidates) < 2 or op.backend(first.backend).library:
            continue  # nothing to check: the rule's pick is the default
        binary = (op.name, problem.with_m(1), first)
        if binary in seen or known.known(op, problem, first, target) is not None:
            continue
        seen.add(binary)
        out[problem] = first
    return out


def _measured_s(
    problem: Problem,
    todo: list[Any],
    target: Target,
    settings: BenchSettings,
    flush_s: float,
    cores: int,
    source: float,
) -> list[float]:
    """Seconds to measure each of `todo` on a GPU: the larger of its timing (the cost model's kernel time;
    over `settings.race` times the best, raced) and its share of compiling on `cores` (`source`: the
    problem's configs' Triton source, as `compile_seconds` counts it)."""
    from autotune.engine.model import predict_us

    predicted = [predict_us(problem, config, target) for config in todo]
    best_us = min((t for t in predicted if math.isfinite(t)), default=math.inf)
    bound_us = math.inf if settings.race is None else settings.race * best_us
    out = []
    for config, kernel_us in zip(todo, predicted, strict=True):
        # A config the model says cannot launch fails fast (out of resources): the fixed cost only.
        measure = (
            trial_seconds(kernel_us, settings, flush_s, raced=kernel_us > bound_us)
            if math.isfinite(kernel_us)
            else FIXED_TRIAL_S
        )
        out.append(max(measure, compile_seconds(target, problem, config, source) / cores))
    return out


def _interpreter_trial_s(problem: Problem, config: Any, settings: BenchSettings) -> float:
    """Seconds of one trial in the interpreter: the correctness check's launch, the warm-up and the timed
    runs, each `interpreter_launch_s`, and the fixed cost."""
    launches = 1 + settings.warmup + settings.min_reps
    library = is_vendor(problem.op, config.backend)
    return FIXED_TRIAL_S + launches * interpreter_launch_s(problem, config, library)


def interpreter_launch_s(problem: Problem, config: Any, library: bool) -> float:
    """Seconds one launch of `config` takes in Triton's CPU interpreter: a library backend's on the CPU,
    else the Python cost of every program instance and its K steps (tiles from BLOCK_M/N/K or
    BLOCK_SIZE_M/N/K, the whole of M or N or K where a config has no such knob; rows: the op's
    `kernel_rows`, M × topk for the fused MoE)."""
    if library:
        return INTERPRETER_LAUNCH_S + problem.flops() / INTERPRETER_LIBRARY_FLOPS

    def tile(name: str, whole: int) -> int:
        value = config.get(f"BLOCK_{name}", config.get(f"BLOCK_SIZE_{name}", whole))
        return max(1, int(value))

    rows = rules_of(problem.op).kernel_rows(problem)
    split_k = max(1, int(config.get("SPLIT_K", 1)))
    programs = math.ceil(rows / tile("M", rows)) * math.ceil(problem.N / tile("N", problem.N)) * split_k
    iters = math.ceil(problem.K / (split_k * tile("K", problem.K)))
    return INTERPRETER_LAUNCH_S + programs * (INTERPRETER_PROGRAM_S + iters * INTERPRETER_ITER_S)


def makespan(durations: list[float], workers: int) -> float:
    """Wall time of `durations` (seconds per problem) shared out on `workers` GPUs the way a sweep does
    it: longest first, each to the worker that frees up first."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    loads = [0.0] * workers
    for d in sorted(durations, reverse=True):
        i = loads.index(min(loads))
        loads[i] += d
    return max(loads) if durations else 0.0


def plan(
    spec: SweepSpec, target: Target, on_problem: Callable[[Problem], None] | None = None
) -> list[tuple[Problem, int, int]]:
    """(problem, valid configs, raw configs) for every problem; SpecError for an unknown backend.
    `on_problem` is called as each problem's space is built and counted."""
    spaces = _spaces(spec, target, on_problem)
    return [(p, len(s), s.raw_size()) for (_, p), s in zip(spec.problems(), spaces, strict=True)]


def _spaces(
    spec: SweepSpec, target: Target, on_problem: Callable[[Problem], None] | None
) -> list[SearchSpace]:
    """Every problem's space on `target`, counted (SpecError for an unknown backend)."""
    out = []
    for entry, problem in spec.problems():
        op = entry.op_for(problem)
        try:
            space = op.space(problem, target, entry.backends)
        except ValueError as exc:
            raise SpecError(f"{spec.path}: {exc}") from None
        len(space)  # counted here: the time a caller's progress shows
        out.append(space)
        if on_problem is not None:
            on_problem(problem)
    return out
