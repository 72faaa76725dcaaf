"""The MLA decode's Gluon kernel (backend "gluon") cross-compiles for sm_90 without a GPU, in both schedules
(SCHEDULE 0, `mla/gluon_kernel.py`: each ring the space holds, BLOCK_N 32 and 64, 1 to 4 stages; SCHEDULE
1, the seesaw, `mla/gluon_seesaw.py`: 64 x 2, 32 x 2 to 4), for one split and several, and for an FP8
cache (the lockstep schedule, its tiles upcast to fp16, whose dots are then f16 ones): no
spills, registers within 255, shared memory within the target's 227 KiB and within what the space counts
(`gluon_space.gluon_smem_bytes` + SMEM_SCRATCH), warpgroup MMAs for both dots (S: N = BLOCK_N / 2 a
warpgroup in lockstep, N = BLOCK_N in the seesaw; P·V: N = 256), nine TMA boxes a tile, and the waits as
written (ptxas serializes no wgmma). The seesaw: two consumer warpgroups and a loader warp
(`gl.warp_specialize`, setmaxnreg 240 and 24).

Compiles through the op (`MLA_DECODE.kernel_calls`, as a sweep's static check does), in one process
without TRITON_INTERPRET. Numerics need a Hopper GPU (`tests/kernels/mla/test_mla_gpu.py -k gluon`);
Gluon has no interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

#: (SCHEDULE, BLOCK_N, num_stages, num_kv_splits, kv_dtype, Q_FP8): every ring of the space, with one
#: split and several, and the FP8 cache's, its tiles upcast for both dots (Q_FP8 0) or scored as loaded.
CONFIGS = [
    (0, 64, 1, 1, "bf16", 0),
    (0, 64, 2, 1, "bf16", 0),
    (0, 64, 2, 4, "bf16", 0),
    (0, 32, 2, 2, "bf16", 0),
    (0, 32, 3, 1, "bf16", 0),
    (0, 32, 4, 8, "bf16", 0),
    (1, 64, 2, 1, "bf16", 0),
    (1, 64, 2, 4, "bf16", 0),
    (1, 32, 2, 4, "bf16", 0),
    (1, 32, 3, 2, "bf16", 0),
    (1, 32, 4, 1, "bf16", 0),
    (1, 32, 4, 8, "bf16", 0),
    (0, 64, 1, 1, "fp8e4m3", 0),
    (0, 64, 2, 4, "fp8e4m3", 0),
    (0, 32, 2, 1, "fp8e4m3", 0),
    (0, 32, 4, 2, "fp8e4m3", 0),
    (0, 64, 2, 1, "fp8e4m3", 1),
    (0, 64, 3, 4, "fp8e4m3", 1),
    (0, 32, 4, 2, "fp8e4m3", 1),
]

SCRIPT = r"""
import re
from autotune import Config
from autotune.core.problem import Problem
from autotune.engine.compile import _cubin_usage, compile_call, cubin_sass
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.gluon_space import SMEM_SCRATCH, gluon_smem_bytes

out = {}
for schedule, block_n, stages, splits, kv, q_fp8 in json.loads(sys.argv[2]):
    name = f"{schedule}x{block_n}x{stages}x{splits}x{kv}x{q_fp8}"
    p = Problem.of("mla_decode", 16, 512, 576, heads=128, context=8192, kv_dtype=kv, page_size=64)
    c = Config(backend="gluon", BLOCK_N=block_n, num_stages=stages, num_kv_splits=splits, SCHEDULE=schedule,
               **({"Q_FP8": q_fp8} if kv != "bf16" else {}))
    try:
        calls = MLA_DECODE.kernel_calls(p, c, target)
        kernel = compile_call(calls[0], target)
        for extra in calls[1:]:
            compile_call(extra, target)
    except Exception as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}"[-3000:]}
        continue
    ptx = kernel.asm["ptx"]
    regs, stack, shared, local = _cubin_usage(kernel.asm["cubin"])
    sass = cubin_sass(kernel.asm["cubin"])
    out[name] = dict(
        regs=regs, stack=stack, local=local, shared=int(kernel.metadata.shared),
        counted=gluon_smem_bytes(block_n, stages, schedule, 1 + (kv == "bf16"), bool(q_fp8)) + SMEM_SCRATCH,
        space=MLA_DECODE.space(p, target).check(c),
        calls=len(calls), grid=list(calls[0].grid), warps=int(kernel.metadata.num_warps),
        wgmma=sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+)\.f32\.(?:b?f16|e4m3)\.", ptx))),
        f16=ptx.count(".f32.f16.f16"),
        e4m3=ptx.count(".f32.e4m3.e4m3"),
        wait0=ptx.count("wgmma.wait_group.sync.aligned 0;"),
        sass_wait0=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0"),
        wait1=ptx.count("wgmma.wait_group.sync.aligned 1;"),
        sass_wait1=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1"),
        setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+);", ptx)}),
        spill_ops=len(re.findall(r"\b(STL|LDL)\b", sass)),
        tma=len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::c\w+\.global", ptx)),
    )
