"""The dense GEMM's `triton` kernels compile once per config for every M: Triton specializes none of their
M-dependent integer arguments (equal to 1, divisible by 16), so an M profile of them compiles nothing a
sweep did not, and serving a new M compiles nothing new. The other kernels keep Triton's specialization
(the persistent TMA kernel ran up to 6% slower on the H100 without it). Checked with Triton's own binder
on the launches the op captures for a cross-compile target, at M from 1 to 256 (the binder needs real
JIT functions: a subprocess without the interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import json
from autotune import Problem
from autotune.engine.compile import gpu_target
from autotune.kernels import get_op
from autotune.core.target import Target
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

def problem(op, M):
    return Problem.of("gemm", M, 256, 512)

def keys(op, target, config, M):
    backend = make_backend(gpu_target(target))
    out = []
    for call in op.kernel_calls(problem(op.name, M), config, target):
        fn = call.fn
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        _, spec, _ = binder(*call.args, **dict(call.kwargs))
        out.append([fn.__name__, repr(spec)])
    return out

checked = []
for name in ["gemm"]:
    op = get_op(name)
    for arch in ("sm_90", "gfx950"):
        target = Target.for_arch(arch)
        seen = set()
        for M0 in (1, 16, 64, 4096):
            config = op.default_config(problem(name, M0), target)
            if config in seen:
                continue
            seen.add(config)
            per_m = {}
            for M in (1, 2, 3, 16, 24, 37, 136, 200, 256):
                if op.space(problem(name, M), target).check(config) is None:
                    per_m[M] = keys(op, target, config, M)
            calls = [c for ks in per_m.values() for c in ks]
            if not calls:
                continue
            checked.append([name, arch, config.backend, config.short(), per_m])
print(json.dumps(checked))
"""


def test_kernels_compile_once_for_every_m(
    compile_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = compile_script(SCRIPT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = json.loads(proc.stdout.strip().splitlines()[-1])
    compared = 0
    for name, arch, backend, short, per_m in checked:
        if name == "gemm" and backend == "triton" and len(per_m) > 1:
            compared += 1
            first = next(iter(per_m))
            for m in per_m:
                assert per_m[m] == per_m[first], (arch, short, m, first)
    assert compared >= 4  # two defaults, on sm_90 and gfx950
