"""`autotune sweep --executor ray --address` against a Ray cluster started apart, as a fleet would have.

A module of its own: `ray stop` at the end stops every Ray process of this machine, so no other test's
Ray may be running then.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autotune.db import Store

pytest.importorskip("ray", reason="the Ray executor's tests need Ray (pip install ray)")

SPEC = """
name = "on-a-cluster"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 2, 3]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 3
"""


def test_cli_sweep_on_an_existing_ray_cluster(tmp_path: Path) -> None:
    ray_cli = shutil.which("ray")
    if ray_cli is None:
        pytest.skip("the ray command is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's sockets need a short path
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    start = [ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "2", "--num-gpus", "0",
             "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", ray_tmp]  # fmt: skip
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        (tmp_path / "spec.toml").write_text(SPEC)
        cmd = [sys.executable, "-m", "autotune.cli", "sweep", "spec.toml", "--interpret", "--executor",
               "ray", "--address", f"127.0.0.1:{port}", "--gpus", "0,1", "--db", "c.db"]  # fmt: skip
        cmd.append("--no-progress")
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "3 problems on 2 workers (ray)" in done.stdout and "9 trials run" in done.stdout
    finally:
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    with Store(str(tmp_path / "c.db")) as store:
        trials = store.trials()
    assert len(trials) == 9 and {t.extra["worker"] for t in trials} <= {"ray0", "ray1"}
    assert all(t.ok for t in trials)
