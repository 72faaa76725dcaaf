"""How the gluon blockwise FP8 kernel splits K: shared by the kernel (`quant.gluon`) and its space
(`quant.space`), which must not import the kernel module (it needs a Triton with Gluon)."""

from __future__ import annotations

from autotune.core.problem import cdiv

__all__ = ["split_slices"]


def split_slices(k_groups: int, split_k: int) -> int:
    """How many non-empty K slices the gluon kernel's split of `k_groups` scale groups in `split_k` gives
    (cdiv(k_groups, split_k) groups each, the last the rest): it needs all split_k."""
    return cdiv(k_groups, cdiv(k_groups, split_k))
