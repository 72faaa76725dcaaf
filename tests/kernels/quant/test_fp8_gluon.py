"""The Gluon blockwise FP8 kernel (`kernels/gemm_fp8_gluon.py`, the "gluon" backend of gemm_fp8_blockwise)
cross-compiles for sm_90 without a GPU, with the asynchronous waits it exists for: `wgmma.wait_group 1`
(group g scaled while g + 1's wgmma runs) and no serialization by ptxas (which would show as waits for 0
in the SASS beyond the PTX's own). WARP_SPEC=1 (a loader warp, one partition per consumer warpgroup)
compiles on Triton 3.6 and 3.9 alike, without spills and without a CTA barrier in its consumers' K loops.

Compiles in a subprocess: the test session may have TRITON_INTERPRET=1. Numerics need a Hopper GPU
(`tests/kernels/quant/test_quant_gpu.py -k gluon`); Gluon does not run in the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: (BLOCK_M, BLOCK_N, num_warps, num_stages, persistent, warp_spec, split_k, swap); the first is the main
#: config. Swapped (decode, compiled at M = 16): BLOCK_M is the activations' tile, wgmma's N side.
Cfg = tuple[int, int, int, int, bool, bool, int, bool]
CONFIGS: list[Cfg] = [
    (128, 128, 8, 4, False, False, 1, False),
    (128, 128, 8, 4, True, False, 1, False),
    (64, 128, 4, 4, False, False, 1, False),
    (128, 64, 8, 3, False, False, 1, False),
    (128, 128, 8, 4, False, True, 1, False),
    (128, 128, 8, 4, True, True, 1, False),
    (64, 128, 4, 3, True, True, 1, False),
    (64, 128, 4, 4, False, False, 3, False),
    (64, 64, 4, 6, False, True, 4, False),
    (128, 128, 8, 4, False, True, 2, False),
    (16, 64, 4, 6, False, False, 2, True),
    (32, 128, 4, 4, False, True, 1, True),
    (32, 64, 4, 5, True, False, 1, True),
]
WARP_SPEC = [cfg for cfg in CONFIGS if cfg[5]]

SCRIPT = r"""
import json, re, sys
from triton.experimental.gluon import language as gl
from autotune.kernels.quant.gluon import compile_for_target
from autotune.engine.compile import _cubin_usage, cubin_sass

def inner_loops(ptx):
    # the innermost loops of the PTX: from a label LLVM marks "Inner Loop Header" to its last branch back
    lines = ptx.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\$L__BB\d+_\d+):", line)
        if m and "Inner Loop Header" in "\n".join(lines[i:i + 4]):
            back = re.compile(r"\bbra(\.uni)?\s+" + re.escape(m.group(1)) + ";")
            end = max(j for j, text in enumerate(lines) if back.search(text))
            yield "\n".join(lines[i:end + 1])

facts = {"asm_mbarrier": hasattr(gl, "inline_asm")}
for cfg in json.loads(sys.argv[1]):
    name = "x".join(str(int(v)) for v in cfg)
    try:
        kernel = compile_for_target(*cfg[:4], persistent=bool(cfg[4]), warp_spec=bool(cfg[5]), split_k=cfg[6],
                                    swap=bool(cfg[7]), M=16 if cfg[7] else 2048)
    except Exception as exc:
        facts[name] = {"error": f"{type(exc).__name__}: {exc}"[-2000:]}
        continue
    ptx = kernel.asm["ptx"]
    regs, stack, shared, local = _cubin_usage(kernel.asm["cubin"])
    sass = cubin_sass(kernel.asm["cubin"])
    k_loops = [body for body in inner_loops(ptx) if "wgmma.mma_async" in body]
    facts[name] = dict(
        mma_async=ptx.count("wgmma.mma_async"),
        wait0=ptx.count("wgmma.wait_group.sync.aligned 0;"),
        wait1=ptx.count("wgmma.wait_group.sync.aligned 1;"),
        sass_wait0=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0"),
        sass_wait1=sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1"),
        spill_ops=len(re.findall(r"\b(STL|LDL)\b", sass)),
        regs=regs, stack=stack, local=local, shared=int(kernel.metadata.shared),
        k_loops=[dict(wait1=b.count("wgmma.wait_group.sync.aligned 1;"),
                      wait0=b.count("wgmma.wait_group.sync.aligned 0;"),
                      bars=re.findall(r"\b(?:bar|barrier)\.sync\s+([^;]*);", b),
                      arrives=b.count("mbarrier.arrive")) for b in k_loops],
        setmaxnreg=sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+);", ptx)}),
        inits=[int(v) for v in re.findall(r"mbarrier\.init\.shared::cta\.b64\s+\[[^]]*\],\s*(\d+);", ptx)],
        atoms=re.findall(r"\batom\.[\w.:]+", ptx),
    )
