"""Compile-only check of the MoE's persistent GEMMs (PERSISTENT 1; no GPU needed): the default's wide
bf16 prefill tile on sm_90 (128 x 256, 8 warps, 4 stages, weights through TMA) launches the persistent
kernel and fits the H100's shared memory without spills; on gfx942 and gfx950 a persistent 128 x 128 tile
compiles without spills too (the knob is searched there). Runs in subprocesses (compiling needs real JIT
functions, not the interpreter's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SCRIPT = r"""
from autotune import Config
from autotune.core.problem import Problem
from autotune.engine.compile import compile_features
from autotune.kernels import get_op

op = get_op("moe")
problem = Problem.of("moe", 4096, 7168, 4096, E=8, topk=2)  # Mixtral-8x7B TP 2 prefill, 1024 tokens an expert
if target.is_amd:
    config = Config(backend="triton", BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=16,
                    SPLIT_K=1, GATE_UP_FUSED=0, PERSISTENT=1, num_warps=8, num_stages=2,
                    matrix_instr_nonkdim=16, waves_per_eu=0,
                    **({"kpack": 2} if target.arch == "gfx942" else {}))
else:
    config = op.default_config(problem, target)
main = op.kernel_calls(problem, config, target)[0]
f = compile_features(op, problem, config, target)
print(json.dumps({
    "config": dict(config.items()), "kernel": main.fn.__name__, "walks": main.kwargs.get("PERSISTENT"),
    "space": op.space(problem, target).check(config),
    "compiled": f.compiled, "error": f.error, "spills": f.spills, "lds": f.lds_bytes,
    "lds_limit": target.lds_bytes, "tma": list(f.tma),
}))
"""


@pytest.fixture(scope="module")
def compiled(compile_per_arch: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return compile_per_arch(SCRIPT, ("sm_90", "gfx942", "gfx950"), None)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950"])
def test_persistent_gemms_compile_without_spills_within_the_lds(compiled: dict[str, Any], arch: str) -> None:
    found = compiled[arch]
    if "skip" in found:
        pytest.skip(found["skip"])
    assert found["compiled"], found["error"]
    assert found["space"] is None and found["config"]["PERSISTENT"] == 1
    assert found["kernel"] == "moe_gemm_kernel" and found["walks"]
    assert found["spills"] == 0 and 0 < found["lds"] <= found["lds_limit"], found
    if arch == "sm_90":  # the default's wide tile: vLLM's structure, weights through TMA
        assert found["config"]["GATE_UP_FUSED"] == 0 and found["config"]["B_TMA"] == 1
        assert (found["config"]["BLOCK_SIZE_M"], found["config"]["BLOCK_SIZE_N"]) == (128, 256)
        assert "load" in found["tma"]
