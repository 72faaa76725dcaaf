"""Ops are peers: outside its folder (`autotune/kernels/<op>/`) no code names an op. The one list that does is
the registration in `autotune/kernels/__init__.py` (its lazy entry points are functions named after ops);
the Alembic migrations rewrite historical data and keep the names they rewrote."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from autotune.core.problem import Problem
from autotune.core.registry import format_modules, ops

ROOT = Path(__file__).resolve().parent.parent / "autotune"
OP_FOLDERS = ("kernels/dense", "kernels/moe", "kernels/quant", "kernels/mla")
ALLOWED = ("kernels/__init__.py", "db/migrations")


def _shared_modules() -> list[Path]:
    """The package's modules outside the op folders and the allowed exceptions."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(OP_FOLDERS) and not rel.startswith(ALLOWED):
            out.append(path)
    return out


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of each plain string literal of the module at `path` (docstrings included)."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type != tokenize.STRING:
            continue
        try:
            value = ast.literal_eval(tok.string)
        except (ValueError, SyntaxError):  # an f-string
            continue
        if isinstance(value, str):
            found.append((tok.start[0], value))
    return found


def test_no_string_outside_the_op_folders_is_an_op_name() -> None:
    names = set(ops())
    named = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in _shared_modules()
        for line, value in _literals(path)
        if value in names
    ]
    assert named == [], "\n".join(named)


def test_core_has_no_constructor_named_after_an_op() -> None:
    assert not [name for name in ops() if hasattr(Problem, name)]


def test_the_ops_name_their_format_modules_in_their_own_folders() -> None:
    modules = format_modules()
    assert modules == (
        "autotune.kernels.dense.formats",
        "autotune.kernels.moe.formats",
        "autotune.kernels.quant.formats",
    )
    for op in ops().values():
        for module in getattr(op, "format_modules", ()):
            folder = module.split(".")[2]
            assert folder in ("dense", "moe", "quant", "mla") and type(op).__module__.split(".")[2] == folder
