"""The run-time entry points as the modules of `autotune.nn` call them, each one node for torch.compile.

Rule: where an entry point runs a registered torch op (`torch.ops.autotune.<name>`: one graph node with a
fake implementation), it is called as it is. Where it does not (a build of `autotune.kernels` without its
ops), dynamo would trace into its Python caches and Triton launches (and fail in the interpreter), so it
runs under `torch.compiler.disable` instead: a graph break per call, the code around it (the activation
quantization, reshapes, the bias) still compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from autotune.kernels import fused_moe as _fused_moe
from autotune.kernels import gemm_quant as _gemm_quant
from autotune.kernels import linear as _linear

__all__ = ["fused_moe", "gemm_quant", "is_torch_op", "linear"]

F = TypeVar("F", bound=Callable[..., Any])


def is_torch_op(name: str) -> bool:
    """Whether `autotune::<name>` is a registered torch op."""
    try:
        getattr(torch.ops.autotune, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _one_node(name: str, fn: F) -> F:
    """`fn` where it runs the op autotune::`name`, else `fn` under `torch.compiler.disable`."""
    return fn if is_torch_op(name) else torch.compiler.disable(fn)


def _linear_call(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _linear(x, weight, bias)


def _gemm_quant_call(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return _gemm_quant(op, a, b, a_scale, b_scale, out_dtype=out_dtype)


def _fused_moe_call(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: torch.Tensor | None,
    w2_scale: torch.Tensor | None,
    block_shape: list[int] | None,
) -> torch.Tensor:
    return _fused_moe(
        x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale, block_shape=block_shape
    )


#: `autotune.kernels.linear(x (..., K), weight (N, K), bias (N,) or None)`.
linear = _one_node("linear", _linear_call)
#: `autotune.kernels.gemm_quant(op, a, b, a_scale, b_scale, out_dtype=out_dtype)`.
gemm_quant = _one_node("gemm_quant", _gemm_quant_call)
#: `autotune.kernels.fused_moe(x, w1, w2, topk_weights, topk_ids, w1_scale=, w2_scale=, block_shape=)`.
fused_moe = _one_node("fused_moe", _fused_moe_call)
