"""Every failure a user can cause or meet ends in one line on stderr and exit status 2, with nothing
half-written: bad import files (too large a number, too deep, too long a field, no regular file), a full
database, a PostgreSQL server that is gone; and giving up on a server takes the retry budget, not more."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from autotune.cli import main
from autotune.db import Store
from autotune.db.store import RETRY_ENV

REPO = Path(__file__).resolve().parents[2]
VLLM = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
ENTRY = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
         "num_stages": 2}  # fmt: skip
SPEC = """
name = "night"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = {m}
nk = [[32, 32]]
strategy = "exhaustive"
trials = 3
"""


def _cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, str, float]:
    """Runs `autotune argv` in a process of its own: (exit status, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})  # fmt: skip
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _trials(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM trials").fetchone()[0])
    finally:
        con.close()


def _import(tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path) -> str:
    db = tmp_path / "i.db"
    code = main(["import", str(path), "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert _trials(db) == 0  # nothing written
    return _one_line(err)


def test_an_m_key_past_any_integer_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(3)
    m = rng.randrange(10**19, 10**21)
    (tmp_path / VLLM).write_text(json.dumps({str(m): ENTRY}))
    line = _import(tmp_path, capsys, tmp_path / VLLM)
    assert line.startswith(f"autotune import: error: {tmp_path / VLLM}: no entry could be imported")
    assert f"M={m} is out of range (1 to 16777216)" in line


def test_json_nested_100000_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / VLLM).write_text('{"1": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = _import(tmp_path, capsys, tmp_path / VLLM)
    assert line == f"autotune import: error: {tmp_path / VLLM}: nested too deeply to be a config file"


def test_a_5000_digit_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digits = "".join(random.Random(5).choice("123456789") for _ in range(5000))
    (tmp_path / VLLM).write_text('{"1": {"BLOCK_SIZE_M": ' + digits + "}}")
    line = _import(tmp_path, capsys, tmp_path / VLLM)
    assert line.startswith(f"autotune import: error: {tmp_path / VLLM}: cannot read it as vllm: Exceeds")


def test_an_aiter_field_of_200_kb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName"
    row = "gfx942,304,16,4096,4096,False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,1,0,5.0,"
    path = tmp_path / "bf16_tuned_gemm.csv"
    path.write_text(f"{header},err_ratio,tflops,bw\n{row}{'k' * 200_000},0.0,1.0,1.0\n")
    line = _import(tmp_path, capsys, path)
    assert line.startswith(f"autotune import: error: {path}: cannot read it as aiter-gemm: field larger")


def test_dev_zero_is_refused_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _import(tmp_path, capsys, Path("/dev/zero"))
    assert line == "autotune import: error: /dev/zero: cannot read it: it is a device, not a regular file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_like_a_vllm_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / VLLM
    os.mkfifo(fifo)
    code, out, err, _ = _cli(
        "-m", "autotune.cli", "import", str(fifo), "--db", str(tmp_path / "f.db"), timeout=120
    )
    assert code == 2 and out == ""
    assert (
        _one_line(err) == f"autotune import: error: {fifo}: cannot read it: it is a FIFO, not a regular file"
    )


def test_a_full_database_stops_the_sweep_in_one_line_marked_failed(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SPEC.format(m=list(range(1, 9))))
    db = tmp_path / "full.db"
    Store(str(db)).close()
    spec = str(tmp_path / "spec.toml")
    code, _, err, _ = _cli(str(REPO / "tests/cli/capped_sqlite_cli.py"), "0", "sweep", spec, "--interpret",
                           "--executor", "inline", "--db", str(db), "--no-progress", "--log-dir",
                           str(tmp_path / "logs"))  # fmt: skip
    assert code == 2
    assert _one_line(err).startswith("autotune sweep: error: the database cannot be used: ")
    assert err.rstrip().endswith("database or disk is full")
    with Store(str(db)) as store:  # reads need no new page
        [sweep] = store.sweeps()
        assert sweep.status == "failed"
        stored = store.trials()
    assert 0 < len(stored) < 24 and len({(t.problem, t.config) for t in stored}) == len(stored)


def test_a_closed_postgres_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/none"
    code = main(["status", "--db", url])
    _, err = capsys.readouterr()
    assert code == 2
    line = _one_line(err)
    assert line.startswith("autotune status: error: cannot open database") and "refused" in line


class _Proxy:
    """A TCP proxy to the PostgreSQL server that can be stopped: its connections cut and its port closed,
    as when a server goes away."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would not)
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.mark.postgres
def test_a_postgres_outage_past_the_retry_budget_gives_up_once_in_one_line(
    pg_url: str, tmp_path: Path
) -> None:
    """The server goes away mid-sweep for good: the sweep retries for the budget ($AUTOTUNE_RETRY_S, 4 s
    here) once for the data write, the heartbeat and the write that marks it failed together, then
    exits 2 with one line; every trial stored before is whole and the next run resumes from them."""
    url = make_url(pg_url)
    proxy = _Proxy(url.host or "127.0.0.1", url.port or 5432)
    via = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    (tmp_path / "spec.toml").write_text(SPEC.format(m=list(range(1, 41))))
    Store(pg_url).close()
    cmd = [sys.executable, "-m", "autotune.cli", "sweep", str(tmp_path / "spec.toml"), "--interpret",
           "--executor", "inline", "--db", via, "--no-progress", "--log-dir", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), RETRY_ENV: "4"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        with Store(pg_url) as store:
            while store.summary().n_trials < 3:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        proxy.stop()
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=120)
        gave_up_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, (out[-3000:], err)
    line = _one_line(err)
    assert line.startswith("autotune sweep: error: the database cannot be used: database error on")
    print(f"gave up {gave_up_s:.1f} s after the outage began")
    assert 3 < gave_up_s < 2 * 4  # one budget for everything (three writes at 4 s each: 12 s)
    with Store(pg_url) as store:
        stored = store.trials()
        assert len(stored) == len({(t.problem, t.config) for t in stored}) and stored
        assert all(t.ok for t in stored)
