"""The Gluon blockwise FP8 GEMM (`kernels/gemm_fp8_gluon.py`, the "gluon" backend of gemm_fp8_blockwise)
cross-compiles for sm_90 without a GPU, with the asynchronous waits it exists for: `wgmma.wait_group 1`
(group g scaled while g + 1's wgmma runs) and no serialization by ptxas (which would show as waits for 0
in the SASS beyond the PTX's own).

Compiles in a subprocess: the test session may have TRITON_INTERPRET=1. Numerics need a Hopper GPU
(`benchmarks/fp8_gluon.py`); Gluon does not run in the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: (BLOCK_M, BLOCK_N, num_warps, num_stages, persistent); the first is the main config.
CONFIGS = [(128, 128, 8, 4, False), (128, 128, 8, 4, True), (64, 128, 4, 4, False), (128, 64, 8, 3, False)]

SCRIPT = r"""
import json, subprocess, sys, tempfile, os
from triton import knobs
from autotune.kernels.gemm_fp8_gluon import compile_for_target
from autotune.compile import _cubin_usage

facts = {}
for cfg in json.loads(sys.argv[1]):
    name = "x".join(str(int(v)) for v in cfg)
    try:
        kernel = compile_for_target(*cfg[:4], persistent=bool(cfg[4]))
    except Exception as exc:
        facts[name] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
        continue
    ptx = kernel.asm["ptx"]
    regs, stack, shared, local = _cubin_usage(kernel.asm["cubin"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        sass = subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", path], capture_output=True, text=True,
                              check=True).stdout
    facts[name] = dict(
        mma_async=ptx.count("wgmma.mma_async"),
        wait0=ptx.count("wgmma.wait_group.sync.aligned 0;"),
        wait1=ptx.count("wgmma.wait_group.sync.aligned 1;"),
        sass_wait0=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0"),
        sass_wait1=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1"),
        regs=regs, stack=stack, local=local, shared=int(kernel.metadata.shared),
    )
print(json.dumps(facts))
"""


def _name(cfg: tuple[int, int, int, int, bool]) -> str:
    return "x".join(str(int(v)) for v in cfg)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    """What the sm_90 compile of each config shows (one subprocess for all)."""
    pytest.importorskip("triton")
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this Triton has no Gluon for Hopper (triton.experimental.gluon): {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(CONFIGS)],
        capture_output=True, text=True, env=env, timeout=540,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_compiles_for_sm90_with_a_wgmma_left_in_flight(
    facts: dict[str, Any], cfg: tuple[int, int, int, int, bool], record_property: Any
) -> None:
    f = facts[_name(cfg)]
    assert "error" not in f, f.get("error")
    for key, value in f.items():
        record_property(key, value)
    print(f"{_name(cfg)}: {f}")
    assert f["mma_async"] > 0
    # The point of the kernel: the scale-and-add of group g runs while group g + 1's wgmma is in flight.
    assert f["wait1"] >= 1
    # waits for 0 only after the last group of a tile (two tails: an even and an odd count of K groups)
    assert f["wait0"] == 2
    # ptxas kept the waits as written: it injects waits for 0 where it serializes the wgmmas (C7514).
    assert f["sass_wait0"] == f["wait0"], f
    assert f["sass_wait1"] == f["wait1"], f
    assert f["shared"] <= 227 * 1024


def test_main_config_does_not_spill(facts: dict[str, Any]) -> None:
    f = facts[_name(CONFIGS[0])]
    assert "error" not in f, f.get("error")
    assert f["local"] == 0 and f["regs"] <= 255, f


def test_launcher_rejects_configs_it_cannot_run() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from autotune.kernels.gemm_fp8_gluon import gluon_blockwise_launcher

    with pytest.raises(ValueError, match="BLOCK_N"):
        gluon_blockwise_launcher(128, 256)  # two B scales per tile and group
    with pytest.raises(ValueError, match="BLOCK_M"):
        gluon_blockwise_launcher(64, 128, num_warps=8)  # 8 warps need 128 rows
    with pytest.raises(ValueError, match="num_stages"):
        gluon_blockwise_launcher(num_stages=1)


def test_pinned_launch_keys_the_gluon_descriptors() -> None:
    """The op launches the kernel through `launch.pinned`: its launch key must take the Gluon tensor
    descriptors (all their fields, the base tensor as a tensor), so a repeat launch skips the binder."""
    pytest.importorskip("triton")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    import torch

    from autotune.kernels.gemm_fp8_gluon import _kernel_args
    from autotune.kernels.launch import _launch_key

    def key(M: int, block_n: int = 128) -> tuple[Any, ...]:
        a = torch.empty(M, 256, dtype=torch.float8_e4m3fn)
        b = torch.empty(512, 256, dtype=torch.float8_e4m3fn)
        sa, sb = torch.empty(M, 2), torch.empty(4, 2)
        out = torch.empty(M, 512, dtype=torch.bfloat16)
        return _launch_key(0, _kernel_args(a, b, sa, sb, out, 128, block_n), {})

    assert hash(key(300)) == hash(key(300)) and key(300) == key(300)
    assert key(300) != key(301) and key(300) != key(300, block_n=64)