print(json.dumps(facts))
"""


def _name(cfg: Cfg) -> str:
    return "x".join(str(int(v)) for v in cfg)


def _consumers(cfg: Cfg) -> int:
    """Consumer partitions (warpgroups) of a WARP_SPEC config; the kernel without: one."""
    return cfg[2] // 4 if cfg[5] else 1


@pytest.fixture(scope="module")
def facts(compile_script: Callable[..., subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    """What the sm_90 compile of each config shows (one subprocess for all)."""
    pytest.importorskip("triton")
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this Triton has no Gluon for Hopper (triton.experimental.gluon): {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = compile_script(SCRIPT, json.dumps(CONFIGS), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_compiles_for_sm90_with_a_wgmma_left_in_flight(
    facts: dict[str, Any], cfg: Cfg, record_property: Any
) -> None:
    f = facts[_name(cfg)]
    assert "error" not in f, f.get("error")
    for key, value in f.items():
        record_property(key, value)
    print(f"{_name(cfg)}: {f}")
    assert f["mma_async"] > 0
    # The point of the kernel: the scale-and-add of group g runs while group g + 1's wgmma is in flight.
    assert f["wait1"] >= 1
    # waits for 0 only after the last group of a tile (two tails: an even and an odd count of K groups),
    # in every consumer partition
    assert f["wait0"] == 2 * _consumers(cfg)
    # ptxas kept the waits as written: it injects waits for 0 where it serializes the wgmmas (C7514).
    assert f["sass_wait0"] == f["wait0"], f
    assert f["sass_wait1"] == f["wait1"], f
    assert f["shared"] <= 227 * 1024
    # one K loop per consumer, each retiring two groups with a wgmma left in flight
    assert len(f["k_loops"]) == _consumers(cfg), f["k_loops"]
    assert all(k["wait1"] == 4 and k["wait0"] == 0 for k in f["k_loops"]), f["k_loops"]
    # SPLIT_K: each consumer bumps its block's counter (acquire-release, GPU scope) and the last resets it
    if cfg[6] > 1:
        assert sorted(f["atoms"]) == sorted(
            ["atom.global.gpu.acq_rel.add.u32", "atom.global.gpu.relaxed.exch.b32"] * _consumers(cfg)
        ), f["atoms"]
    else:
        assert f["atoms"] == [], f["atoms"]


def test_main_config_does_not_spill(facts: dict[str, Any]) -> None:
    f = facts[_name(CONFIGS[0])]
    assert "error" not in f, f.get("error")
    assert f["local"] == 0 and f["regs"] <= 255, f


@pytest.mark.parametrize("cfg", WARP_SPEC, ids=_name)
def test_warp_spec_has_no_cta_barrier_in_its_k_loops_and_no_spills(facts: dict[str, Any], cfg: Cfg) -> None:
    """The consumers' K loops: the release of each slot (one arrival per warp on 3.9, per warpgroup on
    3.6), and no bar.sync on 3.9; on 3.6 only Gluon's own, of one warpgroup (128 threads), before each
    mbarrier wait and arrive. Registers: setmaxnreg gives the loader 24 and the consumers 240 or more."""
    f = facts[_name(cfg)]
    assert "error" not in f, f.get("error")
    assert f["local"] == 0 and f["stack"] == 0 and f["spill_ops"] == 0, f
    assert 24 in f["setmaxnreg"] and max(f["setmaxnreg"]) >= 240, f["setmaxnreg"]
    stages, consumers = cfg[3], _consumers(cfg)
    # the ring: "ready" (count 1: the expect) and "empty" (one arrival per consumer warp or warpgroup)
    per_release = cfg[2] if facts["asm_mbarrier"] else consumers
    assert sorted(f["inits"]) == sorted([1] * stages + [per_release] * stages), f["inits"]
    for loop in f["k_loops"]:
        assert loop["arrives"] == 2, loop  # two groups per iteration, one release each
        if facts["asm_mbarrier"]:
            assert loop["bars"] == [], loop
        else:
            assert loop["bars"] and all(b.replace(" ", "").endswith(",128") for b in loop["bars"]), loop


def _gluon_space(M: int, N: int, K: int) -> tuple[Any, Any, Any, Any, list[Any]]:
    """(gemm_fp8_blockwise, the sm_90 target, the problem, its space, the space's gluon configs)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from autotune import Problem
    from autotune.core.target import Target
    from autotune.kernels import get_op

    sm90 = Target.for_arch("sm_90")
    op = get_op("gemm_fp8_blockwise")
    problem = Problem.quant("gemm_fp8_blockwise", M, N, K)
    space = op.space(problem, sm90)
    return op, sm90, problem, space, [c for c in space.configs() if c.backend == "gluon"]


def test_the_space_holds_warp_spec_and_old_configs_still_launch() -> None:
    """WARP_SPEC 0 and 1 are in the gluon space (the default keeps 0); a config stored before the knob
    existed has none and launches as WARP_SPEC 0; WARP_SPEC 1 launches one warpgroup per partition, each
    with its own C block."""
    op, sm90, problem, space, gluon = _gluon_space(2048, 4608, 7168)
    from autotune import Config
    from autotune.kernels.quant.gluon import gluon_launcher

    assert {c["WARP_SPEC"] for c in gluon} == {0, 1} and gluon[0]["WARP_SPEC"] == 1  # the default
    knobs = dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4, PERSISTENT=1, GROUP_M=8)
    old = Config(backend="gluon", **knobs)
    launcher = gluon_launcher(old, num_sms=132)
    assert not launcher.warp_spec and launcher.consumers == 1
    with pytest.raises(ValueError, match="has unknown WARP"):
        gluon_launcher(old.replace(WARP=1), num_sms=132)
    for warps, consumers in ((8, 2), (4, 1)):
        ws = Config(
            backend="gluon",
            **(knobs | dict(BLOCK_M=64 * consumers, num_warps=warps, WARP_SPEC=1, SPLIT_K=1, SWAP_AB=0)),
        )
        assert ws in space
        (call,) = op.kernel_calls(problem, ws, sm90)
        assert call.kwargs["WARP_SPEC"] is True and call.kwargs["CONSUMERS"] == consumers
        assert call.kwargs["num_warps"] == 4  # the default partition: the first consumer warpgroup
        assert call.args[2].block_shape == [64, 128]  # C: one block per consumer warpgroup
    (old_call,) = op.kernel_calls(problem, old, sm90)
    assert old_call.kwargs["WARP_SPEC"] is False and old_call.args[2].block_shape == [128, 128]
    assert old_call.kwargs["SPLIT_K"] == 1 and old_call.grid[1] == 1  # stored before SPLIT_K existed
    assert old_call.kwargs["SWAP"] is False  # and before SWAP_AB


