"""The fused MoE's shape as other projects' files name it (vLLM's and SGLang's config files, aiter's
CSVs): its experts E and top-k, which a moe problem holds as its op's own parameters (`Problem.extra`),
and the K and top-k an imported config of an unknown model is stored under.

These files speak of E and topk as facts of their own; the importers and exporters read and build moe
problems through this module, so that nothing else of the database names them."""

from __future__ import annotations

from autotune.core.problem import Problem

__all__ = ["MOE_OP", "UNKNOWN_K", "UNKNOWN_TOPK", "experts", "moe_problem"]

#: The op whose problems these files hold.
MOE_OP = "moe"
#: K and top-k of an imported MoE config whose model is unknown: no MoE layer has hidden size 1, so
#: K = `UNKNOWN_K` marks "K and top-k unknown" (a moe problem needs K >= 1 and 1 <= topk <= E). Warm
#: starts find such configs by the rest of the shape (the moe op's `unknown_twin`).
UNKNOWN_K = 1
UNKNOWN_TOPK = 1


def moe_problem(
    M: int, N: int, K: int, E: int, topk: int, dtype: str = "bf16", weights: str | None = None
) -> Problem:
    """The moe problem of M tokens over E experts of N x K, top `topk`, activations `dtype` and weights
    `weights` (default: `dtype`)."""
    return Problem.of(MOE_OP, M, N, K, dtype, weights, E=E, topk=topk)


def experts(problem: Problem) -> tuple[int, int]:
    """(E, topk) of a moe problem, from its own parameters."""
    own = dict(problem.extra)
    return int(own["E"]), int(own["topk"])
