"""Vendor backends of the quantized GEMMs: torch._scaled_mm (cuBLASLt / hipBLASLt) and aiter on ROCm.

What the installed torch supports is detected, never assumed: `probe_scaled_mm` runs each scaling mode
once on a tiny problem on the device (for the CPU interpreter: on the CPU), in each argument layout torch
versions have used, and keeps the first layout whose result matches our reference. The result (the
layout, or why none worked) is cached per process. aiter is used when it imports and has the function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import Tensor

import autotune.kernels.common.formats as quant
from autotune.core.problem import Problem
from autotune.core.target import Target

__all__ = [
    "SCALED_MM_MODES",
    "aiter_launch",
    "m_major",
    "probe_scaled_mm",
    "scaled_mm_launch",
    "vendor_reason",
]

log = logging.getLogger(__name__)

#: The torch._scaled_mm scaling mode of each op ("tensor" is chosen at launch for (1, 1) scales).
SCALED_MM_MODES = {
    "gemm_fp8_rowwise": "row",
    "gemm_fp8_blockwise": "blockwise",
    "gemm_mxfp8": "mxfp8",
    "gemm_mxfp4": "mxfp4",
}
_AITER_FUNCTIONS = {"gemm_fp8_rowwise": "gemm_a8w8_CK", "gemm_fp8_blockwise": "gemm_a8w8_blockscale"}

#: A builder turns (a, b, a_scale, b_scale) into a call that writes C into the tensor it is given.
_Builder = Callable[[Tensor, Tensor, Tensor, Tensor], Callable[[Tensor], None]]


def _to_blocked(s: Tensor) -> Tensor:
    """MX scales (rows, K/32) in cuBLAS's swizzled layout: 128x4 tiles, each stored as 32 rows of 16
    bytes where row r holds the scales of rows r, r+32, r+64, r+96 (rows and columns padded)."""
    rows, cols = s.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros(pr, pc, device=s.device, dtype=s.dtype)
    padded[:rows, :cols] = s
    tiles = padded.view(pr // 128, 128, pc // 4, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1)


def m_major(s: Tensor) -> Tensor:
    """`s` (M, G) with stride 1 along M, strides exactly (1, M): what cuBLAS's blockwise A scales must be.
    (`s.t().contiguous().t()` keeps the strides of a size-1 dimension as they were, so at M = 1 it gave
    (1, G), which torch refuses.)"""
    out = torch.empty_strided(s.shape, (1, s.shape[0]), dtype=s.dtype, device=s.device)
    return out.copy_(s)


def _b_block_scales(sb: Tensor, layout: str) -> Tensor:
    """B's 128x128 block scales (N/128, K/128) as `layout` says: "nk" contiguous, "kn" its transpose
    (a view); "_padded": the K (for "kn") or N (for "nk") blocks padded to a multiple of 4 with ones,
    stride 1 along them (what cuBLAS asks for on sm_90)."""
    if layout == "nk":
        return sb.contiguous()
    if layout == "kn":
        return sb.t()
    if layout == "nk_padded":
        rows = -(-sb.shape[0] // 4) * 4
        padded = sb.new_ones(rows, sb.shape[1])
        padded[: sb.shape[0]] = sb
        return padded.t().contiguous().t()
    if layout == "kn_padded":
        cols = -(-sb.shape[1] // 4) * 4
        padded = sb.new_ones(sb.shape[0], cols)
        padded[:, : sb.shape[1]] = sb
        return padded.t()
    raise ValueError(f"unknown block-scale layout {layout!r}")


def _builders(mode: str) -> list[tuple[str, _Builder]]:
    """The argument layouts to try for `mode`, each with a name for logs."""
    F = torch.nn.functional
    if mode in ("tensor", "row"):

        def rowwise(a: Tensor, b: Tensor, sa: Tensor, sb: Tensor) -> Callable[[Tensor], None]:
            sa2 = sa.reshape(()) if mode == "tensor" else sa.reshape(-1, 1).contiguous()
            sb2 = sb.reshape(()) if mode == "tensor" else sb.reshape(1, -1).contiguous()
            bt = b.t()

            def call(out: Tensor) -> None:
                torch._scaled_mm(a, bt, scale_a=sa2, scale_b=sb2, out_dtype=out.dtype, out=out)

            return call

        return [("_scaled_mm", rowwise)]
    if not hasattr(F, "scaled_mm"):
        return []
    S, Z = F.ScalingType, F.SwizzleType
    if mode == "blockwise":

        def blockwise(a_major: bool, b_layout: str) -> _Builder:
            def build(a: Tensor, b: Tensor, sa: Tensor, sb: Tensor) -> Callable[[Tensor], None]:
                sa2 = m_major(sa) if a_major else sa.contiguous()
                sb2 = _b_block_scales(sb, b_layout)
                bt = b.t()

                def call(out: Tensor) -> None:
                    out.copy_(F.scaled_mm(a, bt, sa2, S.BlockWise1x128, sb2, S.BlockWise128x128,
                                          output_dtype=out.dtype))  # fmt: skip

                return call

            return build

        return [
            (f"scaled_mm blockwise a_outer={am} b={bl}", blockwise(am, bl))
            for am in (True, False)
            for bl in ("kn_padded", "nk_padded", "kn", "nk")
        ]
    if mode in ("mxfp8", "mxfp4"):

        def mx(swizzle: bool) -> _Builder:
            def build(a: Tensor, b: Tensor, sa: Tensor, sb: Tensor) -> Callable[[Tensor], None]:
                if mode == "mxfp4":
                    a, b = a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2)
                e8m0 = torch.float8_e8m0fnu
                if swizzle:
                    sa2, sb2 = _to_blocked(sa).view(e8m0), _to_blocked(sb).view(e8m0)
                    sw = Z.SWIZZLE_32_4_4
                else:
                    sa2, sb2, sw = sa.contiguous().view(e8m0), sb.contiguous().view(e8m0), Z.NO_SWIZZLE
                bt = b.t()

                def call(out: Tensor) -> None:
                    out.copy_(F.scaled_mm(a, bt, sa2, S.BlockWise1x32, sb2, S.BlockWise1x32, swizzle_a=sw,
                                          swizzle_b=sw, output_dtype=out.dtype))  # fmt: skip

                return call

            return build

        return [("scaled_mm mx swizzled", mx(True)), ("scaled_mm mx plain", mx(False))]
    raise ValueError(f"unknown torch._scaled_mm mode {mode!r}")


def _probe_inputs(
    mode: str, device: str, fp8: torch.dtype, rows: int = 32
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(rows, 384, generator=gen)  # K/128 = 3 and N/128 = 2: transposed layouts fail the check
    w = torch.randn(256, 384, generator=gen) / 16
    if mode in ("tensor", "row", "blockwise"):
        blocks = {"tensor": ((0, 0), (0, 0)), "row": ((1, 0), (1, 0)), "blockwise": ((1, 128), (128, 128))}
        ba, bb = blocks[mode]
        a, sa = quant.quantize_fp8(x, fp8, ba)
        b, sb = quant.quantize_fp8(w, fp8, bb)
        ref = quant.dequantize_fp8(a, sa, ba) @ quant.dequantize_fp8(b, sb, bb).t()
    else:
        fmt = "e4m3" if mode == "mxfp8" else "e2m1"
        a, sa = quant.quantize_mx(x, fmt)
        b, sb = quant.quantize_mx(w, fmt)
        ref = quant.dequantize_mx(a, sa, fmt) @ quant.dequantize_mx(b, sb, fmt).t()
    return a.to(device), b.to(device), sa.to(device), sb.to(device), ref


@dataclass(frozen=True)
class _Probe:
    builder: _Builder | None
    reason: str


@cache
def probe_scaled_mm(device: str, mode: str, fp8_name: str = "fp8e4m3") -> _Probe:
    """Whether torch._scaled_mm runs `mode` on `device` with this torch, and in which layout: the first
    that runs and matches the reference; else why not (cached per process)."""
    arch = quant.device_arch(device)
    try:
        fp8 = quant.fp8_dtype(fp8_name, arch)
    except ValueError as exc:
        return _Probe(None, str(exc))
    builders = _builders(mode)
    if not builders:
        return _Probe(
            None, f"torch {torch.__version__} has no torch.nn.functional.scaled_mm for {mode} scales"
        )
    a, b, sa, sb, ref = _probe_inputs(mode, device, fp8)
    errors = []
    for name, build in builders:
        try:
            c = torch.empty(a.shape[0], b.shape[0], device=a.device, dtype=torch.bfloat16)
            build(a, b, sa, sb)(c)
            out = c.float().cpu()
        except Exception as exc:  # an unsupported mode raises one of many error types
            errors.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
            continue
        err = float((out - ref).norm() / ref.norm())
        if err == err and err < 2e-2:
            log.debug("torch._scaled_mm %s on %s: %s", mode, device, name)
            return _Probe(build, "")
        errors.append(f"{name}: wrong result (relative error {err:.3g})")
    return _Probe(
        None, f"torch {torch.__version__} _scaled_mm cannot run {mode} scales on {arch}: {'; '.join(errors)}"
    )


@cache
def probe_rows(device: str, mode: str, fp8_name: str, rows: int) -> str:
    """Why the layout `probe_scaled_mm` found cannot run A of `rows` rows ("" when it can): cuBLAS has
    blockwise kernels for some M only (on the H100 with torch 2.11 none at M = 1 or 2). A tiny GEMM of
    that M, checked against the reference; cached per process."""
    found = probe_scaled_mm(device, mode, fp8_name)
    if found.builder is None:
        return found.reason
    a, b, sa, sb, ref = _probe_inputs(
        mode, device, quant.fp8_dtype(fp8_name, quant.device_arch(device)), rows
    )
    try:
        c = torch.empty(rows, b.shape[0], device=a.device, dtype=torch.bfloat16)
        found.builder(a, b, sa, sb)(c)
        err = float((c.float().cpu() - ref).norm() / ref.norm())
    except Exception as exc:  # cuBLAS refuses the shape with one of many error types
        detail = str(exc).strip().splitlines()[0][:160]
        return f"torch._scaled_mm runs {mode} scales, but not with M={rows}: {type(exc).__name__}: {detail}"
    if not err < 2e-2:
        return (
            f"torch._scaled_mm runs {mode} scales, but gives a wrong result with M={rows} (error {err:.3g})"
        )
    return ""


def _device_for(target: Target) -> str | None:
    if target.interpreter:
        return "cpu"
    return "cuda" if target.present else None


def vendor_reason(backend: str, problem: Problem, target: Target) -> str:
    """Why `backend` cannot run `problem` on `target`; "" when it can."""
    if backend == "torch":
        mode = SCALED_MM_MODES.get(problem.op)
        if mode is None:
            return "torch has no GEMM that quantizes bf16 activations to MXFP4 inside its loop"
        device = _device_for(target)
        if device is None:
            return f"torch._scaled_mm support is probed on the GPU, and no {target.arch} is present"
        fp8_name = problem.dtype_a if mode != "mxfp4" else "fp8e4m3"
        return probe_scaled_mm(device, mode, fp8_name).reason or probe_rows(device, mode, fp8_name, problem.M)
    if backend == "aiter":
        if not target.is_amd:
            return "aiter runs on ROCm only"
        fn = _AITER_FUNCTIONS.get(problem.op)
        if fn is None:
            return f"aiter's {problem.op} kernels are not wired in (they want pre-shuffled weights)"
        if not target.present:
            return f"aiter runs on the GPU, and no {target.arch} is present"
        try:
            import aiter
        except Exception as exc:  # aiter missing or broken
            return f"aiter is not importable: {type(exc).__name__}: {exc}"
        if not hasattr(aiter, fn):
            return f"the installed aiter has no {fn}"
        return ""
    return f"{backend} is no vendor backend"


def scaled_mm_launch(
    problem: Problem, a: Tensor, b: Tensor, a_scale: Tensor, b_scale: Tensor, out: Tensor
) -> Callable[[], None]:
    """A launch of torch._scaled_mm writing `out`, in the layout the probe found; ValueError where the
    installed torch cannot run it."""
    mode = SCALED_MM_MODES.get(problem.op)
    if mode is None:
        raise ValueError(vendor_reason("torch", problem, Target.interpreter_target()))
    if mode == "row" and a_scale.numel() == 1 and b_scale.numel() == 1:
        mode = "tensor"
    device = "cpu" if a.device.type == "cpu" else "cuda"
    probe = probe_scaled_mm(device, mode, problem.dtype_a if mode != "mxfp4" else "fp8e4m3")
    if probe.builder is None:
        raise ValueError(probe.reason)
    if mode == "row" and (a_scale.numel() == 1) != (b_scale.numel() == 1):  # one per tensor, one per row
        a_scale = a_scale.expand(a.shape[0], 1) if a_scale.numel() == 1 else a_scale
        b_scale = b_scale.expand(b.shape[0], 1) if b_scale.numel() == 1 else b_scale
    call = probe.builder(a, b, a_scale, b_scale)

    def launch() -> None:
        call(out)

    return launch


def aiter_launch(
    problem: Problem, a: Tensor, b: Tensor, a_scale: Tensor, b_scale: Tensor, out: Tensor
) -> Callable[[], None]:
    """A launch of aiter's FP8 GEMM for `problem` writing `out` (ROCm with aiter installed)."""
    import aiter

    fn: Any = getattr(aiter, _AITER_FUNCTIONS[problem.op])
    if problem.op == "gemm_fp8_rowwise":
        sa = a_scale.expand(a.shape[0], 1).contiguous()
        sb = b_scale.expand(b.shape[0], 1).reshape(1, -1).contiguous()

        def launch() -> None:
            out.copy_(fn(a, b, sa, sb, None, out.dtype))

        return launch

    def launch_blockwise() -> None:
        out.copy_(fn(a, b, a_scale, b_scale, out.dtype))

    return launch_blockwise
