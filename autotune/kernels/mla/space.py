"""Search space and heuristic default of the split-KV MLA decode kernel.

Knobs: `num_kv_splits` (slices of each sequence's context, reduced by a second launch unless 1),
`BLOCK_H` (heads a program takes: each group of heads reads the whole context once), `BLOCK_N` (tokens a
tile), `num_warps`, `num_stages`; on AMD `waves_per_eu` and `matrix_instr_nonkdim`; with an FP8 cache
`Q_FP8` (0: bf16 queries, the cache upcast; 1: queries quantized in the kernel, FP8 score dots), and on
NVIDIA `F16_TILES` (1: the cache's tiles upcast to fp16, both dots in fp16, or P·V alone where the
scores are swapped FP8 MMAs; 0: to bf16; see `autotune.kernels.mla.kernel`); on sm_90 with an FP8 cache
and at most 32 heads `SWAP` (1: the dots swapped, the tile's tokens on the warpgroup MMAs' M side, FP8
scores; see `_swap_knob`); on sm_90 and AMD with an FP8 cache `QUARTERS` (1: the latent dims in four
accumulators, unswapped; see `_quarters_knob`, `_quarters_constraints`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from autotune.core.config import Config, Value
from autotune.core.problem import Problem, cdiv, next_pow2
from autotune.core.registry import get_op
from autotune.core.space import Constraint, SubSpace
from autotune.core.target import Target
from autotune.engine.verdicts import first_passing
from autotune.kernels.candidates import Core, candidates, safer_cores

__all__ = [
    "default_splits",
    "mla_constraints",
    "mla_default_candidates",
    "mla_default_config",
    "mla_params",
    "own",
    "spill_exempt",
    "split_constraints",
]

#: Most splits of a sequence's context the space holds.
MAX_SPLITS = 64
#: Fewest heads a program takes (the M of its dots).
MIN_BLOCK_H = 16
#: 32-bit registers a lane may give the accumulator, the queries and the scores (of 512 VGPRs on
#: CDNA3/4 and 255 on Hopper): past them the kernel spills.
_LANE_REGISTERS = {True: 320, False: 192}


def own(problem: Problem) -> tuple[int, int, str, int]:
    """(heads, context, kv_dtype, page_size) of an mla_decode problem."""
    p = dict(problem.extra)
    return int(p["heads"]), int(p["context"]), str(p["kv_dtype"]), int(p["page_size"])


def _fp8(problem: Problem) -> bool:
    return own(problem)[2].startswith("fp8")


def _f16_knob(problem: Problem, target: Target) -> bool:
    """Whether the space has `F16_TILES`: an FP8 cache on an NVIDIA GPU with FP8 conversions (sm_89 on;
    the kernel upcasts with them), not the interpreter."""
    return _fp8(problem) and target.sm >= 89


def _swap_knob(problem: Problem, target: Target) -> bool:
    """Whether the space has `SWAP`: an FP8 cache on sm_90, at most 32 heads. Swapped, the scores of 16 or
    32 heads are FP8 warpgroup MMAs of 64 tokens a warpgroup; on an H100 that ran 1.03-1.29x faster than
    the unswapped kernel's best at H = 16 (a bf16 cache's swapped dots ran 0.73-0.83x:
    `docs/notes/2026-11-28-mla-swapped-dots.md`). With more heads, 64-head tiles are warpgroup MMAs
    unswapped, and tiles of at most 32 heads would read the cache H / 32 times or more."""
    return _fp8(problem) and target.arch == "sm_90" and own(problem)[0] <= 2 * MIN_BLOCK_H


def _quarters_knob(problem: Problem, target: Target) -> bool:
    """Whether the space has `QUARTERS`: an FP8 cache on sm_90, where 64-head warpgroup tiles hold a whole
    upcast tile in registers unquartered, and on AMD, where (compiled for gfx950 at 128 heads) 64-head
    tiles spill unquartered and not quartered (searched, not the default: not measured on an AMD GPU)."""
    return _fp8(problem) and (target.arch == "sm_90" or target.is_amd)


def mla_params(problem: Problem, target: Target) -> dict[str, Sequence[Value]]:
    """The kernel's knobs on `target` (tiny ones in the interpreter)."""
    q_fp8: dict[str, Sequence[Value]] = {"Q_FP8": (0, 1)} if _fp8(problem) else {}
    if target.interpreter:
        return dict(num_kv_splits=(1, 2, 4), BLOCK_H=(16,), BLOCK_N=(16, 32), num_warps=(4,),
                    num_stages=(1,), **q_fp8)  # fmt: skip
    common: dict[str, Sequence[Value]] = dict(
        num_kv_splits=tuple(1 << i for i in range(MAX_SPLITS.bit_length())),
        BLOCK_H=(16, 32, 64),
        BLOCK_N=(16, 32, 64),
        num_warps=(4, 8),
    )
    quarters: dict[str, Sequence[Value]] = {"QUARTERS": (0, 1)} if _quarters_knob(problem, target) else {}
    if target.is_amd:
        return {**common, "num_stages": (1, 2), "waves_per_eu": (0, 1, 2), "matrix_instr_nonkdim": (16, 32),
                **q_fp8, **quarters}  # fmt: skip
    f16: dict[str, Sequence[Value]] = {"F16_TILES": (0, 1)} if _f16_knob(problem, target) else {}
    swap: dict[str, Sequence[Value]] = {"SWAP": (0, 1)} if _swap_knob(problem, target) else {}
    return {**common, "num_stages": (1, 2, 3), **q_fp8, **f16, **swap, **quarters}


