"""The crash harness's zygote: imports autotune once, then forks a process per command it is given.

Reads one JSON request a line on stdin, ``{"argv": [...], "env": {...}, "cwd": "...", "fake_timing":
bool}``, forks a child that runs ``autotune <argv>`` in `cwd` with `env` added, writes ``{"pid": N}``,
waits for it and writes ``{"pid": N, "status": S}`` (S: the exit code, or minus the signal that ended
it). A fork starts in milliseconds where a new interpreter takes seconds to import torch and Triton, so
a harness can afford hundreds of killed runs.

With `fake_timing`, every trial is still run (in the sweep's worker process) and checked against its
reference, but the time the sweep is given is a function of the problem and the config, so that two
runs of one spec store the same rows: the harness compares a resumed run with an uninterrupted one row
for row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys


def _fake_timing() -> None:
    """Trials answered by a worker get a time that is a function of their problem and config."""
    from autotune.engine import bench, workers

    real = workers.ProcessWorker.run

    def run(self: workers.ProcessWorker, op: object, problem: object, config: object) -> object:
        result = real(self, op, problem, config)  # type: ignore[arg-type]
        if result.ok:
            key = f"{problem.key()} {config.canonical()}"  # type: ignore[attr-defined]
            us = 5.0 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 1000 / 10
            result = dataclasses.replace(result, timing=bench.timing_of([us] * 3, "wallclock"))
        return result

    workers.ProcessWorker.run = run  # type: ignore[method-assign]


def _forked_workers() -> None:
    """Trial workers forked from the sweep (which has torch imported) instead of spawned: a killed run
    and its resume then cost a fraction of a second each instead of an interpreter start. Their lifeline
    is the same (`autotune.engine.lifeline`); tests/sweeps/test_kill_resume.py kills spawned ones."""
    import multiprocessing

    real = multiprocessing.get_context

    def get_context(method: str | None = None) -> object:
        return real("fork" if method == "spawn" else method)

    multiprocessing.get_context = get_context  # type: ignore[assignment]


def _child(request: dict[str, object]) -> int:
    os.chdir(str(request["cwd"]))
    os.environ.update({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})  # type: ignore[call-overload]
    if request.get("fake_timing"):
        _fake_timing()
        _forked_workers()
    from autotune.cli import main

    out = os.open("out.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    return main([str(a) for a in request["argv"]])  # type: ignore[attr-defined]


def serve() -> None:
    # torch and Triton too (a sweep imports them in its first second: the toolchain's versions, the trial
    # worker), so that a fork starts with them in memory as the compile pool's fork server's children do.
    import torch  # noqa: F401
    import triton  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":  # the session's interpreter: tests/fast_interpreter.py
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from fast_interpreter import install

        install()

    import autotune.cli
    import autotune.cli.emit
    import autotune.cli.sweep
    import autotune.engine.bench
    import autotune.kernels
    import autotune.sweeps  # noqa: F401

    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"pid": pid, "status": code}), flush=True)


if __name__ == "__main__":
    serve()
