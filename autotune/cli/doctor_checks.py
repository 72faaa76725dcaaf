"""The checks of `autotune doctor`: each gives `Check` values, one per printed line, and never raises.

A check that cannot finish is a failed `Check` with the first line of its error. The GPU work (running an
op's default against its reference, timing three GEMMs) is done by `run_default` and `time_gemm`, which
tests replace to check the reporting without a GPU.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import logging
import math
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

#: The archs our kernels are tuned for; any other GPU runs them with untuned defaults.
TUNED_ARCHS = ("gfx942", "gfx950", "sm_90")
#: Distributions that install the top-level package `triton` (PyPI's, and PyTorch's own builds).
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")
#: (M, N, K) of the timed bf16 GEMMs: decode, a mid-size batch, prefill.
SPEED_SHAPES = ((16, 4096, 4096), (128, 8192, 8192), (4096, 4096, 4096))


@dataclass(frozen=True)
class Check:
    """One line of the doctor: `ok` True (passed), False (failed: exit 1) or None (does not apply,
    informational). A passing check with a `hint` is a warning."""

    name: str
    ok: bool | None
    detail: str
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def first_line(exc: BaseException) -> str:
    """The root cause of `exc` as one line: its type and the first line of its message."""
    from autotune.core.result import root_cause

    root = root_cause(exc)
    lines = str(root).strip().splitlines()
    return f"{type(root).__name__}: {lines[0]}" if lines else type(root).__name__


def guarded(name: str, check: Callable[[], Iterable[Check]]) -> Iterator[Check]:
    """The checks of `check`, then a failed Check named `name` where it raised."""
    try:
        yield from check()
    except Exception as exc:  # a check never crashes the verb
        log.debug("doctor check %s raised", name, exc_info=True)
        yield Check(name, False, first_line(exc), "the check itself failed: run with -vv for the traceback")


class Budget:
    """The doctor's time budget: `left()` seconds until its deadline (never negative)."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.start


# -- 1. toolchain ----------------------------------------------------------------------------------------


def toolchain() -> Iterator[Check]:
    """torch's version and build, the imported Triton's version and folder; the Triton distributions."""
    import torch

    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    build = f"ROCm {hip}" if hip else f"CUDA {cuda}" if cuda else "CPU"
    torch_text = f"torch {torch.__version__} ({build} build)"
    try:
        import triton
    except Exception as exc:  # not installed, or a broken install that fails on import
        yield Check(
            "toolchain",
            False,
            f"{torch_text}; triton does not import ({first_line(exc)})",
            "a CUDA or ROCm torch brings its own Triton; on a CPU-only machine install the triton extra "
            "(pip install '.[triton]' in a checkout)",
        )
        return
    folder = Path(str(getattr(triton, "__file__", "") or "?")).parent
    version = str(getattr(triton, "__version__", "?"))
    yield Check("toolchain", True, f"{torch_text}; triton {version} from {folder}")
    yield triton_packages(version)


