"""`autotune export`: tuned tables as one CSV per GPU, as vLLM/SGLang fused-MoE config files, or as aiter's
tuned-GEMM tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.cli.common import EXIT_OK, CliError, add_verb, db_arg, open_store

if TYPE_CHECKING:
    import argparse

    from autotune.cli.common import Subparsers

NAME = "export"


def add_parser(subparsers: Subparsers) -> None:
    p = add_verb(
        subparsers,
        NAME,
        help="write tuned tables (one CSV per GPU, vLLM/SGLang fused-MoE configs, aiter GEMM tables)",
        description="--format csv (default): one CSV per GPU fingerprint, a row per winning (problem, "
        "backend, config) with time, TFLOP/s, GB/s, fraction of roofline, speedup over the vendor "
        "library, the GPU's arch and CU count, and the toolchain versions. --format vllm (or sglang): "
        "the moe winners as fused-MoE config files, one per (GPU, E, N, weights), mapping M to the "
        "Triton config (where another backend won, the best Triton config of that M; imported configs "
        "where nothing was measured). vllm and sglang differ only in the file name: vLLM writes "
        "block_shape=[128,128] and NVIDIA_H200 for every H200, SGLang block_shape=[128, 128]; SGLang "
        "files go into triton_X_Y_Z/ (the Triton version SGLang looks up: --triton-version, else the "
        "imported file's, else the measuring GPU's, else the installed one). Imported files are written "
        "as they were (their key order and other keys); flagged entries too, with a warning, unless "
        "--drop-flagged. --format aiter: the measured gemm, gemm_fp8_rowwise and gemm_fp8_blockwise "
        "winners of AMD GPUs as aiter's tuned-GEMM tables (bf16_tuned_gemm.csv, a8w8_tuned_gemm.csv, "
        "a8w8_blockscale_tuned_gemm.csv) in aiter's columns, libtype autotune-<backend> and kernelName the "
        "config's short form, to diff against aiter's own (autotune import reads them back).",
    )
    p.add_argument(
        "--format",
        default="csv",
        choices=("csv", "vllm", "sglang", "aiter"),
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
    db_arg(p)


def run(args: argparse.Namespace) -> int:
    """Writes the files and prints each path."""
    from autotune.db import StoreError, export_aiter, export_csv, export_vllm

    with open_store(args.db, read_only=True) as store:
        try:
            if args.format == "csv":
                paths = export_csv(store, args.out, fingerprint=args.gpu)
            elif args.format == "aiter":
                paths = export_aiter(store, args.out, fingerprint=args.gpu)
            else:
                paths = export_vllm(
                    store,
                    args.out,
                    fingerprint=args.gpu,
                    flavor=args.format,
                    triton_version=args.triton_version,
                    drop_flagged=args.drop_flagged,
                )
        except (StoreError, ValueError, OSError) as exc:
            raise CliError(str(exc)) from None
    for path in paths:
        print(f"wrote {path}")
    return EXIT_OK
