"""Core values build without loading kernels: `import autotune` and the first problems of every built-in op
(their rules come from the op modules, which need no torch) import neither torch nor triton; the entry
points bring torch, and `register_torch_ops` defines the torch ops of them all."""

from __future__ import annotations

import subprocess
import sys

PROBLEMS = """
import sys, autotune
from autotune import Problem
from autotune.core.registry import ops
ps = [Problem.of("gemm", 16, 4096, 4096), Problem.of("moe", 16, 1024, 4096, E=8, topk=2),
      Problem.quant("gemm_fp8_blockwise", 16, 4096, 4096), Problem.quant("gemm_mxfp4", 16, 4096, 4096)]
print(sorted(ops()), [p.flops for p in ps])
print("heavy:", [m for m in ("torch", "triton", "sqlalchemy", "optuna", "pandas") if m in sys.modules])
"""

ENTRY = """
import sys, autotune.kernels as k
assert "torch" not in sys.modules
k.gemm
import torch
print("gemm", hasattr(torch.ops.autotune, "gemm"))
k.register_torch_ops()
print("all", [hasattr(torch.ops.autotune, n) for n in ("linear", "gemm_quant", "fused_moe", "mla_decode")])
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_problems_of_every_op_build_without_torch() -> None:
    out = _run(PROBLEMS)
    assert "'mla_decode'" in out and "'moe'" in out and "heavy: []" in out, out


def test_an_entry_point_brings_torch_and_its_ops() -> None:
    out = _run(ENTRY)
    assert "gemm True" in out and "all [True, True, True, True]" in out, out
