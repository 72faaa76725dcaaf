"""`autotune check`: compile-only checks of a spec's configs for a target, no GPU needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import (
    EXIT_OK,
    CliError,
    add_verb,
    check_defaults,
    check_workers,
    open_store,
    progress,
    spec_arg,
    target_or_local,
)
from autotune.cli.tables import print_table, problem_label

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.engine.predict import ProblemCheck

NAME = "check"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="compile-only checks of a spec's configs for a target (no GPU needed)",
        description="For every problem of SPEC: the space size, what compiled for the target (--target; "
        "the local GPU's, else gfx942 where there is none), "
        "what the static checks prune and why (MFMA shape vs matrix_instr_nonkdim, spills, LDS over "
        "the target's, occupancy under the floor), the configs with far more vector ALU instructions per "
        "matrix instruction than their peers (a warning), and the best candidates by the cost model with "
        "their registers, LDS, occupancy, instructions and instruction mix. Compiles the model's best "
        "[static] candidates per problem (--all: the whole space) on every CPU core. Writes nothing "
        "unless --db is given (then compiled features are kept there and reused).",
        db="keep and reuse compiled features in this database, which must exist: a URL or a SQLite file "
        "(default: none)",
        bar=True,
    )
    spec_arg(p)
    p.add_argument(
        "--target", metavar="ARCH", help="gfx942, gfx950 or sm_90 (default: the local GPU's, else gfx942)"
    )
    p.add_argument("--all", action="store_true", help="compile every config of each space (slow)")
    p.add_argument("--candidates", type=int, metavar="N", help="configs compiled per problem")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout, for machines")
    p.add_argument("--workers", type=int, metavar="N", help="compiler processes (default: one per CPU core)")


def run(args: argparse.Namespace) -> int:
    """Compiles and checks every problem's candidates; a report per problem, or one JSON document."""
    import json
    from dataclasses import replace

    from autotune.engine.checker import StaticChecker
    from autotune.engine.predict import check_problem
    from autotune.sweeps import SpecError, load_spec, plan

    check_workers(args)
    if args.candidates is not None and args.candidates <= 0:
        raise CliError("--candidates must be positive")
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    target, _ = target_or_local(args.target)
    policy = spec.static if args.candidates is None else replace(spec.static, candidates=args.candidates)
    store = open_store(args.db, create=False) if args.db else None
    checks = []
    problems = spec.problems()
    try:
        with StaticChecker(target, policy, store=store, workers=args.workers) as checker:
            check_defaults(spec, target, checker.pool)  # all at once, before the spaces start with them
            try:
                plan(spec, target)
            except SpecError as exc:
                raise CliError(str(exc)) from None
            bar = progress(len(problems), disabled=args.json or args.no_progress, unit="problem")
            try:
                for entry, problem in problems:
                    found = check_problem(
                        entry.op_for(problem),
                        problem,
                        checker,
                        candidates=policy.candidates,
                        everything=args.all,
                        backends=entry.backends,
                    )
                    checks.append(found)
                    bar.update(1)
            finally:
                bar.close()
    finally:
        if store is not None:
            store.close()
    if args.json:
        settings = {
            "prune": list(policy.prune),
            "min_occupancy": policy.min_occupancy,
            "candidates": policy.candidates,
        }
        doc = {
            "target": target.arch,
            "name": target.name,
            "spec": spec.name,
            "policy": settings,
            "problems": [c.to_dict() for c in checks],
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"compile-only check of {spec.name!r} for {target}: {len(checks)} problems")
    for c in checks:
        _print_check(c)
    return EXIT_OK


def _print_check(c: ProblemCheck) -> None:
    """One problem's check: space, compiled, pruned (each with its reason), the best candidates."""
    p = c.problem
    pruned = ", ".join(f"{k} {n}" for k, n in sorted(c.static_pruned.items())) or "none"
    print(
        f"\n{p.op} {problem_label(p)}: space {c.space_size} valid of {c.raw_size}; "
        f"compiled {len(c.compiled)} ({c.n_failed_compile} compile errors); pruned {c.n_pruned} ({pruned})"
    )
    for cand in c.compiled:
        for f in cand.findings:
            print(f"  pruned {cand.config.short()}: {f.check}: {f.reason}")
    for cand in c.compiled:
        for f in cand.warnings:
            print(f"  warning {cand.config.short()}: {f.check}: {f.reason}")
    rows = [("rank", "config", "predicted µs", "static features")]
    mixes = []
    for i, cand in enumerate(c.best()):
        feats = cand.features.summary() if cand.features is not None else "vendor library (not compiled)"
        rows.append((str(i + 1), cand.config.short(), f"{cand.predicted_us:.2f}", feats))
        if cand.features is not None and cand.features.mix:
            mixes.append(f"  {i + 1:>4}  {cand.features.mix_summary()}")
    print("  best candidates by the cost model:")
    print_table(rows, indent="  ")
    if mixes:
        print("  their instruction mix (instructions in the binary, by class):")
        print("\n".join(mixes))
