"""What vLLM's fused MoE runs where our tables do not reach: the keys of its configs, the values of our
kernel's extra knobs that mean its behaviour, and its fallback rule for shapes without a file (the store
reads it as a profile's baseline: `autotune.db.baselines`, through this op's `Fallback`)."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target

from .shape import MOE_OP, experts

__all__ = [
    "AMD_KEYS",
    "FP8_BLOCK_SHAPE",
    "OUR_KEYS",
    "VLLM_BACKEND",
    "VLLM_KEYS",
    "fallback_at",
    "fallback_config",
    "fallback_configs",
    "plain_keys",
]

#: The block shape of FP8 weights with block scales, the one quantization our moe op runs.
FP8_BLOCK_SHAPE: tuple[int, int] = (128, 128)
#: The keys of every config, in the order vLLM writes them.
VLLM_KEYS: tuple[str, ...] = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
)
#: The keys ROCm files may add, in the order vLLM's writer puts them after `VLLM_KEYS`.
AMD_KEYS: tuple[str, ...] = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
#: Our kernel's knobs that vLLM's kernel lacks, with the value that means vLLM's behaviour: a config
#: read from a file gets them (where the knob exists: `plain_keys`); only configs at these values are
#: exported (measured in vLLM's kernel structure: GATE_UP_FUSED 0, the gate/up GEMM over all 2N rows of
#: w1 and the activation after it; B_TMA 0, the weights loaded by pointer; PERSISTENT 0, a program a
#: tile), and written without them.
OUR_KEYS: dict[str, int] = {"SPLIT_K": 1, "GATE_UP_FUSED": 0, "B_TMA": 0, "PERSISTENT": 0}
#: The backend configs are stored under (our Triton fused MoE takes vLLM's names).
VLLM_BACKEND = "triton"


def fallback_config(M: int, E: int, fp8_block: bool, *, rocm: bool = False) -> dict[str, int]:
    """The config vLLM's fused MoE runs when no file covers its (E, N, device): the rule of its
    `get_default_config` (vLLM sources of late 2025) for unquantized and FP8 128x128-block weights, with
    num_warps and num_stages filled in where the rule names none, as Triton's launch then takes them
    (4 warps; 3 stages, 2 on ROCm). M is the token count. What a user without a tuned file gets today."""
    if M < 1 or E < 1:
        raise ValueError(f"M and E must be positive, got M={M}, E={E}")
    stages = 2 if rocm else 3
    if fp8_block:  # BLOCK_SIZE_N and _K are the scale block's
        tiles = (64, FP8_BLOCK_SHAPE[0], FP8_BLOCK_SHAPE[1], 32)
    elif M <= E:  # few tokens per expert: narrow tiles
        tiles = (16, 32, 64, 1)
    else:
        tiles = (64, 64, 32, 8)
    return dict(zip(VLLM_KEYS, (*tiles, 4, stages), strict=True))


#: The weights vLLM's fallback rule covers (`fallback_config`): unquantized, and FP8 with 128x128 blocks.
_FALLBACK_WEIGHTS = {"bf16": False, "fp16": False, "fp8e4m3": True}


def plain_keys(target: Target) -> dict[str, int]:
    """`OUR_KEYS` as a config of vLLM's kernel on `target` carries them (B_TMA only where TMA exists,
    PERSISTENT on every target but the interpreter)."""
    missing = {"B_TMA": not target.tma, "PERSISTENT": target.interpreter}
    return {key: value for key, value in OUR_KEYS.items() if not missing.get(key, False)}


def fallback_at(problem: Problem, target: Target, M: int) -> Config | None:
    """vLLM's fallback for `problem`'s MoE shape at `M` on `target` (`fallback_config`, with `plain_keys`);
    None for another op or for weights the rule does not cover (MXFP4)."""
    fp8 = _FALLBACK_WEIGHTS.get(problem.dtype_b)
    if problem.op != MOE_OP or fp8 is None:
        return None
    values = fallback_config(M, experts(problem)[0], fp8, rocm=target.is_amd)
    return Config(backend=VLLM_BACKEND, **values, **plain_keys(target))


def fallback_configs(problem: Problem, target: Target, ms: Iterable[int]) -> dict[int, Config]:
    """vLLM's fallback for `problem`'s MoE shape on `target` (`fallback_at`) by M key: at each M of `ms`
    and at the rule's own step (M = E and E + 1), so that the nearest key
    (`autotune.dispatch.ranges.imported_pick`) gives the rule's config at every M. Empty for another op or
    for weights the rule does not cover (MXFP4)."""
    if problem.op != MOE_OP:
        return {}
    E = experts(problem)[0]
    found = {m: fallback_at(problem, target, m) for m in sorted({*ms, E, E + 1}) if m >= 1}
    return {m: config for m, config in found.items() if config is not None}
