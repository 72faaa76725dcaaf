"""The GPU the kernels launch on, and what a target's hardware offers them.

Light (no triton; torch only once the running GPU is asked for).
"""

from __future__ import annotations

from functools import cache

from autotune.core.target import Target, TargetError, running_target

__all__ = ["has_tma", "launch_target", "mx_native"]


@cache
def launch_target() -> Target:
    """The target this process's entry points launch on: GPU 0, else the interpreter where
    TRITON_INTERPRET=1 (`autotune.core.target.running_target`), found once per process
    (`launch_target.cache_clear()` forgets it).

    Raises:
        TargetError: neither a GPU nor the interpreter (nothing is cached then).
    """
    target = running_target()
    if target is None:
        raise TargetError(
            "the entry points of autotune.kernels (gemm, gemm_quant, fused_moe, mla_decode) need a GPU; on "
            "a CPU-only machine set TRITON_INTERPRET=1 to run the Triton kernels in the interpreter"
        )
    return target


def has_tma(target: Target) -> bool:
    """Tensor descriptors with hardware TMA: NVIDIA Hopper and newer (and the interpreter, for tests)."""
    return target.interpreter or target.tma


def mx_native(target: Target) -> bool:
    """Whether `target` has MX matrix instructions (tl.dot_scaled runs natively): gfx950 and Blackwell.
    Elsewhere (gfx942, Hopper, the interpreter) MX tiles are dequantized to bf16 in the kernel."""
    return target.arch == "gfx950" or target.sm >= 100
