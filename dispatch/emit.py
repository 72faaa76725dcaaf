"""Emit a pinned Table from the database's winners (imports autotune.db: not for serving processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.dispatch.table import Table
from autotune.result import Source

if TYPE_CHECKING:
    from autotune.db import Store

__all__ = ["DEFAULT_M_POLICY", "DEFAULT_VENDOR_MARGIN", "emit_table"]

#: How an M between tuned buckets is served unless told otherwise: chosen by the regret measured on
#: untuned M values on the H100 (benchmarks/gemm.py, BENCHMARKS.md).
DEFAULT_M_POLICY = "round_up"


#: A backend must beat the vendor library by more than this fraction to be chosen over it: measured
#: run-to-run differences of the same kernel reach about 1% on the H100, so a smaller "win" is noise
#: and could make the dispatched call slower than the vendor library.
DEFAULT_VENDOR_MARGIN = 0.01


def emit_table(
    store: Store,
    *,
    fingerprint: str | None = None,
    m_policy: str = DEFAULT_M_POLICY,
    vendor_margin: float = DEFAULT_VENDOR_MARGIN,
) -> Table:
    """The winners of one GPU as a Table. ValueError when there is nothing to emit, or when the database
    holds several GPUs and `fingerprint` does not pick one.

    Per shape the fastest config is pinned, except that the vendor library is kept unless another backend
    beats it by more than `vendor_margin` (a fraction of the vendor's time).
    """
    if vendor_margin < 0:
        raise ValueError(f"vendor_margin must be >= 0, got {vendor_margin}")
    winners = store.winners(fingerprint, source=Source.MEASURED)
    predicted = False
    if not winners:
        winners = store.winners(fingerprint, source=Source.MODEL)
        predicted = bool(winners)
    if not winners:
        where = f" for GPU {fingerprint}" if fingerprint else ""
        raise ValueError(f"no tuned results{where} in the database; run `autotune sweep` first")
    gpus = {w.gpu.fingerprint: w.gpu for w in winners}
    if len(gpus) > 1:
        listing = "; ".join(f"{fp} ({g.target})" for fp, g in gpus.items())
        raise ValueError(f"the database holds {len(gpus)} GPUs; pick one with --gpu: {listing}")
    gpu = next(iter(gpus.values()))
    picks = []
    for w in winners:
        pick = w.best
        if (
            w.vendor is not None
            and w.vendor.time_us is not None
            and pick.time_us is not None
            and pick.time_us * (1 + vendor_margin) >= w.vendor.time_us
        ):
            pick = w.vendor
        picks.append((w.problem, pick.config, pick.time_us))
    return Table.from_winners(gpu.target, picks, m_policy=m_policy, predicted=predicted)
