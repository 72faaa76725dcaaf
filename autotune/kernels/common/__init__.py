"""The kernel library that the ops share: what several ops' kernels, spaces and entry points use, so that
no op imports another.

- `target`: the GPU the entry points launch on (`launch_target`), and what a target offers (`has_tma`,
  `mx_native`).
- `knobs`, `constraints`, `defaults`: the tiled, TMA and GEMV Triton GEMMs' knobs on a target, the rules
  their configs keep to, split-K for a grid that underfills the GPU, and fitting a default to its space.
- `geometry`: launch geometry, pure Python (GEMV rows, TMA tile parts and C slices, tail splits).
- `formats`: the FP8 and MX quantization formats, in plain PyTorch.
- Triton helpers, imported lazily (they import triton): `tile` (edge-clamped offsets, column halves),
  `grid` (XCD remap, grouped tile order, split-K and stream-K coordinates), `splitk` (the split-K reduce
  kernel and the sums of K parts in a GEMM's own launch), `tma` (tensor-descriptor tiles), `gemv` (the
  GEMV kernels' rows).
- Gluon for Hopper, not re-exported here (it needs a Triton with Gluon): `gluon_hopper` (the Triton 3.6 /
  3.9 shims, a ring's mbarrier protocol under warp specialization, the wgmma layout, the TMA check).

A kernel module imports these names from their module (`from autotune.kernels.common.tile import
edge_clamped`), not from this package: a backend's version hashes the modules its kernels import
(`autotune.core.codehash.module_files`), and a package's re-exports are not followed. So an edit here
changes the version of every backend that uses the edited module, and of no other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.kernels.common.constraints import (
    TMA_ACC_LIMIT,
    gemv_constraints,
    tile_constraints,
    tile_count,
    tma_constraints,
)
from autotune.kernels.common.defaults import fit_to_space, pick_split_k
from autotune.kernels.common.geometry import (
    GEMV_ROWS,
    MIN_SLICE_ITERS,
    MIN_TILE,
    c_store_cols,
    tail_split_schedule,
    tile_parts,
)
from autotune.kernels.common.knobs import AMD_LAUNCH_OPTIONS, gemv_params, knob_values, tile_widths
from autotune.kernels.common.target import has_tma, launch_target, mx_native

if TYPE_CHECKING:
    from autotune.kernels.common.gemv import row_step, rows_step, store_rows
    from autotune.kernels.common.grid import (
        remap_xcd,
        split_coords,
        stream_plan,
        stream_range,
        stream_segment,
        tile_rows_cols,
    )
    from autotune.kernels.common.splitk import (
        REDUCE_BLOCK,
        add_up,
        arrives_last,
        publish_part,
        release_tile,
        splitk_reduce_kernel,
        store_tile,
        stream_store,
        sum_parts,
        summed_launch,
    )
    from autotune.kernels.common.tile import column_halves, edge_clamped
    from autotune.kernels.common.tma import dot_part, tile_origin, tile_part_sums, tma_ready, work_item

__all__ = [
    "AMD_LAUNCH_OPTIONS",
    "GEMV_ROWS",
    "MIN_SLICE_ITERS",
    "MIN_TILE",
    "REDUCE_BLOCK",
    "TMA_ACC_LIMIT",
    "add_up",
    "arrives_last",
    "c_store_cols",
    "column_halves",
    "dot_part",
    "edge_clamped",
    "fit_to_space",
    "gemv_constraints",
    "gemv_params",
    "has_tma",
    "knob_values",
    "launch_target",
    "mx_native",
    "pick_split_k",
    "publish_part",
    "release_tile",
    "remap_xcd",
    "row_step",
    "rows_step",
    "split_coords",
    "splitk_reduce_kernel",
    "store_rows",
    "store_tile",
    "stream_plan",
    "stream_range",
    "stream_segment",
    "stream_store",
    "sum_parts",
    "summed_launch",
    "tail_split_schedule",
    "tile_constraints",
    "tile_count",
    "tile_origin",
    "tile_part_sums",
    "tile_parts",
    "tile_rows_cols",
    "tile_widths",
    "tma_constraints",
    "tma_ready",
    "work_item",
]

#: The Triton helpers' modules and their names, imported on first use of one of them.
_TRITON_MODULES = {
    "gemv": ("row_step", "rows_step", "store_rows"),
    "grid": ("remap_xcd", "split_coords", "stream_plan", "stream_range", "stream_segment", "tile_rows_cols"),
    "splitk": (
        "REDUCE_BLOCK",
        "add_up",
        "arrives_last",
        "publish_part",
        "release_tile",
        "splitk_reduce_kernel",
        "store_tile",
        "stream_store",
        "sum_parts",
        "summed_launch",
    ),
    "tile": ("column_halves", "edge_clamped"),
    "tma": ("dot_part", "tile_origin", "tile_part_sums", "tma_ready", "work_item"),
}
_LAZY = {name: module for module, names in _TRITON_MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
