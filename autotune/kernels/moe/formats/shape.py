"""The fused MoE's shape as other projects' files name it (vLLM's and SGLang's config files, aiter's
CSVs): its experts E and top-k, which a moe problem holds as its op's own parameters (`Problem.extra`),
the K and top-k an imported config of an unknown model is stored under, the models whose hidden size and
top-k a vLLM file's E and N imply, and the source hash of imported configs of our Triton kernel.

These files speak of E and topk as facts of their own; the importers and exporters read and build moe
problems through this module."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from autotune.core.problem import Problem
from autotune.db.foreign import IMPORTED_SOURCE_HASH, InteropError
from autotune.kernels.moe.op import MOE
from autotune.kernels.moe.params import UNKNOWN_K, UNKNOWN_TOPK, experts

__all__ = [
    "KNOWN_MOE_MODELS",
    "MOE_OP",
    "UNKNOWN_K",
    "UNKNOWN_TOPK",
    "MoeModel",
    "UnknownShape",
    "experts",
    "infer_moe_shape",
    "is_unknown_shape",
    "moe_problem",
    "moe_shape_or_unknown",
    "moe_source_hash",
]

logger = logging.getLogger(__name__)

#: The op whose problems these files hold.
MOE_OP = MOE.name


def moe_problem(
    M: int, N: int, K: int, E: int, topk: int, dtype: str = "bf16", weights: str | None = None
) -> Problem:
    """The moe problem of M tokens over E experts of N x K, top `topk`, activations `dtype` and weights
    `weights` (default: `dtype`)."""
    return Problem.of(MOE_OP, M, N, K, dtype, weights, E=E, topk=topk)


class UnknownShape(InteropError):
    """E and N of a file that no known model, or several with different K or top-k, are served with."""


# -- models whose hidden size and top-k a vLLM file name implies --------------------------------------------


@dataclass(frozen=True)
class MoeModel:
    """An MoE model: its routed experts, top-k, hidden size and expert intermediate size, and the tensor
    (TP) and expert (EP) parallel degrees it is served with (E = experts / EP, N = intermediate / TP)."""

    name: str
    experts: int
    topk: int
    hidden: int
    intermediate: int
    tp: tuple[int, ...] = (1, 2, 4, 8)
    ep: tuple[int, ...] = (1,)

    def shapes(self) -> Iterable[tuple[int, int, str]]:
        """(E, N, "TPx[ EPy]") of every way it is served."""
        for ep in self.ep:
            for tp in self.tp:
                if self.experts % ep == 0 and self.intermediate % tp == 0:
                    how = f"TP{tp}" + (f" EP{ep}" if ep > 1 else "")
                    yield self.experts // ep, self.intermediate // tp, how


#: The models `infer_moe_shape` knows.
KNOWN_MOE_MODELS: tuple[MoeModel, ...] = (
    MoeModel("Mixtral-8x7B", experts=8, topk=2, hidden=4096, intermediate=14336),
    # also served at TP16 over two 8-GPU hosts: vLLM ships its E=256, N=128 files
    MoeModel(
        "DeepSeek-V3",
        experts=256,
        topk=8,
        hidden=7168,
        intermediate=2048,
        tp=(1, 2, 4, 8, 16),
        ep=(1, 8, 16, 32),
    ),
    MoeModel("Qwen3-30B-A3B", experts=128, topk=8, hidden=2048, intermediate=768),
    MoeModel("Qwen3-235B-A22B", experts=128, topk=8, hidden=4096, intermediate=1536),
    MoeModel("gpt-oss-120b", experts=128, topk=4, hidden=2880, intermediate=2880),
)


def infer_moe_shape(
    E: int, N: int, *, k: int | None = None, topk: int | None = None, where: str = ""
) -> tuple[int, int, str]:
    """(K, topk, how) of a vLLM file of `E` experts and intermediate size `N`.

    `k` and `topk` given win; what is missing comes from the one known model (`KNOWN_MOE_MODELS`) served
    with these E and N (and agreeing with what was given), `how` naming it ("" when nothing was inferred).
    Raises InteropError, prefixed with `where`, when no known model or several with different K or top-k
    fit, or when the result is no valid MoE (topk < 1, E < topk).
    """
    prefix = f"{where}: " if where else ""
    _check_moe(E, k, topk, prefix)
    how = ""
    if k is None or topk is None:
        fits = [
            (m, served)
            for m in KNOWN_MOE_MODELS
            for e, n, served in m.shapes()
            if (e, n) == (E, N) and k in (None, m.hidden) and topk in (None, m.topk)
        ]
        answers = {(m.hidden, m.topk) for m, _ in fits}
        if not answers:
            known = ", ".join(m.name for m in KNOWN_MOE_MODELS)
            raise UnknownShape(
                f"{prefix}E={E}, N={N} is no known model's MoE layer ({known}): give the hidden size and "
                "the experts per token with --k and --topk"
            )
        if len(answers) > 1:
            shown = "; ".join(f"{m.name} {served} (K={m.hidden}, topk={m.topk})" for m, served in fits)
            raise UnknownShape(
                f"{prefix}E={E}, N={N} is ambiguous, it fits {shown}: give --k and --topk to choose"
            )
        (k, topk), served_by = answers.pop(), sorted({f"{m.name} {served}" for m, served in fits})
        how = ", ".join(served_by)
    assert k is not None and topk is not None
    _check_moe(E, k, topk, prefix)
    return k, topk, how


def moe_shape_or_unknown(
    E: int, N: int, *, k: int | None = None, topk: int | None = None, where: str = ""
) -> tuple[int, int, str]:
    """`infer_moe_shape`, except that E and N of no known model (or of several) give (`UNKNOWN_K`,
    `UNKNOWN_TOPK`, "unknown: " and why) instead of an error: a file found by E, N and device alone."""
    try:
        return infer_moe_shape(E, N, k=k, topk=topk, where=where)
    except UnknownShape as exc:
        why = str(exc).removeprefix(f"{where}: " if where else "").split(":")[0]
        return UNKNOWN_K, UNKNOWN_TOPK, f"unknown: {why}"


def is_unknown_shape(K: int, topk: int) -> bool:
    """Whether (K, topk) is the key of an imported MoE config whose model is unknown."""
    return (K, topk) == (UNKNOWN_K, UNKNOWN_TOPK)


def _check_moe(E: int, k: int | None, topk: int | None, prefix: str) -> None:
    if k is not None and k <= 0:
        raise InteropError(f"{prefix}K (hidden size) must be a positive integer, got {k}")
    if topk is not None and topk < 1:
        raise InteropError(f"{prefix}topk (experts per token) must be at least 1, got {topk}")
    if topk is not None and topk > E:
        raise InteropError(f"{prefix}E={E} experts cannot route each token to topk={topk} of them")


def moe_source_hash(backend: str = "triton") -> str:
    """The source hash of our moe op's `backend`, or `IMPORTED_SOURCE_HASH` if that op cannot be had."""
    try:
        return str(MOE.source_hash(backend))
    except Exception as exc:  # the op is broken here: imported configs are still worth keeping
        logger.debug("no source hash of moe.%s (%s): using %r", backend, exc, IMPORTED_SOURCE_HASH)
        return IMPORTED_SOURCE_HASH
