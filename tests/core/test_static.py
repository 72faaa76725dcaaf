"""Compile-only checks: static features of real cross-compiled binaries for gfx942, gfx950 and sm_90, the
checks on them, parsing, occupancy, and static pruning in the runner. No GPU needed.

The compile-heavy tests share one small CompilePool (its workers run without TRITON_INTERPRET) and
compile only a handful of configs.
"""

from __future__ import annotations

import pytest

from autotune import Config, Problem
from autotune.core.result import TrialStatus
from autotune.core.static import StaticFeatures, StaticFinding, StaticPolicy, check_features
from autotune.core.target import Target, TargetError
from autotune.engine.compile import (
    CompilePool,
    amd_features,
    check_compilable,
    nvidia_features,
    occupancy_amd,
    occupancy_nvidia,
)
from autotune.kernels import GEMM, get_op

pytest.importorskip("triton")

PROBLEM = Problem.of("gemm", 64, 256, 512)


def amd_config(**kw: int) -> Config:
    base = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, NUM_XCDS=1, num_warps=4,
                num_stages=2, matrix_instr_nonkdim=16, waves_per_eu=0)  # fmt: skip
    return Config(backend="triton", **{**base, **kw})


GEMV = Config(backend="triton_gemv", BLOCK_N=4, BLOCK_K=1024, num_warps=8, num_stages=3)
MOE_DECODE = Problem.of("moe", 1, 128, 7168, variant="fp8e4m3", E=256, topk=8)
MOE_SPLIT = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                   SPLIT_K=8, num_warps=4)  # fmt: skip

TMA_WIDE = Config(backend="triton_tma", BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                  PERSISTENT=0, TAIL_SPLIT=0, EPILOGUE_N=0, num_warps=8, num_stages=3)  # fmt: skip