def triton_distributions() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution that provides the top-level package `triton`."""
    names = {_normal(n) for n in metadata.packages_distributions().get("triton", [])}
    for name in TRITON_DISTRIBUTIONS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        names.add(name)
    found = []
    for name in sorted(names):
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, "?"))
    return found


def torch_pinned_triton() -> tuple[str, str] | None:
    """(name, version) of the Triton distribution the installed torch requires with `==`, if any."""
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^]]*\])?\s*==\s*([^\s;,]+)", line)
        if m and _normal(m.group(1)) in TRITON_DISTRIBUTIONS:
            return _normal(m.group(1)), m.group(2)
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _base(version: str) -> str:
    return version.split("+")[0]


def triton_packages(imported: str) -> Check:
    """Failed where two distributions provide `triton` (one overwrote the other's files: the classic broken
    ROCm install); a warning where the imported version is not the one torch pins."""
    found = triton_distributions()
    pinned = torch_pinned_triton()
    listed = ", ".join(f"{n} {v}" for n, v in found)
    if len(found) > 1:
        keep = f"{pinned[0]}=={pinned[1]}" if pinned else "the one your torch build names"
        return Check(
            "triton packages",
            False,
            f"{len(found)} distributions provide `triton` ({listed}): one overwrote the other's files",
            f"keep only {keep}: pip uninstall -y {' '.join(n for n, _ in found)}, then install it again",
        )
    if not found:
        return Check("triton packages", True, f"triton {imported} is imported from no installed distribution")
    if pinned and _base(pinned[1]) != _base(imported):
        return Check(
            "triton packages",
            True,
            f"{listed} is imported, but torch pins {pinned[0]} {pinned[1]}",
            f"kernels may not compile or run as tuned: pip install {pinned[0]}=={pinned[1]} "
            "(from torch's own package index)",
        )
    return Check("triton packages", True, f"one distribution provides `triton`: {listed}")


#: (distribution, what it is for): dependencies first, then optional packages.
_DEPENDENCIES = ("sqlalchemy", "optuna", "pandas")
_OPTIONAL = (("psycopg", "PostgreSQL, the postgres extra"), ("ray", "--executor ray, the ray extra"))


def packages() -> Iterator[Check]:
    """The database and search dependencies' versions (failed where one is missing) and the optional
    packages, on one line."""
    parts, missing = [], []
    for name in _DEPENDENCIES:
        version = _version(name)
        parts.append(f"{name} {version}" if version else f"{name} missing")
        if not version:
            missing.append(name)
    for name, role in _OPTIONAL:
        version = _version(name)
        parts.append(f"{name} {version}" if version else f"{name} not installed ({role})")
    hint = f"reinstall autotune: its dependencies {', '.join(missing)} are missing" if missing else ""
    yield Check("packages", not missing, "; ".join(parts), hint)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


# -- 2. GPUs ---------------------------------------------------------------------------------------------


def gpus(found: list[Target]) -> Iterator[Check]:
    """A line per visible GPU (appended to `found`), or one saying there is none and what compile-only
    work does instead."""
    import torch

    from autotune.core.target import local_target

    if not torch.cuda.is_available():
        hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
        why = (
            "torch is a CPU build"
            if not (hip or cuda)
            else f"torch's {'ROCm' if hip else 'CUDA'} runtime finds no device (driver, permissions, "
            "HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)"
        )
        yield Check(
            "gpu",
            None,
            f"no GPU visible to torch ({why})",
            "compile-only work: `autotune sweep SPEC` compiles for gfx942 by default and stores the cost "
            "model's predictions; --target gfx950|sm_90 for another arch; --interpret runs the kernels in "
            "Triton's CPU interpreter",
        )
        return
    for i in range(torch.cuda.device_count()):
        target = local_target(i)
        found.append(target)
        yield _gpu_line(i, target, torch.cuda.get_device_properties(i))


def _gpu_line(index: int, target: Target, props: Any) -> Check:
    parts = [props.name if hasattr(props, "name") else target.name, target.arch]
    raw_arch = str(getattr(props, "gcnArchName", "") or "") if target.is_amd else ""  # CUDA: the name
    if raw_arch and raw_arch != target.arch:
        parts[-1] = f"{target.arch} ({raw_arch})"
    parts.append(f"{target.cu_count} {'CUs' if target.is_amd else 'SMs'}")
    if target.is_amd and target.arch in TUNED_ARCHS:
        parts.append(f"{target.xcds} XCDs")
    parts.append(f"{target.memory_bytes / 2**30:.0f} GiB")
    if target.llc_bytes:
        parts.append(f"{'LLC' if target.is_amd else 'L2'} {target.llc_bytes >> 20} MiB")
    clock = gpu_clock_mhz(index, props)
    parts.append(f"clock {clock} MHz" if clock else "clock unknown")
    detail = ", ".join(parts)
    if target.arch not in TUNED_ARCHS:
        return Check(
            f"gpu {index}",
            True,
            f"{detail}: an arch our kernels are not tuned for",
            f"the kernels run, but their defaults were tuned on {', '.join(TUNED_ARCHS)}: sweep before "
            "serving (`autotune sweep SPEC`)",
        )
    return Check(f"gpu {index}", True, f"{detail}: tuned arch")


def gpu_clock_mhz(index: int, props: Any) -> int | None:
    """The GPU's clock: its properties' `clock_rate` (kHz) where the build has one, else what torch reads
    through pynvml or amdsmi; None where neither answers."""
    rate = getattr(props, "clock_rate", None)
    if isinstance(rate, (int, float)) and rate > 0:
        return int(rate / 1000)
    try:
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mhz = torch.cuda.clock_rate(index)
        return int(mhz) if mhz else None
    except Exception:  # no pynvml / amdsmi, or a build without clock_rate
        return None


# -- 3. each op's default against its reference ----------------------------------------------------------


def small_problem(name: str) -> Problem:
    """A small problem of op `name`, as the op's tests build them; a GEMM-shaped one for an op (a plugin)
    this doctor does not know (ValueError where that op refuses it)."""
    from autotune.core.problem import Problem

    if name == "gemm":
        return Problem.gemm(16, 512, 512)
    if name == "moe":
        return Problem.moe(16, 256, 512, 8, 2)
    if name == "mla_decode":
        return Problem.of(name, 4, 512, 576, heads=16, context=256, kv_dtype="bf16", page_size=16)
    if name.startswith("gemm_"):
        return Problem.quant(name, 16, 256, 512)
    return Problem.of(name, 16, 512, 512)


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
        return Check(name, False, f"{detail}: {t.error}", "a call failed: see the `op gemm` line")
    return Check(name, True, detail)


def time_gemm(target: Target, m: int, n: int, k: int) -> GemmTimes:
    """Times one bf16 GEMM on the current GPU as `autotune verify` does (graph replays over rotating inputs,
    interleaved rounds): torch.mm, `autotune.kernels.gemm` with no table loaded, and the Triton default."""
    from autotune.core.problem import Problem
    from autotune.dispatch import Dispatcher, UntunedShapeWarning, install_dispatcher
    from autotune.engine.bench import Benchmarker, interleaved_medians
    from autotune.kernels import GEMM, served_config
    from autotune.sweeps.verify import SERVED, VERIFY_SETTINGS, EntryPoint, vendor_config

    problem = Problem.gemm(m, n, k)
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


# -- 5. tables -------------------------------------------------------------------------------------------


def tables(device: Target | None) -> Iterator[Check]:
    """Each table $AUTOTUNE_TABLES names: loaded or not (why), its target, and whether it fits `device`
    (the running GPU, or the interpreter; None: neither) as the dispatcher's device-key guard decides."""
    from autotune.dispatch import Table, TableError
    from autotune.dispatch.dispatcher import ENV_TABLES

    value = os.environ.get(ENV_TABLES, "")
    items = [item.strip() for item in value.split(os.pathsep) if item.strip()]
    if not items:
        yield Check(
            "tables",
            None,
            f"${ENV_TABLES} is not set: every served call runs its op's fallback",
            f"after a sweep, `autotune emit --out table.json` and set {ENV_TABLES}=table.json",
        )
        return
    for item in items:
        path = Path(item).expanduser()
        if not path.exists():
            yield Check(
                f"table {item}", False, "does not exist", f"fix ${ENV_TABLES}: it names a missing path"
            )
            continue
        files = sorted(p for p in path.glob("*.json") if p.is_file()) if path.is_dir() else [path]
        if not files:
            yield Check(f"table {item}", False, "a folder with no *.json tables", f"fix ${ENV_TABLES}")
        for file in files:
            name = f"table {file if path.is_dir() else item}"
            try:
                table = Table.load(file)
            except (TableError, OSError) as exc:
                yield Check(
                    name, False, f"not loaded: {str(exc).splitlines()[0]}", "emit it again (`autotune emit`)"
                )
                continue
            yield _table_line(name, table, device)


