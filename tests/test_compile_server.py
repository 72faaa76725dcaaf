"""tests/compile_server.py (tests/conftest.py's `CompileServer`): a script runs as under `python -c`, in a
fork of the server: its argv, working directory, environment, exit code, output and traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SCRIPT = """
import os, sys
print(sys.argv, os.getcwd(), os.environ.get("SEEN"), "TRITON_INTERPRET" in os.environ, __name__,
      "__file__" in globals(), sys.path[0] == "")
print("to stderr", file=sys.stderr)
if sys.argv[1] == "raise":
    raise ValueError("a script's error")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the server forks")
def test_a_script_runs_as_under_python_c(
    compile_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"SEEN": "yes"}
    found = compile_server.run(SCRIPT, [("0", "a"), ("3", "b"), ("raise", "c")], env)  # type: ignore[attr-defined]
    (ok, ok_out, ok_err), (three, _, _), (raised, _, raised_err) = found
    assert ok == 0 and ok_err == "to stderr\n"
    assert ok_out == f"['-c', '0', 'a'] {tmp_path} yes False __main__ False True\n"
    assert three == 3
    assert (
        raised == 1
        and raised_err.startswith("to stderr\nTraceback")
        and "ValueError: a script's error" in raised_err
    )
