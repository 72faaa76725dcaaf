"""Compile-only check of the MoE's weight tiles through tensor descriptors (no GPU needed): on sm_90 a
B_TMA 1 config's GEMMs load B with TMA (`cp.async.bulk.tensor`) and the same config with B_TMA 0 does not.
Runs in a subprocess: the test session may have TRITON_INTERPRET=1, under which @triton.jit functions
cannot be compiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SCRIPT = r"""
from autotune import Config
from autotune.core.problem import Problem
from autotune.engine.compile import compile_call
from autotune.kernels import get_op

op = get_op("moe")
out = {}
for weights in ("bf16", "fp8e4m3"):
    problem = Problem.of("moe", 512, 768, 2048, variant=weights, E=128, topk=8)
    for fused in (0, 1):
        for tma in (0, 1):
            config = Config(backend="triton", BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64,
                            GROUP_SIZE_M=16, SPLIT_K=1, GATE_UP_FUSED=fused, B_TMA=tma, PERSISTENT=0,
                            num_warps=4, num_stages=3)
            ptx = compile_call(op.kernel_calls(problem, config, target)[0], target).asm["ptx"]
            out[f"{weights}-{fused}-{tma}"] = {
                "space": op.space(problem, target).check(config),
                "tma": ptx.count("cp.async.bulk.tensor"),
                "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
            }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled(compile_on_arch: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return compile_on_arch(SCRIPT, "sm_90")


def test_weight_tiles_load_through_tma_only_with_the_knob(compiled: dict[str, Any]) -> None:
    """Each of the 8 configs is in the space; with B_TMA 1 the gate/up GEMM loads B through TMA (one copy a
    B tile: two with the fused structure's gate and up) and A still by `cp.async`; with 0 nothing is TMA."""
    for key, found in compiled.items():
        assert found["space"] is None, (key, found)
        assert found["cp_async"] > 0, (key, found)
        tma = key.endswith("-1")
        assert (found["tma"] > 0) == tma, (key, found)
    for weights in ("bf16", "fp8e4m3"):
        assert compiled[f"{weights}-1-1"]["tma"] >= 2 * compiled[f"{weights}-0-1"]["tma"], compiled
