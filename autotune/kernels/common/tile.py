"""Triton helpers on one tile's offsets and values, shared by the ops' kernels.

Imported lazily (it imports triton). A kernel imports these names from this module itself (not from the
package), so that they are part of its backend's version (`autotune.core.codehash.module_files`).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["column_halves", "edge_clamped"]


@triton.jit
def edge_clamped(start, BLOCK: tl.constexpr, limit):
    """Offsets start .. start + BLOCK - 1, those past `limit` clamped to limit - 1: a tile's loads stay in
    bounds without masks (the stores are masked). One min per offset, where a wrap (offs % limit) costs
    a division each: on sm_90 the FP8 decode kernel's prologue took 340 instructions before its first
    load with the wrap, against 88 for the same tile without it."""
    return tl.minimum(start + tl.arange(0, BLOCK), limit - 1)


@triton.jit
def column_halves(x):
    """x (R, W) as its two column halves (R, W / 2): (x[:, :W / 2], x[:, W / 2:])."""
    return x.reshape(x.shape[0], 2, x.shape[1] // 2).permute(0, 2, 1).split()
