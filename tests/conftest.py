"""Test set-up: without a GPU, Triton kernels run in the CPU interpreter; `gpu` tests are skipped.

Everything a test session writes goes to one folder of its own in the temp dir (`SESSION_DIR`), removed
when the session ends (`pytest_sessionfinish`, else at exit), so that a run leaves nothing in $HOME or
the temp dir: the tests' `tmp_path` folders (unless --basetemp or $PYTEST_DEBUG_TEMPROOT names another),
Triton's home and kernel cache (`TRITON_HOME`, `TRITON_CACHE_DIR`; $AUTOTUNE_TEST_TRITON_CACHE names a
lasting kernel cache instead, warm across runs), torch inductor's cache, the untuned-shapes log, the
verdict cache, the temp dir ($TMPDIR, Ray's) and the XDG cache and config folders; the worker and compile
processes the tests start inherit the environment, so theirs too.

Under pytest-xdist (`-n 2`) the controller makes the folder and each worker works in a folder of its own
inside it (`gw0`, `gw1`: short, for the Unix sockets of a worker's local Ray), with the worker's temp dir
and caches (its tmp_path folders are the controller's, `popen-gw0` ...); the workers share the session's
Triton home and kernel cache, so that a kernel compiled on one is a cache hit on the other. Each worker
removes its folder when it ends, and the controller the whole one after its workers are gone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

#: The pytest-xdist worker this process is (gw0, gw1 ...), or None: not a worker.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
#: Names the session's folder to the pytest-xdist workers (they inherit the controller's environment).
_ENV_SESSION = "AUTOTUNE_TEST_SESSION_DIR"
if XDIST_WORKER and os.environ.get(_ENV_SESSION):
    #: The whole session's folder: the controller's, or this process's own where it is no xdist worker.
    SESSION_ROOT = Path(os.environ[_ENV_SESSION])
    #: The one folder this process of the test session writes to, removed when the session ends.
    SESSION_DIR = SESSION_ROOT / XDIST_WORKER
    SESSION_DIR.mkdir(exist_ok=True)  # a worker xdist starts again in place of a crashed one: the same
else:
    SESSION_ROOT = SESSION_DIR = Path(tempfile.mkdtemp(prefix="autotune-tests-"))
    os.environ[_ENV_SESSION] = str(SESSION_DIR)
#: A lasting Triton kernel cache for the tests (a warm one makes compile-only tests seconds): none by
#: default, so that the kernel cache is the session's (cold, as in CI).
ENV_TRITON_CACHE = "AUTOTUNE_TEST_TRITON_CACHE"


def _remove_session_dir() -> None:
    shutil.rmtree(SESSION_DIR, ignore_errors=True)  # a worker's own, or the controller's whole one


atexit.register(_remove_session_dir)  # a session that never reaches pytest_sessionfinish
# Before torch and triton are imported (their caches read these when first used). Triton's home holds
# its dump and override folders, and its cache unless TRITON_CACHE_DIR says otherwise.
os.environ["TRITON_HOME"] = str(SESSION_ROOT)
os.environ["TRITON_CACHE_DIR"] = os.environ.get(ENV_TRITON_CACHE) or str(SESSION_ROOT / ".triton" / "cache")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(SESSION_DIR / "inductor")
# A served call that no table covers appends its shape to the untuned-shapes log: never the user's own
# (~/.cache/autotune/untuned.jsonl) from a test. Tests that read the log set their own.
os.environ["AUTOTUNE_UNTUNED_LOG"] = str(SESSION_DIR / "untuned.jsonl")
# The heuristic defaults' compiled verdicts (processes that compile: no interpreter) likewise go to the
# session's folder, never the user's (~/.cache/autotune/verdicts).
os.environ["AUTOTUNE_VERDICT_CACHE"] = str(SESSION_DIR / "verdicts")
# The tests' `tmp_path` folders (pytest-of-USER/pytest-N) in the session's folder too, not kept across runs.
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(SESSION_DIR))
# What the tests' processes write to the temp dir (multiprocessing's pymp-* folders of a killed fork server,
# a Ray actor's log, Ray's own session folder) and to $HOME's cache and config (a browser's profile, the
# ends a sweep that lost its database leaves, `autotune.db.unclosed`) goes there too.
for _name, _env in (("tmp", "TMPDIR"), ("tmp", "RAY_TMPDIR"), ("cache", "XDG_CACHE_HOME"),
                    ("config", "XDG_CONFIG_HOME"), ("unclosed", "AUTOTUNE_UNCLOSED_DIR")):  # fmt: skip
    (SESSION_DIR / _name).mkdir(exist_ok=True)
    os.environ[_env] = str(SESSION_DIR / _name)
tempfile.tempdir = str(SESSION_DIR / "tmp")
# A local Ray cluster of the tests needs no token: Ray's default would write one to ~/.ray/auth_token.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import Engine, make_url  # noqa: E402

HAS_GPU = torch.cuda.is_available()
#: The PostgreSQL server of the database tests (each test creates and drops a database of its own).
PG_BASE = os.environ.get("AUTOTUNE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
if not HAS_GPU:
    # Must be set before anything imports a @triton.jit function.
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from fast_interpreter import install as _install_fast_interpreter

    _install_fast_interpreter()  # the interpreter without the work it repeats (tests/fast_interpreter.py)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session's folder removed, with all that the tests and their processes wrote there."""
    _finish_multiprocessing_temp_dir()
    _remove_session_dir()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Again at the very end: under pytest-xdist, after the workers have ended (the controller's session
    finishes while they may still be exiting)."""
    _remove_session_dir()


def _finish_multiprocessing_temp_dir() -> None:
    """Runs now the finalizer that removes this process's multiprocessing temp folder (a pymp-* folder in
    the session's), which would otherwise run at exit and fail on a folder already gone."""
    from multiprocessing import util

    remove = getattr(util, "_remove_temp_dir", None)
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        if remove is not None and getattr(finalizer, "_callback", None) is remove:
            finalizer()


