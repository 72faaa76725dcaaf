"""The GPU side of `autotune doctor`: each op's default against its reference (on a GPU) or compiled for a
target (without one), and the timing of three GEMMs. The GPU work is done by `run_default` and
`time_gemm`, which tests replace to check the reporting without a GPU."""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.cli.doctor_checks import Budget, Check, first_line, guarded
from autotune.cli.tables import problem_label

if TYPE_CHECKING:
    from concurrent.futures import Future

    from autotune.core.config import Config
    from autotune.core.op import TunableOp
    from autotune.core.problem import Problem
    from autotune.core.static import StaticFeatures
    from autotune.core.target import Target
    from autotune.engine.compile import CompilePool

log = logging.getLogger(__name__)

#: (M, N, K) of the timed bf16 GEMMs: decode, a mid-size batch, prefill.
SPEED_SHAPES = ((16, 4096, 4096), (128, 8192, 8192), (4096, 4096, 4096))


@dataclass(frozen=True)
class OpRun:
    """What became of an op's default on the GPU: `status` "right", "wrong", "compile_error" or "failed";
    `error` the first line of the error; `rel_error` ‖out − ref‖ / ‖ref‖ where it ran."""

    config: str
    status: str
    error: str = ""
    rel_error: float | None = None
    tolerance: float = 0.0


@dataclass(frozen=True)
class GemmTimes:
    """Median µs of one bf16 GEMM shape: the vendor library, the served call (no table: the fallback,
    `served` its config) and the heuristic default (`default` its config); NaN with an `error` where a
    side failed."""

    vendor_us: float
    served_us: float
    default_us: float
    served: str
    default: str
    error: str = ""


# -- 3. each op's default against its reference ----------------------------------------------------------


def small_problem(name: str) -> Problem:
    """A small problem of op `name`, as the op's tests build them (`ProblemRules.example_problem`: a
    GEMM-shaped one for an op with no rules of its own; ValueError where that op refuses it)."""
    from autotune.core.registry import rules_of

    return rules_of(name).example_problem(name)


def registered_ops(only: Iterable[str] = ()) -> list[TunableOp]:
    """The registered ops (the built-in ones and plugins), in registration order; those of `only` where
    given (ValueError naming an unknown one)."""
    import autotune.kernels  # noqa: F401 - registers the built-in ops
    from autotune.core.registry import get_op, load_plugins, ops

    load_plugins()
    wanted = list(only)
    return [get_op(name) for name in wanted] if wanted else list(ops().values())


def _applies(op: TunableOp, target: Target) -> tuple[Problem | None, str]:
    """The op's small problem where `target` runs it, else (None, why not): building the problem and the
    default's candidates (pure: nothing compiled, nothing on the GPU) refuses it."""
    try:
        problem = small_problem(op.name)
        op.default_candidates(problem, target)
    except ValueError as exc:
        return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return problem, ""


def op_checks_gpu(target: Target, ops: list[TunableOp], budget: Budget) -> Iterator[Check]:
    """Each op's heuristic default run on GPU 0 against its reference (`run_default`)."""
    for op in ops:
        name = f"op {op.name}"
        if budget.left() < 5:
            yield _budget_line(name)
            continue
        problem, why = _applies(op, target)
        if problem is None:
            yield Check(name, None, f"{target.arch} does not run it: {why}")
            continue
        yield from guarded(name, functools.partial(_op_run, name, op, problem, target))


def _op_run(name: str, op: TunableOp, problem: Problem, target: Target) -> list[Check]:
    return [_op_line(name, problem, run_default(op, problem, target))]


def _op_line(name: str, problem: Problem, run: OpRun) -> Check:
    shape = problem_label(problem)
    if run.status == "right":
        return Check(
            name,
            True,
            f"right on {shape}: rel. error {run.rel_error:.1e} <= {run.tolerance:g} ({run.config})",
        )
    if run.status == "wrong":
        error = (
            "NaN or inf"
            if run.rel_error is None or not math.isfinite(run.rel_error)
            else f"{run.rel_error:.2e}"
        )
        return Check(
            name,
            False,
            f"WRONG on {shape}: rel. error {error} > {run.tolerance:g} ({run.config})",
            "the heuristic default computes a wrong result on this GPU: do not serve this op here, and "
            "report it with the output of `autotune doctor --json`",
        )
    what = "failed to compile" if run.status == "compile_error" else "failed"
    return Check(
        name,
        False,
        f"{what} on {shape}: {run.error} ({run.config})",
        "the toolchain cannot build or run this kernel here: see the `toolchain` and `triton packages` lines",
    )