def _table_line(name: str, table: Any, device: Target | None) -> Check:
    from autotune.dispatch.dispatcher import ENV_TABLES

    shapes = f"{len(table.entries)} shape{'s' if len(table.entries) != 1 else ''}"
    kind = "predicted" if table.predicted else "measured"
    about = f"{shapes}, {kind}, tuned on {table.target}"
    if device is None or table.device_key != device.device_key():
        here = str(device) if device is not None else "no GPU here"
        return Check(
            name,
            False,
            f"{about}: does not fit this device ({here}); its shapes run the fallback",
            f"emit a table on this GPU (`autotune emit`) or point ${ENV_TABLES} at the right one",
        )
    return Check(name, True, f"{about}: fits this device")


# -- 6. database -----------------------------------------------------------------------------------------


def database(url: str | None) -> Iterator[Check]:
    """The database of `url` ($AUTOTUNE_DB, else ./autotune.db): opened read-only where it exists (never
    created), with its schema version."""
    from autotune.db import SCHEMA_VERSION, Store, StoreError
    from autotune.db.engine import mask_url, resolve_url, sqlite_path

    resolved = resolve_url(url)
    path = sqlite_path(resolved)
    shown = (url or os.environ.get("AUTOTUNE_DB") or "").strip() or "./autotune.db"
    if path is not None and not path.exists():
        yield Check(
            "database",
            None,
            f"no database at {shown} (--db, else $AUTOTUNE_DB, else ./autotune.db)",
            "`autotune sweep SPEC` makes one; `autotune import` fills one from vLLM, aiter, TunableOp files",
        )
        return
    try:
        with Store(resolved, read_only=True) as store:
            del store
    except StoreError as exc:
        yield Check("database", False, str(exc).splitlines()[0], "name another with --db or $AUTOTUNE_DB")
        return
    yield Check(
        "database",
        True,
        f"{mask_url(resolved) if path is None else shown} opens read-only, schema version {SCHEMA_VERSION}",
    )
