"""`autotune export`: tuned tables as one CSV per GPU, as vLLM/SGLang fused-MoE config files, or as aiter's
tuned-GEMM tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_OK, CliError, add_verb, db_arg, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers
    from autotune.db import Store

NAME = "export"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="write tuned tables (one CSV per GPU, vLLM/SGLang fused-MoE configs, aiter GEMM tables, "
        "TunableOp results files)",
        description="--format csv (default): one CSV per GPU fingerprint, a row per winning (problem, "
        "backend, config) with time, TFLOP/s, GB/s, fraction of roofline, speedup over the vendor "
        "library, the GPU's arch and CU count, and the toolchain versions (the cost model's picks of "
        "compile-only sweeps where nothing was measured, source 'model'). --format vllm (or sglang): "
        "the fused MoE's winners as fused-MoE config files, one per (GPU, E, N, weights), mapping M to the "
        "Triton config (where another backend won, the best Triton config of that M; imported configs "
        "where nothing was measured). vllm and sglang differ in the file name and place: vLLM writes "
        "block_shape=[128,128] and NVIDIA_H200 for every H200, SGLang block_shape=[128, 128]; SGLang "
        "files go into triton_X_Y_Z/ (the Triton version SGLang looks up: --triton-version, else the "
        "imported file's, else the measuring GPU's, else the installed one). Imported files are written "
        "as they were (their key order and other keys), each project's whole and never merged with "
        "another's of the same name: --format sglang writes SGLang's file of a name, --format vllm "
        "vLLM's (another project's where only it has one), and says which others were not written and "
        "where their configs differ (a conflict); SGLang's _down and per_channel_quant files are never "
        "written as vLLM's, which never reads them. Flagged entries are written too, with a warning, "
        "unless --drop-flagged; files whose K and topk are unknown are marked so. --format aiter: the "
        "measured winners of the dense and FP8 GEMMs aiter has tables for, of AMD GPUs, as aiter's "
        "tuned-GEMM tables (bf16_tuned_gemm.csv, a8w8_tuned_gemm.csv, a8w8_blockscale_tuned_gemm.csv) in "
        "aiter's columns, libtype autotune-<backend> and kernelName the config's short form, to diff "
        "against aiter's own (autotune import reads them back). --format tunableop: the vendor solutions "
        'PyTorch\'s TunableOp picked (sweeps with backends = ["tunableop"], imported TunableOp files) as '
        "the results files TunableOp reads, tunableop_results_device_name=DEVICE.csv, one per device and "
        "validator set (PyTorch reads a file only where its validators match its own build; autotune "
        "import reads them back). --predicted adds, for vllm, sglang and "
        "aiter, the cost model's picks of compile-only sweeps where nothing was measured (said so for "
        "each file; aiter's tables have no place to mark them). The database must exist: a --db that "
        "names none is an error.",
    )
    p.add_argument(
        "--format",
        default="csv",
        choices=("csv", "vllm", "sglang", "aiter", "tunableop"),
        help="output format (default csv)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--gpu", metavar="FINGERPRINT", help="only this GPU")
    p.add_argument(
        "--triton-version",
        metavar="X.Y.Z",
        help="vllm/sglang: the Triton version files are for (SGLang's triton_X_Y_Z folder)",
    )
    p.add_argument(
        "--drop-flagged",
        action="store_true",
        help="vllm/sglang: leave out imported entries flagged at import (default: written, with a warning)",
    )
    p.add_argument(
        "--predicted",
        action="store_true",
        help="vllm/sglang/aiter: also the cost model's picks of compile-only sweeps where nothing was "
        "measured (csv: always, in its source column)",
    )
    db_arg(p)


def run(args: argparse.Namespace) -> int:
    """Writes the files and prints each path with what it holds, then what was left out or conflicts."""
    from autotune.db import StoreError, export_aiter, export_csv
    from autotune.db.export import with_predictions
    from autotune.db.formats import exporter

    files: list[tuple[str, str]] = []
    notes: tuple[str, ...] = ()
    with open_store(args.db, create=False, read_only=True) as store:
        try:
            if args.format == "csv":
                files = [(str(p), "") for p in export_csv(store, args.out, fingerprint=args.gpu)]
            elif args.format == "tunableop":
                from autotune.db.tunableop_export import export_tunableop

                files = [(str(p), "") for p in export_tunableop(store, args.out, fingerprint=args.gpu)]
            elif args.format == "aiter":
                source = with_predictions(store) if args.predicted else store
                files = [(str(p), "") for p in export_aiter(source, args.out, fingerprint=args.gpu)]
                if args.predicted:
                    notes = _aiter_predictions(store, args.gpu)
            else:
                done = exporter(args.format).write(
                    store,
                    args.out,
                    fingerprint=args.gpu,
                    flavor=args.format,
                    triton_version=args.triton_version,
                    drop_flagged=args.drop_flagged,
                    predicted=args.predicted,
                )
                files, notes = [(str(p), holds) for p, holds in done.files], done.notes
        except (StoreError, ValueError, OSError) as exc:
            raise CliError(_with_hint(str(exc), args)) from None
    for path, holds in files:
        print(f"wrote {path}" + (f" ({holds})" if holds else ""))
    for note in notes:
        print(f"note: {note}")
    return EXIT_OK


def _aiter_predictions(store: Store, gpu: str | None) -> tuple[str, ...]:
    """The note of an aiter export with --predicted: how many winners are the cost model's picks."""
    from autotune.db.aiter_gemm import kind_for_op
    from autotune.db.export import predicted_winners

    guessed = [
        w
        for w, _ in predicted_winners(store, gpu, store.winners(gpu, final=True))
        if w.gpu.target.is_amd and kind_for_op(w.problem.op)
    ]
    if not guessed:
        return ()
    return (
        f"{len(guessed)} winners are the cost model's picks of compile-only sweeps, not measured; aiter's "
        "tables have no place to say so (their rows read as measured)",
    )


def _with_hint(message: str, args: argparse.Namespace) -> str:
    """`message` of a failed export, naming --predicted where predictions would have given something."""
    if args.predicted or args.format != "aiter" or "prediction" not in message:
        return message
    return f"{message}; add --predicted to export the cost model's picks of compile-only sweeps"