print(json.dumps(out))
"""


def _name(cfg: tuple[int, int, int, int, str, int]) -> str:
    return "x".join(str(v) for v in cfg)


@pytest.fixture(scope="module")
def facts(compile_on_arch: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """What the sm_90 compile of each config shows (one process for all)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    return compile_on_arch(SCRIPT, "sm_90", CONFIGS)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_compiles_for_sm90_without_spills_within_its_shared_memory(
    facts: dict[str, Any], cfg: tuple[int, int, int, int, str, int], record_property: Any
) -> None:
    f = facts[_name(cfg)]
    assert "error" not in f, f.get("error")
    for key, value in f.items():
        record_property(key, value)
    print(f"{_name(cfg)}: {f}")
    schedule, block_n, stages, splits, kv, q_fp8 = cfg
    # a bf16 cache's dots are bf16 ones; an FP8 cache's P·V is fp16, its scores fp16 or, with Q_FP8, e4m3
    assert (f["f16"] > 0) == (kv != "bf16") and (f["e4m3"] > 0) == bool(q_fp8), f
    assert f["space"] is None, f["space"]  # a config of the space
    assert f["local"] == 0 and f["stack"] == 0 and f["spill_ops"] == 0 and f["regs"] <= 255, f
    assert f["shared"] <= 227 * 1024 and f["shared"] <= f["counted"], f
    # one program per (64 heads, sequence, split), a sequence's head groups side by side; the reduce
    # launch only with several splits
    assert f["grid"] == [2, 16, splits] and f["calls"] == (1 if splits == 1 else 2)
    # the waits as written: ptxas serialized no wgmma (Triton 3.6's seesaw: one wait for 0 more, the
    # scores retired before the other's P·V is issued in one consumer's loop)
    assert f["sass_wait1"] == f["wait1"] and f["wait0"] <= f["sass_wait0"] <= f["wait0"] + schedule, f
    if schedule == 0:
        assert f["warps"] == 8  # two warpgroups
        # S = Q·Kᵀ: each warpgroup half the tile's tokens; O += P·V: each 256 of the 512 columns
        k = 32 if q_fp8 else 16
        assert f["wgmma"] == sorted([f"m64n{block_n // 2}k{k}", "m64n256k16"]), f["wgmma"]
        # nine 64-column boxes a tile (8 latent + 1 RoPE), issued in the prologue and in the loop
        assert f["tma"] == 9 * (stages + 1), f["tma"]
        # each dot waited for once (then the softmax, then the next tile)
        assert (f["wait0"], f["wait1"]) == (2, 0), f
    else:
        # two consumer warpgroups and the loader warp (its warpgroup rounded up), registers reallocated
        assert f["warps"] == 12 and 24 in f["setmaxnreg"] and 240 in f["setmaxnreg"], f
        # S = Q·Kᵀ of a whole tile by one warpgroup; O += P·V: each 256 of the 512 columns
        assert f["wgmma"] == sorted([f"m64n{block_n}k16", "m64n256k16"]), f["wgmma"]
        # nine boxes a tile: the ring's first tiles in the prologue, the rest in the loader
        assert f["tma"] == 9 * (stages + 1), f["tma"]
        # the scores waited for with the other's P·V left in flight (one wait for 1 a loop)
        assert f["wait1"] == 2 and f["wait0"] >= 4, f