# (name, arch, problem, config): every config compiled once for the whole module.
CASES = {
    "942-mfma16": ("gfx942", PROBLEM, amd_config(kpack=1)),
    "942-mfma32": ("gfx942", PROBLEM, amd_config(matrix_instr_nonkdim=32, kpack=1)),
    "950-mfma16": ("gfx950", PROBLEM, amd_config()),
    "950-mfma32": ("gfx950", PROBLEM, amd_config(matrix_instr_nonkdim=32)),
    # 256x256 tiles on 4 warps: the accumulator spills on gfx942 (on 8 warps Triton 3.6 fits it in 216
    # VGPRs, 3.9 spills); 3 stages of 256x128 A and B tiles overflow the 160 KiB of LDS (Triton 3.6 keeps
    # 128 KiB with 2 stages, 3.9 263 KiB)
    "942-spill": ("gfx942", Problem.of("gemm", 512, 512, 512),
                  amd_config(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, num_warps=4, kpack=2)),
    "950-lds": ("gfx950", Problem.of("gemm", 512, 512, 512),
                amd_config(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)),
    # BLOCK_K = 8 is below what an MFMA needs: the compiler falls back to plain FMA
    "942-fma": ("gfx942", PROBLEM, amd_config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=8, kpack=1)),
    # BLOCK_M = 48 is no power of two: tl.arange refuses it
    "942-broken": ("gfx942", PROBLEM, amd_config(BLOCK_M=48, kpack=1)),
    "sm90": ("sm_90", PROBLEM, Config(backend="triton", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=1,
                                      SPLIT_K=2, num_warps=4, num_stages=3)),
    "sm90-tma": ("sm_90", Problem.of("gemm", 256, 256, 512),
                 Config(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                        PERSISTENT=1, TAIL_SPLIT=0, num_warps=8, num_stages=3)),
    "sm90-tail": ("sm_90", Problem.of("gemm", 4096, 1280, 8192),
                  Config(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                         PERSISTENT=1, TAIL_SPLIT=1, num_warps=4, num_stages=4)),
    # C stored whole or in 64-column slices: 128 x 256 tiles with 3 stages; a 128 x 384 tile of two parts
    "sm90-c-whole": ("sm_90", Problem.of("gemm", 1024, 6144, 4096), TMA_WIDE),
    "sm90-c-sliced": ("sm_90", Problem.of("gemm", 1024, 6144, 4096), TMA_WIDE.replace(EPILOGUE_N=64)),
    "sm90-384": ("sm_90", Problem.of("gemm", 1024, 6144, 4096),
                 TMA_WIDE.replace(BLOCK_N=384, EPILOGUE_N=64)),
    # the K parts of a tile summed in the launch (gemm_sum_kernel): split-K slices on MI300X, stream-K on H100
    "942-fused": ("gfx942", Problem.of("gemm", 16, 4096, 4096),
                  amd_config(BLOCK_M=16, SPLIT_K=4, FUSED_SPLIT=1, kpack=1)),
    "sm90-stream": ("sm_90", Problem.of("gemm", 16, 4096, 14336),
                    Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, SPLIT_K=1,
                           STREAM_K=2, num_warps=4, num_stages=4)),
    # the fused MoE with FP8 weights and K slices summed in the launch (DeepSeek-V3 TP16 decode)
    "942-moe-split": ("gfx942", MOE_DECODE, Config(MOE_SPLIT, num_stages=2, matrix_instr_nonkdim=16,
                                                   waves_per_eu=0, kpack=1)),
    "sm90-moe-split": ("sm_90", MOE_DECODE, Config(MOE_SPLIT, num_stages=3)),
    # a 256 x 256 fp32 accumulator on 4 warps: 512 registers a thread wanted, spilled to the stack frame
    "sm90-spill": ("sm_90", Problem.of("gemm", 512, 512, 512),
                   Config(backend="triton", BLOCK_M=256, BLOCK_N=256, BLOCK_K=32, GROUP_M=1, SPLIT_K=1,
                          num_warps=4, num_stages=2)),
    # the GEMV kernel (decode, no matrix instructions) with the NVIDIA default, on both vendors
    "sm90-gemv": ("sm_90", Problem.of("gemm", 1, 4096, 4096), GEMV),
    "942-gemv": ("gfx942", Problem.of("gemm", 1, 4096, 4096), GEMV),
    # the FP8 GEMV kernel (A of 1-4 rows): row-wise and blockwise scales, on both vendors (e4m3fnuz on gfx942)
    "sm90-gemv-fp8row": ("sm_90", Problem.quant("gemm_fp8_rowwise", 1, 4096, 7168), GEMV),
    "sm90-gemv-fp8block": ("sm_90", Problem.quant("gemm_fp8_blockwise", 2, 1536, 7168), GEMV),
    "942-gemv-fp8block": ("gfx942", Problem.quant("gemm_fp8_blockwise", 1, 1536, 7168), GEMV),
    # row-wise with each K step summed as it comes (STEP_SUM)
    "sm90-gemv-fp8sum": ("sm_90", Problem.quant("gemm_fp8_rowwise", 4, 4096, 7168), GEMV.replace(STEP_SUM=1)),
    "942-gemv-fp8sum": ("gfx942", Problem.quant("gemm_fp8_rowwise", 1, 4096, 7168), GEMV.replace(STEP_SUM=1)),
}  # fmt: skip


@pytest.fixture(scope="module")
def compiled() -> dict[str, StaticFeatures]:
    out: dict[str, StaticFeatures] = {}
    pools: dict[str, CompilePool] = {}
    futures = {}
    try:
        for name, (arch, problem, config) in CASES.items():
            target = Target.for_arch(arch)
            try:
                pool = pools.get(arch) or pools.setdefault(arch, CompilePool(target, workers=2))
            except TargetError as exc:
                pytest.skip(f"this Triton cannot compile for {arch}: {exc}")
            futures[name] = pool.submit(get_op(problem.op), problem, config)
        for name, future in futures.items():
            out[name] = future.result(timeout=600)
    finally:
        for pool in pools.values():
            pool.close()
    return out


