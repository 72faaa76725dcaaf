"""`Linear`: a drop-in `torch.nn.Linear` for inference whose GEMM is the tuned one of `autotune.kernels`."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from autotune.core.problem import Problem
from autotune.core.registry import layer_op
from autotune.kernels import LINEAR_WEIGHTS
from autotune.kernels.common.formats import device_arch, fp8_dtype, quantize_fp8
from autotune.nn import calls
from autotune.nn.quantize import quantize_groups, quantize_rows

__all__ = ["LINEAR_WEIGHTS", "Linear", "LinearWeights"]

#: How a `Linear` keeps its weights: None (the module's own bf16 or fp16), or FP8 per row or per block
#: (`LINEAR_WEIGHTS`: each FP8 kind with its quantized GEMM and the extent of one weight scale).
LinearWeights = Literal["fp8_rowwise", "fp8_blockwise"]
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _param(t: torch.Tensor) -> nn.Parameter:
    return t if isinstance(t, nn.Parameter) else nn.Parameter(t, requires_grad=False)


def _refuse(why: str) -> ValueError:
    return ValueError(f"autotune.nn.Linear cannot serve this layer: {why}")


class Linear(nn.Module):
    """y = x · Wᵀ + b through `autotune.kernels` (inference: no backward), built from a weight (N, K).

    Rules:
    - `weights=None` serves the bf16 or fp16 weight with `linear`; the weight and bias tensors are the
      ones given (shared with the module they came from, ties included).
    - "fp8_rowwise" (a scale per row of W and per token) and "fp8_blockwise" (a scale per 128x128 block of
      W and per 1x128 group of a token's K) quantize W once, here, to the e4m3 of the weight's device
      (`fp8_dtype`); each call quantizes its activations with plain torch ops (`autotune.nn.quantize`) and
      runs `gemm_quant`. The output has the original weight's dtype; the bias is kept as given.
    - Construction refuses what the kernels cannot serve, in one ValueError: a weight that is not 2-D
      bf16 or fp16 (float32 included), a bias of another shape, dtype or device, an unknown `weights`, a
      shape the op's rules refuse (blockwise: K a multiple of 128).
    - forward takes x (..., in_features) of the weight's dtype on its device and returns (...,
      out_features); anything else is one ValueError (TypeError for a non-tensor) before any launch.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, *, weights: LinearWeights | None = None
    ) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise _refuse(f"the weight must be a 2-D (out_features, in_features) tensor, got {weight!r:.80}")
        N, K = weight.shape
        dtype = _DTYPES.get(weight.dtype)
        if dtype is None:
            raise _refuse(f"its weight is {weight.dtype}; the kernels serve bf16 or fp16 (cast it first)")
        if bias is not None and (
            not isinstance(bias, torch.Tensor)
            or tuple(bias.shape) != (N,)
            or bias.dtype != weight.dtype
            or bias.device != weight.device
        ):
            shown: object = bias
            if isinstance(bias, torch.Tensor):
                shown = f"{tuple(bias.shape)} {bias.dtype} on {bias.device}"
            raise _refuse(f"the bias must be ({N},) {weight.dtype} on {weight.device}, got {shown}")
        if weights is not None and weights not in LINEAR_WEIGHTS:
            raise _refuse(f"weights must be None or one of {', '.join(LINEAR_WEIGHTS)}, got {weights!r}")
        if N == 0 or K == 0:
            raise _refuse(f"an empty weight ({N}, {K})")
        try:
            if weights is None:
                Problem.of(layer_op("linear"), 1, N, K, dtype)
            else:
                Problem.quant(LINEAR_WEIGHTS[weights][0], 1, N, K, dtype)
        except ValueError as exc:
            raise _refuse(str(exc)) from None
        self.in_features = K
        self.out_features = N
        self.weights: LinearWeights | None = weights
        #: The dtype of the activations taken and of the output (the original weight's).
        self.act_dtype = weight.dtype
        self.fp8_dtype: torch.dtype | None = None
        self.weight_scale: torch.Tensor | None
        if weights is None:
            self.weight = _param(weight)
            self.register_buffer("weight_scale", None)
        else:
            self.fp8_dtype = fp8_dtype("fp8e4m3", device_arch(weight.device))
            q, scale = quantize_fp8(weight.detach(), self.fp8_dtype, LINEAR_WEIGHTS[weights][1])
            self.register_buffer("weight", q)
            self.register_buffer("weight_scale", scale)
        self.bias: torch.Tensor | None
        self.bias = None if bias is None else _param(bias)

    @classmethod
    def from_linear(cls, module: nn.Linear, *, weights: LinearWeights | None = None) -> Linear:
        """The `Linear` of `module`'s weight and bias (shared where `weights` is None, else quantized)."""
        if not isinstance(module, nn.Linear):
            raise _refuse(f"expected a torch.nn.Linear, got {type(module).__name__}")
        return cls(module.weight, module.bias, weights=weights)

    def extra_repr(self) -> str:
        kind = _DTYPES[self.act_dtype] if self.weights is None else f"{self.weights} ({self.fp8_dtype})"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weights={kind}, out={_DTYPES[self.act_dtype]}"
        )

    def _check(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"autotune.nn.Linear takes a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"autotune.nn.Linear expects x of shape (..., {self.in_features}), got {tuple(x.shape)}"
            )
        if x.dtype != self.act_dtype:
            raise ValueError(f"autotune.nn.Linear takes {self.act_dtype} activations, got {x.dtype}")
        if x.device != self.weight.device:
            raise ValueError(
                f"autotune.nn.Linear's weight is on {self.weight.device}, x on {x.device}: one device needed"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check(x)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] == 0:
            return x.new_empty(*lead, self.out_features)
        if self.weights is None:
            return calls.linear(x2, self.weight, self.bias).reshape(*lead, self.out_features)
        assert self.fp8_dtype is not None and self.weight_scale is not None
        if self.weights == "fp8_rowwise":
            q, scale = quantize_rows(x2, self.fp8_dtype)
        else:
            q, scale = quantize_groups(x2, self.fp8_dtype)
        op = LINEAR_WEIGHTS[self.weights][0]
        y = calls.gemm_quant(op, q, self.weight, scale, self.weight_scale, self.act_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)
