"""Quantize and dequantize helpers of the quantized GEMMs, in plain PyTorch (no triton).

Formats:

- FP8 e4m3 with fp32 scales per tensor (1, 1), per row (rows, 1) or per block (rows/br, K/bk); e4m3fnuz
  on gfx942 (MI300X), e4m3fn elsewhere (`fp8_dtype`).
- MX (OCP microscaling): e8m0 scales (a biased power of two stored as uint8) per 1x32 along K over e4m3fn
  (MXFP8) or e2m1 (MXFP4, two values per byte, the first in the low nibble).

Every dequantizer reads exactly the bits a kernel reads, so `dequantize(q, s) @ ...` in fp32 is the
reference the kernels are checked against. The MX scale of a 32-group is 2^(floor(log2 amax) - emax) with
emax the element format's largest exponent (2 for e2m1, 8 for e4m3): the kernel computing it in the GEMM
loop (`gemm_mxfp4_bf16a`) gets it from the exponent bits of amax, as `mx_scale_exponent` does here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.problem import cdiv

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = [
    "E2M1_MAX",
    "MX_BLOCK",
    "dequantize_fp8",
    "dequantize_mx",
    "device_arch",
    "e2m1_decode",
    "e2m1_encode",
    "e8m0_to_float",
    "fp8_dtype",
    "mx_scale_exponent",
    "pack_fp4",
    "quantize_fp8",
    "quantize_mx",
    "unpack_fp4",
]

#: Elements per MX scale, along K.
MX_BLOCK = 32
#: Largest e2m1 magnitude, and the largest exponent of e2m1 and e4m3 elements.
E2M1_MAX = 6.0
_EMAX = {"e2m1": 2, "e4m3": 8}
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def fp8_dtype(name: str, arch: str) -> torch.dtype:
    """The torch dtype of FP8 `name` ("fp8e4m3": the target's own e4m3, "fp8e4m3fnuz") on `arch`.

    ValueError for a flavour the target has no matrix instructions for (e4m3fnuz off gfx942).
    """
    import torch

    if name == "fp8e4m3":
        return torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn
    if name == "fp8e4m3fnuz":
        if arch not in ("gfx942", "interpreter"):
            raise ValueError(
                f"{arch} has no e4m3fnuz FP8 (MI300X's flavour); use fp8e4m3, which is e4m3fn there"
            )
        return torch.float8_e4m3fnuz
    raise ValueError(f"unknown FP8 dtype {name!r}; known: fp8e4m3, fp8e4m3fnuz")


def device_arch(device: str | torch.device) -> str:
    """The arch of `device` as targets name it: "gfx942", "sm_90" ...; "interpreter" for the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return "interpreter"
    if dev.type != "cuda":
        return dev.type
    props = torch.cuda.get_device_properties(dev)
    if getattr(torch.version, "hip", None):
        return str(getattr(props, "gcnArchName", "")).split(":")[0]
    return f"sm_{props.major}{props.minor}"


# -- FP8 with fp32 scales ---------------------------------------------------------------------------------


def quantize_fp8(x: Tensor, dtype: torch.dtype, block: tuple[int, int] = (1, 0)) -> tuple[Tensor, Tensor]:
    """x (rows, K) → (q in `dtype`, fp32 scales) with x ≈ q · scale.

    `block` is the (rows, K) extent of one scale; 0 means all of it: (0, 0) one scale per tensor (1, 1),
    (1, 0) one per row (rows, 1), (1, 128) per 1x128 group and (128, 128) per block, a partial block at
    the edge of rows getting its own scale. Each scale maps its block's amax onto the format's largest value.
    """
    import torch

    if x.dim() != 2:
        raise ValueError(f"quantize_fp8 takes a 2-D tensor, got shape {tuple(x.shape)}")
    rows, K = x.shape
    br, bk = block[0] or rows, block[1] or K
    if K % bk:
        raise ValueError(f"K={K} is not a multiple of the scale block {bk}")
    nr, nk = cdiv(rows, br), K // bk
    xf = x.float()
    padded = torch.zeros(nr * br, K, device=x.device, dtype=torch.float32)
    padded[:rows] = xf
    amax = padded.view(nr, br, nk, bk).abs().amax(dim=(1, 3))
    scale = (amax / torch.finfo(dtype).max).clamp(min=1e-12)
    full = scale.repeat_interleave(br, 0)[:rows].repeat_interleave(bk, 1)
    q = (xf / full).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype)
    return q, scale.contiguous()


