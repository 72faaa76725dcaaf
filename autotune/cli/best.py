"""`autotune best`: the fastest configs of one problem, per GPU in the database, and the reference records
imported from other projects' files beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import DB_READS, EXIT_FAIL, EXIT_OK, CliError, add_verb, open_store
from autotune.cli.tables import fmt_us, print_table
from autotune.core.result import VENDOR_BACKEND

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.core.problem import Problem
    from autotune.core.result import Source
    from autotune.db import Store
    from autotune.db.records import TrialRecord

NAME = "best"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="the winning config of one shape and its runner-ups",
        description="Show the fastest measured configs of one problem, per GPU in the database, then the "
        "reference records imported from other projects' files (autotune import: vLLM/SGLang, aiter, "
        "PyTorch TunableOp) for the same problem, each tagged with where it came from ([aiter], [vllm], "
        "[sglang], [tunableop]) and, where it was flagged at import, why ([flagged: reason]). Imported "
        "records are never served (`autotune emit`) unless measured here. Where nothing of the problem is "
        "measured, the cost model's predictions of compile-only sweeps are shown, marked as such (as "
        "`autotune emit` and `report` take them). Exit status 1 when nothing measured or predicted (with "
        "--predicted: predicted) is stored for the problem.",
        db=DB_READS,
    )
    p.add_argument(
        "--op",
        help="the op, one of those registered (`autotune doctor` checks each); default: the one op the "
        "database holds problems of (where it holds several, name one; an empty one: the first registered)",
    )
    p.add_argument("--m", type=int, required=True, help="M (rows of A, tokens)")
    p.add_argument("--n", type=int, required=True, help="N (columns of C)")
    p.add_argument("--k", type=int, required=True, help="K (the reduction dimension)")
    p.add_argument(
        "--e",
        type=int,
        default=0,
        help="experts, of an op with experts: short for --param E=N (default 0: none)",
    )
    p.add_argument(
        "--topk",
        type=int,
        default=0,
        help="experts per token, of an op with experts: short for --param topk=N (default 0: none)",
    )
    p.add_argument(
        "--dtype",
        default="bf16",
        help="input dtype (default bf16); for an op that fixes its inputs (the quantized GEMMs), the output "
        "dtype",
    )
    p.add_argument(
        "--weights",
        help="the op's other operand dtype if not --dtype: e.g. fp8e4m3 for FP8 MoE weights with block "
        "scales; for an FP8 GEMM the FP8 flavour (fp8e4m3fnuz names MI300X's)",
    )
    p.add_argument("--layout", default="nk", choices=("nk", "kn"), help="B as (N, K) [default] or (K, N)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one of the op's own problem parameters, for an op that has them (repeat for each)",
    )
    p.add_argument("--gpu", metavar="FINGERPRINT", help="only this GPU (fingerprint or a prefix of 6+ chars)")
    p.add_argument("--limit", type=int, default=5, help="how many configs to list (default 5)")
    p.add_argument(
        "--predicted",
        action="store_true",
        help="the cost model's predictions of compile-only sweeps, also where measurements exist (without "
        "it: measurements, else predictions)",
    )


def run(args: argparse.Namespace) -> int:
    """The ranking per GPU, with the final round's where one ran: measured, else (or with --predicted)
    predicted; exit 1 when nothing is stored (saying so, and where --predicted hides measurements)."""
    from autotune.core.problem import normalize_dtype
    from autotune.core.result import Source
    from autotune.sweeps.spec import SPEC_DTYPES

    if args.op is None:
        _check_sizes(args)  # the op is the database's: flags no problem has are told first all the same
    given = _problem(args, args.op) if args.op else None
    if args.limit <= 0:
        raise CliError("--limit must be positive")
    with open_store(args.db, create=False, read_only=True) as store:
        problem = given or _problem(args, _stored_op(store))
        try:
            predicted = args.predicted
            records = store.best(problem, fingerprint=args.gpu, limit=10_000, source=_source(predicted))
            other = not records and bool(
                store.best(problem, fingerprint=args.gpu, limit=1, source=_source(not predicted))
            )  # what the other source holds, where this one holds nothing
            if other and not predicted:  # nothing measured: the predictions, said so
                predicted = True
                records = store.best(problem, fingerprint=args.gpu, limit=10_000, source=Source.MODEL)
            finals = (
                [] if predicted else store.best(problem, fingerprint=args.gpu, limit=64, source=Source.FINAL)
            )
            imported = _imported(store, problem, args.gpu)
            holdings = store.holdings(problem.op).describe() if not records else ""
        except ValueError as exc:  # a --gpu prefix that is too short or ambiguous
            raise CliError(str(exc)) from None
    if predicted and not args.predicted:
        print(
            f"nothing of {problem} is measured: the cost model's predictions of compile-only sweeps "
            "(tune it on the GPU with `autotune sweep` to measure it)\n"
        )
    by_gpu: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_gpu.setdefault(r.gpu.fingerprint, []).append(r)
    for fp, recs in by_gpu.items():
        gpu = recs[0].gpu
        tag = " [interpreter: timings are not a GPU's]" if gpu.interpreter else ""
        if predicted:
            tag += " [predicted by the cost model, not measured]"
        print(f"{problem} on {gpu.target} [{fp}]{tag}")
        _print_ranking(problem, recs[: args.limit], recs, "µs")
        final = [r for r in finals if r.gpu.fingerprint == fp]  # fastest first, as `store.best` gives them
        if final:
            print(f"final round ({final[0].extra.get('final_rounds', '?')} rounds, head to head; "
                  "`autotune emit` picks from it where it holds the fastest config above):")  # fmt: skip
            _print_ranking(problem, final, final, "median µs")
        print()
    _print_imported(problem, imported, args.limit)
    if not records and not imported and normalize_dtype(args.dtype) not in SPEC_DTYPES:
        raise CliError(
            f"op {problem.op} is tuned in {' or '.join(SPEC_DTYPES)} only (--dtype names the activations' "
            f"dtype; of a quantized op, the output's), not {args.dtype}; records of other dtypes come only "
            "from imported files, and the database holds none of this problem"
        )
    if not records:
        what = "predicted" if args.predicted else "measured"
        nor = "" if args.predicted else " (nor predictions)"
        hint = " (the database holds measurements of it: drop --predicted)" if other else ""
        print(f"no {what} results for {problem}{nor}; the database holds {holdings}; tune it with "
              f"`autotune sweep`{hint}")  # fmt: skip
        return EXIT_FAIL
    return EXIT_OK


def _source(predicted: bool) -> Source:
    from autotune.core.result import Source

    return Source.MODEL if predicted else Source.MEASURED


def _imported(store: Store, problem: Problem, gpu: str | None) -> list[TrialRecord]:
    """The imported records of `problem`: all of them, or, with `gpu`, those of the GPU it names or of a
    GPU of the same arch and CU count (a file's device beside the measured one)."""
    from autotune.core.result import Source

    found = store.trials(problem=problem, source=Source.IMPORTED)
    if gpu is None:
        return found
    named = store.match_gpus(gpu)
    ids = {g.id for g in named}
    devices = {(g.arch, g.target.cu_count) for g in named}
    return [r for r in found if r.gpu.id in ids or (r.gpu.arch, r.gpu.target.cu_count) in devices]


def _print_imported(problem: Problem, records: list[TrialRecord], limit: int) -> None:
    """Per GPU, the imported records of `problem`: timed ones fastest first, then untimed ones, then the
    flagged ones, each tagged with the project its file came from and why it was flagged."""
    by_gpu: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_gpu.setdefault(r.gpu.fingerprint, []).append(r)
    for fp, recs in by_gpu.items():
        recs.sort(key=lambda r: (not r.ok, r.timing is None, r.timing.median_us if r.timing else 0.0, r.id))
        print(f"{problem} on {recs[0].gpu.target} [{fp}]: reference records from imported files "
              "(not measured here; never served)")  # fmt: skip
        rows = [("rank", "from", "backend", "config", "µs", "TFLOP/s", "note")]
        for i, r in enumerate(recs[:limit]):
            t = r.timing.median_us if r.timing is not None and r.timing.median_us > 0 else None
            rank = str(i + 1) if r.ok and t else "-"
            tflops = f"{problem.flops() / t / 1e6:.1f}" if t else "-"
            note = "" if r.ok else f"[flagged: {r.error or r.status.value}]"
            origin = f"[{r.extra.get('imported_from', 'imported')}]"
            if r.extra.get("shape") == "unknown":  # a file that fits several models: K and topk not known
                origin += " [K, topk unknown]"
            rows.append((rank, origin, r.config.backend, r.config.canonical(), fmt_us(t), tflops, note))
        print_table(rows)
        if len(recs) > limit:
            print(f"({len(recs) - limit} more; raise --limit to see them)")
        print()


def _stored_op(store: Store) -> str:
    """The op `best` shows where --op names none: the one op `store` holds problems of (the first
    registered op where it holds none); CliError naming them where it holds several."""
    from autotune.core.registry import ops

    held = store.problem_ops()
    if len(held) > 1:
        raise CliError(f"the database holds problems of several ops ({', '.join(held)}): name one with --op")
    return held[0] if held else next(iter(ops()))


def _check_sizes(args: argparse.Namespace) -> None:
    """CliError for an M, N or K that no problem has (checked before the database is opened)."""
    from autotune.core.problem import check_sizes

    try:
        check_sizes(args.m, args.n, args.k)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _problem(args: argparse.Namespace, op: str) -> Problem:
    """The problem of `op` the flags name, its dtypes as the op's rules give them (a quantized op fixes
    its inputs: --dtype is then the output's)."""
    from autotune.core.problem import Problem
    from autotune.core.registry import rules_of

    # --e and --topk: the experts' parameters spelled short, as specs name them
    short = [f"{name}={value}" for name, value in (("E", args.e), ("topk", args.topk)) if value]
    try:
        extra = rules_of(op).parse_params([*short, *args.param])
        return Problem.of(op, args.m, args.n, args.k, args.dtype, args.weights, layout=args.layout, **extra)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _print_ranking(
    problem: Problem, shown: list[TrialRecord], ranked: list[TrialRecord], us_header: str
) -> None:
    """A table of the trial records `shown`, with their speed against the vendor library's fastest of
    `ranked`."""
    vendor = next((r for r in ranked if r.config.backend == VENDOR_BACKEND), None)
    rows = [("rank", "backend", "config", us_header, "TFLOP/s", "vs vendor")]
    for i, r in enumerate(shown):
        t = r.time_us
        vs = f"{vendor.time_us / t:.2f}x" if vendor and vendor.time_us and t else "-"
        tflops = f"{problem.flops() / t / 1e6:.1f}" if t else "-"
        rows.append((str(i + 1), r.config.backend, r.config.canonical(), fmt_us(t), tflops, vs))
    print_table(rows)
