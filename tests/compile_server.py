"""The compile server of tests/conftest.py's `compile_per_arch`: a process started without TRITON_INTERPRET
that loads once what every compile script loads (torch, Triton's compiler and backends, the op plug-ins
and their kernels: `autotune.engine.compile_preload`, as the compile pool's fork server does), then forks a
child per script, so that a script starts in milliseconds where a new interpreter takes seconds.

Reads one JSON request a line on stdin: ``{"jobs": [{"script": str, "argv": [...], "env": {...}, "cwd":
str, "out": path, "err": path}, ...]}``; forks a child per job, all at once; each runs its script as
``python -c script *argv`` would (``sys.argv``, a fresh ``__main__``, the working directory `cwd`, `env`
its whole environment, its stdout and stderr to the files `out` and `err`); writes ``{"codes": [...]}``
(each child's exit code, or minus the signal that ended it) when all have ended.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types


def _child(job: dict[str, object]) -> int:
    os.chdir(str(job["cwd"]))
    os.environ.clear()  # the environment the test gave, whole
    os.environ.update({str(k): str(v) for k, v in dict(job["env"]).items()})  # type: ignore[call-overload]
    for fd, path in ((1, job["out"]), (2, job["err"])):
        file = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(file, fd)
        os.close(file)
    sys.argv = ["-c", *(str(a) for a in job["argv"])]  # type: ignore[attr-defined]
    main = types.ModuleType("__main__")  # a fresh __main__, as under `python -c` (no __file__)
    sys.modules["__main__"] = main
    try:
        exec(compile(str(job["script"]), "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def serve() -> None:
    sys.path[0] = ""  # as under `python -c`: the working directory first
    import torch  # noqa: F401
    import triton  # noqa: F401

    import autotune.engine.compile_preload  # noqa: F401

    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        jobs = json.loads(line)["jobs"]
        pids = []
        for job in jobs:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(job)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        print(json.dumps({"codes": codes}), flush=True)


if __name__ == "__main__":
    serve()