def findings(compiled: dict[str, StaticFeatures], name: str, floor: int = 1) -> list[StaticFinding]:
    arch, _, config = CASES[name]
    return check_features(compiled[name], config, Target.for_arch(arch), min_occupancy=floor)


@pytest.mark.parametrize("name, mfma", [("942-mfma16", "v_mfma_f32_16x16x16_bf16"),
                                        ("942-mfma32", "v_mfma_f32_32x32x8_bf16"),
                                        ("950-mfma16", "v_mfma_f32_16x16x32_bf16"),
                                        ("950-mfma32", "v_mfma_f32_32x32x16_bf16")])  # fmt: skip
def test_nonkdim_gives_the_matching_mfma(compiled, name: str, mfma: str) -> None:
    f = compiled[name]
    assert f.compiled, f.error
    assert f.mma == (mfma,)
    assert f.vgprs > 0 and f.sgprs > 0 and f.lds_bytes > 0
    assert f.occupancy_unit == "waves/SIMD" and 1 <= f.occupancy <= 8
    assert f.load_bits and f.store_bits and f.compile_s > 0
    assert findings(compiled, name) == []


def test_oversized_tiles_are_flagged_with_the_reason(compiled) -> None:
    spill = findings(compiled, "942-spill")
    assert compiled["942-spill"].spills > 0  # to scratch memory on 3.6, to AGPRs on 3.9
    assert [f.check for f in spill] == ["spills"], spill
    lds = findings(compiled, "950-lds")
    assert compiled["950-lds"].lds_bytes > 160 * 1024
    checks = {f.check for f in lds}
    assert "lds" in checks and "occupancy" in checks, lds
    assert any("160 KiB" in f.reason for f in lds)


def test_missing_mfma_and_compile_errors_are_findings_not_exceptions(compiled) -> None:
    fma = findings(compiled, "942-fma")
    assert compiled["942-fma"].compiled and compiled["942-fma"].mma == ()
    assert [f.check for f in fma] == ["mfma_shape"] and "no MFMA" in fma[0].reason
    broken = compiled["942-broken"]
    assert not broken.compiled and "power of 2" in broken.error
    assert [f.check for f in findings(compiled, "942-broken")] == ["compile"]


def test_sm90_reports_registers_and_shared_memory(compiled) -> None:
    f = compiled["sm90"]
    assert f.compiled, f.error
    assert 0 < f.vgprs <= 255 and f.sgprs == 0
    assert f.lds_bytes >= 3 * 64 * 64 * 2  # at least the A and B tiles of the pipelined stages
    assert f.occupancy_unit == "blocks/SM" and f.occupancy == occupancy_nvidia(f.vgprs, f.lds_bytes, 4)
    assert any(m.startswith("wgmma.mma_async") for m in f.mma)
    assert 128 in f.load_bits and f.spills == 0 and f.scratch_bytes == 0
    tma = compiled["sm90-tma"]
    assert tma.compiled and tma.tma == ("load", "store") and tma.vgprs > 0
    tail = compiled["sm90-tail"]  # the split tail: the same TMA main loop, no spills from the fix-up
    assert tail.compiled, tail.error
    assert tail.tma == ("load", "store") and any(m.startswith("wgmma.mma_async") for m in tail.mma)
    assert tail.spills == 0 and tail.scratch_bytes == 0


def test_in_launch_sums_compile_without_spills(compiled) -> None:
    """The sum kernels keep the plain kernel's main loop: matrix instructions, no spills from the fix-up."""
    fused, stream = compiled["942-fused"], compiled["sm90-stream"]
    assert fused.compiled and stream.compiled, (fused.error, stream.error)
    assert any("mfma" in m for m in fused.mma) and fused.spills == 0 and fused.scratch_bytes == 0
    assert stream.mma and stream.spills == 0 and stream.scratch_bytes == 0