def _groups(problem: Problem, block_h: int) -> int:
    return cdiv(own(problem)[0], block_h)


def _wgmma(target: Target, block_h: int) -> bool:
    """Whether the dots are warpgroup MMAs on `target` (sm_90 with 64 heads a program or more): their
    A operand, the queries, is then read from shared memory, not held in registers."""
    return target.arch == "sm_90" and block_h >= 64


def spill_exempt(target: Target) -> frozenset[str]:
    """The static checks that do not prune the kernel's configs on `target`: spills on sm_90, where the
    64-head tiles (warpgroup MMAs) spill a few registers and still run fastest at 128 heads (1.7x the
    32-head tiles that do not spill, `docs/notes/2026-11-28-mla-decode-h100.md`)."""
    return frozenset({"spills"}) if target.arch == "sm_90" else frozenset()


def _swapped(c: Mapping[str, Value]) -> bool:
    return bool(int(c.get("SWAP", 0)))


def _lane_registers(problem: Problem, target: Target, c: Mapping[str, Value]) -> float:
    """Per lane, in 32-bit registers: the fp32 accumulator (BLOCK_H x latent), the queries (BLOCK_H x
    K, bf16; none with warpgroup MMAs, whose operands are in shared memory) and the scores with their
    probabilities (BLOCK_H x BLOCK_N, fp32, twice)."""
    bh, bn = int(c["BLOCK_H"]), int(c["BLOCK_N"])
    queries = 0 if _wgmma(target, bh) or _swapped(c) else bh * problem.K / 2
    words = bh * problem.N + queries + 2 * bh * bn
    return words / (int(c["num_warps"]) * (target.wave_size or 32))


def _lds_bytes(problem: Problem, target: Target, c: Mapping[str, Value]) -> int:
    """The shared memory a program needs at least: the cache tile (BLOCK_N rows of K) per buffered stage
    (what Triton 3.9 allocates, within a few KiB, for the defaults on gfx942, gfx950 and sm_90; the static
    check has the binary's exact figure)."""
    stages = int(c["num_stages"])
    buffers = max(1, stages - 1) if target.is_amd else max(1, stages)
    elem = 1 if _fp8(problem) else 2
    return int(c["BLOCK_N"]) * problem.K * elem * buffers