def run_default(op: TunableOp, problem: Problem, target: Target) -> OpRun:
    """Runs `op`'s heuristic default on `problem` on the current GPU once, into an output poisoned with NaN,
    and compares it with the reference."""
    import torch

    from autotune.core.result import TrialStatus
    from autotune.engine.bench import classify_error, rel_error

    config = op.default_config(problem, target)
    inputs = op.make_inputs(problem, "cuda", seed=0)
    out = op.make_output(problem, "cuda")
    if out.is_floating_point():
        out.fill_(math.nan)
    tolerance = op.tolerance(problem)
    try:
        op.prepare(problem, config, target, inputs, out)()
        torch.cuda.synchronize()
    except Exception as exc:
        status = "compile_error" if classify_error(exc) is TrialStatus.COMPILE_ERROR else "failed"
        return OpRun(config.short(), status, first_line(exc), tolerance=tolerance)
    err = rel_error(out, op.reference(problem, inputs))
    status = "right" if err <= tolerance else "wrong"
    return OpRun(config.short(), status, rel_error=err if math.isfinite(err) else None, tolerance=tolerance)


def op_checks_compile(arch: str, ops: list[TunableOp], budget: Budget, workers: int) -> Iterator[Check]:
    """Each op's heuristic default compiled for `arch` on a CompilePool of `workers` processes (no GPU):
    compiled or not, with spills and LDS."""
    from autotune.core.target import Target, TargetError
    from autotune.engine.compile import CompilePool, check_compilable

    try:
        target = Target.for_arch(arch)
        check_compilable(target)
    except TargetError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = "install a Triton with the target's backend (on a CPU-only machine: the triton extra)"
        yield Check("defaults", False, f"cannot compile for {arch}: {reason}", hint)
        return
    from concurrent.futures import ThreadPoolExecutor

    verdict_log = logging.getLogger("autotune.engine.verdicts")
    with CompilePool(target, workers=workers) as pool, ThreadPoolExecutor(max(1, len(ops))) as threads:
        pool.warm_up()
        chooser = _DefaultChooser(pool, budget)
        verdict_log.addFilter(chooser)
        try:
            futures = [threads.submit(chooser.compile, op, target) for op in ops]
            which = "heuristic default" if chooser.checking else "rule's pick (TRITON_INTERPRET is set)"
            yield Check(
                "defaults",
                None,
                f"no GPU: each op's {which} is compiled for {arch}, not run ({workers} processes)",
            )
            for op, future in zip(ops, futures, strict=True):
                yield _outcome(f"op {op.name}", future, budget)
        finally:
            verdict_log.removeFilter(chooser)


def _outcome(name: str, future: Future[Check], budget: Budget) -> Check:
    """The line of one op's compile: out of time (a budget line), the check's own failure, or its line."""
    from concurrent.futures import TimeoutError as FutureTimeout

    try:
        return future.result(timeout=budget.left() + 1)
    except (FutureTimeout, TimeoutError, _OutOfTime):
        return _budget_line(name)
    except Exception as exc:  # the check's own failure
        return Check(name, False, first_line(exc))


class _OutOfTime(Exception):
    """The doctor's budget is spent before a compile could start."""


def _budget_line(name: str) -> Check:
    return Check(
        name, None, "skipped: the doctor's time budget is spent", "run it again: Triton's cache is warm now"
    )


class _DefaultChooser(logging.Filter):
    """Picks each op's default as `TunableOp.default_config` does (the first candidate whose binary passes
    the static checks), compiling candidates on the pool; where this process cannot compile (Triton's
    interpreter is on) it takes the op's own `default_config` (the rule's pick) and compiles that.

    An op whose candidates were still being compiled when the budget ran out is skipped (a line), never
    reported with a candidate the pick would have passed over. As a logging filter it drops the
    verdicts' warnings about such an interrupted pick. `compile` runs on several threads at once."""

    def __init__(self, pool: CompilePool, budget: Budget) -> None:
        from autotune.engine.verdicts import Verdicts, cache_dir, can_check

        super().__init__()
        self.pool, self.budget = pool, budget
        self.checking = can_check(pool.target)
        self.verdicts = (
            Verdicts(cache_dir(), features_of=self._compile, checkable=lambda target: True)
            if self.checking
            else None
        )
        self.out_of_time = False  # set once, by any thread
        self._local = threading.local()  # per thread: the op it picks for ran out of time

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.out_of_time and str(record.msg).startswith("cannot check the defaults"))

    def _compile(self, op: TunableOp, problem: Problem, config: Config, target: Target) -> StaticFeatures:
        from concurrent.futures import TimeoutError as FutureTimeout

        try:
            if self.budget.left() <= 0:
                raise _OutOfTime
            return self.pool.submit(op, problem, config).result(timeout=self.budget.left())
        except (_OutOfTime, FutureTimeout, TimeoutError):
            self.out_of_time = self._local.out_of_time = True
            raise _OutOfTime from None

    def compile(self, op: TunableOp, target: Target) -> Check:
        name = f"op {op.name}"
        if self.budget.left() < 3:
            return _budget_line(name)
        problem, why = _applies(op, target)
        if problem is None:
            return Check(name, None, f"{target.arch} does not run it: {why}")
        self._local.out_of_time = False
        if self.verdicts is not None:
            config = self.verdicts.first_passing(op, problem, target, op.default_candidates(problem, target))
            if self._local.out_of_time:  # the pick stopped at a candidate it could not check
                return _budget_line(name)
            features = self.verdicts.features(op, problem, config, target)
        else:
            config = op.default_config(problem, target)
            features = self._compile(op, problem, config, target)
        return _compiled_line(name, problem, config, features, target.arch)


