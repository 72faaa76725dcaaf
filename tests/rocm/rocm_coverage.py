"""The package's lines under an AMD/ROCm branch, and which of them a coverage data file saw run.

    python tests/rocm/rocm_coverage.py DATA_FILE [--list]

A ROCm line is a statement of `autotune/` (not `autotune/cli/doctor*`) whose text names AMD or ROCm
(`ROCM_WORDS`: is_amd, amd, rocm, hip, gfx9, fnuz, xcd, waves_per_eu, kpack, matrix_instr_nonkdim,
gcnArchName;
in code or in a string that names something, not in a comment or prose), and,
where that statement is an `if`/`elif`/`while` whose condition names them, every statement of its body.
`def` and `class` lines (run at import) do not count; their bodies do only through such a branch.
Statements are coverage.py's own (a docstring or comment is none).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROCM_WORDS = re.compile(
    r"is_amd|\bamd\b|\brocm\b|\bhip|_hip\b|gfx9|fnuz|xcd|waves_per_eu|kpack|matrix_instr_nonkdim|gcnarch",
    re.I,
)
PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


def _statements(node: ast.AST) -> list[ast.stmt]:
    return [n for n in ast.walk(node) if isinstance(n, ast.stmt)]


def rocm_lines(path: Path) -> set[int]:
    """The ROCm lines of one source file (first lines of statements)."""
    text = path.read_text()
    lines = _without_comments(text)
    tree = ast.parse(text)
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            continue
        if isinstance(node, (ast.If, ast.While)):
            head = ast.get_source_segment(text, node.test) or ""
            if ROCM_WORDS.search(head):
                out.add(node.lineno)
                for body in node.body:
                    out.update(s.lineno for s in _statements(body))
            continue
        if isinstance(node, (ast.For, ast.With, ast.Try, ast.Match)):
            continue  # compound: its own statements are visited one by one
        end = node.end_lineno or node.lineno
        own = "\n".join(lines[node.lineno - 1 : end])
        if ROCM_WORDS.search(own):
            out.add(node.lineno)
    return out


def _without_comments(text: str) -> list[str]:
    """The lines of `text` with comments and prose (strings with a space: messages, help, docstrings)
    blanked out; names in strings ("gfx942", "waves_per_eu") stay."""
    lines = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        prose = tok.type == tokenize.STRING and any(c.isspace() for c in tok.string)
        if tok.type == tokenize.COMMENT or prose:
            (r0, c0), (r1, c1) = tok.start, tok.end
            for row in range(r0, r1 + 1):
                line = lines[row - 1]
                lo = c0 if row == r0 else 0
                hi = c1 if row == r1 else len(line)
                lines[row - 1] = line[:lo] + " " * (hi - lo) + line[hi:]
    return lines


def files() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if not (p.parent.name == "cli" and p.name.startswith("doctor"))
    )


def main(argv: list[str] | None = None) -> int:
    import coverage

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a combined coverage data file")
    parser.add_argument("--list", action="store_true", help="print every ROCm line not run")
    args = parser.parse_args(argv)
    cov = coverage.Coverage(data_file=args.data)
    cov.load()
    data = cov.get_data()
    total = seen = 0
    missed: dict[str, list[int]] = {}
    for path in files():
        statements = set(cov.analysis2(str(path))[1])
        wanted = rocm_lines(path) & statements
        ran = set(data.lines(str(path)) or ())
        total += len(wanted)
        seen += len(wanted & ran)
        if wanted - ran:
            missed[str(path.relative_to(PACKAGE.parent))] = sorted(wanted - ran)
    print(f"ROCm lines: {total}, run by a test: {seen} ({100 * seen / max(total, 1):.1f}%)")
    for name, numbers in missed.items():
        print(f"  {name}: {len(numbers)} not run" + (f": {numbers}" if args.list else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
