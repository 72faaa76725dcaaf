"""The MoE's baseline, backend "torch": per expert, gather its tokens, two torch matmuls, a weighted
scatter-add. Its version is this module's code and the reference helpers it imports (`moe.ref`), with
torch's version."""

from __future__ import annotations

from typing import Any

from autotune.core.op import Launch
from autotune.kernels.moe.ref import (
    FP8_BLOCK,
    dequantize_blockwise,
    dequantize_mxfp4_weight,
    quantize_fp8_act_groupwise,
)

__all__ = ["torch_loop_launch"]


def torch_loop_launch(
    x: Any, w1: Any, w2: Any, weights: Any, ids: Any, w1s: Any, w2s: Any, out: Any
) -> Launch:
    """The baseline: per expert, gather its tokens, two torch matmuls in the activation dtype, weighted
    scatter-add into an fp32 sum. With FP8 weights it computes on the values the kernel reads: weights
    dequantized with their block scales (once, here), activations quantized per 1x128 group; MXFP4
    weights are dequantized to the activation dtype once, here (exact)."""
    import torch
    import torch.nn.functional as F

    E = w1.shape[0]
    topk = ids.shape[1]
    flat = ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E).tolist()  # host sync once, at prepare time
    tokens = (order // topk).to(torch.int64)
    gates = weights.reshape(-1)[order].to(torch.float32)
    group = FP8_BLOCK[1]
    fp8 = w1s is not None and w1.dtype != torch.uint8
    fp8_dtype = w1.dtype
    if w1.dtype == torch.uint8:  # MXFP4
        w1, w2 = dequantize_mxfp4_weight(w1, w1s).to(x.dtype), dequantize_mxfp4_weight(w2, w2s).to(x.dtype)
    elif fp8:  # dequantized once, as a framework without FP8 kernels would keep them
        w1, w2 = (dequantize_blockwise(w, s, FP8_BLOCK).to(x.dtype) for w, s in ((w1, w1s), (w2, w2s)))

    def act(a: Any) -> Any:
        if not fp8:
            return a
        q, scale = quantize_fp8_act_groupwise(a, group, fp8_dtype)
        return dequantize_blockwise(q, scale, (1, group)).to(x.dtype)

    def launch() -> None:
        acc = torch.zeros(out.shape, device=out.device, dtype=torch.float32)
        xa = act(x)
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            rows = tokens[start : start + n]
            h = xa[rows] @ w1[e].t()
            half = h.shape[1] // 2
            y = act(F.silu(h[:, :half]) * h[:, half:]) @ w2[e].t()
            acc.index_add_(0, rows, y.float() * gates[start : start + n, None])
            start += n
        out.copy_(acc)

    return launch
