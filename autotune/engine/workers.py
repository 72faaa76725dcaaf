"""Trial workers: where a config is measured. A worker process per GPU isolates crashes and hangs.

A `Worker` measures one (op, problem, config) at a time and always answers with a TrialResult. The
`ProcessWorker` runs a Benchmarker in a spawned child process that sees one GPU; if a config kills the
child (a segfault, an abort inside the compiler, a GPU fault) or hangs past the trial timeout, the
trial is answered `crashed` or `timeout` with what is known (the phase it was in, the exit signal, the
last lines the child wrote) and the child is replaced before the next trial. `InlineWorker` measures in
this process, as a library call would (no isolation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.engine.lifeline import start_from_main

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from autotune.core.op import TunableOp
    from autotune.engine.bench import Benchmarker, BenchSettings

__all__ = [
    "Benches",
    "BoundWorker",
    "CrashStreak",
    "InlineWorker",
    "ProcessWorker",
    "Worker",
    "WorkerAborted",
    "WorkerError",
    "device_env",
    "visible_devices",
]

log = logging.getLogger(__name__)

#: A worker that crashes this many trials in a row is taken for a broken GPU, not bad configs.
MAX_CONSECUTIVE_CRASHES = 5
#: Seconds a new worker process may take to import torch and open its GPU.
START_TIMEOUT_S = 180.0


class WorkerError(RuntimeError):
    """A worker cannot work at all (it does not start, or its GPU is broken): the sweep stops. `result` is
    the trial that made it give up (the last crash of a streak), to be stored like any other."""

    def __init__(self, message: str, result: TrialResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class WorkerAborted(RuntimeError):
    """The worker was closed while a trial was running (Ctrl-C): the trial is not a result."""


class Worker(Protocol):
    """Measures trials on one device, one at a time; `run` never raises for a bad config.

    `target` is the device the worker measures on (read by the worker itself, so on a cluster it is the
    remote GPU), and results are recorded under it. `close` may be called from another thread to abort a
    running trial, which then raises WorkerAborted.
    """

    name: str

    @property
    def target(self) -> Target: ...

    def start(self) -> None:
        """Begins starting (a process, an actor) without waiting; `run` and `target` wait for it."""
        ...

    def run(self, op: TunableOp, problem: Problem, config: Config) -> TrialResult: ...

    def close(self) -> None: ...


class BoundWorker:
    """A worker bound to one op: has the `run(problem, config)` the Runner calls on a Benchmarker."""

    def __init__(self, worker: Worker, op: TunableOp) -> None:
        self.worker, self.op = worker, op

    def run(self, problem: Problem, config: Config) -> TrialResult:
        return self.worker.run(self.op, problem, config)


class Benches:
    """One Benchmarker per op (told apart by their pickled form: a MoE op carries its routing skew) on
    one target, kept for the worker's life so each problem's inputs are built once."""

    def __init__(
        self,
        target: Target,
        settings: BenchSettings | None = None,
        make: Callable[[TunableOp], Benchmarker] | None = None,
    ) -> None:
        self.target, self.settings, self.make = target, settings, make
        self._by_op: dict[bytes, Benchmarker] = {}
        #: Set on every Benchmarker made (a worker process reports the phases of its trials).
        self.on_phase: Callable[[str], None] | None = None

    def get(self, op: TunableOp) -> Benchmarker:
        """The Benchmarker of `op`, made on first use (a `ServedTiming` op's times as served)."""
        from autotune.engine.bench import Benchmarker

        key = pickle.dumps(op)
        bench = self._by_op.get(key)
        if bench is None:
            made = self.make(op) if self.make else Benchmarker(op, self.target, settings=self.settings)
            bench = self._by_op[key] = made
            bench.on_phase = self.on_phase
        return bench

    def clear(self) -> None:
        self._by_op.clear()


def fault_result(config: Config, fault: Exception) -> TrialResult:
    """The `crashed` result of a trial whose device fault left the measuring process unusable."""
    return TrialResult(config, TrialStatus.CRASHED, error=str(fault), extra={"phase": "device"})


class CrashStreak:
    """Counts trials in a row that crashed a worker; WorkerError at `MAX_CONSECUTIVE_CRASHES`, since then
    the GPU, not the configs, is at fault."""

    def __init__(self, name: str, limit: int | None = MAX_CONSECUTIVE_CRASHES) -> None:
        self.name, self.count, self.limit = name, 0, limit

    def tell(self, result: TrialResult, *, crashed: bool | None = None) -> TrialResult:
        """`result`, after counting it (a crash unless `crashed` says otherwise; a timeout is not). With
        `limit` None nothing is raised: the caller keeps the count (a worker inside a Ray actor)."""
        if crashed is None:
            crashed = result.status is TrialStatus.CRASHED
        self.count = self.count + 1 if crashed else 0
        if self.limit is not None and self.count >= self.limit:
            raise WorkerError(
                f"{self.name}: {self.count} trials in a row crashed the worker; the GPU looks broken "
                f"(last: {result.error[:300]})",
                result,
            )
        if result.status in (TrialStatus.CRASHED, TrialStatus.TIMEOUT):
            log.warning("%s: %s %s", self.name, result.status.value, result.error[:500])
        return result


class InlineWorker:
    """Measures in this process (no isolation: a device fault raises DeviceFault). `make` builds the
    Benchmarker of an op, where a caller wants its own (tests inject fakes)."""

    def __init__(
        self,
        target: Target,
        settings: BenchSettings | None = None,
        name: str = "inline",
        make: Callable[[TunableOp], Benchmarker] | None = None,
    ) -> None:
        self.name = name
        self._target = target
        self._benches = Benches(target, settings, make)

    @property
    def target(self) -> Target:
        return self._target

    def start(self) -> None:
        """Nothing to start: trials run in this process."""

    def run(self, op: TunableOp, problem: Problem, config: Config) -> TrialResult:
        return self._benches.get(op).run(problem, config)

    def close(self) -> None:
        self._benches.clear()


def visible_devices() -> list[str]:
    """The GPUs this process may use, as the ids a child's ``*_VISIBLE_DEVICES`` takes (HIP's or CUDA's
    variable respected when set); empty without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    names = (
        ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if torch.version.hip else ("CUDA_VISIBLE_DEVICES",)
    )
    for name in names:
        value = os.environ.get(name)
        if value:
            ids = [v.strip() for v in value.split(",") if v.strip()]
            return ids[:count]
    return [str(i) for i in range(count)]


def device_env(device_id: str) -> dict[str, str]:
    """The environment that makes a child process see only GPU `device_id` (as `visible_devices` names
    it) as its device 0."""
    import torch

    name = "HIP_VISIBLE_DEVICES" if torch.version.hip else "CUDA_VISIBLE_DEVICES"
    env = {name: device_id}
    if torch.version.hip and os.environ.get("CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = "0"  # HIP applies both: after HIP's, the one left is 0
    return env


@dataclass(frozen=True)
class _Started:
    target: Target
    pid: int


class ProcessWorker:
    """Measures in a spawned child process that sees one GPU (or runs the CPU interpreter).

    The child is started by `start()` (without waiting) or on first use, and replaced after it dies; a
    trial that kills it is answered `crashed`, one that runs past `timeout_s` is answered `timeout` and
    the child is killed. The child's stdout and stderr go to `log_path` (appended), whose last lines are
    kept in a crashed trial's error.
    After `MAX_CONSECUTIVE_CRASHES` crashed trials in a row WorkerError is raised: the GPU, not the
    configs, is at fault. The parent and child talk over a pipe; the child ignores Ctrl-C (the parent
    decides) and exits when the parent dies. Trials run one at a time (the sweep's threads sharing a
    worker take turns); `target`, `start` and `close` may be called from any thread.
    """

    def __init__(
        self,
        *,
        name: str = "worker",
        env: dict[str, str] | None = None,
        interpret: bool = False,
        settings: BenchSettings | None = None,
        timeout_s: float = 300.0,
        log_path: str | Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        crash_limit: int | None = MAX_CONSECUTIVE_CRASHES,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the trial timeout must be positive, got {timeout_s}")
        self.name = name
        self.env = dict(env or {})
        self.interpret = interpret
        self.settings = settings
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.log_path = Path(log_path) if log_path is not None else None
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._target: Target | None = None
        self._closed = False
        self._streak = CrashStreak(name, crash_limit)
        self._starting: float | None = None  # when the child now starting was spawned
        self._start_lock = threading.Lock()
        #: Child processes started so far (1 + replacements).
        self.starts = 0
        #: Seconds the last child took from spawning to ready.
        self.start_s: float | None = None

    # -- life cycle ---------------------------------------------------------------------------------

    @property
    def target(self) -> Target:
        if self._target is None:
            self._ensure_started()
        assert self._target is not None
        return self._target

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Starts the child process without waiting for it: it imports torch, opens its GPU and loads the
        kernels while the caller goes on; the first `run` (or `target`) waits until it is ready."""
        with self._start_lock:
            if self._proc is None and not self._closed:
                self._spawn()

    def _ensure_started(self) -> None:
        """A child ready for a trial: the one starting, the running one, or a new one for a dead one.
        Thread-safe: threads sharing the worker wait for the same child."""
        with self._start_lock:
            if self._proc is not None and self._starting is None and not self._proc.is_alive():
                self._kill()  # it died between trials
            if self._proc is None:
                self._spawn()
            if self._starting is not None:
                self._await_started()

    def _spawn(self) -> None:
        import multiprocessing

        if self._closed:
            raise WorkerAborted(f"{self.name} is closed")
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        env = dict(self.env)
        if self.interpret:
            env["TRITON_INTERPRET"] = "1"
        log_file = str(self.log_path) if self.log_path is not None else None
        proc = ctx.Process(
            target=_child_main, args=(child, env, self.settings, log_file), name=f"autotune-{self.name}"
        )
        proc.daemon = True
        start_from_main(proc.start)  # its death signal follows this process, not this thread
        child.close()
        self._proc, self._conn = proc, parent
        self._starting = time.monotonic()
        self.starts += 1

    def _await_started(self) -> None:
        proc, parent, spawned = self._proc, self._conn, self._starting
        assert proc is not None and parent is not None and spawned is not None
        deadline = spawned + self.start_timeout_s
        while not parent.poll(0.2):
            if self._closed:
                raise WorkerAborted(f"{self.name} closed while starting")
            if not proc.is_alive() or time.monotonic() > deadline:
                self._kill()
                why = (
                    "did not start in time"
                    if proc.exitcode is None
                    else f"exited ({_exit_text(proc.exitcode)})"
                )
                raise WorkerError(f"{self.name}: worker process {why}{_tail_text(self.log_path)}")
        try:
            kind, payload = parent.recv()
        except (EOFError, OSError):
            self._kill()
            why = f"{self.name}: worker process died while starting{_tail_text(self.log_path)}"
            raise WorkerError(why) from None
        if kind == "error":
            self._kill()
            raise WorkerError(f"{self.name}: {payload}")
        started: _Started = payload
        if self._target is not None and started.target.fingerprint() != self._target.fingerprint():
            self._kill()
            raise WorkerError(f"{self.name}: the replacement worker sees another GPU ({started.target})")
        self._target = started.target
        self._starting = None
        self.start_s = time.monotonic() - spawned
        log.info("%s: worker process %d on %s, ready in %.1f s", self.name, started.pid, started.target,
                 self.start_s)  # fmt: skip

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        self._starting = None
        if conn is not None:
            conn.close()
        if proc is not None and proc.is_alive():
            proc.kill()
        if proc is not None:
            proc.join(5)

    def close(self) -> None:
        """Stops the child. A trial running in another thread then raises WorkerAborted."""
        self._closed = True
        proc, conn = self._proc, self._conn
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        if proc is not None:
            proc.join(2)
        self._kill()

    def __enter__(self) -> ProcessWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- trials -------------------------------------------------------------------------------------

    def run(self, op: TunableOp, problem: Problem, config: Config) -> TrialResult:
        self._ensure_started()
        conn, proc = self._conn, self._proc
        assert conn is not None and proc is not None
        phase = "start"
        t0 = time.monotonic()
        try:
            conn.send((op, problem, config))
            while True:
                if self._closed:
                    raise WorkerAborted(f"{self.name} closed during a trial")
                alive = proc.is_alive()  # before polling: what a child sent just before dying is read
                if conn.poll(0.1 if alive else 0):
                    kind, payload = conn.recv()
                    if kind == "phase":
                        phase = payload
                        continue
                    result: TrialResult = payload
                    result = dataclasses.replace(result, extra={**result.extra, "worker": self.name})
                    if kind == "fault":  # the child's device is unusable: it exits, a new one takes over
                        self._kill()
                    return self._streak.tell(result)
                if not alive:
                    break
                if time.monotonic() - t0 > self.timeout_s:
                    self._kill()
                    return self._streak.tell(
                        _failure(config, TrialStatus.TIMEOUT, self, phase,
                                 f"no result after {self.timeout_s:g} s; worker process killed"),
                        crashed=False,
                    )  # fmt: skip
        except (EOFError, OSError, BrokenPipeError):
            if self._closed:
                raise WorkerAborted(f"{self.name} closed during a trial") from None
        proc.join(5)
        code = proc.exitcode
        self._kill()
        if self._closed:
            raise WorkerAborted(f"{self.name} closed during a trial")
        text = f"worker process died ({_exit_text(code)}){_tail_text(self.log_path)}"
        return self._streak.tell(_failure(config, TrialStatus.CRASHED, self, phase, text, exitcode=code))


def _failure(
    config: Config,
    status: TrialStatus,
    worker: ProcessWorker,
    phase: str,
    text: str,
    exitcode: int | None = None,
) -> TrialResult:
    extra: dict[str, Any] = {"worker": worker.name, "phase": phase}
    if exitcode is not None:
        extra["exitcode"] = exitcode
    return TrialResult(config, status, error=f"{text} (during {phase})", extra=extra)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _tail_text(path: Path | None, lines: int = 8, limit: int = 1500) -> str:
    """'; last output: …' from the worker's log: the fatal error and the innermost frames that
    faulthandler wrote, else its last lines; '' when there is nothing."""
    if path is None or not path.is_file():
        return ""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    fatal = text.rfind("Fatal Python error")
    if fatal >= 0:  # the stack is printed most recent call first: keep the top of it
        kept = [line.strip() for line in text[fatal:].splitlines() if line.strip()][:lines]
    else:
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    tail = " | ".join(kept)
    return f"; last output: {tail[:limit]}" if tail else ""


# -- the child process ------------------------------------------------------------------------------


def _child_main(
    conn: Connection, env: dict[str, str], settings: BenchSettings | None, log_file: str | None
) -> None:
    import multiprocessing

    from autotune.engine.lifeline import die_with_parent, watch_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # The sweep that started this process, even where it died before this line ran (kill -9 at a busy
    # moment): this process then ends now.
    parent = multiprocessing.parent_process()
    sweep = parent.pid if parent is not None else None
    die_with_parent(sweep)  # no orphan holds a GPU: it goes with the sweep, kill -9 included
    watch_parent(sweep)
    os.environ.update(env)  # before the first CUDA call: this process sees one GPU
    if log_file is not None:
        fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    import faulthandler

    faulthandler.enable()  # a segfault or abort leaves its Python stack in the log, for the crash record
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [pid {os.getpid()}] %(name)s: %(message)s")
    try:
        target = _child_target(env.get("TRITON_INTERPRET") == "1")
        _warm_up(target)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("started", _Started(target, os.getpid())))
    from autotune.engine.bench import DeviceFault

    benches = Benches(target, settings)
    benches.on_phase = _phase_sender(conn)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg is None:
            return
        op, problem, config = msg
        try:
            result = benches.get(op).run(problem, config)
        except DeviceFault as fault:
            conn.send(("fault", fault_result(config, fault)))
            return
        conn.send(("result", result))


