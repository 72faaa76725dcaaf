"""`FusedMoE`: the router's top-k and the fused experts of a sparse MoE block as one module, for inference."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from autotune.core.problem import Problem
from autotune.core.registry import layer_op
from autotune.kernels import FP8_BLOCK, fused_topk, quantize_fp8_weight_blockwise
from autotune.kernels.common.formats import device_arch, fp8_dtype
from autotune.nn import calls
from autotune.nn.hf import read_moe_block

__all__ = ["FusedMoE", "MoeWeights"]

#: How a `FusedMoE` keeps its expert weights: None (the block's own bf16 or fp16) or FP8 per 128x128 block.
MoeWeights = Literal["fp8_blockwise"]
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _refuse(why: str) -> ValueError:
    return ValueError(f"autotune.nn.FusedMoE cannot serve this block: {why}")


def _param(t: torch.Tensor) -> nn.Parameter:
    return t if isinstance(t, nn.Parameter) else nn.Parameter(t, requires_grad=False)


class FusedMoE(nn.Module):
    """out = Σ_j w[t, j] · MLP_e(x[t]) over each token's top-k experts e: router logits x · gateᵀ,
    `fused_topk` (softmax over all E experts in fp32, the top-k, renormalized where `renormalize`), then
    `fused_moe`. Inference only (no backward).

    Rules:
    - Weights in vLLM's layout: `gate` (E, K) the router, `w1` (E, 2N, K) with the gate rows before the up
      rows, `w2` (E, K, N); one dtype (bf16 or fp16) and one device. Without `weights` the tensors given are
      kept (shared with their block); "fp8_blockwise" quantizes w1 and w2 once, here, to the e4m3 of their
      device with an fp32 scale per 128x128 block. The router stays in the given dtype: its logits choose
      the experts.
    - Construction refuses, in one ValueError, what `fused_moe` cannot serve (shapes that do not fit,
      float32, topk outside [1, E], a shape the op's rules refuse).
    - forward takes hidden_states (..., K) of the weights' dtype on their device and returns the same
      shape, or (that, router logits (tokens, E)) where `return_router_logits` (transformers 4.x blocks
      did). Anything else is one ValueError (TypeError for a non-tensor) before any launch.
    """

    def __init__(
        self,
        gate: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        *,
        topk: int,
        renormalize: bool,
        weights: MoeWeights | None = None,
        return_router_logits: bool = False,
    ) -> None:
        super().__init__()
        tensors = {"gate": gate, "w1": w1, "w2": w2}
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor):
                raise _refuse(f"{name} must be a tensor, got {type(t).__name__}")
        if gate.dim() != 2 or w1.dim() != 3 or w1.shape[1] % 2 or w1.shape[0] != gate.shape[0]:
            raise _refuse(f"gate must be (E, K), w1 (E, 2N, K), got {tuple(gate.shape)}, {tuple(w1.shape)}")
        E, K = gate.shape
        N = w1.shape[1] // 2
        if w1.shape[2] != K or tuple(w2.shape) != (E, K, N):
            raise _refuse(
                f"w1 must be (E={E}, 2N, K={K}) and w2 (E, K, N) to match, got {tuple(w1.shape)} and "
                f"{tuple(w2.shape)}"
            )
        dtypes = {t.dtype for t in tensors.values()}
        dtype = _DTYPES.get(gate.dtype)
        if len(dtypes) != 1 or dtype is None:
            shown = ", ".join(sorted(map(str, dtypes)))
            raise _refuse(f"gate, w1 and w2 must all be bf16 or all fp16, got {shown}")
        devices = {t.device for t in tensors.values()}
        if len(devices) != 1:
            raise _refuse(f"gate, w1 and w2 are on several devices: {', '.join(sorted(map(str, devices)))}")
        if weights is not None and weights != "fp8_blockwise":
            raise _refuse(f"weights must be None or 'fp8_blockwise', got {weights!r}")
        if not isinstance(topk, int) or not 1 <= topk <= E:
            raise _refuse(f"topk must be an int in [1, E={E}], got {topk!r}")
        if N == 0 or K == 0:
            raise _refuse(f"empty experts: N={N}, K={K}")
        try:
            Problem.of(layer_op("experts"), 1, N, K, dtype, "fp8e4m3" if weights else None, E=E, topk=topk)
        except ValueError as exc:
            raise _refuse(str(exc)) from None
        self.num_experts, self.hidden_size, self.intermediate_size = E, K, N
        self.topk, self.renormalize = topk, bool(renormalize)
        self.weights: MoeWeights | None = weights
        self.return_router_logits = bool(return_router_logits)
        #: The dtype of the hidden states taken and returned (the weights' own).
        self.act_dtype = gate.dtype
        self.fp8_dtype: torch.dtype | None = None
        self.gate = _param(gate)
        self.w1_scale: torch.Tensor | None
        self.w2_scale: torch.Tensor | None
        if weights is None:
            self.w1, self.w2 = _param(w1), _param(w2)
            self.register_buffer("w1_scale", None)
            self.register_buffer("w2_scale", None)
        else:
            self.fp8_dtype = fp8_dtype("fp8e4m3", device_arch(w1.device))
            for name, w in (("w1", w1), ("w2", w2)):
                q, scale = quantize_fp8_weight_blockwise(w.detach(), FP8_BLOCK, self.fp8_dtype)
                self.register_buffer(name, q)
                self.register_buffer(f"{name}_scale", scale)

    @classmethod
    def from_block(cls, block: nn.Module, *, weights: MoeWeights | None = None) -> FusedMoE:
        """The `FusedMoE` of a transformers Mixtral or Qwen3-MoE sparse MoE block (`autotune.nn.hf`: 4.x and
        5.x layouts), with its routing and its return value; ValueError for another block."""
        try:
            read = read_moe_block(block)
        except ValueError as exc:
            raise _refuse(str(exc)) from None
        return cls(
            read.gate, read.w1, read.w2, topk=read.topk, renormalize=read.renormalize, weights=weights,
            return_router_logits=read.returns_logits,
        )  # fmt: skip

    @classmethod
    def from_mixtral(cls, block: nn.Module, *, weights: MoeWeights | None = None) -> FusedMoE:
        """`from_block` for a `MixtralSparseMoeBlock` (softmax over all experts, top-k renormalized)."""
        return cls._from_family(block, "MixtralSparseMoeBlock", weights)

    @classmethod
    def from_qwen3_moe(cls, block: nn.Module, *, weights: MoeWeights | None = None) -> FusedMoE:
        """`from_block` for a `Qwen3MoeSparseMoeBlock` (top-k renormalized where `norm_topk_prob`)."""
        return cls._from_family(block, "Qwen3MoeSparseMoeBlock", weights)

    @classmethod
    def _from_family(cls, block: nn.Module, name: str, weights: MoeWeights | None) -> FusedMoE:
        if name not in {c.__name__ for c in type(block).__mro__}:
            raise _refuse(f"expected a {name}, got {type(block).__name__}")
        return cls.from_block(block, weights=weights)

    def extra_repr(self) -> str:
        kind = _DTYPES[self.act_dtype] if self.weights is None else f"{self.weights} ({self.fp8_dtype})"
        return (
            f"experts={self.num_experts}, hidden_size={self.hidden_size}, intermediate_size="
            f"{self.intermediate_size}, topk={self.topk}, renormalize={self.renormalize}, weights={kind}"
        )

    def _check(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"autotune.nn.FusedMoE takes a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != self.hidden_size:
            raise ValueError(
                f"autotune.nn.FusedMoE expects hidden_states of shape (..., {self.hidden_size}), got "
                f"{tuple(x.shape)}"
            )
        if x.dtype != self.act_dtype:
            raise ValueError(f"autotune.nn.FusedMoE takes {self.act_dtype} hidden states, got {x.dtype}")
        if x.device != self.gate.device:
            raise ValueError(
                f"autotune.nn.FusedMoE's weights are on {self.gate.device}, hidden states on {x.device}"
            )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        self._check(hidden_states)
        x = hidden_states.reshape(-1, self.hidden_size)
        if not x.is_contiguous():
            x = x.contiguous()
        logits = torch.nn.functional.linear(x, self.gate)
        if x.shape[0] == 0:
            out = torch.empty_like(hidden_states)
        else:
            topk_weights, topk_ids = fused_topk(x, logits, self.topk, self.renormalize)
            block = list(FP8_BLOCK) if self.weights else None
            out = calls.fused_moe(
                x, self.w1, self.w2, topk_weights, topk_ids, self.w1_scale, self.w2_scale, block
            )
            out = out.reshape(hidden_states.shape)
        return (out, logits) if self.return_router_logits else out
