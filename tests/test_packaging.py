"""Packaging: the wheel holds every part, serving imports stay light, and the CLI lists every verb."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERBS = ("doctor", "sweep", "best", "diff", "report", "export", "emit", "status")

# Files that must be in the wheel, each a copy of the checkout's file at the same path.
WHEEL_FILES = [
    "autotune/kernels/dense/kernel.py",
    "autotune/db/store.py",
    # The Alembic environment and revisions that `autotune db upgrade` runs.
    "autotune/db/migrations/env.py",
    "autotune/db/migrations/script.py.mako",
    "autotune/db/migrations/versions/v1_baseline.py",
    "autotune/db/migrations/versions/v2_trials_host.py",
    "autotune/dispatch/table.py",
    "autotune/sweeps/spec.py",
    "autotune/sweeps/smoke.toml",
    "autotune/core/config.py",
    "autotune/engine/bench.py",
]

# Left out of the copy the wheel is built from: environments, caches and build outputs.
_SKIP_TOP = {".git", ".venv", "build", "dist", "out", ".whl", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _run(args: list[str], cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_TABLES", "AUTOTUNE_DB")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _version(dist: str) -> tuple[int, ...] | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version(dist)
    except PackageNotFoundError:
        return None
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _can_build_without_isolation() -> bool:
    """setuptools>=68 (what pyproject.toml asks for) and a bdist_wheel (setuptools>=70.1 or `wheel`)."""
    setuptools = _version("setuptools")
    if setuptools is None or setuptools < (68,):
        return False
    return setuptools >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _copy_checkout(dest: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith((".egg-info", ".db", ".pyc"))}
        if Path(folder).resolve() == ROOT:
            skip |= _SKIP_TOP & set(names)
        return skip

    shutil.copytree(ROOT, dest, symlinks=True, ignore=ignore)
    return dest


@pytest.mark.timeout(180)
def test_wheel_contains_every_part(tmp_path: Path) -> None:
    """Slow-ish (a few seconds; up to ~20 s when pip has to set up an isolated build environment)."""
    src = _copy_checkout(tmp_path / "src")  # builds in a copy: the checkout gets no build/ or egg-info
    out = tmp_path / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-w", str(out), "-q"]
    isolated = not _can_build_without_isolation()
    if not isolated:
        cmd.append("--no-build-isolation")
    proc = _run(cmd, cwd=src, timeout=170)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        offline = ("No matching distribution", "Could not find a version", "NewConnectionError")
        if isolated and any(marker in text for marker in offline):
            pytest.skip(
                f"cannot build a wheel offline: no setuptools>=68 here and none to download:\n{text[-800:]}"
            )
        pytest.fail(f"building the wheel failed ({' '.join(cmd)}):\n{text[-4000:]}")
    wheels = list(out.glob("autotune-*.whl"))
    assert len(wheels) == 1, f"expected one autotune wheel, found {[w.name for w in out.iterdir()]}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        missing = [name for name in WHEEL_FILES if name not in names]
        assert not missing, f"the wheel lacks {missing}; it holds {sorted(names)}"
        for name in WHEEL_FILES:
            assert wheel.read(name) == (src / name).read_bytes(), f"{name} differs from the checkout's"
        tops = {name.split("/", 1)[0] for name in names}
    # Only the autotune package and its metadata: no top-level kernels/, db/, tests/ or benchmarks/.
    assert {t for t in tops if not t.endswith(".dist-info")} == {"autotune"}, sorted(tops)


def _modules_after(code: str) -> dict[str, bool]:
    probe = (
        "import json, sys\n"
        f"{code}\n"
        "print(json.dumps({m: m in sys.modules for m in "
        "('sqlalchemy', 'optuna', 'pandas', 'torch', 'triton')}))\n"
    )
    proc = _run([sys.executable, "-c", probe])
    assert proc.returncode == 0, proc.stderr
    result: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_serving_imports_stay_light() -> None:
    """What a serving process imports pulls in none of the database or search libraries."""
    loaded = _modules_after("import autotune.dispatch, autotune.kernels")
    heavy = [m for m in ("sqlalchemy", "optuna", "pandas") if loaded[m]]
    assert not heavy, f"importing autotune.dispatch and autotune.kernels imported {heavy}"


def test_dispatch_import_needs_no_torch() -> None:
    """autotune.dispatch itself uses the standard library only; torch comes with autotune.kernels."""
    loaded = _modules_after("import autotune.dispatch")
    assert not any(loaded.values()), {m for m, yes in loaded.items() if yes}


def test_cli_help_lists_every_verb() -> None:
    proc = _run([sys.executable, "-m", "autotune.cli", "--help"])
    assert proc.returncode == 0, proc.stderr
    missing = [verb for verb in VERBS if verb not in proc.stdout.split()]
    assert not missing, f"`autotune --help` does not list {missing}:\n{proc.stdout}"


@pytest.mark.parametrize("verb", VERBS)
def test_cli_verb_help(verb: str) -> None:
    proc = _run([sys.executable, "-m", "autotune.cli", verb, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: autotune {verb}"), proc.stdout


def test_console_script_points_at_the_cli() -> None:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("autotune")
    except PackageNotFoundError:
        pytest.skip("autotune is not installed (pip install -e .)")
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts.get("autotune") == "autotune.cli:main", scripts