def test_moe_split_kernel_is_the_main_kernel_and_compiles_without_spills(compiled) -> None:
    """The static features of a fused-MoE config are those of its gate/up GEMM (not of the activation
    quantization launched before it): FP8 matrix instructions, no spills from the in-launch sum."""
    amd, nvidia = compiled["942-moe-split"], compiled["sm90-moe-split"]
    assert amd.compiled and nvidia.compiled, (amd.error, nvidia.error)
    assert any("mfma" in m and "fp8" in m for m in amd.mma), amd.mma
    assert amd.spills == 0 and amd.scratch_bytes == 0
    assert nvidia.mma and nvidia.spills == 0 and nvidia.scratch_bytes == 0


def test_nvidia_spills_to_the_stack_frame_are_spills(compiled) -> None:
    """ptxas spills to the stack frame (cuobjdump's STACK, with LOCAL 0): counted, and flagged."""
    spill = compiled["sm90-spill"]
    assert spill.compiled, spill.error
    assert spill.spills > 100 and spill.scratch_bytes >= 4 * spill.spills, spill.summary()
    assert any(f.check == "spills" for f in findings(compiled, "sm90-spill")), findings(
        compiled, "sm90-spill"
    )
    tma = compiled["sm90-tma"]  # a 128 x 128 tile on 8 warps: a reserved frame at most, no spill
    assert tma.spills == 0 and tma.scratch_bytes == 0, tma.summary()


def test_gemv_compiles_without_matrix_instructions_or_spills(compiled) -> None:
    names = ("sm90-gemv", "942-gemv", "sm90-gemv-fp8row", "sm90-gemv-fp8block", "942-gemv-fp8block",
             "sm90-gemv-fp8sum", "942-gemv-fp8sum")  # fmt: skip
    for name in names:
        gemv = compiled[name]
        assert gemv.compiled, gemv.error
        assert not gemv.mma and gemv.spills == 0 and gemv.scratch_bytes == 0, gemv.summary()


def test_occupancy_floor(compiled) -> None:
    floor = compiled["942-mfma16"].occupancy + 1
    assert [f.check for f in findings(compiled, "942-mfma16", floor=floor)] == ["occupancy"]


# -- parsing and occupancy, no compiler -------------------------------------------------------------

AMD_ASM = """
    v_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], a[0:3]
    v_mfma_f32_16x16x16_bf16 a[4:7], v[4:5], v[6:7], a[4:7]
    global_load_dwordx4 v[8:11], v[12:13], off
    buffer_load_ushort v14, v15, s[0:3], 0 offen
    global_store_short_d16_hi v[16:17], v18, off
; NumVgprs: 100
; NumAgprs: 28
; TotalNumVgprs: 132
; ScratchSize: 16
; Occupancy: 3
    .agpr_count:     28
    .sgpr_count:     40
    .vgpr_count:     132
    .vgpr_spill_count: 4
    .sgpr_spill_count: 1
    .private_segment_fixed_size: 16
"""


def test_amd_features_from_assembly() -> None:
    f = amd_features(AMD_ASM, 32 * 1024, Target.for_arch("gfx942"), num_warps=4)
    assert (f.vgprs, f.agprs, f.sgprs, f.spills, f.scratch_bytes) == (132, 28, 40, 5, 16)
    assert f.mma == ("v_mfma_f32_16x16x16_bf16",)
    assert f.load_bits == (16, 128) and f.store_bits == (16,)
    assert f.occupancy == 2  # LDS: 64 KiB / 32 KiB = 2 workgroups of 4 waves over 4 SIMDs


def test_amd_occupancy() -> None:
    gfx942, gfx950 = Target.for_arch("gfx942"), Target.for_arch("gfx950")
    assert occupancy_amd(128, 0, 4, gfx942) == 4  # 512 / 128
    assert occupancy_amd(130, 0, 4, gfx942) == 3  # 136 after rounding to the granule of 8
    assert occupancy_amd(24, 0, 4, gfx942) == 8  # wave slots
    assert occupancy_amd(64, 48 * 1024, 8, gfx942) == 2  # one workgroup of 8 waves per CU
    assert occupancy_amd(64, 48 * 1024, 8, gfx950) == 6  # 160 KiB holds three
    assert occupancy_amd(64, 96 * 1024, 4, gfx942) == 0  # does not fit at all


