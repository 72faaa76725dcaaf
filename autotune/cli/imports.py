"""`autotune import`: the MoE configs vLLM/SGLang ship (.json), aiter's tuned fused-MoE and GEMM CSVs and
PyTorch TunableOp results (.csv), files or folders, each file on its own. (The module is `imports`:
`import` is a keyword.)"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_FAIL, EXIT_OK, CliError, add_verb, db_arg, missing_database, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "import"
#: The projects config files come from (`autotune.db.foreign.JSON_PROJECTS`, not imported here: the CLI
#: loads no database module before a verb runs).
PROJECTS = ("vllm", "sglang", "aiter")


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="import vLLM/SGLang MoE configs, aiter's tuned CSVs and PyTorch TunableOp results",
        description="Import vLLM/SGLang fused-MoE config files (E=..,N=..,device_name=..[,dtype=..]"
        "[,block_shape=..][,per_channel_quant=True][_down].json), aiter tuned fused-MoE CSVs "
        "(tuned_fmoe.csv), aiter tuned GEMM tables (bf16_tuned_gemm.csv, a8w8_tuned_gemm.csv, "
        "a8w8_blockscale_tuned_gemm.csv, a8w8_bpreshuffle_tuned_gemm.csv: records of the dense and FP8 "
        "GEMMs) and PyTorch TunableOp results (tunableop_results*.csv: records of the dense and row-wise "
        "FP8 GEMMs), given as files or folders (searched recursively, each file's format "
        "told by its content), as reference records of source 'imported', on a GPU of their own (never "
        "mixed with measurements, never served unless measured here). Each file is imported on "
        "its own, in its own transaction: a file that cannot be imported is reported with the reason "
        "and stops no other. Importing again writes nothing new. Entries are flagged (stored as pruned, "
        "with the reason) where the toolchain would reject them (num_stages=0 on AMD with Triton 3.0 "
        "to 3.2, block sizes that are not powers of two) or our op does not run them as measured "
        "(quantizations other than unquantized and FP8 128x128 blocks, _down files; pre-shuffled "
        "weights, bias epilogues, other output dtypes): reference records still, shown by best (and "
        "vLLM's written back by export); aiter rows whose errRatio is above 0.05 are stored as wrong_result "
        "with the ratio. Entries no op of ours holds (int8, batched GEMMs, an unknown GPU) are skipped "
        "with the reason. K and topk of vLLM files: --shape for the files it names, else --k and --topk "
        "(warned of where they fall on files of different E and N, or disagree with the one model of a "
        "file's E and N), else inferred from E and N for known models, else unknown (the file is kept by "
        "E, N and device; best shows it at every K and topk of its E and N, marked so). Values out of "
        "bounds (sizes, tile sizes, times, see autotune.db.bounds; num_warps beyond a block of 1024 "
        "threads, num_stages beyond the device's shared memory) are skipped with the reason. Only regular "
        "files are read (never a FIFO or a device; one found in a "
        "folder is reported), of at most 1 GiB, a JSON file a chunk at a time. Each file keeps its project "
        "(vllm, sglang, aiter, tunableop: told by its folders and name, or --project): SGLang's and vLLM's "
        "files of one name are two records, and where their configs differ at an M the import says so "
        "(a conflict; export writes each project's file to its own layout). Exit status 1 when a file "
        "could not be read at all or every entry it has is bad (no config, or out of bounds); 2, with the "
        "reason as one line, when the one file named cannot be imported. A new database is made where "
        "--db names none, and the import says so.",
    )
    p.add_argument(
        "files",
        metavar="PATH",
        nargs="+",
        help="vLLM/SGLang .json, aiter or TunableOp .csv files, or folders of them",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="PATTERN:K,TOPK",
        help="hidden size K and experts per token of the vLLM files PATTERN names: E=128,N=384 (those E "
        "and N), a file or folder, or a glob; repeat per shape (the first that names a file wins)",
    )
    p.add_argument(
        "--k",
        type=int,
        help="hidden size (K) of the vLLM files no --shape names; default: inferred from E and N for known "
        "models (warned of when the files have different E and N)",
    )
    p.add_argument(
        "--topk",
        type=int,
        help="experts per token of the vLLM files no --shape names; default: inferred from E and N for "
        "known models",
    )
    p.add_argument(
        "--project",
        choices=PROJECTS,
        help="the project the config files come from (default: told by their folders and names: "
        "SGLang's triton_X_Y_Z/, a folder named vllm or sglang, names only SGLang writes; else vllm)",
    )
    db_arg(p)


def run(args: argparse.Namespace) -> int:
    """Imports the files and prints, per file, its entries: ok, flagged (why), skipped (why), new, and
    what it warns of (conflicts with another project's file, shape flags that disagree)."""
    from autotune.db import StoreError
    from autotune.db.interop import InteropError, ShapeFlag, import_files

    try:
        shapes = [ShapeFlag.parse(text) for text in args.shape]
    except InteropError as exc:
        raise CliError(str(exc)) from None
    created = missing_database(args.db)  # a database made for this import, said once it holds something
    try:
        with open_store(args.db, create=True) as store:
            try:
                files = import_files(
                    store, args.files, k=args.k, topk=args.topk, shapes=shapes, project=args.project,
                    warn=lambda message: print(f"warning: {message}"),
                )  # fmt: skip
            except (InteropError, StoreError) as exc:
                raise CliError(str(exc)) from None
            where = store.display_url
        if len(files) == 1 and files[0].error and not Path(args.files[0]).expanduser().is_dir():
            raise CliError(files[0].error)  # the one file named could not be imported: nothing was written
    except BaseException:
        if created is not None:  # a failed import leaves no empty database behind
            _remove_database(created)
        raise
    if created is not None:
        print(f"created a new database at {created}")
    for f in files:
        if f.error:
            print(f"{f.path}: {'unreadable' if not f.readable else 'skipped'}: {f.error}")
            continue
        new = f.written or 0
        counts = f"{f.n_entries} entries: {f.n_ok} ok, {f.n_flagged} flagged"
        if f.skipped:
            counts += f", {len(f.skipped) + f.more[0]} skipped"
        print(f"{f.path}: {f.format}, {f.summary}")
        print(f"  imported {counts}; {new} new, {f.n_trials - new} already stored")
        for warning in f.warnings:
            print(f"  warning: {warning}")
        for entry, reason in f.flagged:
            print(f"  flagged {entry}: {reason}")
        if f.more[1]:
            print(f"  ... and {f.more[1]} more flagged entries")
        for entry, reason in f.skipped:
            print(f"  skipped {entry}: {reason}")
        if f.more[0]:
            print(f"  ... and {f.more[0]} more skipped entries")
    total = sum(f.written or 0 for f in files)
    bad = sum(1 for f in files if f.error)
    failed = sum(1 for f in files if f.failed)
    tail = f" ({failed} of them unreadable or with no good entry)" if failed else ""
    print(f"imported {total} new trials from {len(files) - bad} files into {where}; "
          f"{bad} files skipped{tail}")  # fmt: skip
    return EXIT_FAIL if failed else EXIT_OK


def _remove_database(path: Path) -> None:
    """Removes the SQLite database at `path` and its -wal and -shm files, made by this import."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            Path(f"{path}{suffix}").unlink()
