"""Reading the sparse MoE blocks of `transformers`' Mixtral and Qwen3-MoE into vLLM's layout, by duck
typing: nothing here imports transformers.

Layouts read (checked on transformers 4.57 and 5.x):

- 5.x: `gate` a router module with `weight` (E, K) and `top_k` (Qwen3: `norm_topk_prob`); `experts` fused:
  `gate_up_proj` (E, 2N, K), gate rows first, and `down_proj` (E, K, N) (their `is_transposed` and
  `is_concatenated` flags honoured); the block returns the hidden states.
- 4.x: `gate` an nn.Linear (K → E), `top_k` (Qwen3: `norm_topk_prob`) on the block; `experts` a ModuleList
  of MLPs: Mixtral's `w1` (gate), `w3` (up), `w2` (down), Qwen3's `gate_proj`, `up_proj`, `down_proj`; the
  block returns (hidden states, router logits).

Routing: Mixtral takes the softmax over all experts and renormalizes its top-k; Qwen3-MoE renormalizes only
where `norm_topk_prob`. Experts must be SiLU-gated MLPs without biases; anything else is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["MOE_BLOCKS", "MoeBlockWeights", "moe_block_family", "read_moe_block"]

#: The class names of the sparse MoE blocks read here, and their model family.
MOE_BLOCKS = {"MixtralSparseMoeBlock": "mixtral", "Qwen3MoeSparseMoeBlock": "qwen3_moe"}
_SILU = ("SiLU", "SiLUActivation")


@dataclass(frozen=True)
class MoeBlockWeights:
    """A sparse MoE block in vLLM's layout: `gate` (E, K) the router, `w1` (E, 2N, K) gate rows then up
    rows, `w2` (E, K, N); top-k routing renormalized where `renormalize`; `returns_logits` where the block
    returns (hidden states, router logits). Tensors are the block's own where its layout is vLLM's (5.x),
    else new stacks of its experts' weights."""

    family: str
    gate: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    topk: int
    renormalize: bool
    returns_logits: bool


def moe_block_family(module: nn.Module) -> str | None:
    """ "mixtral" or "qwen3_moe" for those models' sparse MoE blocks (by class name), else None."""
    for cls in type(module).__mro__:
        family = MOE_BLOCKS.get(cls.__name__)
        if family is not None:
            return family
    return None


def _refuse(block: nn.Module, why: str) -> ValueError:
    return ValueError(f"cannot read {type(block).__name__}: {why}")


def _silu(block: nn.Module, act: object) -> None:
    if type(act).__name__ not in _SILU and not isinstance(act, nn.SiLU):
        raise _refuse(block, f"its experts' activation is {type(act).__name__}; the fused kernel's is SiLU")


def _fused_experts(block: nn.Module, experts: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """w1 (E, 2N, K) and w2 (E, K, N) of 5.x experts (`gate_up_proj`, `down_proj`)."""
    if not getattr(experts, "has_gate", True) or getattr(experts, "has_bias", False):
        raise _refuse(block, "its experts have biases or no gate; the fused kernel serves SiLU(gate)·up MLPs")
    if getattr(experts, "has_post_expert_norm", False):
        raise _refuse(block, "its experts normalize their outputs; the fused kernel does not")
    _silu(block, getattr(experts, "act_fn", None))
    w1, w2 = experts.gate_up_proj, experts.down_proj
    if not isinstance(w1, torch.Tensor) or not isinstance(w2, torch.Tensor) or w1.dim() != 3 or w2.dim() != 3:
        raise _refuse(block, "its experts' gate_up_proj and down_proj are not 3-D tensors")
    if getattr(experts, "is_transposed", False):  # (E, K, 2N) and (E, N, K)
        w1, w2 = w1.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()
    if not getattr(experts, "is_concatenated", True):  # gate and up rows interleaved
        w1 = torch.cat((w1[:, 0::2], w1[:, 1::2]), dim=1)
    return w1, w2


def _expert_list(
    block: nn.Module, experts: nn.ModuleList, names: tuple[str, str, str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """w1 and w2 stacked from 4.x experts, each an MLP whose Linears are called `names` (gate, up, down)."""
    gates, downs = [], []
    for expert in experts:
        found = [getattr(expert, name, None) for name in names]
        layers = [layer for layer in found if isinstance(layer, nn.Linear)]
        if len(layers) != len(names):
            raise _refuse(block, f"an expert ({type(expert).__name__}) lacks the Linears {', '.join(names)}")
        if any(layer.bias is not None for layer in layers):
            raise _refuse(block, "its experts' Linears have biases; the fused kernel has none")
        _silu(block, getattr(expert, "act_fn", None))
        gate, up, down = (layer.weight for layer in layers)
        gates.append(torch.cat((gate.detach(), up.detach()), dim=0))
        downs.append(down.detach())
    if not gates:
        raise _refuse(block, "it has no experts")
    return torch.stack(gates), torch.stack(downs)


def read_moe_block(block: nn.Module) -> MoeBlockWeights:
    """The weights and routing of a Mixtral or Qwen3-MoE sparse MoE block (module docstring); ValueError
    naming what does not fit."""
    family = moe_block_family(block)
    if family is None:
        raise _refuse(block, f"not one of {', '.join(MOE_BLOCKS)}")
    router, experts = getattr(block, "gate", None), getattr(block, "experts", None)
    if router is None or experts is None:
        raise _refuse(block, "it lacks `gate` (the router) or `experts`")
    gate = getattr(router, "weight", None)
    if not isinstance(gate, torch.Tensor) or gate.dim() != 2:
        raise _refuse(block, "its router has no 2-D weight (E, hidden)")
    if getattr(router, "bias", None) is not None:
        raise _refuse(block, "its router has a bias")
    names = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    if isinstance(experts, nn.ModuleList):  # 4.x: the routing's settings on the block
        w1, w2 = _expert_list(block, experts, names)
        topk, norm, legacy = getattr(block, "top_k", None), getattr(block, "norm_topk_prob", None), True
    elif hasattr(experts, "gate_up_proj") and hasattr(experts, "down_proj"):  # 5.x: on the router
        w1, w2 = _fused_experts(block, experts)
        topk, norm, legacy = getattr(router, "top_k", None), getattr(router, "norm_topk_prob", None), False
    else:
        raise _refuse(block, f"its experts ({type(experts).__name__}) are in a layout not read here")
    if not isinstance(topk, int):
        raise _refuse(block, "it does not say its top_k")
    renormalize = True if family == "mixtral" else bool(norm)
    return MoeBlockWeights(family, gate, w1, w2, topk, renormalize, legacy)