def test_nvidia_occupancy() -> None:
    assert occupancy_nvidia(128, 0, 4) == 4  # 65536 / (128 * 32 * 4)
    assert occupancy_nvidia(255, 0, 8) == 1
    assert occupancy_nvidia(32, 0, 4) == 16  # warp slots: 64 / 4
    assert occupancy_nvidia(64, 100 * 1024, 4) == 2  # 228 KiB / 101 KiB
    assert occupancy_nvidia(64, 230 * 1024, 4) == 0


class _Kernel:
    def __init__(self, ptx: str, shared: int) -> None:
        self.asm = {"ptx": ptx, "cubin": b""}
        self.metadata = type("M", (), {"shared": shared})()


def test_nvidia_instructions_from_ptx(monkeypatch) -> None:
    import autotune.engine.compile as comp

    monkeypatch.setattr(comp, "_cubin_usage", lambda cubin: (96, 8, 0, 16))
    ptx = """
	@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	ld.global.b16 %rs1, [ %rd2 + 0 ];
	cp.async.cg.shared.global [ %r5 + 0 ], [ %rd3 + 0 ], 0x10, %r6;
	@%p2 st.global.v2.b32 [ %rd4 + 0 ], { %r7, %r8 };
	wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1}, %rd5, %rd6, %p3, 1, 1, 0, 1;
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f2}, {%r9}, {%r10}, {%f3};
"""
    f = nvidia_features(_Kernel(ptx, 40 * 1024), Target.for_arch("sm_90"), num_warps=4)
    assert f.load_bits == (16, 128) and f.store_bits == (64,)
    assert f.mma == ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16")  # fmt: skip
    assert (f.vgprs, f.spills, f.scratch_bytes, f.lds_bytes) == (96, 4, 16, 40 * 1024)


@pytest.mark.parametrize("space", ["shared::cta", "shared::cluster"])  # newer Triton, Triton 3.6
def test_nvidia_tma_loads_and_stores_from_ptx(monkeypatch, space: str) -> None:
    import autotune.engine.compile as comp

    monkeypatch.setattr(comp, "_cubin_usage", lambda cubin: (96, 0, 0, 0))
    load = f"@%p4 cp.async.bulk.tensor.2d.{space}.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {{%r2}}];"
    store = "@%p9 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd2, {%r5, %r6}], [%r7];"
    target = Target.for_arch("sm_90")
    assert nvidia_features(_Kernel(f"\t{load}\n\t{store}\n", 0), target, num_warps=4).tma == ("load", "store")
    assert nvidia_features(_Kernel(f"\t{store}\n", 0), target, num_warps=4).tma == ("store",)


def test_features_json_round_trip() -> None:
    f = StaticFeatures(arch="gfx950", vgprs=10, mma=("v_mfma_x",), load_bits=(128,), tma=("load",))
    assert StaticFeatures.from_json(f.to_json()) == f


def test_policy_prunes_by_its_checks_less_the_exempt_ones() -> None:
    found = [StaticFinding("spills", "spills"), StaticFinding("lds", "too much LDS")]
    assert [f.check for f in StaticPolicy().pruning(found)] == ["spills", "lds"]
    assert [f.check for f in StaticPolicy().pruning(found, {"spills"})] == ["lds"]
    assert [f.check for f in StaticPolicy(prune=("spills",)).pruning(found, {"spills"})] == []


def test_mla_kernel_is_exempt_from_spills_on_sm90_only() -> None:
    triton = get_op("mla_decode").backend("triton")
    assert triton.exempt(Target.for_arch("sm_90")) == {"spills"}
    assert not triton.exempt(Target.for_arch("gfx942")) and not GEMM.backend("triton").exempt(
        Target.for_arch("sm_90")
    )


