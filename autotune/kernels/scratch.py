"""Scratch buffers of kernels that sum K slices in one launch: an fp32 workspace and int32 counters.

Kept per (device, stream): the counters must start at zero and the kernels leave them at zero, so they
live between launches. A buffer that is outgrown is kept alive too, because a captured CUDA graph may
still point at it. Imported lazily (it imports torch).
"""

from __future__ import annotations

import torch

__all__ = ["split_scratch"]

_scratch: dict[tuple[str, int], list[torch.Tensor]] = {}
_outgrown: list[torch.Tensor] = []


def split_scratch(device: torch.device, ws_elems: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An fp32 workspace of at least `ws_elems` and at least `counters` zeroed int32 counters for the
    current stream of `device`."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    bufs = _scratch.get(key)
    if bufs is None or bufs[0].numel() < ws_elems or bufs[1].numel() < counters:
        if bufs is not None:
            _outgrown.extend(bufs)
            ws_elems = max(ws_elems, bufs[0].numel())
            counters = max(counters, bufs[1].numel())
        bufs = [
            torch.empty(ws_elems, device=device, dtype=torch.float32),
            torch.zeros(counters, device=device, dtype=torch.int32),
        ]
        _scratch[key] = bufs
    return bufs[0], bufs[1]
