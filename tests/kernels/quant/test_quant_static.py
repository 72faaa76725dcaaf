"""Compile-only checks of the quantized GEMMs: cross-compiled for gfx950, gfx942 and sm_90 without a GPU,
each must use the target's matrix instructions for its format (MX scaled MFMAs of the shape that
matrix_instr_nonkdim asks for on MI355X, FP8 MFMAs on MI300X, FP8 wgmma on the H100)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from autotune import Config, Problem
from autotune.core.static import StaticFeatures, check_features
from autotune.core.target import Target, TargetError
from autotune.engine.compile import CompilePool
from autotune.kernels import get_op

pytest.importorskip("triton")


def amd(nonkdim: int, arch: str, **kw: int) -> Config:
    base = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=1, NUM_XCDS=1, num_warps=4,
                num_stages=2, matrix_instr_nonkdim=nonkdim, waves_per_eu=0)  # fmt: skip
    if arch == "gfx942":
        base["kpack"] = 1
    return Config(backend="triton", **{**base, **kw})


SM90 = Config(backend="triton", BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=2, num_warps=4,
              num_stages=3)  # fmt: skip

SCALE16, SCALE32 = "v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4"
WGMMA_FP8 = "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"
# name: (op, arch, config, the one matrix instruction expected)
CASES = {
    "950-mxfp4-16": ("gemm_mxfp4", "gfx950", amd(16, "gfx950"), SCALE16),
    "950-mxfp4-32": ("gemm_mxfp4", "gfx950", amd(32, "gfx950"), SCALE32),
    "950-mxfp8-16": ("gemm_mxfp8", "gfx950", amd(16, "gfx950", BLOCK_K=256), SCALE16),
    "950-mxfp8-32": ("gemm_mxfp8", "gfx950", amd(32, "gfx950", SPLIT_K=2), SCALE32),
    # bf16 activations quantized in the loop still feed the scaled MFMA
    "950-bf16a-16": ("gemm_mxfp4_bf16a", "gfx950", amd(16, "gfx950", BLOCK_M=16), SCALE16),
    "942-fp8row-16": ("gemm_fp8_rowwise", "gfx942", amd(16, "gfx942"), "v_mfma_f32_16x16x32_fp8_fp8"),
    "942-fp8block-32": ("gemm_fp8_blockwise", "gfx942", amd(32, "gfx942", BLOCK_K=256),
                        "v_mfma_f32_32x32x16_fp8_fp8"),
    # the next K tile's scales loaded ahead (in the space on AMD too)
    "942-fp8block-ahead": ("gemm_fp8_blockwise", "gfx942", amd(16, "gfx942", BLOCK_K=256, SCALES_AHEAD=1),
                           "v_mfma_f32_16x16x32_fp8_fp8"),
    # MI300X has no MX instructions: the tiles are dequantized to bf16 (the README's "emulated")
    "942-mxfp4-emulated": ("gemm_mxfp4", "gfx942", amd(16, "gfx942"), "v_mfma_f32_16x16x16_bf16"),
    "sm90-fp8block": ("gemm_fp8_blockwise", "sm_90", SM90, WGMMA_FP8),
}  # fmt: skip
PROBLEM = dict(M=64, N=256, K=1024)


@pytest.fixture(scope="module")
def compiled() -> dict[str, StaticFeatures]:
    pools: dict[str, CompilePool] = {}
    futures = {}
    try:
        for name, (op, arch, config, _) in CASES.items():
            try:
                pool = pools.get(arch) or pools.setdefault(
                    arch, CompilePool(Target.for_arch(arch), workers=2)
                )
            except TargetError as exc:
                pytest.skip(f"this Triton cannot compile for {arch}: {exc}")
            futures[name] = pool.submit(get_op(op), Problem.quant(op, **PROBLEM), config)
        return {name: future.result(timeout=600) for name, future in futures.items()}
    finally:
        for pool in pools.values():
            pool.close()


@pytest.mark.parametrize("name", list(CASES))
def test_quantized_kernels_use_the_targets_matrix_instructions(compiled, name: str) -> None:
    _, arch, config, want = CASES[name]
    features = compiled[name]
    assert features.compiled, features.error[:2000]
    matrix = [m for m in features.mma if m.startswith(("v_mfma", "wgmma.mma_async"))]
    assert matrix == [want], features.mma
    findings = check_features(features, config, Target.for_arch(arch))
    assert "mfma_shape" not in {f.check for f in findings} and "compile" not in {f.check for f in findings}


# -- the gluon backend: compiled through the sweep's own path (captured launch, CompilePool) ----------------

GLUON_WGMMA = "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"


def test_gluon_default_compiles_for_sm90_with_wgmma_and_no_spills() -> None:
    """The op's default for blockwise prefill on Hopper is the gluon kernel; compile-only (as `autotune
    sweep` compiles ahead) gives its wgmma, no spills and shared memory within the H100's, and so do two
    configs at the space's register limit (128x64 and 64x128 on 4 warps: 192 accumulator values a lane)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    op = get_op("gemm_fp8_blockwise")
    target = Target.for_arch("sm_90")
    problem = Problem.quant("gemm_fp8_blockwise", 2048, 4608, 7168)
    default = op.default_config(problem, target)
    assert default.backend == "gluon"
    space = op.space(problem, target)
    configs = [default, default.replace(BLOCK_N=64, num_warps=4, PERSISTENT=0),
               default.replace(BLOCK_M=64, num_warps=4, num_stages=5)]  # fmt: skip
    assert all(c in space for c in configs)
    try:
        pool = CompilePool(target, workers=len(configs))
    except TargetError as exc:
        pytest.skip(f"this Triton cannot compile for sm_90: {exc}")
    with pool:
        futures = [pool.submit(op, problem, c) for c in configs]
        compiled = [f.result(timeout=600) for f in futures]
    for config, features in zip(configs, compiled, strict=True):
        assert features.compiled, features.error[:2000]
        wgmma = [m for m in features.mma if m.startswith("wgmma")]
        assert wgmma == [GLUON_WGMMA.replace("n128", f"n{config['BLOCK_N']}")], features.mma
        assert features.spills == 0 and features.scratch_bytes == 0, (config.short(), features)
        assert 0 < features.lds_bytes <= target.lds_bytes and "store" in features.tma
        assert check_features(features, config, target) == [], config.short()


# -- FP8 decode: SWAP_AB, the scales ahead and the TMA kernel ------------------------------------------------


def _compile_in_space(op: Any, problem: Problem, configs: list[Config]) -> list[StaticFeatures]:
    """Each config, checked to be in the sm_90 space, compiled for sm_90 (skips where Triton cannot)."""
    target = Target.for_arch("sm_90")
    space = op.space(problem, target)
    assert all(c in space for c in configs), [space.check(c) for c in configs]
    try:
        pool = CompilePool(target, workers=2)
    except TargetError as exc:
        pytest.skip(f"this Triton cannot compile for sm_90: {exc}")
    with pool:
        compiled = [f.result(timeout=600) for f in [pool.submit(op, problem, c) for c in configs]]
    for features in compiled:
        assert features.compiled, features.error[:2000]
    return compiled


def test_swapped_decode_tiles_reach_wgmma_on_sm90() -> None:
    """At M = 16 the row-wise tile of 16 rows cannot be wgmma's M side (64 rows): unswapped it compiles to
    `mma.sync`; with SWAP_AB the weight's 64 rows are the M side and the tokens its N side (m64n16k32),
    in the pointer kernel and in the TMA kernel (whose tiles load through `cp.async.bulk.tensor`)."""
    op = get_op("gemm_fp8_rowwise")
    target = Target.for_arch("sm_90")
    problem = Problem.quant("gemm_fp8_rowwise", 16, 4608, 7168)
    pointer = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1,
                     FUSED_SPLIT=0, STREAM_K=0, SWAP_AB=0, num_warps=4, num_stages=5)  # fmt: skip
    tma = Config(backend="triton_tma", BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, GROUP_M=1, SPLIT_K=1,
                 PERSISTENT=0, SWAP_AB=1, num_warps=4, num_stages=4)  # fmt: skip
    assert op.default_config(problem, target) == pointer.replace(SWAP_AB=1)
    compiled = _compile_in_space(
        op, problem, [pointer, pointer.replace(SWAP_AB=1), tma, tma.replace(SPLIT_K=2)]
    )
    wgmma = [[m for m in f.mma if m.startswith("wgmma")] for f in compiled]
    swapped = "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3"
    assert wgmma[0] == [] and any(m.startswith("mma.sync") for m in compiled[0].mma), compiled[0].mma
    assert wgmma[1:] == [[swapped]] * 3, wgmma
    for features in compiled[2:]:
        assert "load" in features.tma and features.spills == 0, features


# Compiles the swapped blockwise decode tile for sm_90 with and without SCALES_AHEAD, in a process of its own
# (the tests run under the interpreter), and prints per config: bar.sync, st.shared, ld.shared, shared bytes.
_AHEAD_PTX = """
import json
from autotune import Config, Problem
from autotune.engine.compile import compile_call
from autotune.kernels import get_op
from autotune.core.target import Target
target, op = Target.for_arch("sm_90"), get_op("gemm_fp8_blockwise")
problem = Problem.quant("gemm_fp8_blockwise", 16, 4608, 7168)
out = []
for bk, stages in ((256, 4), (512, 3)):
    for ahead in (0, 1):
        config = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=bk, GROUP_M=1, SPLIT_K=1,
                        FUSED_SPLIT=0, STREAM_K=0, SWAP_AB=1, SCALES_AHEAD=ahead, num_warps=4,
                        num_stages=stages)
        kernel = compile_call(op.kernel_calls(problem, config, target)[0], target)
        ptx = kernel.asm["ptx"]
        out.append([bk, stages, ahead, ptx.count("bar.sync"), ptx.count("st.shared"), ptx.count("ld.shared"),
                    int(kernel.metadata.shared)])
print(json.dumps(out))
"""


def test_blockwise_scales_ahead_add_no_barrier_and_keep_the_pipeline_on_sm90(
    compile_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """The scales loaded one K tile ahead are one value per sub-tile, each loaded in the layout that scales
    its product: the kernel has no more barriers and shared-memory traffic than without them (picking a
    column out of a [rows, G] tile cost an exchange through shared memory and two barriers per sub-tile),
    and the tiles keep their multi-buffered shared memory (Triton's pipeliner still applies)."""
    import json
    import os

    from autotune.engine.compile import check_compilable

    try:
        check_compilable(Target.for_arch("sm_90"))
    except TargetError as exc:
        pytest.skip(f"this Triton cannot compile for sm_90: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = compile_script(_AHEAD_PTX, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    for plain, ahead in zip(rows[0::2], rows[1::2], strict=True):
        bk, stages = plain[0], plain[1]
        assert ahead[3:] == plain[3:], (plain, ahead)  # barriers, shared stores and loads, shared bytes
        assert ahead[6] >= (64 + 16) * bk * (stages - 1), ahead  # the ring of K tiles in shared memory


def test_swapped_blockwise_decode_tiles_reach_wgmma_on_sm90() -> None:
    """Blockwise at M = 16 the same: swapped, the weight's 64 rows are wgmma's M side (its scales now one
    number per tile and K group, A_GROUPED), whole and with slices summed in the launch, with the scales
    loaded ahead (the op's default there) or not; no spills."""
    op = get_op("gemm_fp8_blockwise")
    target = Target.for_arch("sm_90")
    problem = Problem.quant("gemm_fp8_blockwise", 16, 4608, 7168)
    plain = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1, FUSED_SPLIT=0,
                   STREAM_K=0, SWAP_AB=0, SCALES_AHEAD=0, num_warps=4, num_stages=4)  # fmt: skip
    default = plain.replace(SWAP_AB=1, SCALES_AHEAD=1, BLOCK_K=512, num_stages=3)
    assert op.default_config(problem, target) == default
    configs = [plain, plain.replace(SWAP_AB=1), default.replace(SPLIT_K=2, FUSED_SPLIT=1), default]
    compiled = _compile_in_space(op, problem, configs)
    assert all(f.spills == 0 for f in compiled), compiled
    wgmma = [[m for m in f.mma if m.startswith("wgmma")] for f in compiled]
    assert wgmma[0] == [] and any(m.startswith("mma.sync") for m in compiled[0].mma), compiled[0].mma
    assert wgmma[1:] == [["wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3"]] * 3, wgmma


def test_blockwise_tma_decode_tiles_reach_wgmma_through_tma_loads_on_sm90() -> None:
    """The blockwise TMA kernel at M = 16, swapped (K tiles of 512 in four scale-group sub-tiles) and at
    M = 64 unswapped: FP8 wgmma with the weight's 64 rows on its M side, TMA loads, no spills."""
    op = get_op("gemm_fp8_blockwise")
    swapped = Config(backend="triton_tma", BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, GROUP_M=1, SPLIT_K=1,
                     PERSISTENT=0, SWAP_AB=1, num_warps=4, num_stages=3)  # fmt: skip
    plain = swapped.replace(BLOCK_M=64, BLOCK_K=256, SWAP_AB=0, num_stages=4)
    (small,) = _compile_in_space(op, Problem.quant("gemm_fp8_blockwise", 16, 4608, 7168), [swapped])
    (wide,) = _compile_in_space(op, Problem.quant("gemm_fp8_blockwise", 64, 4608, 7168), [plain])
    for features, mma in ((small, "m64n16k32"), (wide, "m64n64k32")):
        wgmma = [m for m in features.mma if m.startswith("wgmma")]
        assert wgmma == [f"wgmma.mma_async.sync.aligned.{mma}.f32.e4m3.e4m3"], features.mma
        assert "load" in features.tma and features.spills == 0, features


# Compiles the FP8 decode defaults for sm_90 with PDL (with and without the weight's L2 prefetch) in a process
# of its own (the tests run under the interpreter) and prints per config: griddepcontrol instructions,
# prefetch.global.L2 instructions, and whether the kernel launches as a programmatic dependent launch.
_PDL_PTX = """
import json
from autotune import Problem
from autotune.engine.compile import compile_call
from autotune.kernels import get_op
from autotune.core.target import Target
target, out = Target.for_arch("sm_90"), []
for name in ("gemm_fp8_blockwise", "gemm_fp8_rowwise"):
    op, problem = get_op(name), Problem.quant(name, 16, 4608, 7168)
    for prefetch in (0, 512):
        config = op.default_config(problem, target).replace(PDL=1, PREFETCH_K=prefetch)
        kernel = compile_call(op.kernel_calls(problem, config, target)[0], target)
        ptx = kernel.asm["ptx"]
        out.append([name, prefetch, ptx.count("griddepcontrol"), ptx.count("prefetch.global.L2"),
                    bool(kernel.metadata.launch_pdl)])
print(json.dumps(out))
"""


def test_pdl_compiles_to_griddepcontrol_and_an_l2_prefetch_on_sm90(
    compile_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """PDL: the kernel lets the next launch start (griddepcontrol.launch_dependents) and waits for the
    previous one (griddepcontrol.wait), launches with the programmatic attribute, and with PREFETCH_K
    asks L2 for its weight tile's first columns before the wait: 64 rows x 512 columns, 256 lines of 128
    bytes, 2 a thread."""
    import json
    import os

    from autotune.engine.compile import check_compilable

    try:
        check_compilable(Target.for_arch("sm_90"))
    except TargetError as exc:
        pytest.skip(f"this Triton cannot compile for sm_90: {exc}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = compile_script(_PDL_PTX, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert [(r[0], r[1]) for r in rows] == [
        (n, k) for n in ("gemm_fp8_blockwise", "gemm_fp8_rowwise") for k in (0, 512)
    ]
    for name, prefetch, griddep, prefetches, launch_pdl in rows:
        assert griddep == 2 and launch_pdl, (name, prefetch, griddep, launch_pdl)
        assert prefetches == (2 if prefetch else 0), (name, prefetch, prefetches)
