"""A hash of Python source over the tokens that carry meaning, equal on every Python version.

Standard library only, so that it can be loaded on its own (tests compare it across interpreters).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import tokenize
from pathlib import Path

__all__ = ["code_hash", "code_tokens", "module_files", "modules_hash"]

_SKIP_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.TYPE_COMMENT}
_LAYOUT_TOKENS = {tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE}


def code_tokens(text: str) -> list[tuple[str, str]]:
    """The (type name, text) tokens of Python source that carry meaning: no comments or blank lines, and
    the same on every Python version (names, not numbers: the numbers of token types change between
    versions). Python 3.12 splits an f-string into FSTRING_START/MIDDLE/END and the
    tokens of its expressions, where 3.11 gives one STRING token; here an f-string is always one STRING
    token holding its source text."""
    lines = text.splitlines(keepends=True)
    out: list[tuple[str, str]] = []
    depth, start = 0, (0, 0)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = tokenize.tok_name.get(tok.type, "")
        if kind == "FSTRING_START":
            if depth == 0:
                start = tok.start
            depth += 1
        elif depth:
            if kind == "FSTRING_END":
                depth -= 1
                if depth == 0:
                    out.append(("STRING", _source_span(lines, start, tok.end)))
        elif tok.type not in _SKIP_TOKENS:
            out.append((kind, "" if tok.type in _LAYOUT_TOKENS else tok.string))
    return out


def _source_span(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    (r0, c0), (r1, c1) = start, end
    if r0 == r1:
        return lines[r0 - 1][c0:c1]
    return lines[r0 - 1][c0:] + "".join(lines[r0 : r1 - 1]) + lines[r1 - 1][:c1]


def code_hash(*paths: str | Path) -> str:
    """16 hex digits of sha256 over the code tokens of these files, in order."""
    h = hashlib.sha256()
    for path in paths:
        for kind, text in code_tokens(Path(path).read_text(encoding="utf-8")):
            h.update(f"{kind}:{text}\x00".encode())
    return h.hexdigest()[:16]


def _file_of(module: str) -> Path | None:
    """The source file of `module` (a package: None; its __init__ only re-exports)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a name imported from a module, not a module of its own
        return None
    if spec is None or spec.origin is None or spec.submodule_search_locations is not None:
        return None
    return Path(spec.origin)


def _imported(path: Path, module: str) -> set[str]:
    """The modules `path` (module `module`) imports anywhere in it: absolute names, and relative ones
    resolved; `from P import name` counts P.name, which is kept where it is a module."""
    package = module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def module_files(*roots: str, within: str) -> list[Path]:
    """The files of the modules `roots` and of every module under the package `within` that they import,
    directly or not (imports inside functions too), sorted by module name; packages' __init__ files are
    left out. What a backend's code is: its kernels and launcher, and the helpers they use."""
    seen: dict[str, Path] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _file_of(name)
        if path is None:
            if name in roots:
                raise ValueError(f"{name!r} is not a module with a source file")
            continue
        seen[name] = path
        todo.extend(m for m in _imported(path, name) if m.startswith(within + ".") and m not in seen)
    return [seen[name] for name in sorted(seen)]


def modules_hash(*roots: str, within: str) -> str:
    """`code_hash` of `module_files(*roots, within=within)`: a backend's version, which changes with
    the code of its kernels and of every helper they import, and with nothing else."""
    return code_hash(*module_files(*roots, within=within))
