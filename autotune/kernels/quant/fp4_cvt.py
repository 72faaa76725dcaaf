"""A CPU model of gfx950's FP4 conversion, v_cvt_scalef32_pk_fp4_{bf16,f32}, and of the MXFP4 quantizer
that `gemm_mxfp4_bf16a` runs with it (HW_FP4_CVT), in plain PyTorch.

The instruction (AMD CDNA4 ISA): two values (a packed pair of bf16, or two fp32) are divided by the power
of two that the exponent field of the fp32 `scale` operand gives, then each is converted to e2m1 with
round-to-nearest-even and packed into one byte, the first value in the low nibble; op_sel picks which
byte of the destination is written. The model takes, where the ISA text says less:

- the scale is 2^(E - 127) for its exponent field E, its sign and mantissa ignored; E = 0 is 2^-127 (as
  e8m0), and E = 255 (no e8m0 scale the kernel passes: it stays at most 253) is refused;
- the division is exact (a power of two), so rounding happens once, on the quotient;
- magnitudes past 6 (the largest e2m1), infinities included, saturate to ±6;
- the sign bit is kept: a negative value that rounds to zero (and -0.0) gives code 8, -0;
- NaN, which e2m1 cannot hold, gives +0 (not documented; `quant.quantize_mx` does the same).

The kernel's scale of a 32-group is the floor rule of `quant.quantize_mx`: 2^(E_max - 2) with E_max the
largest exponent field of the group (the exponent of its amax; 253 where it holds inf or NaN), clamped at
0. Another rule in use rounds amax first (its fp32 bits + 0x200000, & 0xFF800000, >> 23: `rounded_scale`):
it gives a scale one larger exactly where the amax's mantissa is at least 1.75, so that amax / scale
rounds to 4 instead of saturating at 6 from 7 up. The two quantizers differ from each other only there and
on -0.0 (code 8 here, 0 in `quantize_mx`; both decode to 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from autotune.kernels.common.formats import MX_BLOCK

__all__ = ["cvt_pk_fp4", "floor_scale", "quantize_words", "rounded_scale"]

_E2M1_MAX = 6.0


def _exponent_field(x: Tensor) -> Tensor:
    """The biased exponent field (int32) of fp32 or bf16 values."""
    bits = x.float().contiguous().view(torch.int32)
    return (bits >> 23) & 0xFF


def _e2m1_round(y: Tensor) -> Tensor:
    """float64 quotients → e2m1 codes (uint8): the step is 0.5 below 2 (subnormals 0 and 0.5, then 1 and
    1.5), 1 in [2, 4), 2 from 4; round half to even on that step, saturate at 6, keep the sign bit;
    NaN → 0."""
    a = y.abs()
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0)).to(torch.float64)
    mag = torch.clamp(torch.round(torch.nan_to_num(a, nan=0.0, posinf=8.0) / step) * step, max=_E2M1_MAX)
    grid = torch.tensor((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0), dtype=torch.float64)
    code = torch.searchsorted(grid, mag.contiguous()).to(torch.uint8)  # exact: mag is on the grid
    negative = torch.signbit(y) & ~torch.isnan(y)
    return code | (negative.to(torch.uint8) << 3)


def cvt_pk_fp4(lo: Tensor, hi: Tensor, scale: Tensor) -> Tensor:
    """The instruction on pairs: e2m1(lo / s) | e2m1(hi / s) << 4 (uint8) with s = 2^(E - 127) from the
    exponent field E of `scale` (fp32, broadcast against lo and hi: bf16 or fp32 values).
    ValueError for a scale whose exponent field is 255."""
    e = _exponent_field(scale.float())
    if bool((e == 255).any()):
        raise ValueError("a scale with exponent field 255 (inf/NaN) is no e8m0 scale")
    inv = torch.exp2((127 - e).to(torch.float64))
    return _e2m1_round(lo.double() * inv) | (_e2m1_round(hi.double() * inv) << 4)


def floor_scale(groups: Tensor) -> Tensor:
    """e8m0 scales (uint8) of `groups` (..., 32): the largest exponent field minus 2, clamped at 0, read from
    each value's bits as the kernel does (the exponent of the amax, 255 for inf and NaN)."""
    e = _exponent_field(groups).amax(dim=-1)
    return (e - 2).clamp(min=0).to(torch.uint8)


def rounded_scale(groups: Tensor) -> Tensor:
    """The other rule: amax's fp32 bits + 0x200000 (its mantissa rounded at two bits, carrying into the
    exponent from 1.75 up), & 0xFF800000, >> 23, minus 2, clamped to [0, 254]."""
    bits = groups.float().abs().amax(dim=-1).contiguous().view(torch.int32)
    e = (((bits + 0x200000) & 0x7F800000) >> 23) & 0xFF
    return (e - 2).clamp(0, 254).to(torch.uint8)


def quantize_words(a: Tensor, scale_rule: str = "floor") -> tuple[Tensor, Tensor]:
    """bf16 A (rows, K) → (packed e2m1 bytes (rows, K / 2), e8m0 scales (rows, K / 32)) as the HW_FP4_CVT
    kernel makes them: the scale of each 32-group by `scale_rule` ("floor", the kernel's; "rounded"), then
    the instruction on each pair of consecutive values (one 32-bit word of A)."""
    if a.dtype != torch.bfloat16 or a.dim() != 2 or a.shape[1] % MX_BLOCK:
        raise ValueError(f"quantize_words takes bf16 (rows, K), K a multiple of {MX_BLOCK}; got "
                         f"{a.dtype} {tuple(a.shape)}")  # fmt: skip
    rules = {"floor": floor_scale, "rounded": rounded_scale}
    if scale_rule not in rules:
        raise ValueError(f"unknown scale rule {scale_rule!r}; known: {', '.join(rules)}")
    rows, K = a.shape
    groups = a.view(rows, K // MX_BLOCK, MX_BLOCK)
    s = rules[scale_rule](groups)
    scale = (s.to(torch.int32) << 23).view(torch.float32)  # 2^(s - 127) as the fp32 operand
    pairs = groups.view(rows, K // MX_BLOCK, MX_BLOCK // 2, 2)
    packed = cvt_pk_fp4(pairs[..., 0], pairs[..., 1], scale[..., None])
    return packed.view(rows, K // 2), s
