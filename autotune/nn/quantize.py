"""Per-call FP8 quantization of activations, in plain torch ops (torch.compile fuses them with their
neighbours).

Rule: each scale maps its group's amax onto the FP8 format's largest value (at least 1e-12), and the values
are divided by it, clamped and cast: exactly `autotune.kernels.common.formats.quantize_fp8` with block
(1, 0) (`quantize_rows`) or (1, group) (`quantize_groups`), without its padded copy.
"""

from __future__ import annotations

import torch

__all__ = ["FP8_GROUP", "quantize_groups", "quantize_rows"]

#: Elements of K under one activation scale of the blockwise FP8 GEMM (and one weight block's side).
FP8_GROUP = 128


def quantize_rows(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) → (q (M, K) in `dtype`, scales (M, 1) fp32): one scale per row."""
    fmax = torch.finfo(dtype).max
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / fmax).clamp(min=1e-12)
    return (xf / scale).clamp(-fmax, fmax).to(dtype), scale


def quantize_groups(
    x: torch.Tensor, dtype: torch.dtype, group: int = FP8_GROUP
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K), K a multiple of `group` → (q (M, K) in `dtype`, scales (M, K / group) fp32): one scale per
    row and `group` consecutive elements of K."""
    M, K = x.shape
    fmax = torch.finfo(dtype).max
    xf = x.float().reshape(M, K // group, group)
    scale = (xf.abs().amax(dim=-1, keepdim=True) / fmax).clamp(min=1e-12)
    q = (xf / scale).clamp(-fmax, fmax).to(dtype).reshape(M, K)
    return q, scale.reshape(M, K // group)