def split_constraints(
    problem: Problem,
    target: Target,
    groups: Callable[[Mapping[str, Value]], int],
    group_knobs: tuple[str, ...],
) -> list[Constraint]:
    """The split rules every MLA kernel shares: no more splits than BLOCK_N tiles of the context, and none
    past what fills the GPU (half the splits already give every CU two programs); `groups`: a config's
    head groups a sequence, from `group_knobs`."""
    context, B, cus = own(problem)[1], problem.M, target.cu_count
    return [
        Constraint(
            "splits_past_context",
            f"{{num_kv_splits}} splits of BLOCK_N {{BLOCK_N}} tokens exceed the context {context}",
            lambda c: int(c["num_kv_splits"]) * int(c["BLOCK_N"]) <= max(context, int(c["BLOCK_N"])),
            knobs=("num_kv_splits", "BLOCK_N"),
        ),
        Constraint(
            "splits_needless",
            f"half the splits already give {B} sequences x head groups 2 programs per CU ({cus} CUs)",
            lambda c: int(c["num_kv_splits"]) == 1 or B * groups(c) * int(c["num_kv_splits"]) // 2 < 2 * cus,
            knobs=("num_kv_splits", *group_knobs),
        ),
    ]


def mla_constraints(problem: Problem, target: Target) -> list[Constraint]:
    """The kernel's constraints on `problem` and `target`."""
    heads = own(problem)[0]
    budget = _LANE_REGISTERS[target.is_amd]
    out = [
        *split_constraints(problem, target, lambda c: _groups(problem, int(c["BLOCK_H"])), ("BLOCK_H",)),
        Constraint(
            "block_h_waste",
            f"BLOCK_H {{BLOCK_H}} > next_pow2(H={heads}): idle rows",
            lambda c: int(c["BLOCK_H"]) <= max(MIN_BLOCK_H, next_pow2(heads)),
            knobs=("BLOCK_H",),
        ),
        Constraint(
            "registers",
            f"the accumulator, queries and scores need more than {budget} registers a lane",
            lambda c: target.interpreter or _lane_registers(problem, target, c) <= budget,
            knobs=("BLOCK_H", "BLOCK_N", "num_warps", *(("SWAP",) if _swap_knob(problem, target) else ())),
        ),
        Constraint(
            "lds_overflow",
            f"the cache tile x stages needs more than the {target.lds_bytes} bytes of shared memory/LDS",
            lambda c: target.interpreter or _lds_bytes(problem, target, c) <= target.lds_bytes,
            knobs=("BLOCK_N", "num_stages"),
        ),
    ]
    if _f16_knob(problem, target) and target.arch == "sm_90":
        out.append(
            Constraint(
                "f16_tiles_past_fp8_wgmma",
                "F16_TILES 1 with Q_FP8 1 and BLOCK_H {BLOCK_H}: the scores' FP8 warpgroup MMA run in fp16",
                lambda c: not (int(c["F16_TILES"]) and int(c["Q_FP8"]) and _wgmma(target, int(c["BLOCK_H"]))),
                knobs=("F16_TILES", "Q_FP8", "BLOCK_H"),
            )
        )
    if _swap_knob(problem, target):
        out += _swap_constraints()
    if _quarters_knob(problem, target) and target.arch == "sm_90":  # AMD searches it unconstrained
        out += _quarters_constraints(_swap_knob(problem, target))
    if target.is_amd:
        out.append(
            Constraint(
                "mfma_32_small_tile",
                "matrix_instr_nonkdim 32 needs BLOCK_H and BLOCK_N >= 32",
                lambda c: (
                    int(c["matrix_instr_nonkdim"]) == 16 or min(int(c["BLOCK_H"]), int(c["BLOCK_N"])) >= 32
                ),
                knobs=("matrix_instr_nonkdim", "BLOCK_H", "BLOCK_N"),
            )
        )
    return out


def _swap_constraints() -> list[Constraint]:
    """Where SWAP 1 is searched: FP8 scores (FP8 queries: swapped bf16 or fp16 scores ran slower than
    unswapped ones; F16_TILES then sets P·V's dtype), whole warpgroup MMAs (64 tokens a group of 4 warps;
    the knob's at most 32 heads keep BLOCK_H within 32 by `block_h_waste`); and never unpipelined: with
    one stage the swapped kernel faults on sm_90 (Triton 3.6)."""
    return [
        Constraint(
            "swap_needs_fp8_scores",
            "SWAP 1 with Q_FP8 {Q_FP8}: swapped, only FP8 scores pay",
            lambda c: not _swapped(c) or int(c["Q_FP8"]) == 1,
            knobs=("SWAP", "Q_FP8"),
            search_only=True,
        ),
        Constraint(
            "swap_tile",
            "SWAP 1 with BLOCK_N {BLOCK_N} on {num_warps} warps: not 64 tokens a warpgroup",
            lambda c: not _swapped(c) or int(c["BLOCK_N"]) >= 16 * int(c["num_warps"]),
            knobs=("SWAP", "BLOCK_N", "num_warps"),
        ),
        Constraint(
            "swap_one_stage",
            "SWAP 1 with num_stages 1 faults on sm_90",
            lambda c: not _swapped(c) or int(c["num_stages"]) >= 2,
            knobs=("SWAP", "num_stages"),
        ),
    ]