#: Test files whose tests run on one pytest-xdist worker (`--dist loadgroup`), one after the other: file ->
#: group. Every other test goes to whichever worker is free. The modules whose module-scoped fixture
#: compiles or sweeps (on one worker it runs once); the Ray tests (test_ray_cluster.py's `ray stop` ends
#: every Ray process of the machine, the local Ray of test_ray.py's fixture too); test_user_path.py (each
#: GPU's sweep runs once a process, kept in `_swept`).
XDIST_GROUPS = {
    **{f"tests/{name}.py": name.rsplit("/", 1)[-1] for name in (
        "kernels/test_defaults_static", "core/test_static", "kernels/mla/test_mla_static",
        "kernels/mla/test_mla_gluon_static",
        "kernels/moe/test_moe_persistent_static", "kernels/moe/test_moe_mxfp4_static",
        "kernels/moe/test_moe_tma_static", "kernels/quant/test_fp8_gluon", "kernels/quant/test_quant_static",
        "engine/test_isa", "cli/test_cli", "cli/test_cli_static", "cli/test_cli_read_only",
        "cli/test_cli_report", "rocm/test_user_path")},
    "tests/engine/test_ray.py": "ray",
    "tests/engine/test_ray_cluster.py": "ray",
}  # fmt: skip


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: xdist's scheduling by group, with the groups of `XDIST_GROUPS` (xdist's own
    `xdist_group` marks name no group under pytest 9, whose node ids xdist 3.8 cannot rename)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)  # an `xdist_group` mark's, where xdist names it
            if scope != nodeid:
                return scope
            return XDIST_GROUPS.get(nodeid.split("::", 1)[0], nodeid)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An AUTOCOMMIT connection to the PostgreSQL server, or a skip saying why there is none."""
    shown = make_url(PG_BASE).render_as_string(hide_password=True)
    try:
        engine = create_engine(PG_BASE, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # driver missing, server down, bad credentials
        pytest.skip(
            f"PostgreSQL at {shown} is unreachable ({type(exc).__name__}: {exc}); "
            "set AUTOTUNE_TEST_PG to a reachable server"
        )
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_admin: Engine) -> Iterator[str]:
    """A fresh, uniquely named database, dropped afterwards (reruns and parallel runs never collide)."""
    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    with pg_admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_BASE).set(database=name).render_as_string(hide_password=False)
    finally:
        with pg_admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "autotune.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records the config of every Triton GEMM launcher built (the entry point caches one per config)."""
    import autotune.kernels.dense.kernel as gemm_triton

    seen: list[Any] = []
    real: Callable[..., Any] = gemm_triton.launcher

    def spy(config: Any, **kwargs: Any) -> Any:
        seen.append(config)
        return real(config, **kwargs)

    monkeypatch.setattr(gemm_triton, "launcher", spy)
    return seen


@pytest.fixture(scope="module")
def target() -> Any:
    """The local GPU's Target (GPU tests)."""
    from autotune.core.target import local_target

    return local_target()


@pytest.fixture
def right_and_repeatable() -> Any:
    """GPU tests: `check(op, problem, config, target, what)` asserts that `config` computes `problem`
    within tolerance, then gives bit-identical results 50 times over."""

    def check(op: Any, problem: Any, config: Any, target: Any, what: str) -> None:
        """`config` computes `problem` within tolerance, then gives bit-identical results 50 times over: parts
        of a tile that meet across SMs through a counter and a workspace show a missing fence or a wrong
        last-arriver test as a wrong or run-to-run different result."""
        inputs = op.make_inputs(problem, "cuda", seed=9)
        ref = op.reference(problem, inputs)
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        launch = op.prepare(problem, config, target, inputs, out)
        launch()
        torch.cuda.synchronize()
        first = out.clone()
        assert float((first.double() - ref.double()).norm() / ref.double().norm()) < op.tolerance(problem)
        for _ in range(50):
            out.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            assert torch.equal(out, first), f"{what} gave a different result on a repeat"

    return check


