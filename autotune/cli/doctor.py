"""`autotune doctor`: what works on this machine, in under a minute.

One line per check, in order: the toolchain (torch, Triton, a second Triton shadowing the first, the
packages), the GPUs, each op's heuristic default against its reference (compiled for an arch instead
where there is no GPU), the speed of three GEMMs, the tables of $AUTOTUNE_TABLES and the database. Exits
1 when a check failed, 0 otherwise. The checks are in `autotune.cli.doctor_checks` and
`autotune.cli.doctor_ops`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from autotune.cli import doctor_checks as dc
from autotune.cli import doctor_ops as do
from autotune.cli.common import DEFAULT_COMPILE_TARGET, EXIT_FAIL, EXIT_OK, CliError, add_verb, db_arg

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.core.op import TunableOp
    from autotune.core.target import Target

NAME = "doctor"

#: Seconds the doctor may take; the checks that take time (compiling, timing) are skipped, each with a
#: line, once it is nearly spent.
BUDGET_S = 50.0
#: Glyphs of passed, failed and not applicable checks, and of a passed one with a warning (a hint).
GLYPHS: dict[object, str] = {True: "✓", False: "✗", None: "–", "warn": "!"}
_ASCII: dict[object, str] = {True: "ok", False: "FAIL", None: "-", "warn": "!"}


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="what works on this machine: toolchain, GPUs, each op's default, speed, tables, database",
        description="Checks, in under a minute, what works here and prints one line per check (✓ passed, "
        "✗ failed, – does not apply, ! passed with a warning), with a hint where something is wrong: "
        "the toolchain (torch's build, Triton and a second Triton package shadowing it, the optional "
        "packages), each GPU (arch, CUs, memory, clock; whether our kernels are tuned for it), each op's "
        "heuristic default run against its reference on a small problem (with no GPU: compiled for "
        "--target instead), the vendor library, the served call and the default timed on three bf16 "
        "GEMMs (GPU only), the tables of $AUTOTUNE_TABLES and whether they fit this device, and the "
        "database (opened read-only, never created). Exits 1 when a check failed.",
    )
    db_arg(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON: [{name, ok, detail, hint}]")
    p.add_argument(
        "--target",
        default=DEFAULT_COMPILE_TARGET,
        metavar="ARCH",
        help="with no GPU, compile the defaults for this arch (default %(default)s; gfx950, sm_90)",
    )
    p.add_argument(
        "--op",
        action="append",
        default=[],
        metavar="NAME",
        help="check only this op (repeatable; default all)",
    )


def run(args: argparse.Namespace) -> int:
    """Prints every check as it finishes (or all as JSON); exit 1 when one failed."""
    ops = _ops(args.op)
    budget = dc.Budget(BUDGET_S)
    found: list[dc.Check] = []
    glyphs = GLYPHS if _encodes("".join(GLYPHS.values()) + "→µ") else _ASCII
    width = max(16, *(len(f"op {op.name}") for op in ops))
    for check in checks(args, ops, budget):
        found.append(check)
        if not args.json:
            print(_line(check, glyphs, width), flush=True)
    if args.json:
        print(json.dumps([c.to_dict() for c in found], indent=2, ensure_ascii=False))
    failed = sum(c.ok is False for c in found)
    if not args.json:
        passed, skipped = sum(c.ok is True for c in found), sum(c.ok is None for c in found)
        verdict = f"{failed} failed" if failed else "nothing failed"
        print(f"doctor: {verdict}, {passed} passed, {skipped} not applicable ({budget.elapsed():.0f} s)")
    return EXIT_FAIL if failed else EXIT_OK


def checks(args: argparse.Namespace, ops: list[TunableOp], budget: dc.Budget) -> Iterator[dc.Check]:
    """Every check, in order, each guarded: one that raises is a failed line, never the verb's end."""
    from autotune.core.target import Target, interpreting

    yield from dc.guarded("toolchain", dc.toolchain)
    yield from dc.guarded("packages", dc.packages)
    gpus: list[Target] = []
    yield from dc.guarded("gpu", lambda: dc.gpus(gpus))
    if gpus:
        yield from dc.guarded("ops", lambda: do.op_checks_gpu(gpus[0], ops, budget))
        yield from dc.guarded("speed", lambda: do.speed(gpus[0], budget))
    else:
        workers = max(1, min(4, os.cpu_count() or 1, len(ops)))
        yield from dc.guarded("ops", lambda: do.op_checks_compile(args.target, ops, budget, workers))
        yield dc.Check("speed", None, "no GPU: nothing timed")
    device = gpus[0] if gpus else Target.interpreter_target() if interpreting() else None
    yield from dc.guarded("tables", lambda: dc.tables(device))
    yield from dc.guarded("database", lambda: dc.database(args.db))


def _ops(names: list[str]) -> list[TunableOp]:
    """The ops to check (all registered ones where none is named); CliError naming an unknown one."""
    try:
        return do.registered_ops(names)
    except (KeyError, ValueError) as exc:
        raise CliError(f"--op: {exc}") from None


def _line(check: dc.Check, glyphs: dict[object, str], width: int) -> str:
    """`glyph name  detail` (names padded to `width`), and the hint indented on the next line."""
    key: object = "warn" if check.ok is True and check.hint else check.ok
    pad = max(len(g) for g in glyphs.values())
    text = f"{glyphs[key]:<{pad}} {check.name:<{width}}  {check.detail}"
    if check.hint:
        arrow = "→" if glyphs is GLYPHS else "hint:"
        text += f"\n{'':<{pad}} {'':<{width}}  {arrow} {check.hint}"
    return text


def _encodes(text: str) -> bool:
    """Whether stdout can print `text` (a terminal set to ASCII cannot print the glyphs)."""
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