def test_policy_validation() -> None:
    assert StaticPolicy.from_mapping({"prune": False}).enabled is False
    with pytest.raises(ValueError, match="unknown static check"):
        StaticPolicy.from_mapping({"prune": ["spill"]})
    with pytest.raises(ValueError, match="min_occupancy"):
        StaticPolicy.from_mapping({"min_occupancy": "2"})
    with pytest.raises(ValueError, match="unknown key"):
        StaticPolicy.from_mapping({"floor": 2})


def test_targets_that_cannot_be_compiled_for(monkeypatch) -> None:
    with pytest.raises(TargetError, match="unknown target"):
        Target.for_arch("gfx1234")
    with pytest.raises(TargetError, match="compile-only work needs"):
        check_compilable(Target.interpreter_target())
    import triton.backends

    monkeypatch.setattr(triton.backends, "backends", {"nvidia": object()})
    with pytest.raises(TargetError, match="no amd backend"):
        check_compilable(Target.for_arch("gfx942"))


def test_kernel_calls_capture_the_real_launches() -> None:
    target = Target.for_arch("gfx942")
    config = amd_config(SPLIT_K=2, kpack=1)
    calls = GEMM.kernel_calls(PROBLEM, config, target)
    assert [c.fn.__name__ for c in calls] == ["gemm_kernel", "splitk_reduce_kernel"]
    main = calls[0]
    assert main.grid == (1 * 4, 2)  # cdiv(64, 64) * cdiv(256, 64) tiles, 2 K slices
    assert main.kwargs["matrix_instr_nonkdim"] == 16 and main.kwargs["SPLIT_K"] == 2
    assert all(str(a.device) == "meta" for a in main.args[:3])
    assert GEMM.kernel_calls(PROBLEM, Config(backend="torch"), target) == []


# -- static pruning in the runner -------------------------------------------------------------------


class _FakeChecker:
    """Flags configs with BLOCK_K 32 as spilling; records what was prefetched."""

    lookahead = 4

    def __init__(self) -> None:
        self.prefetched: list[Config] = []

    def prefetch(self, op, problem, configs) -> None:
        self.prefetched += list(configs)

    def ready(self, problem, config) -> bool:
        return True  # every compile is done: the strategy's order stands

    def findings(self, op, problem, config) -> list[StaticFinding]:
        if config.get("BLOCK_K") == 32:
            return [StaticFinding("spills", "spills 3 register(s) to 12 B of scratch per lane")]
        return []


def test_runner_stores_statically_pruned_configs_without_running_them(tmp_path) -> None:
    from autotune.db import Store
    from autotune.engine.bench import Benchmarker
    from autotune.engine.runner import Runner
    from autotune.engine.strategies import Budget

    target = Target.interpreter_target()
    problem = Problem.of("gemm", 16, 32, 64)
    checker = _FakeChecker()
    ran: list[Config] = []
    bench = Benchmarker(GEMM, target)
    real_run = bench.run

    def run(p, c):
        ran.append(c)
        return real_run(p, c)

    bench.run = run  # type: ignore[method-assign]
    with Store(str(tmp_path / "t.db")) as store:
        runner = Runner(store, target, bench, checker=checker)  # type: ignore[arg-type]
        report = runner.tune(GEMM, problem, strategy="exhaustive", budget=Budget(trials=8),
                             backends=("triton",))  # fmt: skip
        pruned = store.trials(problem=problem, status=TrialStatus.PRUNED)
    assert report.static_pruned.get("spills", 0) == len(pruned) > 0
    assert report.failed == 0  # a config the static checks prune never runs: no failure
    assert all(t.config["BLOCK_K"] == 32 and "spills" in t.error for t in pruned)
    assert all(c.get("BLOCK_K") != 32 for c in ran) and ran
    assert checker.prefetched, "the runner must queue compiles ahead"