def _quarters_constraints(swap: bool) -> list[Constraint]:
    """Where QUARTERS 1 is searched on sm_90: 64-head tiles (warpgroup MMAs) with FP8 queries. Compiled
    for sm_90 at 128 heads on 8 warps, 32 or 64 tokens a tile, 1 or 2 stages, the quartered loop spills
    nothing there, where the whole-tile loop spills up to 50 words at 64 tokens; with bf16 queries it
    spills more than the whole-tile loop (194-210 words against 68-84). Never with SWAP 1, whose loop is
    quartered already."""
    out = [
        Constraint(
            "quarters_need_fp8_wgmma",
            "QUARTERS 1 with Q_FP8 {Q_FP8} and BLOCK_H {BLOCK_H}: only 64-head tiles with FP8 queries",
            lambda c: not int(c["QUARTERS"]) or (int(c["Q_FP8"]) == 1 and int(c["BLOCK_H"]) >= 64),
            knobs=("QUARTERS", "Q_FP8", "BLOCK_H"),
            search_only=True,
        )
    ]
    if swap:
        out.append(
            Constraint(
                "quarters_swapped",
                "QUARTERS 1 with SWAP 1: the swapped loop is quartered already",
                lambda c: not (int(c["QUARTERS"]) and _swapped(c)),
                knobs=("QUARTERS", "SWAP"),
            )
        )
    return out


def mla_subspace(problem: Problem, target: Target, default: Config | None) -> SubSpace:
    """The kernel's configs, the heuristic default first."""
    first = default or mla_default_config(problem, target)
    return SubSpace("triton", mla_params(problem, target), mla_constraints(problem, target), (first,))


