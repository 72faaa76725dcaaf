"""The knobs of the ops' tiled Triton GEMMs and their values on a target.

The dense and the quantized GEMMs share the tile, split-K, warp and stage knobs (`knob_values`) and the
GEMV kernel's (`gemv_params`); the AMD-only knobs exist only on AMD targets, where they are passed to
Triton as compile options (`AMD_LAUNCH_OPTIONS`).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.core.config import Value
from autotune.core.target import Target

__all__ = ["AMD_LAUNCH_OPTIONS", "gemv_params", "knob_values", "tile_widths"]

#: Config parameters passed to Triton as compile options on AMD only.
AMD_LAUNCH_OPTIONS = ("matrix_instr_nonkdim", "waves_per_eu", "kpack")

_TILES = (16, 32, 64, 128, 256)


def tile_widths(target: Target) -> tuple[int, ...]:
    """The BLOCK_N values of `knob_values` on `target`: 16 and 32 on the interpreter; from 16 to 256 on
    AMD; from 32 on NVIDIA."""
    if target.interpreter:
        return (16, 32)
    return _TILES if target.is_amd else _TILES[1:]


def knob_values(
    target: Target,
    *,
    k_tiles: Sequence[int],
    nvidia_stages: Sequence[int],
    interpreter_k_tiles: Sequence[int],
    in_launch: bool = False,
) -> dict[str, Sequence[Value]]:
    """The tile, split-K, warp and stage knobs of a Triton GEMM on `target`, with the AMD knobs
    (matrix_instr_nonkdim, waves_per_eu, XCD remap, kpack on gfx942) only on AMD; the dense and the
    quantized GEMMs differ only in their K tiles and NVIDIA pipeline depths. `in_launch` adds the knobs of
    the kernels that sum K parts in their own launch: FUSED_SPLIT (the SPLIT_K slices) and STREAM_K
    (programs per CU that share the K steps of all tiles evenly; 0 = one program per tile and K slice)."""
    streams: dict[str, Sequence[Value]] = {}
    if in_launch:
        streams = {"FUSED_SPLIT": (0, 1), "STREAM_K": (0, 1) if target.interpreter else (0, 1, 2)}
    if target.interpreter:
        return (
            dict(
                BLOCK_M=(16, 32),
                BLOCK_N=tile_widths(target),
                BLOCK_K=tuple(interpreter_k_tiles),
                GROUP_M=(1, 4),
                SPLIT_K=(1, 2, 4),
                num_warps=(4,),
                num_stages=(1,),
            )
            | streams
        )
    common: dict[str, Sequence[Value]] = dict(
        BLOCK_M=_TILES,
        BLOCK_N=tile_widths(target),
        BLOCK_K=tuple(k_tiles),
        GROUP_M=(1, 8),
        SPLIT_K=(1, 2, 4, 8, 16),
        num_warps=(4, 8),
    )
    if target.is_amd:
        amd: dict[str, Sequence[Value]] = dict(
            num_stages=(1, 2),
            matrix_instr_nonkdim=(16, 32),
            waves_per_eu=(0, 1, 2),
            NUM_XCDS=(1, target.xcds) if target.xcds > 1 else (1,),
        )
        if target.arch == "gfx942":
            amd["kpack"] = (1, 2)
        return {**common, **amd, **streams}
    return {**common, "num_stages": tuple(nvidia_stages), **streams}


def gemv_params(target: Target) -> dict[str, Sequence[Value]]:
    """Knobs of the GEMV kernels (A of at most 4 rows): columns of C and K step per program, warps, and
    stages (1: no software pipelining of the loads)."""
    if target.interpreter:
        return dict(BLOCK_N=(4, 8), BLOCK_K=(32, 64), num_warps=(4,), num_stages=(1,))
    return dict(BLOCK_N=(4, 8, 16), BLOCK_K=(256, 512, 1024), num_warps=(4, 8), num_stages=(1, 3))