#: (heads, num_stages, num_kv_splits) of the swapped kernel (SCHEDULE 2: an e4m3 cache, FP8 scores, 64-token
#: tiles): 16 columns (8 and 16 heads) in every ring, 32 columns in the deepest that fits.
SWAPPED = [(16, 1, 1), (16, 2, 4), (16, 4, 8), (8, 3, 2), (32, 3, 4)]

SWAPPED_SCRIPT = r"""
import re
from autotune import Config
from autotune.core.problem import Problem
from autotune.engine.compile import _cubin_usage, compile_call, cubin_sass
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.gluon_space import SMEM_SCRATCH, gluon_smem_bytes

out = {}
for heads, stages, splits in json.loads(sys.argv[2]):
    name = f"{heads}x{stages}x{splits}"
    p = Problem.of("mla_decode", 16, 512, 576, heads=heads, context=8192, kv_dtype="fp8e4m3", page_size=64)
    c = Config(backend="gluon", BLOCK_N=64, num_stages=stages, num_kv_splits=splits, SCHEDULE=2, Q_FP8=1)
    try:
        calls = MLA_DECODE.kernel_calls(p, c, target)
        kernel = compile_call(calls[0], target)
    except Exception as exc:
        out[name] = {"error": f"{type(exc).__name__}: {exc}"[-3000:]}
        continue
    ptx = kernel.asm["ptx"]
    regs, stack, shared, local = _cubin_usage(kernel.asm["cubin"])
    sass = cubin_sass(kernel.asm["cubin"])
    out[name] = dict(
        regs=regs, stack=stack, local=local, shared=int(kernel.metadata.shared),
        counted=gluon_smem_bytes(64, stages, 2, kv_bytes=1, q_fp8=True, heads=heads) + SMEM_SCRATCH,
        calls=len(calls), grid=list(calls[0].grid), warps=int(kernel.metadata.num_warps),
        wgmma=sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+\.f32\.\w+\.\w+)", ptx))),
        spill_ops=len(re.findall(r"\b(STL|LDL)\b", sass)),
        tma=len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::c\w+\.global", ptx)),
    )
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def swapped_facts(compile_on_arch: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """What the sm_90 compile of each swapped config shows (one process for all)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    return compile_on_arch(SWAPPED_SCRIPT, "sm_90", SWAPPED)


@pytest.mark.parametrize("cfg", SWAPPED, ids=lambda c: "x".join(map(str, c)))
def test_the_swapped_kernel_compiles_for_sm90_with_its_heads_as_the_wgmmas_n(
    swapped_facts: dict[str, Any], cfg: tuple[int, int, int]
) -> None:
    """SCHEDULE 2 (`mla/gluon_swapped.py`): one warpgroup, one program a (sequence, split); no spills,
    registers within 255, shared memory within the target's and within what the space counts; the scores
    as FP8 wgmmas m64nHk32 (H = 16 or 32 columns of heads) and Vᵀ·Pᵀ as fp16 m64nHk16; nine TMA boxes a
    tile (the prologue's and the loop's); the reduce launched only with several splits."""
    heads, stages, splits = cfg
    f = swapped_facts["x".join(map(str, cfg))]
    assert "error" not in f, f.get("error")
    print(f"{cfg}: {f}")
    columns = 16 if heads <= 16 else 32
    assert f["local"] == 0 and f["stack"] == 0 and f["spill_ops"] == 0 and f["regs"] <= 255, f
    assert f["shared"] <= 227 * 1024 and f["shared"] <= f["counted"], f
    assert f["grid"] == [16, splits] and f["calls"] == (1 if splits == 1 else 2) and f["warps"] == 4, f
    assert f["wgmma"] == sorted([f"m64n{columns}k32.f32.e4m3.e4m3", f"m64n{columns}k16.f32.f16.f16"]), f
    assert f["tma"] == 9 * (stages + 1), f
