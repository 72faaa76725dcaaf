"""Routing for the run-time MoE entry point: top-k selection and a block alignment that never reads the
routing back to the host, so a call can be captured in a CUDA/HIP graph.

`align_fixed(topk_ids, block_m, E)` does what `moe.ref.align_block_size` does (the (token, slot) pairs
sorted by expert, each expert's group padded to a multiple of `block_m`, one expert id per block), but on
a grid sized from the shapes alone: the most blocks any routing of M·topk pairs over E experts can need,
min(E, M·topk) groups padded. Blocks past the routed ones hold only the sentinel M·topk and the expert id
-1: the kernel's programs for them return at once. Two Triton launches of one program per expert do it
(`moe.align`), with sizes known from the shapes (no bincount, no nonzero, no `.item()`).

`fused_topk` is a registered torch op (`TORCH_OPS`: autotune::fused_topk; see `autotune.kernels.torch_ops`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune.core.target import interpreting
from autotune.kernels.moe.ref import route
from autotune.kernels.torch_ops import TorchOp, eager, explained, register

__all__ = ["TORCH_OPS", "Buffers", "align_fixed", "fixed_padded", "fresh_buffer", "fused_topk"]


#: Where the MoE takes its intermediate tensors: (name, shape, dtype, device) → an uninitialized tensor.
Buffers = Callable[[str, tuple[int, ...], torch.dtype, torch.device], torch.Tensor]


def fresh_buffer(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A new tensor for each call (the caching allocator's): the default `buffers`."""
    return torch.empty(shape, dtype=dtype, device=device)


def fixed_padded(pairs: int, num_experts: int, block_m: int) -> int:
    """The sorted-id slots of the worst routing of `pairs` (token, slot) pairs: each of the at most
    min(E, pairs) busy experts padded to `block_m`, rounded to whole blocks."""
    busy = min(num_experts, pairs)
    return -(-(pairs + busy * (block_m - 1)) // block_m) * block_m


def align_fixed(
    topk_ids: torch.Tensor, block_m: int, num_experts: int, buffers: Buffers = fresh_buffer
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(sorted_ids int32 (P,), expert_ids int32 (P / block_m,), P) with P = `fixed_padded`: the layout of
    `align_block_size`, then padding blocks (sentinel ids, expert -1) up to P. Pairs out of [0, E) must
    be ruled out by the caller (they are not read back here). `buffers` gives the two results and the
    launches' scratch (by default new tensors)."""
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be (M, topk), got shape {tuple(topk_ids.shape)}")
    if block_m < 1:
        raise ValueError(f"block_m must be >= 1, got {block_m}")
    device = topk_ids.device
    n = topk_ids.numel()
    slots = fixed_padded(n, num_experts, block_m)
    sorted_ids = buffers("sorted_ids", (slots,), torch.int32, device)
    expert_ids = buffers("expert_ids", (slots // block_m,), torch.int32, device)
    if device.type == "meta" or n == 0:  # no data (a compile-only recording), or no slot at all
        return sorted_ids, expert_ids, slots
    if device.type == "cpu" and not interpreting():
        raise ValueError(
            "align_fixed runs Triton kernels: give it a GPU's tensors, or set TRITON_INTERPRET=1"
        )
    from autotune.kernels.moe.align import align_on_device, spans_for

    counts = buffers("expert_counts", (num_experts * spans_for(n, num_experts),), torch.int32, device)
    align_on_device(topk_ids.reshape(-1).contiguous(), block_m, num_experts, sorted_ids, expert_ids, counts)
    return sorted_ids, expert_ids, slots


def _check_topk(hidden_states: Any, gating_output: Any, topk: int) -> tuple[int, int]:
    """The shapes' checks (no data read): (M, E)."""
    if not isinstance(hidden_states, torch.Tensor) or not isinstance(gating_output, torch.Tensor):
        raise TypeError(
            f"fused_topk takes tensors hidden_states and gating_output, got {type(hidden_states).__name__} "
            f"and {type(gating_output).__name__}"
        )
    if gating_output.dim() != 2 or gating_output.shape[0] != hidden_states.shape[0]:
        raise ValueError(
            f"gating_output must be (M={hidden_states.shape[0]}, E), got {tuple(gating_output.shape)}"
        )
    if gating_output.device != hidden_states.device:
        raise ValueError(
            f"gating_output is on {gating_output.device}, hidden_states on {hidden_states.device}: one device"
        )
    M, E = gating_output.shape
    if not 1 <= topk <= E:
        raise ValueError(f"topk must be in [1, E={E}], got {topk}")
    return M, E


def _fused_topk_impl(
    hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """autotune::fused_topk: the checks, then `moe.ref.route`."""
    _check_topk(hidden_states, gating_output, topk)
    return route(gating_output, topk, renormalize)


def _fused_topk_fake(
    hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    M, _ = _check_topk(hidden_states, gating_output, topk)
    weights = gating_output.new_empty((M, topk), dtype=torch.float32)
    return weights, gating_output.new_empty((M, topk), dtype=torch.int32)


def fused_topk(
    hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k experts of each token from its router logits (M, E) and their weights, with vLLM's
    `fused_topk` arguments (`moe.ref.route`: softmax in fp32, the `topk` largest, renormalized to sum to 1
    if asked). Returns (topk_weights fp32 (M, topk), topk_ids int32 (M, topk)). ValueError for
    mismatched shapes. Runs the op autotune::fused_topk."""
    if eager(hidden_states, gating_output):
        return _fused_topk_impl(hidden_states, gating_output, topk, renormalize)
    try:
        weights, ids = _FUSED_TOPK(hidden_states, gating_output, topk, renormalize)
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(exc, _check_topk, hidden_states, gating_output, topk) from None
    return weights, ids


#: The ops of this module (`autotune.kernels.torch_ops.register`).
TORCH_OPS = (
    TorchOp(
        "fused_topk(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize=True) "
        "-> (Tensor, Tensor)",
        _fused_topk_impl,
        _fused_topk_fake,
    ),
)
(_FUSED_TOPK,) = register(*TORCH_OPS)
