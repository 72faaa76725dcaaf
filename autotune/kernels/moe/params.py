"""The fused MoE's own problem parameters: E, the experts (of this rank), and topk, the experts each token
is routed to. A moe problem holds them in `Problem.extra` (`Problem.of("moe", M, N, K, E=128, topk=8)`),
as every op holds its own; the database stores them with its other fields and a table keys its families
by them (``E=128,topk=8`` in the key's params)."""

from __future__ import annotations

from autotune.core.problem import Problem

__all__ = ["PARAMS", "UNKNOWN_K", "UNKNOWN_TOPK", "experts", "experts_touched"]

#: The MoE's own parameters by name and type (`MoeOp.params`).
PARAMS: dict[str, type] = {"E": int, "topk": int}
#: K and top-k of an imported MoE config whose model is unknown: no MoE layer has hidden size 1, so
#: K = `UNKNOWN_K` marks "K and top-k unknown" (a moe problem needs K >= 1 and 1 <= topk <= E). Warm
#: starts find such configs by the rest of the shape (the moe op's `unknown_twin`).
UNKNOWN_K = 1
UNKNOWN_TOPK = 1


def experts(problem: Problem) -> tuple[int, int]:
    """(E, topk) of a moe problem: its experts and the experts each token is routed to."""
    own = dict(problem.extra)
    return int(own["E"]), int(own["topk"])


def experts_touched(problem: Problem) -> float:
    """The expected number of experts that receive a token of a moe problem under uniform routing."""
    E, topk = experts(problem)
    return E * (1.0 - (1.0 - topk / E) ** problem.M)
