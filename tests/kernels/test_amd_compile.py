"""The AMD launch options of the GEMM compile for gfx942 and gfx950 without an AMD GPU (cross-compile).

Runs in a subprocess: the test session may have TRITON_INTERPRET=1, under which @triton.jit functions
are interpreter objects that cannot be compiled.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

SCRIPT = r"""
import sys, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from autotune import Config
from autotune.kernels.common.knobs import AMD_LAUNCH_OPTIONS
from autotune.kernels.dense.kernel import gemm_kernel

arch, nonkdim = sys.argv[1], int(sys.argv[2])
config = Config(backend="triton", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, NUM_XCDS=8,
                num_warps=8, num_stages=2, matrix_instr_nonkdim=nonkdim, waves_per_eu=2,
                **({"kpack": 2} if arch == "gfx942" else {}))
sig = {n: "*bf16" for n in ("a_ptr", "b_ptr", "c_ptr")}
sig |= {n: "i32" for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cs",
                           "stride_cm", "stride_cn")}
consts = {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "NUM_XCDS")}
consts |= {"EVEN_K": True, "DOT_F32": False}
sig |= {k: "constexpr" for k in consts}
options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
options |= {k: config[k] for k in AMD_LAUNCH_OPTIONS if k in config}
kernel = triton.compile(ASTSource(fn=gemm_kernel, signature=sig, constexprs=consts),
                        target=GPUTarget("hip", arch, 64), options=options)
print(sorted({line.split()[0] for line in kernel.asm["amdgcn"].splitlines() if "v_mfma" in line}))
"""


@pytest.mark.parametrize("arch, nonkdim, mfma", [("gfx942", 16, "16x16"), ("gfx950", 32, "32x32")])
def test_amd_knobs_compile_to_the_matching_mfma(
    arch: str, nonkdim: int, mfma: str, compile_script: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = compile_script(SCRIPT, arch, str(nonkdim), env=env)
    if proc.returncode != 0 and "hip" in proc.stderr.lower() and "backend" in proc.stderr.lower():
        pytest.skip(f"this Triton cannot compile for {arch}: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    instrs = proc.stdout.strip()
    assert f"v_mfma_f32_{mfma}" in instrs, instrs
