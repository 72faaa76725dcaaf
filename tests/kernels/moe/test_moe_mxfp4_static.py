"""Compile-only checks of the MXFP4 MoE (no GPU needed): the heuristic default's gate/up kernel for
gfx950 and gfx942 at decode and prefill, its matrix and conversion instructions, and the static checks.

gfx950 runs `tl.dot_scaled` with bf16 activations: Triton lowers it to the hardware FP4 → bf16
conversion with the e8m0 scale applied (v_cvt_scalef32_pk_bf16_fp4) feeding bf16 MFMAs. The scaled
MFMA (v_mfma_scale_*_f8f6f4) takes FP8/FP6/FP4 operands only, so it appears only where the activations
are quantized too, which this mode does not do. gfx942 has neither: the weights are dequantized in
software (emulated) before its bf16 MFMAs.

Runs in one subprocess per target: the test session may have TRITON_INTERPRET=1, under which
@triton.jit functions cannot be compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

ARCHS = ("gfx950", "gfx942")
#: (M, N, K, E, topk): Mixtral-sized experts at decode and prefill.
PROBLEMS = [(16, 1792, 4096, 8, 2), (4096, 1792, 4096, 8, 2)]

SCRIPT = r"""
import collections, re
from autotune.core.problem import Problem
from autotune.core.registry import get_op
from autotune.core.static import check_features
from autotune.engine.compile import amd_features, compile_call

op = get_op("moe")
out = []
for m, n, k, e, topk in json.loads(sys.argv[2]):
    problem = Problem.of("moe", m, n, k, variant="mxfp4", E=e, topk=topk)
    config = op.default_config(problem, target)
    call = op.kernel_calls(problem, config, target)[0]
    kernel = compile_call(call, target)
    asm = kernel.asm["amdgcn"]
    features = amd_features(asm, int(kernel.metadata.shared), target, int(config["num_warps"]))
    ops = collections.Counter(re.findall(r"^\s+(v_cvt_scalef32\w*|v_mfma\w*)", asm, re.M))
    out.append(dict(m=m, kernel=call.fn.__name__, native=call.kwargs.get("NATIVE"), config=config.short(),
                    space=op.space(problem, target).check(config), features=features.summary(), ops=ops,
                    findings=[f"{f.check}: {f.reason}" for f in check_features(features, config, target)]))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled(compile_per_arch: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return compile_per_arch(SCRIPT, ARCHS, PROBLEMS)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_default_passes_the_static_checks(compiled: dict[str, Any], arch: str) -> None:
    found = compiled[arch]
    if isinstance(found, dict):
        pytest.skip(found["skip"])
    assert [r["m"] for r in found] == [p[0] for p in PROBLEMS]
    for r in found:
        assert r["kernel"] == "moe_mx_gemm_kernel" and r["space"] is None, r
        assert not r["findings"], (r["config"], r["features"], r["findings"])


def test_gfx950_converts_fp4_in_hardware_and_gfx942_emulates(compiled: dict[str, Any]) -> None:
    for arch in ARCHS:
        if isinstance(compiled[arch], dict):
            pytest.skip(compiled[arch]["skip"])
    for r in compiled["gfx950"]:
        mfma = {op for op in r["ops"] if op.startswith("v_mfma")}
        assert r["native"] is True and mfma == {"v_mfma_f32_16x16x32_bf16"}, r["ops"]
        assert r["ops"].get("v_cvt_scalef32_pk_bf16_fp4", 0) > 0, r["ops"]
        assert not any(op.startswith("v_mfma_scale") for op in r["ops"])  # bf16 A: no f8f6f4 operand
    for r in compiled["gfx942"]:
        assert r["native"] is False and set(r["ops"]) == {"v_mfma_f32_16x16x16_bf16"}, r["ops"]
