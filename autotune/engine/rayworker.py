"""RayWorker: the same trial worker as a Ray actor holding one GPU, for sweeps over a Ray cluster.

Each worker is an actor with ``num_gpus=1`` (0 under the CPU interpreter), so Ray places it on a node
with a free GPU. The actor runs its trials in a child process of its own (`ProcessWorker`): a config that
kills it is answered `crashed` with the exit code or signal, the phase and the stack faulthandler wrote,
as under the local executor; one that runs past the trial timeout is answered `timeout`; a new child
takes the next trial. An actor that dies itself is answered `crashed` ("Ray actor died") and replaced.
Results come back to the driver, which writes them to the sweep's database; the target is the one the
actor sees, so a cluster of mixed GPUs is recorded right. Ray is imported only here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.engine.workers import START_TIMEOUT_S, CrashStreak, WorkerAborted, WorkerError

if TYPE_CHECKING:
    from autotune.core.op import TunableOp
    from autotune.engine.bench import BenchSettings

__all__ = ["ACTOR_GRACE_S", "RayWorker", "connect", "ray_gpu_count"]

#: Seconds past the trial timeout the driver waits for an actor's answer: its process worker kills a
#: hung trial at the timeout and starts a new child.
ACTOR_GRACE_S = 60.0

log = logging.getLogger(__name__)


def connect(address: str | None, *, interpret: bool = False) -> None:
    """Joins the Ray cluster at `address` ("auto": the one this node belongs to), or starts a local
    one when `address` is None. ValueError when Ray is not installed, RuntimeError when unreachable."""
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'ray[default]'") from None
    if ray.is_initialized():
        return
    env: dict[str, Any] = {"env_vars": {"TRITON_INTERPRET": "1"}} if interpret else {}
    try:
        if address is None:  # a cluster of this process's own, whose processes die with it
            from autotune.engine.lifeline import reap_descendants

            ray.init(include_dashboard=False, runtime_env=env or None, log_to_driver=False)
            reap_descendants()
        else:
            ray.init(address=address, runtime_env=env or None, log_to_driver=False)
    except ConnectionError as exc:
        raise RuntimeError(
            f"cannot reach the Ray cluster at {address}: {exc} (is it up, and does this process have the "
            "cluster's auth token, or RAY_AUTH_MODE as the cluster was started with?)"
        ) from None


def ray_gpu_count() -> int:
    """GPUs the connected Ray cluster has."""
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


class _TrialActor:
    """The actor body: a ProcessWorker on the GPU Ray gave it, so a trial that crashes or hangs ends its
    child process, not the actor, and is answered with what the local executor tells (exit code or
    signal, the phase, the last lines faulthandler wrote)."""

    def __init__(self, interpret: bool, settings: BenchSettings | None, timeout_s: float) -> None:
        import tempfile

        from autotune.engine.workers import ProcessWorker

        fd, log_path = tempfile.mkstemp(prefix="autotune-ray-worker-", suffix=".log")
        os.close(fd)
        self.log_path = log_path
        self.worker = ProcessWorker(
            name="ray-actor", interpret=interpret, settings=settings, timeout_s=timeout_s, log_path=log_path,
            crash_limit=None,  # the driver's RayWorker counts the streak
        )  # fmt: skip

    def start(self) -> tuple[Target, int, str]:
        import socket

        return self.worker.target, os.getpid(), socket.gethostname()

    def run(self, op: TunableOp, problem: Problem, config: Config) -> tuple[str, TrialResult]:
        return "result", self.worker.run(op, problem, config)

    def close(self) -> None:
        self.worker.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


class RayWorker:
    """A trial worker backed by a Ray actor with one GPU (see the module docstring). One thread at a
    time, except `close`."""

    def __init__(
        self,
        *,
        name: str = "ray",
        interpret: bool = False,
        settings: BenchSettings | None = None,
        timeout_s: float = 300.0,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the trial timeout must be positive, got {timeout_s}")
        self.name = name
        self.interpret = interpret
        self.settings = settings
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._actor: Any = None
        self._pending: tuple[Any, Any] | None = None  # (actor, its start call) asked for by start()
        self._start_lock = threading.Lock()
        self._target: Target | None = None
        self._closed = False
        self._streak = CrashStreak(name)
        self.starts = 0
        self.node = ""

    @property
    def target(self) -> Target:
        with self._start_lock:
            if self._target is None:
                self._start()
        assert self._target is not None
        return self._target

    def start(self) -> None:
        """Asks Ray for the actor without waiting: it starts while the caller goes on."""
        with self._start_lock:
            if self._actor is None and self._pending is None and not self._closed:
                self._pending = self._submit()

    def _submit(self) -> tuple[Any, Any]:
        import ray

        if self._closed:
            raise WorkerAborted(f"{self.name} is closed")
        actor_cls: Any = ray.remote(num_gpus=0 if self.interpret else 1, max_restarts=0)(_TrialActor)
        actor: Any = actor_cls.remote(self.interpret, self.settings, self.timeout_s)
        self.starts += 1
        return actor, actor.start.remote()

    def _start(self) -> None:
        import ray

        actor, ref = self._pending or self._submit()
        self._pending = None
        try:
            target, pid, node = ray.get(ref, timeout=self.start_timeout_s)
        except Exception as exc:
            ray.kill(actor)
            raise WorkerError(
                f"{self.name}: the Ray actor did not start: {type(exc).__name__}: {exc}"
            ) from None
        if self._target is not None and target.fingerprint() != self._target.fingerprint():
            # A replacement landed on another kind of GPU: keep results apart by ending this worker.
            ray.kill(actor)
            raise WorkerError(f"{self.name}: the replacement actor landed on another GPU ({target})")
        self._actor, self._target, self.node = actor, target, node
        log.info("%s: Ray actor pid %d on %s, %s", self.name, pid, node, target)

    def _kill(self) -> None:
        actors = [self._actor, self._pending[0] if self._pending else None]
        self._actor = self._pending = None
        for actor in actors:
            if actor is not None:
                import ray

                ray.kill(actor, no_restart=True)

    def close(self) -> None:
        self._closed = True
        if self._actor is not None:  # its child and log file go first; then the actor
            import ray

            with contextlib.suppress(Exception):
                ray.get(self._actor.close.remote(), timeout=10)
        self._kill()

    def run(self, op: TunableOp, problem: Problem, config: Config) -> TrialResult:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        with self._start_lock:
            if self._actor is None:
                self._start()
        extra = {"worker": self.name, "node": self.node}
        ref = self._actor.run.remote(op, problem, config)
        try:  # the actor's process worker times the trial out; this catches an actor that hangs itself
            _, result = ray.get(ref, timeout=self.timeout_s + ACTOR_GRACE_S)
        except GetTimeoutError:
            self._kill()
            if self._closed:
                raise WorkerAborted(f"{self.name} closed during a trial") from None
            text = f"no result after {self.timeout_s:g} s; Ray actor killed"
            return self._streak.tell(
                TrialResult(config, TrialStatus.TIMEOUT, error=text, extra=extra), crashed=False
            )
        except RayActorError as exc:
            self._actor = None
            if self._closed:
                raise WorkerAborted(f"{self.name} closed during a trial") from None
            said = str(exc).strip()
            text = f"Ray actor died: {said.splitlines()[0][:500] if said else type(exc).__name__}"
            return self._streak.tell(TrialResult(config, TrialStatus.CRASHED, error=text, extra=extra))
        return self._streak.tell(dataclasses.replace(result, extra={**result.extra, **extra}))