def _compiled_line(name: str, problem: Problem, config: Config, features: StaticFeatures, arch: str) -> Check:
    shape = problem_label(problem)
    if not features.compiled:
        error = features.error.strip().splitlines()[0] if features.error.strip() else "?"
        return Check(
            name,
            False,
            f"not compiled for {arch} on {shape}: {error} ({config.short()})",
            "the toolchain cannot build this kernel: check the `toolchain` and `triton packages` lines",
        )
    lds = f"LDS {features.lds_bytes // 1024} KiB"
    spills = f"{features.spills} spills"
    detail = f"compiled for {arch} on {shape}: {spills}, {lds} ({config.short()})"
    if features.spills:
        return Check(name, True, detail, "the default spills registers on this arch: expect it to run slowly")
    return Check(name, True, detail)


# -- 4. speed --------------------------------------------------------------------------------------------


def speed(target: Target, budget: Budget) -> Iterator[Check]:
    """The vendor library, the served call and the heuristic default timed on `SPEED_SHAPES` (`time_gemm`)."""
    for m, n, k in SPEED_SHAPES:
        name = f"speed {m}x{n}x{k}"
        if budget.left() < 8:
            yield _budget_line(name)
            continue
        yield from guarded(name, functools.partial(_speed_run, name, target, m, n, k))


def _speed_run(name: str, target: Target, m: int, n: int, k: int) -> list[Check]:
    return [_speed_line(name, time_gemm(target, m, n, k))]


def _speed_line(name: str, t: GemmTimes) -> Check:
    def us(x: float) -> str:
        return f"{x:.1f} µs" if math.isfinite(x) else "failed"

    def ratio(x: float) -> str:
        finite = math.isfinite(x) and math.isfinite(t.vendor_us) and x > 0
        return f" (speed-up {t.vendor_us / x:.2f}x)" if finite else ""

    detail = (
        f"torch.mm {us(t.vendor_us)}; served ({t.served}) {us(t.served_us)}{ratio(t.served_us)}; "
        f"default ({t.default}) {us(t.default_us)}{ratio(t.default_us)}"
    )
    if t.error:
        from autotune.kernels import GEMM

        return Check(name, False, f"{detail}: {t.error}", f"a call failed: see the `op {GEMM.name}` line")
    return Check(name, True, detail)


def time_gemm(target: Target, m: int, n: int, k: int) -> GemmTimes:
    """Times one bf16 GEMM on the current GPU as `autotune verify` does (graph replays over rotating inputs,
    interleaved rounds): torch.mm, `autotune.kernels.gemm` with no table loaded, and the Triton default."""
    from autotune.core.problem import Problem
    from autotune.dispatch import Dispatcher, UntunedShapeWarning, install_dispatcher
    from autotune.engine.bench import Benchmarker, interleaved_medians
    from autotune.kernels import GEMM, served_config
    from autotune.sweeps.verify import SERVED, VERIFY_SETTINGS, EntryPoint, vendor_config

    problem = Problem.of(GEMM.name, m, n, k)
    previous = install_dispatcher(Dispatcher([], device_key=target, untuned_log=os.devnull))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedShapeWarning)
            served = served_config(GEMM, problem, target)
            default = GEMM.default_config(problem, target)
            vendor = vendor_config(GEMM, problem, target)
            configs = {"served": SERVED, "default": default} | ({"vendor": vendor} if vendor else {})
            bench = Benchmarker(EntryPoint(GEMM), target, settings=VERIFY_SETTINGS)
            times = interleaved_medians(bench, problem, configs, rounds=2)
    finally:
        install_dispatcher(previous)
    errors = [f"{side}: {status}" for side, (_, status) in times.items() if status != "ok"]
    return GemmTimes(
        vendor_us=times.get("vendor", (math.nan, "ok"))[0],
        served_us=times["served"][0],
        default_us=times["default"][0],
        served=served.short(),
        default=default.short(),
        error="; ".join(errors),
    )