def dequantize_fp8(q: Tensor, scale: Tensor, block: tuple[int, int] = (1, 0)) -> Tensor:
    """q (rows, K) times its fp32 scales, one per `block` as in `quantize_fp8`, in fp32. A (1, 1) scale
    is one per tensor whatever `block` says."""
    rows, K = q.shape
    br, bk = block[0] or rows, block[1] or K
    if scale.numel() == 1:
        br, bk = rows, K
    if scale.shape != (cdiv(rows, br), K // bk):
        raise ValueError(f"scales of shape {tuple(scale.shape)} do not fit {rows}x{K} in blocks {block}")
    full = scale.float().repeat_interleave(br, 0)[:rows].repeat_interleave(bk, 1)
    return q.float() * full


# -- MX: e8m0 scales per 1x32 ------------------------------------------------------------------------------


def e8m0_to_float(s: Tensor) -> Tensor:
    """e8m0 scales (uint8, bias 127) as fp32 powers of two; 0 is 2^-127 (255, NaN, is never produced)."""
    import torch

    return torch.exp2(s.to(torch.int32).float() - 127.0)


def mx_scale_exponent(amax: Tensor, fmt: str) -> Tensor:
    """The e8m0 scale (uint8) of groups with largest magnitude `amax` (fp32): the biased exponent of amax
    (its fp32 exponent bits) minus the element format's emax, clamped to [0, 254]."""
    import torch

    biased = (amax.float().contiguous().view(torch.int32) >> 23) & 0xFF
    return (biased - _EMAX[fmt]).clamp(0, 254).to(torch.uint8)


def e2m1_encode(y: Tensor) -> Tensor:
    """fp32 values (already divided by their scale) → e2m1 codes (uint8, sign in bit 3), rounded to the
    nearest e2m1 value with ties to even and saturated at ±6. The kernel uses the same thresholds."""
    import torch

    a = y.abs()
    code = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    )
    return code | ((y < 0).to(torch.uint8) << 3)


def e2m1_decode(code: Tensor) -> Tensor:
    """e2m1 codes (uint8, low 4 bits) → fp32 values."""
    import torch

    lut = torch.tensor(_E2M1_VALUES, device=code.device, dtype=torch.float32)
    c = code.to(torch.int64)
    mag = lut[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def pack_fp4(code: Tensor) -> Tensor:
    """e2m1 codes (..., K) → bytes (..., K / 2), element 2i in the low nibble of byte i."""
    import torch

    if code.shape[-1] % 2:
        raise ValueError(f"packing FP4 needs an even last dimension, got {code.shape[-1]}")
    pairs = code.to(torch.uint8).view(*code.shape[:-1], code.shape[-1] // 2, 2)
    return (pairs[..., 0] & 0xF) | ((pairs[..., 1] & 0xF) << 4)


def unpack_fp4(packed: Tensor) -> Tensor:
    """bytes (..., K / 2) → e2m1 codes (..., K)."""
    import torch

    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).view(*packed.shape[:-1], packed.shape[-1] * 2)


def quantize_mx(x: Tensor, fmt: str) -> tuple[Tensor, Tensor]:
    """x (rows, K) → (data, e8m0 scales (rows, K / 32) uint8); `fmt` "e4m3" gives float8_e4m3fn data,
    "e2m1" packed FP4 bytes (rows, K / 2). Values past the element format's range saturate."""
    import torch

    if fmt not in _EMAX:
        raise ValueError(f"unknown MX element format {fmt!r}; known: {', '.join(_EMAX)}")
    if x.dim() != 2 or x.shape[1] % MX_BLOCK:
        raise ValueError(f"quantize_mx takes (rows, K) with K a multiple of {MX_BLOCK}, got {tuple(x.shape)}")
    rows, K = x.shape
    groups = x.float().view(rows, K // MX_BLOCK, MX_BLOCK)
    scale = mx_scale_exponent(groups.abs().amax(dim=-1), fmt)
    y = groups * e8m0_to_float(254 - scale.to(torch.int32))[..., None]  # exact: a power of two
    y = y.view(rows, K)
    if fmt == "e4m3":
        big = torch.finfo(torch.float8_e4m3fn).max
        return y.clamp(-big, big).to(torch.float8_e4m3fn), scale
    return pack_fp4(e2m1_encode(y)), scale


def dequantize_mx(data: Tensor, scale: Tensor, fmt: str) -> Tensor:
    """MX `data` (float8_e4m3fn (rows, K), or packed e2m1 bytes (rows, K / 2)) and e8m0 `scale`
    (rows, K / 32) → fp32 (rows, K)."""
    values = e2m1_decode(unpack_fp4(data)) if fmt == "e2m1" else data.float()
    rows, K = values.shape
    s = e8m0_to_float(scale)
    return (values.view(rows, K // MX_BLOCK, MX_BLOCK) * s[..., None]).view(rows, K)
