"""A test module whose module-scoped fixture compiles runs on one pytest-xdist worker: else each worker that
takes one of its tests compiles the whole set again (`conftest.XDIST_GROUPS`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
#: The session fixtures that compile in a subprocess (`conftest.py`).
COMPILING = {"compile_on_arch", "compile_per_arch", "compile_script"}


def _shared_fixture_args(tree: ast.Module) -> set[str]:
    """The parameters of the module's module- or session-scoped fixtures."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            scope = [
                kw.value.value
                for kw in getattr(deco, "keywords", [])
                if kw.arg == "scope" and isinstance(kw.value, ast.Constant)
            ]
            if scope and scope[0] in ("module", "session"):
                found |= {a.arg for a in node.args.args}
    return found


def _groups(config: pytest.Config) -> dict[str, Any]:
    """`XDIST_GROUPS` of tests/conftest.py, as pytest loaded it (a plain import could find another
    folder's conftest, or run this one's set-up twice)."""
    for plugin in config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == (TESTS / "conftest.py").resolve():
            groups: dict[str, Any] = plugin.XDIST_GROUPS
            return groups
    raise AssertionError("tests/conftest.py is not loaded")


def test_modules_whose_shared_fixture_compiles_are_grouped_on_one_worker(pytestconfig: pytest.Config) -> None:
    groups = _groups(pytestconfig)
    loose = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if _shared_fixture_args(ast.parse(path.read_text())) & COMPILING:
            name = f"tests/{path.relative_to(TESTS).as_posix()}"
            if name not in groups:
                loose.append(name)
    assert not loose, f"add to conftest.XDIST_GROUPS: {loose}"


def test_the_check_finds_a_compiling_fixture() -> None:
    source = '@pytest.fixture(scope="module")\ndef built(compile_on_arch, tmp_path_factory):\n    pass\n'
    assert _shared_fixture_args(ast.parse(source)) == {"compile_on_arch", "tmp_path_factory"}
    assert not _shared_fixture_args(ast.parse("@pytest.fixture\ndef each(compile_on_arch):\n    pass\n"))
