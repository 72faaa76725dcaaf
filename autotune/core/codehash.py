"""A hash of Python source over the tokens that carry meaning, equal on every Python version.

Standard library only, so that it can be loaded on its own (tests compare it across interpreters).
"""

from __future__ import annotations

import hashlib
import io
import tokenize
from pathlib import Path

__all__ = ["code_hash", "code_tokens"]

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
