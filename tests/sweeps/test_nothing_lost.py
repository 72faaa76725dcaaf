"""Nothing lost, nothing left behind: the processes of a killed sweep, read-only access to a database a
writer left in its -wal, a read-only file, a sweep row closed after its database came back, progress
counted from the rows, a freed problem taken at once, and problems handed out longest first."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store, StoreError
from autotune.db.unclosed import read_unclosed
from autotune.sweeps.shared import SharedWork

REPO = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
TARGET = Target.for_arch("sm_90")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def in_folder(folder: Path) -> list[int]:
    """Processes (not this one) working in `folder`: what a command run there started."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/cwd") == str(folder):
                    out.append(int(entry))
    return out


def gone_within(folder: Path, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := in_folder(folder)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:  # never leave them to the next test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return alive


def ok(config: Config, us: float = 10.0) -> TrialResult:
    return TrialResult(config, TrialStatus.OK, timing=Timing(us, us, us, us, us, 0.0, 5, "events"))


# -- processes ------------------------------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_killed_compile_only_sweep_leaves_no_process(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(
        'name = "k"\n[[sweep]]\nop = "gemm"\nm = [1, 16, 64]\nnk = [[512, 1024]]\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_CACHE_DIR": str(tmp_path / "triton")}  # cold
    cmd = [sys.executable, "-m", "autotune.cli", "sweep", "spec.toml", "--target", "gfx942", "--workers", "2",
           "--db", "k.db", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(in_folder(tmp_path)) < 5:  # the sweep, its resource tracker, fork server, 2 compile processes
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, in_folder(tmp_path)
        time.sleep(0.1)
    time.sleep(1.0)  # compiling
    proc.kill()
    proc.wait()
    assert gone_within(tmp_path, 5.0) == []


@pytest.mark.skipif(not LINUX, reason="prctl and /proc")
def test_a_child_dies_with_its_parent_even_started_from_a_thread_that_ended(tmp_path: Path) -> None:
    """The parent starts a child (`start_from_main` from a short-lived thread), the thread ends, the child
    lives on; then the parent is killed and the child goes within a second."""
    script = textwrap.dedent(
        """
        import multiprocessing, sys, threading, time
        from autotune.engine.lifeline import start_from_main

        def child():
            from autotune.engine.lifeline import die_with_parent, watch_parent
            die_with_parent()
            watch_parent()
            time.sleep(600)

        if __name__ == "__main__":
            ctx = multiprocessing.get_context("spawn")
            proc = ctx.Process(target=child)
            t = threading.Thread(target=lambda: start_from_main(proc.start))
            t.start(); t.join()
            time.sleep(2.0)
            print(proc.pid, proc.is_alive(), flush=True)
            time.sleep(600)
        """
    )
    (tmp_path / "parent.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, "parent.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    _, alive = parent.stdout.readline().split()
    assert alive == "True"  # outlived the thread that started it
    parent.kill()
    parent.wait()
    assert gone_within(tmp_path, 5.0) == []


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_the_reaper_kills_what_a_killed_process_left(tmp_path: Path) -> None:
    """A process starts a grandchild that would outlive it (like a local Ray cluster's agents), then is
    killed: the reaper ends the grandchild."""
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        from autotune.engine.lifeline import REAP_EVERY_S, reap_descendants
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        reap_descendants()
        time.sleep(2 * REAP_EVERY_S)
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    (tmp_path / "parent.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, "parent.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
    assert len(in_folder(tmp_path)) >= 3  # itself, the sleeper, the reaper
    parent.kill()
    parent.wait()
    assert gone_within(tmp_path, 5.0) == []


# -- the database ---------------------------------------------------------------------------------


def _writer_killed_with_wal(db: Path, n: int) -> None:
    """A process stores `n` trials and is killed: they are committed, in the -wal only."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from autotune.core.config import Config
        from autotune.core.problem import Problem
        from autotune.core.result import Timing, TrialResult, TrialStatus
        from autotune.core.target import Target
        from autotune.db import Store
        store = Store({str(db)!r})
        for i in range({n}):
            t = Timing(10.0, 10.0, 10.0, 10.0, 10.0, 0.0, 5, "events")
            result = TrialResult(Config(backend="triton", BLOCK_M=i), TrialStatus.OK, timing=t)
            store.record(target=Target.for_arch("sm_90"), kernel="gemm.triton", source_hash="h",
                         problem=Problem.of("gemm", 16, 64, 64), result=result)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def test_read_only_verbs_see_what_a_killed_writer_left_in_the_wal(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    _writer_killed_with_wal(db, 90)
    assert Path(f"{db}-wal").stat().st_size > 0
    file_only = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:  # the file alone holds fewer: what an immutable read would have shown
        stored = file_only.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.OperationalError:
        stored = 0
    file_only.close()
    assert stored < 90
    db.chmod(0o444)
    try:
        code, out, err = run_cli("status", "--db", str(db))
        assert code == 0, err
        assert re.search(r"^trials\s+90\b", out, re.M), out
        with Store(str(db), read_only=True) as store:
            assert len(store.trials()) == 90
    finally:
        db.chmod(0o644)


def test_a_sweep_refuses_a_read_only_file_root_included(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store(str(db)).close()
    db.chmod(0o444)
    try:
        spec = tmp_path / "s.toml"
        spec.write_text('name = "s"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[32, 32]]\ntrials = 1\n')
        code, _, err = run_cli("sweep", str(spec), "--interpret", "--db", str(db), "--no-progress")
        assert code == 2 and "read-only" in err and "chmod u+w" in err, err
        with pytest.raises(StoreError, match="marks it read-only"):
            Store(str(db))
        with Store(str(db), read_only=True) as store:  # reading it is fine
            assert store.sweeps() == []
    finally:
        db.chmod(0o644)
    assert stat.S_IMODE(db.stat().st_mode) == 0o644


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_sweep_that_lost_its_database_is_closed_failed_when_it_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.sweeps import run_sweep
    from autotune.sweeps.spec import parse_spec

    monkeypatch.setenv("AUTOTUNE_UNCLOSED_DIR", str(tmp_path / "unclosed"))
    url = str(tmp_path / "lost.db")
    spec = parse_spec('name = "lost"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[32, 32]]\ntrials = 2\n')

    class Gone(Store):
        """The database goes away once the sweep has started: every write after that fails."""

        lost = False

        def record(self, **kwargs: object) -> bool:
            Gone.lost = True
            raise StoreError("database error: server closed the connection unexpectedly")

        def finish_sweep(self, *args: object, **kwargs: object) -> None:
            if Gone.lost:
                raise StoreError("database error: connection refused")
            super().finish_sweep(*args, **kwargs)  # type: ignore[arg-type]

    class Worker:
        name = "fake"
        target = TARGET

        def start(self) -> None: ...
        def close(self) -> None: ...
        def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
            return ok(config)

    with Gone(url) as store, pytest.raises(StoreError, match="server closed"):
        run_sweep(spec, store, TARGET, workers=[Worker()])  # type: ignore[list-item]
    with Store(url) as store:
        [sweep] = store.sweeps()
        assert sweep.status == "running"  # what the database still says
        waiting = read_unclosed(store.url)
        assert waiting[sweep.id].status == "failed" and "server closed" in (waiting[sweep.id].error or "")
    con = sqlite3.connect(url)
    con.execute("UPDATE sweeps SET pid = ?", (_dead_pid(),))  # as if from a process that exited
    con.commit()
    con.close()
    with Store(url) as store:  # the next sweep of this host closes it
        store.start_sweep("next", "", TARGET)
        first = next(s for s in store.sweeps() if s.name == "lost")
        assert first.status == "failed" and "server closed the connection" in (first.error or "")
        assert read_unclosed(store.url) == {}
    code, out, _ = run_cli("status", "--db", url)
    assert code == 0 and f"sweep {first.id} failed: StoreError: database error: server closed" in out


def test_progress_is_counted_from_the_rows(tmp_path: Path) -> None:
    with Store(str(tmp_path / "p.db")) as store:
        sweep = store.start_sweep("s", "", TARGET)
        for i in range(3):
            result = ok(Config(backend="triton", BLOCK_M=i))
            problem = Problem.of("gemm", 16, 64, 64)
            store.record(target=TARGET, kernel="gemm.triton", source_hash="h", problem=problem, result=result,
                         sweep_id=sweep)  # fmt: skip
        store.touch_sweep(sweep, trials_done=1)  # the heartbeat lagged: the process was killed
        [record] = store.sweeps()
        assert record.trials_done == 3


def test_a_waiting_copy_takes_a_freed_problem_within_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.sweeps.run import _ProblemQueue
    from autotune.sweeps.spec import parse_spec

    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "30")  # the old wait: 5 s between looks
    spec = parse_spec('name = "w"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[32, 32]]\ntrials = 2\n')
    with Store(str(tmp_path / "w.db")) as store:
        first, second = store.start_sweep("w", "", TARGET), store.start_sweep("w", "", TARGET)
        [(entry, problem)] = spec.problems()
        holder = SharedWork(store, "work", first)
        assert holder.claim(problem.key()) == "claimed"
        queue = _ProblemQueue([(entry, problem)], None, 1)
        queue.shared = SharedWork(store, "work", second)
        got: list[float] = []
        thread = threading.Thread(target=lambda: got.append(time.monotonic()) if queue.take() else None)
        thread.start()
        time.sleep(1.0)
        assert not got  # held by the other sweep
        freed = time.monotonic()
        holder.free(problem.key())  # it stopped without finishing the problem
        thread.join(10)
        assert got and got[0] - freed < 1.0


def test_problems_are_handed_out_longest_first(tmp_path: Path) -> None:
    from autotune.sweeps import run_sweep
    from autotune.sweeps.spec import parse_spec

    order: list[int] = []

    class Worker:
        name = "fake"
        target = TARGET

        def start(self) -> None: ...
        def close(self) -> None: ...
        def run(self, op: object, problem: Problem, config: Config) -> TrialResult:
            if not order or order[-1] != problem.M:
                order.append(problem.M)
            return ok(config)

    spec = parse_spec(
        'name = "l"\n[[sweep]]\nop = "gemm"\nm = [1, 8192]\nnk = [[8192, 8192]]\ntrials = 3\n'
        "final_rounds = 0\nprofile_m = false\n"
    )
    with Store(str(tmp_path / "l.db")) as store:
        run_sweep(spec, store, TARGET, workers=[Worker()])  # type: ignore[list-item]
    assert order == [8192, 1]