#: The start of every `compile_per_arch` script: the arch's target, or a skip where this process cannot
#: compile for it (a Triton without that backend).
COMPILE_PREAMBLE = """
import json, sys
from autotune.core.target import Target
from autotune.engine.verdicts import can_check

target = Target.for_arch(sys.argv[1])
if not can_check(target):
    print(json.dumps({"skip": f"this process cannot compile for {target.arch}"}))
    sys.exit(0)
"""


class CompileServer:
    """tests/compile_server.py: a process without TRITON_INTERPRET that has loaded torch, Triton's compiler
    and the op plug-ins once, and forks a child per compile script (a new interpreter would load them
    again, seconds a script). Started at the first `run` of a session (of an xdist worker)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="compile-", dir=SESSION_DIR))
        self.count = 0

    def _start(self) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        server = Path(__file__).with_name("compile_server.py")
        proc = subprocess.Popen(
            [sys.executable, str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env, start_new_session=True,
        )  # fmt: skip
        self.proc = proc
        self._read(600)  # ready
        return proc

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.close(kill=True)
            raise TimeoutError(f"the compile server answered nothing in {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            raise RuntimeError(f"the compile server exited ({code})")
        return dict(json.loads(line))

    def run(
        self, script: str, argvs: Sequence[Sequence[str]], env: dict[str, str]
    ) -> list[tuple[int, str, str]]:
        """Runs `script` as `python -c script *argv` for each of `argvs`, all at once, with the environment
        `env`: (exit code, stdout, stderr) of each."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        jobs = []
        for argv in argvs:
            self.count += 1
            out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
            job = dict(script=script, argv=list(argv), env=env, cwd=os.getcwd(), out=str(out), err=str(err))
            jobs.append(job)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jobs": jobs}) + "\n")
        proc.stdin.flush()
        codes = self._read(600)["codes"]
        found = []
        for job, code in zip(jobs, codes, strict=True):
            out, err = Path(job["out"]), Path(job["err"])
            found.append((int(code), out.read_text(), err.read_text()))
            out.unlink()
            err.unlink()
        return found

    def close(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if not kill and proc.stdin is not None:
            proc.stdin.close()
            try:
                proc.wait(30)
                return
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the server and the children it forked
        proc.wait()


@pytest.fixture(scope="session")
def compile_server() -> Iterator[CompileServer]:
    """The session's (an xdist worker's) `CompileServer`, ended with it."""
    server = CompileServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def compile_script(compile_server: CompileServer) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`run(script, *argv, env=...)`: `python -c script *argv` with the environment `env` (whole), run as a
    fork of the session's `CompileServer`, as its CompletedProcess (exit code, stdout, stderr). For compile
    scripts: the server runs without TRITON_INTERPRET, whatever `env` says."""

    def run(script: str, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        ((code, out, err),) = compile_server.run(script, [argv], env)
        return subprocess.CompletedProcess([sys.executable, "-c", script, *argv], code, out, err)

    return run


@pytest.fixture(scope="session")
def compile_per_arch(compile_server: CompileServer) -> Callable[..., dict[str, Any]]:
    """A function that runs `script` (Python source whose last printed line is JSON) once per arch of
    `archs`, all at once, each in a process without TRITON_INTERPRET (compiling needs real JIT
    functions), with argv [arch, JSON of `payload`] and `env` added: arch -> the JSON it printed. The
    script starts after `COMPILE_PREAMBLE`: `json`, `sys` and `target` (the arch's) are defined, and a
    process that cannot compile for the arch prints {"skip": reason} instead. Each process is a fork of
    the session's `CompileServer`, which runs it as `python -c` would."""

    def run(
        script: str, archs: Sequence[str], payload: Any, env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        pytest.importorskip("triton")
        base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | (env or {})
        found = compile_server.run(
            COMPILE_PREAMBLE + script, [(arch, json.dumps(payload)) for arch in archs], base
        )
        out: dict[str, Any] = {}
        for arch, (code, stdout, stderr) in zip(archs, found, strict=True):
            assert code == 0, stderr[-3000:]
            out[arch] = json.loads(stdout.strip().splitlines()[-1])
        return out

    return run


@pytest.fixture(scope="session")
def compile_on_arch(compile_per_arch: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """`compile_per_arch` for one arch: `script`'s JSON for `arch` (and `payload`), the test skipped where
    this process cannot compile for it."""

    def run(script: str, arch: str, payload: Any = None) -> dict[str, Any]:
        found: dict[str, Any] = compile_per_arch(script, (arch,), payload)[arch]
        if "skip" in found:
            pytest.skip(found["skip"])
        return found

    return run
