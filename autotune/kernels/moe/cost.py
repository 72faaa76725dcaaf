"""The fused MoE's cost model: its two grouped GEMMs through the dense GEMM's model, plus the weight
traffic of every busy expert and the extra launches."""

from __future__ import annotations

import math

from autotune.core.config import Config
from autotune.core.problem import DTYPE_BYTES, Problem
from autotune.core.registry import backend_of
from autotune.core.static import StaticFeatures
from autotune.core.target import Target
from autotune.engine.model import LAUNCH_US, library_us, predict_us
from autotune.kernels.moe.params import experts, experts_touched

__all__ = ["MOE_EXTRA_LAUNCHES", "MOE_TORCH_LAUNCHES_PER_EXPERT", "moe_us"]

#: Launches of the fused MoE besides its two GEMMs: the block alignment of the routing, the SiLU and the
#: top-k reduction (and the activation quantization with FP8 weights).
MOE_EXTRA_LAUNCHES = 3
#: The torch baseline launches a handful of kernels per busy expert (gather, two matmuls, activation,
#: scatter-add).
MOE_TORCH_LAUNCHES_PER_EXPERT = 6
#: vLLM's knob names → the dense GEMM's.
_MOE_TO_GEMM = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K"}


def moe_us(problem: Problem, config: Config, target: Target, features: StaticFeatures | None) -> float:
    """The fused MoE as its two grouped GEMMs (gate+up: 2N x K, down: K x N) over the rows the routing
    gives the busy experts, each padded to BLOCK_SIZE_M, plus the weight traffic of every busy expert
    (the dense model reads B once) and the extra launches; with MXFP4 weights the down GEMM takes
    BLOCK_SIZE_N_DOWN as its column tile. A first model: not yet validated against
    measurements (the dense GEMM's is, in BENCHMARKS.md)."""
    touched = max(1.0, experts_touched(problem))
    per_expert = problem.M * experts(problem)[1] / touched
    wbytes = DTYPE_BYTES[problem.dtype_b]
    if backend_of(problem.op, config.backend).library or target.peak_tflops <= 0 or target.mem_gbps <= 0:
        launches = touched * MOE_TORCH_LAUNCHES_PER_EXPERT * (LAUNCH_US if target.peak_tflops > 0 else 1.0)
        return launches + library_us(problem, target) if target.peak_tflops > 0 else launches + 1.0
    bm = int(config["BLOCK_SIZE_M"])
    rows = int(touched * math.ceil(per_expert / bm) * bm)
    skip = ("backend", "GROUP_SIZE_M", "BLOCK_SIZE_N_DOWN")
    knobs = {_MOE_TO_GEMM.get(k, k): v for k, v in config.items() if k not in skip}
    gemm_config = Config(backend="triton", **{"GROUP_M": 1, "SPLIT_K": 1, **knobs})
    # MXFP4 weights: the down GEMM has a column tile of its own
    down_config = (
        gemm_config.replace(BLOCK_N=config["BLOCK_SIZE_N_DOWN"])
        if "BLOCK_SIZE_N_DOWN" in config
        else gemm_config
    )
    up = Problem("gemm", rows, 2 * problem.N, problem.K, dtype_a=problem.dtype_a, dtype_b=problem.dtype_b,
                 dtype_out=problem.dtype_out)  # fmt: skip
    down = Problem("gemm", rows, problem.K, problem.N, dtype_a=problem.dtype_a, dtype_b=problem.dtype_b,
                   dtype_out=problem.dtype_out)  # fmt: skip
    gemms = predict_us(up, gemm_config, target, features) + predict_us(down, down_config, target, features)
    extra_weights = (touched - 1) * 3 * problem.N * problem.K * wbytes / (target.mem_gbps * 1e3)
    return gemms + extra_weights + MOE_EXTRA_LAUNCHES * LAUNCH_US