def _wanted_splits(problem: Problem, target: Target, block_h: int) -> int:
    """The most splits worth having: about two programs per CU, at most MAX_SPLITS."""
    programs = problem.M * _groups(problem, block_h)
    return min(max(1, 2 * target.cu_count // programs), MAX_SPLITS)


def default_splits(problem: Problem, target: Target, block_h: int, block_n: int) -> int:
    """Splits for about two programs per CU: the largest power of two at most 2 x CUs / (sequences x head
    groups), each split at least four tiles of the context, at most MAX_SPLITS; 1 where the sequences
    fill the GPU already (stage 1 then writes the output and the reduce is skipped)."""
    context = own(problem)[1]
    want = _wanted_splits(problem, target, block_h)
    splits = 1
    while 2 * splits <= want and 2 * splits * 4 * block_n <= context:
        splits *= 2
    return splits


def _in_space(problem: Problem, target: Target, config: Config) -> Config | None:
    """`config` where the kernel's space on `target` holds it, else None."""
    sub = SubSpace("triton", mla_params(problem, target), mla_constraints(problem, target))
    return config if sub.check(config) is None else None


def _swap_default(problem: Problem, target: Target) -> Config | None:
    """The swapped default (16 heads x 64 tokens, 4 warps, 2 stages, FP8 scores, fp16 P·V) where the space
    has SWAP, the heads fit one 16-head tile, and the context is long enough for the splits wanted at 64
    tokens a tile (else the unswapped 32-token tiles split it finer; measured on an H100 where the
    swapped tiles' splits were cut: 42.7 against 19.2 us at batch 1, 4K); None elsewhere."""
    if not _swap_knob(problem, target) or own(problem)[0] > MIN_BLOCK_H:
        return None
    splits = default_splits(problem, target, MIN_BLOCK_H, 64)
    if splits < _wanted_splits(problem, target, MIN_BLOCK_H):
        return None
    return _in_space(problem, target, Config(backend="triton", num_kv_splits=splits, BLOCK_H=MIN_BLOCK_H,
                                             BLOCK_N=64, num_warps=4, num_stages=2, Q_FP8=1, F16_TILES=1,
                                             SWAP=1, QUARTERS=0))  # fmt: skip


def _core(problem: Problem, target: Target) -> Core:
    """BLOCK_H (as `bm`), BLOCK_N (as `bn`), warps and stages of the rule: 16 heads where there are 16;
    else 64 on AMD (twice the lanes a warp) and sm_90 (warpgroup MMAs, 8 warps, 64-token tiles), 32
    elsewhere, so that 128 heads read the cache 2 (4) times; 32-token tiles otherwise."""
    heads = own(problem)[0]
    if heads > MIN_BLOCK_H and _wgmma(target, 64):
        return Core(min(64, next_pow2(heads)), 64, 1, 8, 2)
    wide = 64 if target.is_amd else 32
    bh = MIN_BLOCK_H if heads <= MIN_BLOCK_H else min(wide, next_pow2(heads))
    warps = 4 if target.is_amd or bh <= 32 else 8
    return Core(bh, 32, 1, warps, 2)


def _config(problem: Problem, target: Target, core: Core) -> Config | None:
    """`core` with its splits and AMD's knobs (bf16 queries; on NVIDIA fp16 tiles where a tile holds 16
    heads, bf16 tiles otherwise; with an FP8 cache on sm_90, 64-head tiles take FP8 queries and the latent
    dims in quarters: 1.41x the unquartered default on an H200, and 3 stages no faster than 2); None where
    that is no config of the space."""
    bh, bn, _, warps, stages = core
    values: dict[str, Value] = dict(num_kv_splits=default_splits(problem, target, bh, bn), BLOCK_H=bh,
                                    BLOCK_N=bn, num_warps=warps, num_stages=stages)  # fmt: skip
    if target.is_amd:
        values.update(waves_per_eu=0, matrix_instr_nonkdim=16)
    quarters = _fp8(problem) and _wgmma(target, bh)  # sm_90's 64-head tiles: the knob is there
    if _fp8(problem):
        values["Q_FP8"] = int(quarters)
    if _f16_knob(problem, target):  # fp16 tiles on 16-head tiles (`mma.sync`), where they were measured
        values["F16_TILES"] = int(bh <= MIN_BLOCK_H)
    if _swap_knob(problem, target):
        values["SWAP"] = 0
    if _quarters_knob(problem, target):
        values["QUARTERS"] = int(quarters)
    return _in_space(problem, target, Config(backend="triton", **values))


def mla_default_candidates(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The swapped default where it applies (`_swap_default`), the rule's pick (`_core`,
    `default_splits`), then its safer cores (`autotune.kernels.candidates`: more warps, fewer stages, then
    fewer heads or tokens a tile); the space's first config where none is one of the space."""
    params = mla_params(problem, target)
    if target.interpreter:
        values: dict[str, Value] = dict(num_kv_splits=1, BLOCK_H=16, BLOCK_N=16, num_warps=4, num_stages=1)
        if _fp8(problem):
            values["Q_FP8"] = 0
        return (Config(backend="triton", **values),)
    core = _core(problem, target)
    cores = safer_cores(
        core, rows=params["BLOCK_H"], cols=params["BLOCK_N"], k_tiles=(1,), warps=params["num_warps"],
        stages=params["num_stages"],
    )  # fmt: skip
    found = candidates((), cores, lambda c: _config(problem, target, c), params["num_warps"])
    swapped = _swap_default(problem, target)
    if swapped is not None:
        found = (swapped, *(c for c in found if c != swapped))
    if not found:
        sub = SubSpace("triton", params, mla_constraints(problem, target))
        found = (next(Config({**v}) for v, broken in sub.walk() if broken is None),)
    return found


def mla_default_config(problem: Problem, target: Target) -> Config:
    """The first of `mla_default_candidates` whose binary passes the static checks on `target`."""
    return first_passing(get_op(problem.op), problem, target, mla_default_candidates(problem, target))
