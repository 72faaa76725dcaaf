"""Emit a pinned Table from the database's winners (imports autotune.db: not for serving processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.dispatch.table import Table
from autotune.result import Source

if TYPE_CHECKING:
    from autotune.db import Store

__all__ = ["DEFAULT_M_POLICY", "emit_table"]

#: How an M between tuned buckets is served unless told otherwise: chosen by the regret measured on
#: untuned M values on the H100 (benchmarks/gemm.py, BENCHMARKS.md).
DEFAULT_M_POLICY = "round_up"


def emit_table(store: Store, *, fingerprint: str | None = None, m_policy: str = DEFAULT_M_POLICY) -> Table:
    """The winners of one GPU as a Table. ValueError when there is nothing to emit, or when the database
    holds several GPUs and `fingerprint` does not pick one."""
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
    return Table.from_winners(
        gpu.target,
        [(w.problem, w.best.config, w.best.time_us) for w in winners],
        m_policy=m_policy,
        predicted=predicted,
    )