def _warm_up(target: Target) -> None:
    """What every first trial would do anyway, done while the parent sets up: the kernels' modules
    imported, and on a GPU the vendor library's handle created."""
    import autotune.engine.bench  # noqa: F401
    from autotune.core.registry import load_plugins

    load_plugins()  # the ops and their Triton kernels

    if not target.interpreter:
        import torch

        x = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
        torch.mm(x, x)
        torch.cuda.synchronize()


def _phase_sender(conn: Connection) -> Callable[[str], None]:
    def send(phase: str) -> None:
        conn.send(("phase", phase))

    return send


def _child_target(interpret: bool) -> Target:
    from autotune.core.target import local_target

    if interpret:
        return Target.interpreter_target()
    return local_target(0)


def check_devices(requested: Sequence[int] | None) -> list[str]:
    """The device ids (`visible_devices` names) for worker indices `requested` (all visible when None);
    ValueError naming what exists for an index that does not."""
    visible = visible_devices()
    if requested is None:
        return visible
    bad = [i for i in requested if not 0 <= i < len(visible)]
    if bad:
        raise ValueError(
            f"GPU index {bad[0]} does not exist: {len(visible)} GPU(s) visible"
            + (f" (indices 0-{len(visible) - 1})" if visible else "")
        )
    if len(set(requested)) != len(requested):
        raise ValueError(f"GPU indices repeat: {list(requested)}")
    return [visible[i] for i in requested]
