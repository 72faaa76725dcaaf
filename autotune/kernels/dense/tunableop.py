"""PyTorch TunableOp as the dense GEMM's "tunableop" backend: the vendor library's solution pinned per shape.

TunableOp (`torch.cuda.tunable`) times every solution the vendor libraries offer for one GEMM (hipBLASLt and
rocBLAS on ROCm; on CUDA only cuBLAS's "Default" up to torch 2.11, cuBLASLt's heuristics in newer builds)
and replays the pick from a results file. Rules:

- Tuning (`tune`, in a sweep's worker) writes to a private results file that is removed at once, and turns
  TunableOp and its tuning off again: nothing of it outlives the call, and no file is left behind.
- A pin is one results line (op signature, parameter signature, solution, ms) with the validators
  TunableOp wrote beside it; a table carries the pins of the shapes it serves with this backend
  (`Table.pins["tunableop"]`).
- Serving (`mm`) runs a GEMM through TunableOp only where its exact shape was pinned and the pins were
  accepted by this process's TunableOp (`install`, at the first such call: same validators, read back; so
  that first call belongs outside a CUDA graph's capture, as a warm-up is); TunableOp is on for that
  one call and off again after it, tuning off, so no other GEMM of the process ever goes through it. Any
  other shape, or pins TunableOp refused, runs plain `torch.mm`: never slower than the vendor library.
- Environment variables (`PYTORCH_TUNABLEOP_ENABLED`, `..._TUNING`) take precedence over these calls in
  PyTorch: where a user sets them, TunableOp behaves as they say.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

__all__ = [
    "PinError",
    "available",
    "install",
    "installed_shapes",
    "mm",
    "pin_key",
    "results_text",
    "run_pinned",
    "tune",
]

#: One pin: (op signature, parameter signature, solution, ms).
Pin = tuple[str, str, str, float]
#: A served GEMM's identity: (M, N, K, dtype name, B's layout).
Shape = tuple[int, int, int, str, str]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_lock = threading.Lock()
#: The shapes whose pins this process's TunableOp accepted; None until `install` ran.
_installed: set[Shape] | None = None


class PinError(RuntimeError):
    """TunableOp is missing, or did not record a result for the GEMM it was asked to tune."""


def _tunable() -> Any:
    tunable = getattr(getattr(torch, "cuda", None), "tunable", None)
    if tunable is None or not hasattr(tunable, "get_results"):
        raise PinError(
            f"torch {torch.__version__} has no torch.cuda.tunable (TunableOp: torch 2.3 and later)"
        )
    return tunable


def available() -> bool:
    """Whether TunableOp can run here: torch has it and a CUDA or ROCm GPU is visible."""
    try:
        _tunable()
    except PinError:
        return False
    return bool(torch.cuda.is_available())


def pin_key(M: int, N: int, K: int, dtype: str, layout: str) -> Shape:
    """The served shape a pin is for."""
    return (int(M), int(N), int(K), dtype, layout)


def tune(a: torch.Tensor, bt: torch.Tensor, out: torch.Tensor) -> dict[str, Any]:
    """Tunes C = `a` · `bt` (written into `out`) with TunableOp and returns its pin: {"op_signature",
    "param_signature", "solution", "ms", "validators"}. A GEMM tuned before in this process gives its
    earlier pin. TunableOp's state (enabled, tuning, results file) is restored after the call.

    Raises:
        PinError: no TunableOp, or it recorded no result for this GEMM (an unsupported dtype or layout).
    """
    tunable = _tunable()
    with _lock:
        before = {(r[0], r[1]) for r in tunable.get_results()}
        was_enabled, was_tuning = tunable.is_enabled(), tunable.tuning_is_enabled()
        old_name = tunable.get_filename()
        folder = tempfile.mkdtemp(prefix="autotune-tunableop-")
        path = os.path.join(folder, "results.csv")
        try:
            tunable.set_filename(path, False)
            tunable.enable(True)
            tunable.tuning_enable(True)
            torch.mm(a, bt, out=out)
            if a.is_cuda:
                torch.cuda.synchronize()
        finally:
            tunable.tuning_enable(was_tuning)
            tunable.enable(was_enabled)
            tunable.set_filename(old_name, False)
            for name in os.listdir(folder):
                os.unlink(os.path.join(folder, name))
            os.rmdir(folder)
        results = [tuple(r) for r in tunable.get_results()]
        validators = {str(k): str(v) for k, v in tunable.get_validators()}
    fresh = [r for r in results if (r[0], r[1]) not in before]
    gemms = [r for r in fresh if _is_gemm(r)]
    if not gemms:  # tuned before: the line whose sizes are this GEMM's
        sizes = _sizes(a, bt)
        gemms = [
            r for r in results if str(r[0]).startswith("GemmTunableOp_") and _param_sizes(str(r[1])) == sizes
        ]
    if not gemms:
        raise PinError(
            f"TunableOp recorded no GEMM result for {tuple(a.shape)} x {tuple(bt.shape)} {a.dtype}"
        )
    op_sig, params, solution, ms = gemms[-1]
    return {
        "op_signature": str(op_sig),
        "param_signature": str(params),
        "solution": str(solution),
        "ms": float(ms),
        "validators": validators,
    }


def _is_gemm(row: Sequence[Any]) -> bool:
    return str(row[0]).startswith("GemmTunableOp_")


def _sizes(a: torch.Tensor, bt: torch.Tensor) -> tuple[int, int, int]:
    # BLAS sees C^T = B^T A^T: its m is our N, its n our M
    return (int(bt.shape[1]), int(a.shape[0]), int(a.shape[1]))


def _param_sizes(params: str) -> tuple[int, ...]:
    fields = params.split("_")
    try:
        return tuple(int(f) for f in fields[1:4])
    except ValueError:
        return ()


def results_text(validators: Mapping[str, str], pins: Iterable[Sequence[Any]]) -> str:
    """A TunableOp results file: the Validator lines, then one line per pin."""
    lines = [f"Validator,{key},{value}" for key, value in validators.items()]
    for op_sig, params, solution, ms in pins:
        lines.append(f"{op_sig},{params},{solution},{float(ms):.6g}")
    return "\n".join(lines) + "\n"


def install(pins: Sequence[Mapping[str, Any]], device: torch.device | str = "cuda") -> set[Shape]:
    """Gives this process's TunableOp the pins of the tables in use (tuning off) and returns the shapes it
    accepted: those `mm` then runs through it. Each item: {"validators": {...}, "results": [[op, params,
    solution, ms, M, N, K, dtype, layout], ...]}. A group whose validators differ from this process's, or
    that TunableOp does not read back, is left out (its shapes run plain torch.mm). Runs once per process;
    later calls return the first answer."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        accepted: set[Shape] = set()
        if pins and available():
            accepted = _install(pins, device)
        _installed = accepted
        return accepted