def test_the_space_splits_k_where_the_tiles_leave_sms_idle() -> None:
    """SPLIT_K > 1 is in the gluon space where the tiles number fewer than the SMs (decode), never with
    PERSISTENT or where a slice would be empty; a split config launches a (tiles, SPLIT_K) grid with the
    fp32 workspace (SPLIT_K blocks per block of C) and one zeroed counter per block of C."""
    op, sm90, decode, space, gluon = _gluon_space(16, 7168, 8192)
    from autotune import Config, Problem

    assert {c["SPLIT_K"] for c in gluon} == {1, 2, 3, 4}
    assert all(not c["PERSISTENT"] for c in gluon if int(c["SPLIT_K"]) > 1)
    split = Config(
        backend="gluon", BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4, PERSISTENT=0, GROUP_M=1,
        WARP_SPEC=1, SPLIT_K=3, SWAP_AB=0,
    )  # fmt: skip
    assert split in space
    prefill = op.space(Problem.quant("gemm_fp8_blockwise", 2048, 4608, 7168), sm90)
    assert {c["SPLIT_K"] for c in prefill.configs() if c.backend == "gluon"} == {1}
    reason = prefill.check(split.replace(BLOCK_M=128, num_warps=8, GROUP_M=8))
    assert reason is not None and reason.startswith("gluon_split_needless"), reason
    # 5 K groups in slices of cdiv(5, 4) = 2 make 3 slices, not 4
    short = op.space(Problem.quant("gemm_fp8_blockwise", 16, 7168, 640), sm90)
    reason = short.check(split.replace(SPLIT_K=4))
    assert reason is not None and reason.startswith("gluon_split_empty"), reason
    assert short.check(split) is None

    (call,) = op.kernel_calls(decode, split, sm90)
    tiles = 1 * 7168 // 128
    assert call.grid == (tiles, 3) and call.kwargs["SPLIT_K"] == 3
    ws, counters = call.args[5], call.args[6]
    assert ws.dtype.is_floating_point and ws.numel() >= tiles * 3 * 64 * 128
    assert str(counters.dtype) == "torch.int32" and counters.numel() >= tiles


