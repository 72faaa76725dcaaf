"""GPU tests of the fused MoE kernel. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import pytest

from autotune import Config, Problem

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "mnk, e, topk, weights, split",
    [
        ((1, 128, 7168), 256, 8, "fp8e4m3", 8),  # DeepSeek-V3 TP16 decode: 16 gate/up tiles in 8 slices
        ((1, 768, 2048), 128, 8, "bf16", 2),  # Qwen3-30B-A3B: the down GEMM (K = 768) is split too
    ],
)
def test_moe_split_k_on_gpu_is_right_and_repeatable(
    right_and_repeatable, target, mnk, e, topk, weights, split
) -> None:
    """The fused MoE's K slices meet through a counter and a workspace across SMs (gate and up parts):
    the result must match the reference and be bit-identical on every repeat."""
    from autotune.kernels import get_op

    op = get_op("moe")
    problem = Problem.moe(*mnk, e, topk, weights=weights)
    config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                    SPLIT_K=split, num_warps=4, num_stages=3)  # fmt: skip
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the MoE split-K sum")