def test_candidates_spread_over_configs_the_model_can_tell_apart() -> None:
    from autotune.engine.predict import _spread

    def cfg(bk: int, wpe: int) -> Config:
        return amd_config(BLOCK_K=bk, waves_per_eu=wpe)

    ranked = [(cfg(64, 0), 1.0), (cfg(64, 1), 1.0), (cfg(64, 2), 1.0), (cfg(128, 0), 1.1), (cfg(32, 0), 1.2)]
    assert _spread(ranked) == [cfg(64, 0), cfg(128, 0), cfg(32, 0), cfg(64, 1), cfg(64, 2)]


def test_a_broken_pool_is_replaced(monkeypatch) -> None:
    """A worker that dies (a compiler crash) fails the config it held; the next compiles go on."""
    import os
    import signal
    import time

    target = Target.for_arch("sm_90")
    with CompilePool(target, workers=1) as pool:
        original = pool._pool
        victim = pool._pool.submit(os.getpid)
        pid = victim.result(timeout=120)
        os.kill(pid, signal.SIGKILL)
        time.sleep(1.0)
        knobs = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=2)
        config = Config(backend="triton", **knobs)
        features = dict(pool.map(GEMM, Problem.of("gemm", 16, 64, 64), [config]))[config]
        assert pool._pool is not original
    assert features.compiled, features.error


def test_prefetch_queues_the_next_configs_first_then_the_slowest_looking() -> None:
    from concurrent.futures import Future

    from autotune.engine.checker import StaticChecker, compile_weight
    from autotune.kernels import GEMM

    class RecordingPool:
        workers = 2

        def __init__(self) -> None:
            self.order: list[Config] = []

        def submit(self, op: object, problem: Problem, config: Config) -> Future:
            self.order.append(config)
            return Future()

    def cfg(bm: int, bn: int, warps: int) -> Config:
        return Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=32, num_warps=warps)

    checker = StaticChecker(Target.for_arch("sm_90"), workers=2)
    pool = checker._pool = RecordingPool()  # type: ignore[assignment]
    sizes = [(16, 16, 4), (32, 32, 4), (64, 64, 4), (128, 256, 4), (128, 128, 8), (16, 32, 4)]
    batch = [cfg(*s) for s in sizes]
    problem = Problem.of("gemm", 64, 256, 256)
    checker.prefetch(GEMM, problem, [*batch, Config(backend="torch"), batch[0]])
    assert pool.order[:2] == batch[:2]  # the GPU needs these first
    assert pool.order[2:] == [batch[3], batch[4], batch[2], batch[5]]  # then 8192, 2048, 1024, 128 per warp
    moe = Config(backend="triton", BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, num_warps=4)  # vLLM's names
    assert compile_weight(moe) == 4096.0
    checker.prefetch(GEMM, problem, batch)  # all queued already: nothing again
    assert len(pool.order) == 6


def test_compile_processes_run_niced_on_every_core() -> None:
    """Compiling ahead is background work (a lower priority than the GPU workers), free to use every core
    the sweep may use: a compile runs threads of its own, which one pinned core would serialize."""
    import os

    from autotune.engine.compile import COMPILE_NICENESS, CompilePool

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs sched_getaffinity")
    pool = CompilePool(Target.for_arch("sm_90"), workers=2)
    try:
        futures = [pool._pool.submit(os.sched_getaffinity, 0) for _ in range(4)]
        assert all(f.result(timeout=120) == os.sched_getaffinity(0) for f in futures)
        assert pool._pool.submit(os.nice, 0).result(timeout=120) == os.nice(0) + COMPILE_NICENESS
    finally:
        pool.close()


