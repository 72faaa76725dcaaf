"""`autotune export --format aiter`: our measured GEMM winners in aiter's tuned-GEMM tables, to be read side
by side with aiter's own (the tables and their columns: `autotune.db.aiter_gemm.AITER_GEMM_KINDS`; the op
each table's winners are of: the ops' `AiterRows`, `autotune.db.aiter_gemm.kind_for_op`)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

from .aiter_gemm import AITER_GEMM_KINDS, OUR_LIBTYPE_PREFIX, GemmKind, config_name, fp8_column, kind_for_op
from .files import write_atomically
from .records import Winner
from .store import Store, StoreError

__all__ = ["aiter_row", "export_aiter"]

logger = logging.getLogger(__name__)

_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


def aiter_row(kind: GemmKind, winner: Winner) -> dict[str, Any]:
    """The row of `winner` in table `kind`: gfx and cu_num of its GPU, the shape, libtype
    ``autotune-{backend}``, kernelName the config's short form (`config_name`), solidx or kernelId -1 (no
    aiter kernel), splitK the config's SPLIT_K (0 where it has none), us its time, tflops and bw as aiter
    computes them (2 decimals), and an error ratio of 0.0 (every config passed our check against the
    reference)."""
    gpu, problem, config = winner.gpu, winner.problem, winner.config
    us = winner.time_us
    split_k = config.get("SPLIT_K", 0)
    row: dict[str, Any] = {
        "gfx": gpu.arch,
        "cu_num": gpu.target.cu_count,
        "M": problem.M,
        "N": problem.N,
        "K": problem.K,
        "bias": False,
        "dtype": _TORCH_DTYPES.get(problem.dtype_a, problem.dtype_a),
        "outdtype": _TORCH_DTYPES.get(problem.dtype_out, problem.dtype_out),
        "scaleAB": False,
        "bpreshuffle": False,
        "q_dtype_w": fp8_column(problem.dtype_b, gpu.arch),
        "libtype": f"{OUR_LIBTYPE_PREFIX}{config.backend}",
        "solidx": -1,
        "kernelId": -1,
        "splitK": split_k if isinstance(split_k, int) else 0,
        "us": repr(float(us)),
        "kernelName": config_name(config),
        "tflops": round(problem.flops() / us / 1e6, 2),
        "bw": round(problem.min_bytes() / us / 1e3, 2),
        "err_ratio": 0.0,
        "errRatio": 0.0,
    }
    return {c: row[c] for c in kind.columns}


def _why_not(kind: GemmKind | None, winner: Winner) -> str:
    """Why `winner` has no row in an aiter table ("" when it has one)."""
    p, target = winner.problem, winner.gpu.target
    if not target.is_amd or target.interpreter:
        return f"{target} is no AMD GPU"
    if kind is None:
        return f"aiter has no {p.op} table"
    if p.layout != "nk":
        return "B is (K, N): aiter's tables hold B as (N, K)"
    if "outdtype" not in kind.columns and p.dtype_out != "bf16":
        return f"{p.dtype_out} output: aiter's {kind.name} table holds bf16 outputs"
    try:
        config_name(winner.config)
    except ValueError as exc:
        return str(exc)
    return ""


def export_aiter(store: Store, out_dir: str | Path, fingerprint: str | None = None) -> list[Path]:
    """Writes the measured winners of the GEMM ops aiter has tables for (`kind_for_op`) on AMD GPUs (all, or
    the one `fingerprint` names) into `out_dir`, one file per table under aiter's name, rows sorted by
    GPU, N, K and M. Where the final round holds a winner's fastest config, its time is the final round's.
    Winners with no row (another GPU, layout or output dtype, a config no kernel name can spell) are
    logged. Returns the paths written.

    Raises StoreError when there is nothing to write (saying what the database holds), when
    two GPUs of one gfx and CU count would share rows (aiter keys rows by them: pick one with
    `fingerprint`), or when `out_dir` cannot be written. Each file is written to a temporary name and
    renamed.
    """
    tables: dict[str, tuple[GemmKind, list[Winner]]] = {}
    left_out: dict[str, int] = {}
    for w in store.winners(fingerprint, final=True):
        kind = kind_for_op(w.problem.op)
        why = _why_not(kind, w)
        if why or kind is None:
            left_out[why] = left_out.get(why, 0) + 1
            continue
        tables.setdefault(kind.name, (kind, []))[1].append(w)
    for why, n in sorted(left_out.items()):
        logger.warning("%d winners not written: %s", n, why)
    if not tables:
        which = f" of GPU {fingerprint}" if fingerprint else ""
        ops = ", ".join(sorted({op for k in AITER_GEMM_KINDS.values() if (op := k.op)}))
        held = store.holdings(fingerprint=fingerprint).describe()
        raise StoreError(
            f"nothing to export: {store.display_url} holds no measured winners of {ops} on an AMD GPU{which}"
            f"; it holds {held}: run `autotune sweep` to measure them"
        )
    _check_one_gpu_per_key([w for _, ws in tables.values() for w in ws])
    out = Path(out_dir).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create output directory {out}: {exc.strerror or exc}") from exc
    written: list[Path] = []
    for kind, winners in tables.values():
        winners.sort(key=lambda w: (w.gpu.arch, w.gpu.target.cu_count, w.problem.N, w.problem.K, w.problem.M))
        path = out / kind.file

        def write(tmp: Path, kind: GemmKind = kind, winners: list[Winner] = winners) -> None:
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=kind.columns, lineterminator="\n")
                writer.writeheader()
                writer.writerows(aiter_row(kind, w) for w in winners)

        write_atomically(path, write)
        logger.info("wrote %d rows to %s", len(winners), path)
        written.append(path)
    return written


def _check_one_gpu_per_key(winners: list[Winner]) -> None:
    """StoreError where two stored GPUs share a gfx and CU count: aiter's rows could not tell them apart."""
    seen: dict[tuple[str, int], str] = {}
    for w in winners:
        key = (w.gpu.arch, w.gpu.target.cu_count)
        other = seen.setdefault(key, w.gpu.fingerprint)
        if other != w.gpu.fingerprint:
            raise StoreError(
                f"aiter keys rows by gfx and cu_num: GPUs {other} and {w.gpu.fingerprint} are both {key[0]} "
                f"with {key[1]} CUs; pick one with --gpu"
            )
