"""Shared by the tests of `autotune.nn`: the relative error that NaN cannot pass, and a launch guard."""

from __future__ import annotations

from typing import Any

import pytest
import torch

#: ‖out − ref‖ / ‖ref‖ allowed for a bf16 or fp16 output against an fp32 reference of the same inputs.
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; inf where out is not finite (NaN never passes), ref must be random."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
    assert torch.isfinite(ref64).all() and float(ref64.norm()) > 0, "the reference is not finite and non-zero"
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm())


def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every entry point that the modules call fail the test: checks must come before any launch."""
    import autotune.nn.calls as calls

    def launched(*args: Any, **kwargs: Any) -> Any:
        pytest.fail("a kernel was launched")

    for name in ("linear", "gemm_quant", "fused_moe"):
        monkeypatch.setattr(calls, name, launched)
