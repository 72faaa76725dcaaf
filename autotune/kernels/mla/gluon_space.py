"""The search space of the MLA decode's Gluon kernel (backend "gluon", `mla.gluon_kernel`) on Hopper.

Knobs: `num_kv_splits` (as the Triton kernel's), `BLOCK_N` (32 or 64 tokens a cache tile), `num_stages`
(1 to 4 tiles in the ring of shared-memory slots) and `SCHEDULE` (0: the two warpgroups in lockstep,
`mla.gluon_kernel`; 1: the seesaw, `mla.gluon_seesaw`, the warpgroups taking the tiles in turn beside a
loader warp; 2: the swapped kernel, `mla.gluon_swapped`, tokens on the MMA's M and at most 32 heads as
its N, for an e4m3 cache). Fixed: 64 heads a program on two warpgroups (the swapped kernel: all of a
sequence's heads on one), so no BLOCK_H or num_warps knob.

Where it exists: sm_90 (wgmma and TMA), with a Triton whose Gluon imports; a problem it cannot run there
prunes its one config with the reason (`gluon_absent`): a cache neither bf16 nor e4m3 (fnuz is AMD's),
other dims than 512 latent + 64 RoPE, a page size that no tile of 32 or 64 tokens divides. Any head
count: programs of 64 heads, the last one padded with zero queries. An e4m3 cache runs the lockstep
schedule, its tiles upcast to fp16 (with the knob `Q_FP8` 1, FP8 queries score them as loaded and only
V is upcast).

Constraints: `splits_past_context` and `splits_needless` (the Triton kernel's rules, at 64 heads a
program), `tile_past_page` (a tile lies inside one page: PAGE % BLOCK_N == 0), `seesaw_one_stage` (the
seesaw needs two slots: with one, the second warpgroup's first tile would wait for its own release of
the first), `seesaw_bf16` (the seesaw reads a bf16 cache), `swapped_form` (the swapped kernel takes an
e4m3 cache scored by FP8 queries, at most 32 heads, 64-token tiles), `swapped_unmeasured` (it is pruned
until its GPU tests have passed: `SWAPPED_MEASURED`) and `lds_overflow` (the queries, the
ring, P and, in the seesaw, the row statistics within the target's shared memory: 2 stages of 64 tokens,
or 4 of 32, at most on an H100; an FP8 cache adds the fp16 tile its ring's tiles are upcast into). It is
the op's default only where it was measured to win (`gluon_default`: Hopper, from batch 32 and 4K
tokens, whole head groups or padded ones in 128 programs with a bf16 cache); its first config
(`gluon_first`) orders its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache

from autotune.core.config import Config, Value
from autotune.core.problem import Problem, cdiv
from autotune.core.space import Constraint, SubSpace
from autotune.core.target import Target
from autotune.kernels.mla.space import MAX_SPLITS, own, split_constraints

__all__ = [
    "GLUON_BLOCK_H",
    "GLUON_PARAMS",
    "SMEM_SCRATCH",
    "SWAPPED_BLOCK_N",
    "SWAPPED_MAX_HEADS",
    "SWAPPED_MEASURED",
    "gluon_absent",
    "gluon_default",
    "gluon_first",
    "gluon_params",
    "gluon_runs",
    "gluon_smem_bytes",
    "gluon_splits",
    "gluon_subspace",
    "swapped_columns",
]

#: Heads a program of the Gluon kernel takes (wgmma's M: one warpgroup's 64 rows).
GLUON_BLOCK_H = 64
#: The kernel's knobs (an FP8 cache adds `Q_FP8`: `gluon_params`).
GLUON_PARAMS: Mapping[str, tuple[Value, ...]] = {
    "num_kv_splits": tuple(1 << i for i in range(MAX_SPLITS.bit_length())),
    "BLOCK_N": (32, 64),
    "num_stages": (1, 2, 3, 4),
    "SCHEDULE": (0, 1, 2),
}
#: Whether the swapped kernel (SCHEDULE 2) has run right on a GPU: until its GPU tests have passed
#: (`tests/kernels/mla/test_mla_gpu.py -k swapped`), the space prunes it (`swapped_unmeasured`).
SWAPPED_MEASURED = False
#: The swapped kernel's most heads (its wgmmas' N) and its tile (their M).
SWAPPED_MAX_HEADS, SWAPPED_BLOCK_N = 32, 64


def swapped_columns(heads: int) -> int:
    """The swapped kernel's columns (its wgmmas' N) for `heads`: 16, or 32 from 17 heads."""
    return 16 if heads <= 16 else 32


def gluon_params(problem: Problem) -> Mapping[str, tuple[Value, ...]]:
    """The knobs of `problem`: GLUON_PARAMS, and with an FP8 cache `Q_FP8` (1: FP8 queries score the
    cache's tiles as loaded; 0: the tiles upcast to fp16 for both dots)."""
    return {**GLUON_PARAMS, "Q_FP8": (0, 1)} if own(problem)[2] != "bf16" else GLUON_PARAMS


#: Bytes of shared memory Triton adds to the kernel's own (the softmax's reductions across the two
#: warpgroups, layout conversions), at most, as compiled for sm_90 by Triton 3.6 and 3.9.
SMEM_SCRATCH = 1024
_LATENT, _K = 512, 576


def gluon_runs(target: Target) -> bool:
    """Hopper (sm_90, sm_90a): where wgmma and TMA exist (not Blackwell, not AMD, not the interpreter)."""
    return target.is_nvidia and target.arch.rstrip("a") == "sm_90"


@cache
def _gluon_missing() -> str:
    """Why the kernel module cannot be imported here ("" when it can): it needs a Triton with Gluon for
    Hopper. Imports it, once per process."""
    try:
        importlib.import_module("autotune.kernels.mla.gluon_kernel")
    except Exception as exc:  # no Triton, or one without Gluon or with other names for its calls
        return (
            "the gluon kernel needs a Triton with Gluon for Hopper (triton.experimental.gluon), and it does "
            f"not import here: {type(exc).__name__}: {exc}"
        )
    return ""


def gluon_absent(problem: Problem, target: Target) -> str:
    """Why the kernel cannot run `problem` on `target` ("" when it can)."""
    _, _, kv, page = own(problem)
    if kv not in ("bf16", "fp8e4m3"):
        return f"the gluon kernel reads a bf16 or fp8e4m3 cache, not {kv}"
    if (problem.N, problem.K) != (_LATENT, _K):
        rope = _K - _LATENT
        return f"the gluon kernel is built for {_LATENT} + {rope} dims, not N={problem.N}, K={problem.K}"
    if page % min(int(v) for v in GLUON_PARAMS["BLOCK_N"]):
        return (
            f"the gluon kernel's tiles (32 or 64 tokens) lie inside a page: page_size {page} is no multiple"
        )
    return _gluon_missing()


def gluon_smem_bytes(
    block_n: int, stages: int, schedule: int = 0, kv_bytes: int = 2, q_fp8: bool = False, heads: int = 64
) -> int:
    """The shared memory the kernel allocates itself: the queries (64 x 576, 16-bit; FP8 with `q_fp8`),
    `stages` cache tiles (block_n x 576 of `kv_bytes` each), P (64 x block_n) and the ring's mbarriers;
    with an FP8 cache (`kv_bytes` 1) the fp16 tile it is upcast into (block_n x 576; the latent 512 alone
    with `q_fp8`); the seesaw (`schedule` 1) also the row maxima and sums (2 x 64 fp32), two mbarriers a
    slot and two more; the swapped kernel (`schedule` 2) its `heads` (16 or 32) rows of FP8 queries, the
    ring, the fp16 V tile (block_n x 512), Pᵀ (block_n x heads fp16) and a barrier a slot. Triton adds up
    to SMEM_SCRATCH."""
    if schedule == 2:
        rows = swapped_columns(heads)
        return rows * _K + stages * block_n * _K * kv_bytes + block_n * (_LATENT + rows) * 2 + 8 * stages
    queries = GLUON_BLOCK_H * _K * (1 if q_fp8 else 2)
    ring, p = stages * block_n * _K * kv_bytes, GLUON_BLOCK_H * block_n * 2
    if schedule == 0:
        upcast = block_n * (_LATENT if q_fp8 else _K) * 2 if kv_bytes == 1 else 0
        return queries + ring + upcast + p + 8 * stages
    return queries + ring + p + 2 * GLUON_BLOCK_H * 4 + 8 * (2 * stages + 2)


def gluon_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The kernel's rules on `problem` and `target` (module docstring)."""
    heads, _, kv, page = own(problem)
    groups = cdiv(heads, GLUON_BLOCK_H)
    kv_bytes = 2 if kv == "bf16" else 1

    def smem(c: Mapping[str, Value]) -> int:
        knobs = int(c["BLOCK_N"]), int(c["num_stages"]), int(c["SCHEDULE"])
        q_fp8 = bool(int(c.get("Q_FP8", 0)))
        return gluon_smem_bytes(*knobs, kv_bytes=kv_bytes, q_fp8=q_fp8, heads=heads) + SMEM_SCRATCH

    def swapped_form(c: Mapping[str, Value]) -> bool:
        return (
            kv_bytes == 1 and int(c.get("Q_FP8", 0)) == 1 and int(c["BLOCK_N"]) == SWAPPED_BLOCK_N
            and heads <= SWAPPED_MAX_HEADS
        )  # fmt: skip

    return [
        *split_constraints(problem, target, lambda c: groups, ()),
        Constraint(
            "tile_past_page",
            f"BLOCK_N {{BLOCK_N}} does not divide the page size {page}: a tile must lie inside one page",
            lambda c: page % int(c["BLOCK_N"]) == 0,
            knobs=("BLOCK_N",),
        ),
        Constraint(
            "seesaw_one_stage",
            "the seesaw schedule (SCHEDULE 1) needs 2 stages at least, not {num_stages}",
            lambda c: int(c["SCHEDULE"]) != 1 or int(c["num_stages"]) >= 2,
            knobs=("SCHEDULE", "num_stages"),
        ),
        Constraint(
            "seesaw_bf16",
            f"the seesaw schedule (SCHEDULE 1) reads a bf16 cache, not {kv}",
            lambda c: int(c["SCHEDULE"]) != 1 or kv_bytes == 2,
            knobs=("SCHEDULE",),
        ),
        Constraint(
            "swapped_form",
            f"the swapped kernel (SCHEDULE 2) takes an e4m3 cache with Q_FP8 1, at most {SWAPPED_MAX_HEADS} "
            f"heads and 64-token tiles, not {kv} with {heads} heads, BLOCK_N {{BLOCK_N}}",
            lambda c: int(c["SCHEDULE"]) != 2 or swapped_form(c),
            knobs=("SCHEDULE", "BLOCK_N", *(("Q_FP8",) if kv_bytes == 1 else ())),
        ),
        Constraint(
            "swapped_unmeasured",
            "the swapped kernel (SCHEDULE 2) has not run on a GPU yet: its GPU tests come first",
            lambda c: int(c["SCHEDULE"]) != 2 or SWAPPED_MEASURED,
            knobs=("SCHEDULE",),
        ),
        Constraint(
            "lds_overflow",
            f"the queries, {{num_stages}} tiles of BLOCK_N {{BLOCK_N}} tokens and P (SCHEDULE {{SCHEDULE}}) "
            f"need more than the {target.lds_bytes} bytes of shared memory",
            lambda c: target.interpreter or smem(c) <= target.lds_bytes,
            knobs=("BLOCK_N", "num_stages", "SCHEDULE", *(("Q_FP8",) if kv_bytes == 1 else ())),
        ),
    ]


def gluon_splits(problem: Problem, target: Target) -> int:
    """Splits for one wave: a program fills an SM's shared memory, so the largest power of two with
    (sequences x head groups x splits) programs within the SMs, at least four tiles of 64 tokens a split;
    1 where the sequences fill the SMs already. On an H100 at 128 heads the fastest splits of every shape
    measured (batch 32-128, context 4K-32K: 2 at batch 32, 1 from 64; docs/notes/2026-12-07-mla-gluon.md)."""
    context = own(problem)[1]
    programs = problem.M * cdiv(own(problem)[0], GLUON_BLOCK_H)
    splits = 1
    while (
        programs * 2 * splits <= target.cu_count
        and 2 * splits * 4 * 64 <= context
        and 2 * splits <= MAX_SPLITS
    ):
        splits *= 2
    return splits


def gluon_first(problem: Problem, target: Target) -> Config | None:
    """The config visited first: with a bf16 cache the seesaw (SCHEDULE 1) on 32-token tiles in 4 stages,
    with an e4m3 one the lockstep schedule (0) on 64-token tiles in 2 stages with FP8 scores (`Q_FP8` 1),
    the fastest forms of each at 16 and 128 heads on an H100 (docs/notes/2026-12-07-mla-gluon.md); then
    the other ring shapes where the page size or the shared memory refuses these; `gluon_splits`. None
    where the space holds none of them."""
    params = gluon_params(problem)
    sub = SubSpace("gluon", params, gluon_constraints(problem, target))
    splits = gluon_splits(problem, target)
    fp8 = {"Q_FP8": 1} if "Q_FP8" in params else {}
    rings = ((1, 32, 4), (0, 64, 2), (0, 32, 4), (0, 32, 2))
    for schedule, block_n, stages in rings[1:] if fp8 else rings:
        knobs = dict(num_kv_splits=splits, BLOCK_N=block_n, num_stages=stages, SCHEDULE=schedule, **fp8)
        config = Config(backend="gluon", **knobs)
        if sub.check(config) is None:
            return config
    return None


#: Where the kernel is the op's default on Hopper (`gluon_default`): at least this batch and context bucket,
#: the smallest measured (H100, docs/notes/2026-12-07-mla-gluon.md).
DEFAULT_MIN_BATCH, DEFAULT_MIN_CONTEXT = 32, 4096


def gluon_default(problem: Problem, target: Target) -> Config | None:
    """`gluon_first` where it is the op's default: on Hopper where the kernel runs, from batch 32 and a
    context of 4K, with whole 64-head groups (a bf16 or e4m3 cache), or padded groups (a bf16 cache) in 128
    programs at least. Measured there on an H100 (16 and 128 heads, batch 32-256, context 4K-32K): its
    first config 2.0-2.4x the Triton kernel's best at 128 heads with a bf16 cache, 1.2x with an e4m3
    one, 1.1x at 16 heads with bf16 from batch 128; with padded groups and an e4m3 cache it loses (the
    Triton kernel's swapped form wins), and under 32 sequences or 4K tokens it was not measured. None
    elsewhere."""
    heads, context, kv, _ = own(problem)
    if not gluon_runs(target) or problem.M < DEFAULT_MIN_BATCH or context < DEFAULT_MIN_CONTEXT:
        return None
    whole = heads % GLUON_BLOCK_H == 0
    if not (whole or (kv == "bf16" and problem.M * cdiv(heads, GLUON_BLOCK_H) >= 128)):
        return None
    if gluon_absent(problem, target):
        return None
    return gluon_first(problem, target)


def gluon_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The kernel's configs, `default` (where it is a gluon config) or `gluon_first` first."""
    first = default or gluon_first(problem, target)
    return SubSpace(
        "gluon",
        gluon_params(problem),
        gluon_constraints(problem, target),
        first=() if first is None else (first,),
    )