def _install(pins: Sequence[Mapping[str, Any]], device: torch.device | str) -> set[Shape]:
    tunable = _tunable()
    accepted: set[Shape] = set()
    tunable.tuning_enable(False)
    for group in pins:
        rows = [list(r) for r in group.get("results", ())]
        _register_validators(tunable, rows, device)
        mine = {str(k): str(v) for k, v in tunable.get_validators()}
        if dict(group.get("validators", {})) != mine:
            continue  # another torch or library build: its solutions may not exist here
        folder = tempfile.mkdtemp(prefix="autotune-tunableop-")
        path = os.path.join(folder, "pins.csv")
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(results_text(mine, [r[:4] for r in rows]))
            ok = bool(tunable.read_file(path))
        finally:
            os.unlink(path)
            os.rmdir(folder)
        if ok:
            accepted.update(pin_key(*r[4:9]) for r in rows)
    return accepted


def _register_validators(tunable: Any, rows: Sequence[Sequence[Any]], device: torch.device | str) -> None:
    """Runs one tiny GEMM per (dtype, layout) of `rows` through TunableOp (tuning off): on ROCm, the vendor
    libraries' validators are registered when TunableOp first builds the GEMM of that dtype."""
    seen: set[str] = set()
    for row in rows:
        dtype = str(row[7])
        if dtype in seen:
            continue
        seen.add(dtype)
        torch_dtype = next((t for t, n in _DTYPES.items() if n == dtype), None)
        if torch_dtype is None:
            continue
        a = torch.ones(8, 8, device=device, dtype=torch_dtype)
        was = tunable.is_enabled()
        tunable.enable(True)
        try:
            torch.mm(a, a.t())
        finally:
            tunable.enable(was)


def installed_shapes() -> set[Shape] | None:
    """The shapes this process serves through TunableOp; None before `install` ran."""
    return _installed


def mm(a: torch.Tensor, bt: torch.Tensor, shape: Shape, out: torch.Tensor | None) -> torch.Tensor:
    """C = `a` · `bt`: through TunableOp with its pinned solution where `shape` was accepted by `install`,
    else plain torch.mm."""
    if _installed is None or shape not in _installed:
        return torch.mm(a, bt) if out is None else torch.mm(a, bt, out=out)
    return run_pinned(a, bt, out)


def run_pinned(a: torch.Tensor, bt: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """C = `a` · `bt` through TunableOp, tuning off: the solution it holds for this GEMM (tuned or
    installed), "Default" for one it holds none for. TunableOp is on for this call only."""
    tunable = torch.cuda.tunable
    was = tunable.is_enabled()
    tunable.enable(True)
    try:
        return torch.mm(a, bt) if out is None else torch.mm(a, bt, out=out)
    finally:
        tunable.enable(was)


def _reset_for_tests() -> None:
    global _installed
    _installed = None