def test_the_space_swaps_at_decode_only() -> None:
    """SWAP_AB 1 is in the gluon space at M <= 32 with the activations' 16 or 32 rows on wgmma's N side and
    the weight's 64 or 128 on its M side (4 warps); pruned with the reason at prefill and for tiles the
    kernel refuses; a swapped config launches the kernel on Cᵀ: the weight's descriptor first, C's blocks
    (BLOCK_M, BLOCK_N), one program per tile and K slice."""
    op, sm90, decode, space, gluon = _gluon_space(16, 4608, 7168)
    from autotune import Config, Problem

    swapped = [c for c in gluon if c["SWAP_AB"]]
    assert swapped and {c["BLOCK_M"] for c in swapped} == {16}  # M = 16: no wider activation tile
    assert all(c["num_warps"] == 4 and c["BLOCK_N"] in (64, 128) for c in swapped)
    assert {c["BLOCK_M"] for c in gluon if not c["SWAP_AB"]} == {64}
    cfg = Config(
        backend="gluon", BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=6, PERSISTENT=0, GROUP_M=1,
        WARP_SPEC=0, SPLIT_K=2, SWAP_AB=1,
    )  # fmt: skip
    assert cfg in space
    (call,) = op.kernel_calls(decode, cfg, sm90)
    assert call.kwargs["SWAP"] is True and call.grid == (4608 // 64, 2)
    a_desc, b_desc, c_desc = call.args[:3]
    assert a_desc.block_shape == [64, 128] and list(a_desc.shape) == [4608, 7168]  # the weight
    assert b_desc.block_shape == [16, 128] and list(b_desc.shape) == [16, 7168]  # the activations
    assert c_desc.block_shape == [16, 64] and list(c_desc.shape) == [16, 4608]
    assert call.args[7:9] == (4608, 16)  # the kernel's M and N: Cᵀ's
    for m in (64, 2048):
        wider = op.space(Problem.quant("gemm_fp8_blockwise", m, 4608, 7168), sm90)
        reason = wider.check(cfg.replace(BLOCK_M=64, SPLIT_K=1))
        assert reason is not None and reason.startswith("gluon_swap_decode"), reason
    for bad in (dict(BLOCK_N=32), dict(num_warps=8), dict(BLOCK_M=128)):
        reason = space.check(cfg.replace(**bad))
        assert reason is not None, bad
    unswapped_narrow = space.check(cfg.replace(SWAP_AB=0))
    assert unswapped_narrow is not None and unswapped_narrow.startswith("gluon_warp_rows"), unswapped_narrow


def test_launcher_rejects_configs_it_cannot_run() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from autotune.kernels.quant.gluon import gluon_blockwise_launcher

    with pytest.raises(ValueError, match="BLOCK_N"):
        gluon_blockwise_launcher(128, 256)  # two B scales per tile and group
    with pytest.raises(ValueError, match="SWAP_AB: BLOCK_N 32"):
        gluon_blockwise_launcher(16, 32, 4, swap=True)  # wgmma's M side: 64 rows at least
    with pytest.raises(ValueError, match="SWAP_AB: BLOCK_M 128"):
        gluon_blockwise_launcher(128, 64, 4, swap=True)
    with pytest.raises(ValueError, match="4 warps"):
        gluon_blockwise_launcher(16, 128, 8, swap=True)
    with pytest.raises(ValueError, match="BLOCK_M"):
        gluon_blockwise_launcher(64, 128, num_warps=8)  # 8 warps need 128 rows
    with pytest.raises(ValueError, match="BLOCK_M"):
        gluon_blockwise_launcher(64, 128, num_warps=8, warp_spec=True)  # a warpgroup per 64 rows
    with pytest.raises(ValueError, match="num_stages"):
        gluon_blockwise_launcher(num_stages=1)
    with pytest.raises(ValueError, match="SPLIT_K"):
        gluon_blockwise_launcher(64, 128, 4, persistent=True, split_k=2)
    with pytest.raises(ValueError, match="SPLIT_K"):
        gluon_blockwise_launcher(64, 128, 4, split_k=0)
    import torch

    launcher = gluon_blockwise_launcher(64, 128, 4, split_k=4)
    a = torch.empty(16, 640, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(256, 640, dtype=torch.float8_e4m3fn, device="meta")
    sa, sb = torch.empty(16, 5, device="meta"), torch.empty(2, 5, device="meta")
    out = torch.empty(16, 256, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="leaves a slice empty"):
        launcher.bind(a, b, sa, sb, out)  # 5 K groups: slices of 2, 2 and 1
    gluon_blockwise_launcher(64, 128, 4, split_k=3).bind(a, b, sa, sb, out)


def test_pinned_launch_keys_the_gluon_descriptors() -> None:
    """The op launches the kernel through `launch.pinned`: its launch key must take the Gluon tensor
    descriptors (all their fields, the base tensor as a tensor), so a repeat launch skips the binder."""
    pytest.importorskip("triton")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    import torch

    from autotune.kernels.launch import _launch_key
    from autotune.kernels.quant.gluon import _kernel_args

    def key(M: int, block_n: int = 128, consumers: int = 1) -> tuple[Any, ...]:
        a = torch.empty(M, 256, dtype=torch.float8_e4m3fn)
        b = torch.empty(512, 256, dtype=torch.float8_e4m3fn)
        sa, sb = torch.empty(M, 2), torch.empty(4, 2)
        out = torch.empty(M, 512, dtype=torch.bfloat16)
        return _launch_key(0, _kernel_args(a, b, sa, sb, out, 128, block_n, consumers), {})

    assert hash(key(300)) == hash(key(300)) and key(300) == key(300)
    assert key(300) != key(301) and key(300) != key(300, block_n=64) and key(300) != key(300, consumers=2)
