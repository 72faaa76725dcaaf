"""Launch geometry of the ops' GEMM kernels, pure Python: what the kernels' launchers and the search spaces
both follow (how many rows the GEMV kernels take, how a TMA tile splits into parts and its C store into
slices, how a partial wave's tail tiles split along K). The kernels import it, so it is part of their
version."""

from __future__ import annotations

__all__ = ["GEMV_ROWS", "MIN_SLICE_ITERS", "MIN_TILE", "c_store_cols", "tail_split_schedule", "tile_parts"]

MIN_TILE = 16  # tl.dot needs every dimension >= 16

#: The most rows of A the GEMV kernel takes (one register partial per row); its launcher refuses more, and
#: `autotune.kernels.gemm` gives a larger M the default instead of a GEMV table entry.
GEMV_ROWS = 4


#: The fewest K iterations a slice of a split tail tile gets.
MIN_SLICE_ITERS = 4


def tail_split_schedule(tiles: int, iters: int, num_sms: int) -> tuple[int, int, int]:
    """(programs, whole-wave tiles, slices per tail tile) for `tiles` C tiles of `iters` K iterations on
    `num_sms` SMs: the tiles past the last whole wave are split along K into as many slices as the SMs
    hold (each of at least MIN_SLICE_ITERS iterations); 1 slice means no split."""
    waves, rem = divmod(tiles, num_sms)
    if rem == 0:
        return num_sms, tiles, 1
    splits = max(1, min(num_sms // rem, iters // MIN_SLICE_ITERS))
    return (num_sms if waves else rem * splits), waves * num_sms, splits


def tile_parts(width: int, smallest: int = MIN_TILE) -> tuple[int, int, int]:
    """`width` as up to three powers of two, widest first, 0 for a part not there (96 -> (64, 32, 0)):
    the column parts of a TMA kernel tile whose width is not a power of two. ValueError for a width that
    needs more parts or a part under `smallest`."""
    bits = [1 << b for b in range(max(width, 0).bit_length() - 1, -1, -1) if width >> b & 1]
    if not bits or len(bits) > 3 or bits[-1] < smallest:
        raise ValueError(
            f"a TMA tile width must be the sum of at most 3 powers of two of at least {smallest}, got {width}"
        )
    first, second, third = [*bits, 0, 0][:3]
    return first, second, third


def c_store_cols(width: int, epilogue: int) -> int:
    """Columns of the C store's shared-memory buffer for a TMA tile (or tile part) `width` wide: the whole
    width (all its parts), or with EPILOGUE_N > 0 one slice, as wide as the widest part at most; for one
    part this is also the block of its C descriptor."""
    if not epilogue:
        return width
    return min(max(tile_parts(width)), epilogue)
