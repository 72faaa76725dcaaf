"""A test session leaves nothing in $HOME or the temp dir: tests/conftest.py sends what the tests, Triton
and the processes they start write to one folder of the session, removed when it ends."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER = """
import os, subprocess, sys
from pathlib import Path


def test_writes_where_a_session_writes(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("a test's file")
    from triton import knobs

    cache = Path(knobs.cache.dir)
    assert cache.is_relative_to(os.environ["TRITON_HOME"]) and not cache.is_relative_to(Path.home())
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "kernel").write_text("a kernel")
    worker = "import os, pathlib; p = pathlib.Path(os.environ['TRITON_CACHE_DIR']); (p / 'w').write_text('w')"
    subprocess.run([sys.executable, "-c", worker], check=True)  # a worker process: the same folder
"""


def test_a_session_leaves_nothing_in_home_or_the_temp_dir(tmp_path: Path) -> None:
    """A session in one process, and one on two pytest-xdist workers (the README's test command) where
    pytest-xdist is installed."""
    home, temp, tests = tmp_path / "home", tmp_path / "tmp", tmp_path / "inner"
    for folder in (home, temp, tests):
        folder.mkdir()
    (tests / "test_inner.py").write_text(INNER)
    ours = ("TRITON_", "TORCHINDUCTOR_", "PYTEST_", "AUTOTUNE_")  # the outer session's: set afresh inside
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env |= {"HOME": str(home), "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    sessions = [[]]
    if importlib.util.find_spec("xdist") is not None:
        sessions.append(["-n", "2", "--dist", "loadgroup"])
    for options in sessions:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", *options,
             str(tests)],
            cwd=tests, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "1 passed" in proc.stdout
        assert sorted(os.listdir(home)) == [] and sorted(os.listdir(temp)) == [], options
