"""Run-time entry point of the quantized GEMMs: `gemm_quant(op, a, b, a_scale, b_scale)`.

Looks the shape up in the pinned tables of `autotune.dispatch` (op, A's dtype, N, K, M bucket) and
launches that config. A shape that no table covers runs `QuantGemmOp.fallback_config`: torch._scaled_mm
where the installed torch runs the op's scaling mode on this GPU (probed), except for the FP8 ops on
NVIDIA GPUs at M <= QUANT_DEFAULT_MAX_M[op] (decode), where our kernels are measured ahead; the heuristic
default where _scaled_mm cannot run it (MX formats on sm_90, gemm_mxfp4_bf16a, ...). Inputs are checked
on every call (one ValueError before any launch); the launch is prepared per call (its launcher is cached
per config), so this costs more host time than `gemm` does.

The entry point is a registered torch op (`TORCH_OPS`: autotune::gemm_quant and autotune::gemm_quant_out,
see `autotune.kernels.torch_ops`); a call that names its `target` runs the implementation directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.kernels.quant.problem import QUANT_OPS
from autotune.kernels.serve import served_config
from autotune.kernels.torch_ops import TorchOp, eager, explained, register

__all__ = ["TORCH_OPS", "entry_launch", "gemm_quant"]

_OUT_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# The problem of each (op, M, N, K, dtypes, arch) seen: building one validates it, which costs host time.
_problems: dict[tuple[Any, ...], Problem] = {}


def _problem(op: str, a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, target: Target) -> Problem:
    if type(a) is torch.Tensor and type(b) is torch.Tensor and a.dim() == 2 and b.dim() == 2:
        key = (op, a.shape[0], b.shape[0], b.shape[1], a.dtype, out_dtype, target.arch)
        found = _problems.get(key)
        if found is None:
            found = _new_problem(op, a, b, out_dtype, target)
            if len(_problems) >= 4096:
                _problems.clear()
            _problems[key] = found
        return found
    return _new_problem(op, a, b, out_dtype, target)


def _shape(op: str, a: Any, b: Any, out_dtype: Any) -> tuple[int, int]:
    """(M, N) of C, after the checks that need no target (the op, the tensors' ranks, the output dtype)."""
    if op not in QUANT_OPS:
        raise ValueError(f"unknown quantized GEMM {op!r}; known: {', '.join(QUANT_OPS)}")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{op} takes 2-D tensors a (M, K) and b (N, K)")
    if out_dtype not in _OUT_NAMES:
        raise ValueError(f"{op} writes bf16 or fp16, not {out_dtype}")
    return a.shape[0], b.shape[0]


def _new_problem(
    op: str, a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, target: Target
) -> Problem:
    M, N = _shape(op, a, b, out_dtype)
    K = b.shape[1] * (2 if op in ("gemm_mxfp4", "gemm_mxfp4_bf16a") else 1)
    fp8 = "fp8e4m3"  # the target's own e4m3; e4m3fnuz named only where it is not the target's own
    if op.startswith("gemm_fp8") and a.dtype == torch.float8_e4m3fnuz and target.arch != "gfx942":
        fp8 = "fp8e4m3fnuz"
    return Problem.quant(op, M, N, K, _OUT_NAMES[out_dtype], fp8)


def _gemm_quant_impl(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor | None,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype,
    out: torch.Tensor | None = None,
    target: Target | None = None,
) -> torch.Tensor:
    """autotune::gemm_quant (and gemm_quant_out with `out`): the checks, the lookup and the launch."""
    from autotune.kernels.common.target import launch_target
    from autotune.kernels.quant.op import QUANT_GEMMS

    tgt = target or launch_target()
    problem = _problem(op, a, b, out_dtype, tgt)
    if out is not None:
        _check_out(op, out, problem, out_dtype, a)
    config = served_config(QUANT_GEMMS[op], problem, tgt)  # the table's, else the op's fallback
    if out is None:
        out = torch.empty(problem.M, problem.N, device=a.device, dtype=out_dtype)
    inputs: Any = (a, b, a_scale, b_scale)  # a_scale None: gemm_mxfp4_bf16a
    QUANT_GEMMS[op].prepare(problem, config, tgt, inputs, out)()
    return out


def _gemm_quant_out_impl(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor | None,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype,
    out: torch.Tensor,
) -> None:
    _gemm_quant_impl(op, a, b, a_scale, b_scale, out_dtype, out)


def _explain_call(
    op: str, a: Any, b: Any, a_scale: Any, b_scale: Any, out_dtype: Any, out: Any = None
) -> tuple[int, int]:
    """The checks of a call that need no target (a fake's, or for arguments that the op's schema
    refuses): (M, N) of C."""
    M, N = _shape(op, a, b, out_dtype)
    for name, t in (("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} is on {t.device}, not {a.device} like a")
    if out is not None:
        _explain_out(op, out, M, N, out_dtype, a)
    return M, N


def _gemm_quant_fake(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor | None,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return a.new_empty(_explain_call(op, a, b, a_scale, b_scale, out_dtype), dtype=out_dtype)


def _gemm_quant_out_fake(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor | None,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype,
    out: torch.Tensor,
) -> None:
    _explain_call(op, a, b, a_scale, b_scale, out_dtype, out)


def gemm_quant(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor | None,
    b_scale: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    target: Target | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """C (M, N) of quantized GEMM `op` (see `quant.op` for the inputs of each), through the tuned
    table when one holds the shape, else the op's `fallback_config`.

    `out`, a contiguous (M, N) tensor of `out_dtype` on A's device, receives C and is returned; another
    shape, dtype, device or layout is a ValueError (a non-tensor a TypeError) before any launch. Without
    it C is allocated. Runs the op autotune::gemm_quant (autotune::gemm_quant_out with `out`); with a
    `target` (which no op takes: eager only) the implementation is called directly."""
    if target is not None or eager(a, b):
        return _gemm_quant_impl(op, a, b, a_scale, b_scale, out_dtype, out, target)
    try:
        if out is None:
            return _GEMM_QUANT(op, a, b, a_scale, b_scale, out_dtype)
        _GEMM_QUANT_OUT(op, a, b, a_scale, b_scale, out_dtype, out)
        return out
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(exc, _explain_call, op, a, b, a_scale, b_scale, out_dtype, out) from None


def _check_out(op: str, out: Any, problem: Problem, out_dtype: torch.dtype, a: torch.Tensor) -> None:
    _explain_out(op, out, problem.M, problem.N, out_dtype, a)


def _explain_out(op: str, out: Any, M: int, N: int, out_dtype: torch.dtype, a: torch.Tensor) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    dense = out.is_contiguous()
    so = out.shape
    if (
        len(so) != 2
        or so[0] != M
        or so[1] != N
        or out.dtype != out_dtype
        or out.device != a.device
        or not dense
    ):
        strides = "" if dense else f" with strides {out.stride()}"
        raise ValueError(
            f"{op}: out must be a contiguous ({M}, {N}) {out_dtype} tensor on {a.device} (the shape and "
            f"dtype of C), got {tuple(out.shape)} {out.dtype} on {out.device}{strides}"
        )


_SCALES = "Tensor? a_scale, Tensor b_scale, ScalarType out_dtype"
#: The ops of this module (`autotune.kernels.torch_ops.register`).
TORCH_OPS = (
    TorchOp(
        f"gemm_quant(str op, Tensor a, Tensor b, {_SCALES}) -> Tensor", _gemm_quant_impl, _gemm_quant_fake
    ),
    TorchOp(
        f"gemm_quant_out(str op, Tensor a, Tensor b, {_SCALES}, Tensor(a!) out) -> ()",
        _gemm_quant_out_impl,
        _gemm_quant_out_fake,
    ),
)
_GEMM_QUANT, _GEMM_QUANT_OUT = register(*TORCH_OPS)


def entry_launch(
    problem: Problem, target: Target, inputs: Any, out: torch.Tensor, config: Config | None = None
) -> Callable[[], None]:
    """A launch of the entry point's own call, `gemm_quant(problem.op, a, b, a_scale, b_scale,
    out_dtype=out.dtype, target=target, out=out)`, lookup and fallback included on every call
    (`autotune.kernels.served_launch`); ValueError where the inputs or `out` are not `problem`'s."""
    op = problem.op
    if len(inputs) != 4:
        raise ValueError(f"{op} takes (a, b, a_scale, b_scale), got {len(inputs)} inputs")
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a torch.Tensor, got {type(out).__name__}")
    a, b, a_scale, b_scale = inputs
    dtype = out.dtype
    given = _problem(op, a, b, dtype, target)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    _check_out(op, out, problem, dtype, a)

    def launch() -> None:
        gemm_quant(op, a, b, a_scale, b_scale, out_dtype=dtype, target=target, out=out)

    return launch
