"""`autotune import`: the MoE configs vLLM/SGLang ship (.json) and aiter's tuned CSVs (.csv), all or
nothing. (The module is `imports`: `import` is a keyword.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_OK, CliError, add_verb, db_arg, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "import"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="import the MoE configs vLLM/SGLang ship (.json) and aiter's tuned CSVs (.csv)",
        description="Import vLLM/SGLang fused-MoE config files (E=..,N=..,device_name=..[,dtype=..]"
        "[,block_shape=..].json) and aiter tuned fused-MoE CSVs (tuned_fmoe.csv) as moe trials of "
        "source 'imported', on a GPU of their own (never mixed with measurements). All or nothing: "
        "every file is read and checked first, then everything is written in one transaction; on any "
        "error nothing is written. Importing again writes nothing new. Configs the installed toolchain "
        "would reject (num_stages=0 on AMD, block sizes that are not powers of two) are stored as "
        "pruned with the reason. vLLM files hold no timings (so they never win in best or emit); aiter "
        "rows carry aiter's time in µs.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="vLLM/SGLang .json or aiter .csv files")
    p.add_argument(
        "--k",
        type=int,
        help="hidden size (K) of the vLLM files; default: inferred from E and N for known models",
    )
    p.add_argument(
        "--topk",
        type=int,
        help="experts per token of the vLLM files; default: inferred from E and N for known models",
    )
    db_arg(p)


def run(args: argparse.Namespace) -> int:
    """Imports the files and prints, per file, its entries: ok, flagged (why), skipped (why), new."""
    from autotune.db import StoreError, import_files
    from autotune.db.interop import InteropError

    with open_store(args.db) as store:
        try:
            files = import_files(store, args.files, k=args.k, topk=args.topk)
        except (InteropError, StoreError) as exc:
            raise CliError(f"{exc}; nothing was imported") from None
        where = store.display_url
    for f in files:
        new = f.written or 0
        counts = f"{f.n_entries} entries: {f.n_ok} ok, {f.n_flagged} flagged"
        if f.skipped:
            counts += f", {len(f.skipped)} skipped"
        print(f"{f.path}: {f.format}, {f.summary}")
        print(f"  {counts}; {new} new, {len(f.trials) - new} already stored")
        for entry, reason in f.flagged:
            print(f"  flagged {entry}: {reason}")
        for entry, reason in f.skipped:
            print(f"  skipped {entry}: {reason}")
    total = sum(f.written or 0 for f in files)
    print(f"imported {total} new trials from {len(files)} files into {where}")
    return EXIT_OK