def test_compile_processes_get_the_environment_of_their_pool_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server outlives the pool that started it: each pool's processes must still see the sweep's
    environment as it was when that pool started (TRITON_CACHE_DIR above all), never TRITON_INTERPRET."""
    import os

    from autotune.engine.compile import CompilePool

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for value in ("first", "second"):
        monkeypatch.setenv("AUTOTUNE_TEST_PROBE", value)
        pool = CompilePool(Target.for_arch("sm_90"), workers=1)
        try:
            assert pool._pool.submit(os.getenv, "AUTOTUNE_TEST_PROBE").result(timeout=120) == value
            assert pool._pool.submit(os.getenv, "TRITON_INTERPRET").result(timeout=120) is None
        finally:
            pool.close()
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_the_fork_server_preload_starts_no_thread() -> None:
    """The compile pool's fork server forks after importing PRELOAD: a thread started there could hold a
    lock at the fork and hang every compile process (torch's meta kernels do start threads)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/proc/self/task").exists():
        pytest.skip("counts threads through /proc")
    from autotune.engine.compile import PRELOAD

    script = (
        "import importlib, os\n"
        f"for name in {list(PRELOAD[:-1])!r}: importlib.import_module(name)\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        f"importlib.import_module({PRELOAD[-1]!r})\n"
        "print(before, len(os.listdir('/proc/self/task')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = (int(x) for x in out.stdout.split())
    assert after == before


def test_compile_pool_spawns_where_no_fork_server_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing
    import os
    from multiprocessing import forkserver

    from autotune.engine.compile import CompilePool

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform")

    def refuse() -> None:
        raise OSError("no Unix sockets here")

    monkeypatch.setattr(forkserver, "ensure_running", refuse)
    pool = CompilePool(Target.for_arch("sm_90"), workers=1)
    try:
        assert pool._context.get_start_method() == "spawn"
        assert pool._pool.submit(os.getpid).result(timeout=120) != os.getpid()
    finally:
        pool.close()


def test_every_launch_pins_fp_contraction() -> None:
    """Triton 3.9 announces fused multiply-add off by default from 3.10: every launch of ours asks for it,
    so a config runs the code it was tuned with whatever Triton serves it."""
    from autotune.kernels import get_op

    target = Target.for_arch("sm_90")
    problems = [
        Problem.of("gemm", 64, 512, 512, "bf16"),
        Problem.quant("gemm_fp8_blockwise", 64, 512, 512),
        Problem.quant("gemm_mxfp4", 64, 512, 512),
        Problem.of("moe", 16, 256, 256, variant="fp8e4m3", E=8, topk=2),
    ]
    for problem in problems:
        op = get_op(problem.op)
        config = op.default_config(problem, target)
        for split_k in (1, 2) if "SPLIT_K" in config else (1,):
            values = {k: v for k, v in config.items() if k != "SPLIT_K"}
            if "SPLIT_K" in config:
                values["SPLIT_K"] = split_k
            calls = op.kernel_calls(problem, Config(values, backend=config.backend), target)
            assert calls and all(c.kwargs.get("enable_fp_fusion") is True for c in calls), problem


def test_sliced_c_stores_share_one_small_buffer_on_sm90(compiled) -> None:
    """EPILOGUE_N = 64 stores a 128 x 256 tile in four slices through one 16 KB buffer, where the whole
    store takes 64 KB: 48 KB of shared memory freed, the same wgmma and registers. A 128 x 384 tile (parts
    256 + 128) then fits 3 stages, on 8 warps without spilling its 192 accumulators a lane."""
    whole, sliced, wide = compiled["sm90-c-whole"], compiled["sm90-c-sliced"], compiled["sm90-384"]
    for f in (whole, sliced, wide):
        assert f.compiled, f.error
        assert f.tma == ("load", "store") and f.spills == 0 and f.scratch_bytes == 0, f.summary()
    assert whole.lds_bytes - sliced.lds_bytes == 128 * (256 - 64) * 2
    assert whole.mma == sliced.mma == ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",)
    assert sorted(wide.mma) == [
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
    ]
    assert wide.lds_bytes <= Target.for_arch("sm_90").lds_bytes
    assert findings(compiled, "sm90-384") == []
