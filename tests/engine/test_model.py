"""The analytical GEMM cost model: CPU only, no compilation, no GPU."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest

from autotune import Config, Problem, Target
from autotune.core.problem import cdiv
from autotune.core.static import StaticFeatures
from autotune.engine.model import MODEL_VERSION, predict_us, rank
from autotune.kernels import get_op

GPU_ARCHS = ("sm_90", "gfx942", "gfx950")
DECODE = Problem.of("gemm", 16, 4096, 4096)
PREFILL = Problem.of("gemm", 4096, 4096, 4096)


def _tile(target: Target, bm: int, bn: int, bk: int = 64, split_k: int = 1, **more: int) -> Config:
    """A pointer-kernel config with the arch's knobs at neutral values."""
    values: dict[str, int | str] = dict(
        backend="triton",
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=1,
        SPLIT_K=split_k,
        num_warps=4,
        num_stages=2 if target.is_amd else 3,
    )
    if target.is_amd:
        values.update(matrix_instr_nonkdim=16, waves_per_eu=0, NUM_XCDS=1)
        if target.arch == "gfx942":
            values["kpack"] = 2
    values.update(more)
    return Config(values)


def _programs(problem: Problem, config: Config) -> int:
    return (
        cdiv(problem.M, int(config["BLOCK_M"]))
        * cdiv(problem.N, int(config["BLOCK_N"]))
        * int(config.get("SPLIT_K", 1))
    )


def test_model_version_is_a_nonempty_string() -> None:
    assert isinstance(MODEL_VERSION, str) and MODEL_VERSION
    assert MODEL_VERSION == "roofline-3"


@pytest.mark.parametrize("arch", [*GPU_ARCHS, "interpreter"])
@pytest.mark.parametrize("mnk", [(1, 4096, 4096), (16, 6144, 4096), (4096, 4096, 4096), (33, 17, 100)])
def test_every_config_of_the_space_gets_a_finite_positive_time(arch: str, mnk: tuple[int, int, int]) -> None:
    target = Target.for_arch(arch)
    problem = Problem.of("gemm", *mnk)
    configs = get_op("gemm").space(problem, target).configs()
    assert len(configs) > 1
    for config in configs:
        us = predict_us(problem, config, target)
        assert math.isfinite(us) and us > 0, (config, us)


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_no_config_beats_the_roofline(arch: str) -> None:
    target = Target.for_arch(arch)
    for problem in (DECODE, PREFILL, Problem.of("gemm", 1, 8192, 8192)):
        roof = target.roofline_us(problem.flops(), problem.min_bytes())
        configs = get_op("gemm").space(problem, target).configs()
        fastest = min(predict_us(problem, c, target) for c in configs)
        assert fastest > roof


def test_a_config_that_did_not_compile_is_infinitely_slow() -> None:
    target = Target.for_arch("sm_90")
    config = _tile(target, 128, 128)
    failed = StaticFeatures.failed("sm_90", "out of resources: shared memory")
    assert predict_us(PREFILL, config, target, failed) == math.inf
    too_much_lds = StaticFeatures(arch="sm_90", lds_bytes=target.lds_bytes + 1024, occupancy=1)
    assert predict_us(PREFILL, config, target, too_much_lds) == math.inf


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_spills_raise_the_prediction(arch: str) -> None:
    target = Target.for_arch(arch)
    config = _tile(target, 128, 128)
    clean = StaticFeatures(arch=arch, vgprs=128, lds_bytes=32768, occupancy=2)
    spilled = StaticFeatures(arch=arch, vgprs=255, spills=12, scratch_bytes=96, lds_bytes=32768, occupancy=2)
    scratch_only = StaticFeatures(arch=arch, vgprs=255, scratch_bytes=16, lds_bytes=32768, occupancy=2)
    base = predict_us(PREFILL, config, target, clean)
    assert predict_us(PREFILL, config, target, spilled) >= 1.5 * base
    assert predict_us(PREFILL, config, target, scratch_only) >= 1.5 * base


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_occupancy_one_hides_latency_worse(arch: str) -> None:
    target = Target.for_arch(arch)
    config = _tile(target, 64, 64)  # 4096 programs: every CU runs many, so co-residency matters
    one = StaticFeatures(arch=arch, lds_bytes=16384, occupancy=1)
    more = StaticFeatures(arch=arch, lds_bytes=16384, occupancy=4 if target.is_nvidia else 8)
    assert predict_us(PREFILL, config, target, one) > predict_us(PREFILL, config, target, more)


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_decode_prefers_filling_every_cu(arch: str) -> None:
    target = Target.for_arch(arch)
    tiny_grid = _tile(target, 16, 256, bk=128)  # 16 programs, one per N tile
    split = _tile(target, 16, 256, bk=128, split_k=8)  # 128 programs
    narrow = _tile(target, 16, 32, bk=128)  # 128 programs, no reduce
    assert _programs(DECODE, tiny_grid) < target.cu_count / 8
    slow = predict_us(DECODE, tiny_grid, target)
    # Not twice as fast: one CU draws several times its fair share of HBM (measured on H100), so 16 busy
    # CUs already reach a good part of the bandwidth; still clearly slower than a filled grid.
    assert predict_us(DECODE, split, target) < 0.7 * slow
    assert predict_us(DECODE, narrow, target) < 0.7 * slow
    # And the model's favourite Triton config keeps at least half of the CUs busy.
    configs = [c for c in get_op("gemm").space(DECODE, target).configs() if c.backend != "torch"]
    best = rank(DECODE, configs, target)[0][0]
    assert _programs(DECODE, best) >= target.cu_count / 2, best


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_decode_prefers_wide_block_k(arch: str) -> None:
    target = Target.for_arch(arch)
    narrow_k = _tile(target, 16, 32, bk=32)
    wide_k = _tile(target, 16, 32, bk=128)
    assert predict_us(DECODE, wide_k, target) < predict_us(DECODE, narrow_k, target)


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_prefill_prefers_large_tiles(arch: str) -> None:
    target = Target.for_arch(arch)
    small = [_tile(target, 16, 32, bk=bk) for bk in (32, 64, 128)]
    large = _tile(target, 128, 128, num_warps=8)
    assert predict_us(PREFILL, large, target) < 0.5 * min(predict_us(PREFILL, c, target) for c in small)
    configs = [c for c in get_op("gemm").space(PREFILL, target).configs() if c.backend != "torch"]
    best = rank(PREFILL, configs, target)[0][0]
    assert int(best["BLOCK_M"]) * int(best["BLOCK_N"]) >= 128 * 128, best
    assert int(best["num_warps"]) == 8, best
    if target.is_nvidia:
        assert int(best["num_stages"]) >= 3, best


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_one_program_past_a_full_wave_costs_another_wave(arch: str) -> None:
    target = Target.for_arch(arch)
    cus = target.cu_count
    config = _tile(target, 128, 128, num_warps=8)
    full = Problem.of("gemm", 128 * cus, 128, 8192)  # exactly one program per CU
    over = Problem.of("gemm", 128 * (cus + 1), 128, 8192)  # one more
    assert _programs(full, config) == cus and _programs(over, config) == cus + 1
    # One resident block per CU (8 warps: 2 waves per SIMD on AMD), so the extra program needs a new wave.
    one_block = StaticFeatures(arch=arch, lds_bytes=65536, occupancy=2 if target.is_amd else 1)
    t_full = predict_us(full, config, target, one_block)
    t_over = predict_us(over, config, target, one_block)
    assert t_over > 1.5 * t_full  # 1/cus more work, much more time: the last partial wave costs a full one
    # Without features the estimate may let two blocks share a CU, and two co-resident blocks hide each
    # other's load chains: the extra program then costs less than a wave, but it still costs.
    assert predict_us(over, config, target) > predict_us(full, config, target)


def test_few_stages_expose_a_big_k_slice_on_sm90() -> None:
    # Measured on H100 (pointer kernel, prefill): 128x256 BK128 with 2 stages is ~1.4x slower than BK64
    # with 4 stages: one slice ahead cannot hide a 96 KiB slice's latency and transfer behind the MMA.
    target = Target.for_arch("sm_90")
    one = StaticFeatures(arch="sm_90", lds_bytes=196608, occupancy=1)
    shallow = _tile(target, 128, 256, bk=128, num_warps=8, num_stages=2)
    deep = _tile(target, 128, 256, bk=64, num_warps=8, num_stages=4)
    assert predict_us(PREFILL, shallow, target, one) > 1.15 * predict_us(PREFILL, deep, target, one)


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_deeper_pipelines_never_hurt_at_equal_occupancy(arch: str) -> None:
    target = Target.for_arch(arch)
    feats = StaticFeatures(arch=arch, lds_bytes=32768, occupancy=1)
    for problem in (DECODE, PREFILL):
        times = [
            predict_us(problem, _tile(target, 64, 64, bk=64, num_stages=s), target, feats)
            for s in (1, 2, 3, 5)
        ]
        assert times == sorted(times, reverse=True) and times[0] > times[-1], times


def test_split_k_partials_cost_hbm_traffic_on_sm90() -> None:
    # Measured on H100 at M=64, N=6144, K=4096 (96 programs either way): 64x64 without split-K beats
    # 64x256 split 4, and split 8 is slower again: the fp32 partials go through HBM and a reduce kernel.
    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", 64, 6144, 4096)
    wide = [predict_us(problem, _tile(target, 64, 256, split_k=sk), target) for sk in (4, 8)]
    assert wide[1] > wide[0]
    square = predict_us(problem, _tile(target, 64, 64, bk=128, num_stages=5), target)
    assert square < wide[0]


def test_decode_needs_no_full_grid_on_sm90() -> None:
    # Measured on H100 at M=1, N=6144, K=4096: 48 programs (BN 128) are as fast as 96 (BN 64), since one
    # SM draws ~3.5x its fair share of HBM bandwidth; roofline-1 predicted them 1.6x slower.
    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", 1, 6144, 4096)
    half = predict_us(problem, _tile(target, 16, 128, bk=128, num_stages=4), target)
    full = predict_us(problem, _tile(target, 16, 64, bk=128, num_stages=4), target)
    assert half < 1.15 * full


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_split_k_on_a_full_grid_only_adds_cost(arch: str) -> None:
    target = Target.for_arch(arch)
    one = _tile(target, 128, 128, num_warps=8)
    two = one.replace(SPLIT_K=2)
    assert _programs(PREFILL, one) > 2 * target.cu_count
    assert predict_us(PREFILL, two, target) > predict_us(PREFILL, one, target)


@pytest.mark.parametrize("arch", [*GPU_ARCHS, "interpreter"])
def test_more_work_takes_longer(arch: str) -> None:
    target = Target.for_arch(arch)
    config = _tile(target, 64, 64)
    times = [predict_us(Problem.of("gemm", 1024, 1024, k), config, target) for k in (256, 1024, 4096, 16384)]
    assert times == sorted(times) and times[0] < times[-1]
    library = Config(backend="torch")
    lib = [predict_us(Problem.of("gemm", m, 4096, 4096), library, target) for m in (1, 64, 1024, 8192)]
    assert lib == sorted(lib) and lib[0] < lib[-1]


def test_prefill_top_of_rank_is_near_the_roofline_on_sm90() -> None:
    target = Target.for_arch("sm_90")
    for problem in (PREFILL, Problem.of("gemm", 8192, 8192, 8192), Problem.of("gemm", 4096, 14336, 4096)):
        configs = get_op("gemm").space(problem, target).configs()
        ranked = rank(problem, configs, target)
        best_triton = next((c, us) for c, us in ranked if c.backend != "torch")
        for _config, us in (ranked[0], best_triton):
            tflops = problem.flops() / us / 1e6
            assert 0.5 * target.peak_tflops <= tflops <= target.peak_tflops


def test_rank_is_sorted_and_stable_on_ties() -> None:
    target = Target.for_arch("gfx942")
    configs = list(get_op("gemm").space(PREFILL, target).configs())
    ranked = rank(PREFILL, configs, target)
    assert sorted(c.digest() for c, _ in ranked) == sorted(c.digest() for c in configs)
    times = [us for _, us in ranked]
    assert times == sorted(times)
    # waves_per_eu only differs where registers run out: many ties, all kept in input order.
    position = {c: i for i, c in enumerate(configs)}
    tied = 0
    for (a, ta), (b, tb) in itertools.pairwise(ranked):
        if ta == tb:
            tied += 1
            assert position[a] < position[b]
    assert tied > 0
    reversed_ranked = rank(PREFILL, configs[::-1], target)
    for (a, ta), (b, tb) in itertools.pairwise(reversed_ranked):
        if ta == tb:
            assert position[a] > position[b]


def test_rank_uses_features_by_digest() -> None:
    target = Target.for_arch("sm_90")
    configs = [_tile(target, 128, 128, num_warps=8), _tile(target, 128, 64), _tile(target, 64, 64)]
    plain = rank(PREFILL, configs, target)
    winner = plain[0][0]
    feats = {winner.digest(): StaticFeatures.failed("sm_90", "boom")}
    ranked = rank(PREFILL, configs, target, feats)
    assert ranked[-1] == (winner, math.inf)
    assert [c for c, _ in ranked[:-1]] == [c for c, _ in plain if c != winner]
    assert rank(PREFILL, [], target) == []


def test_the_interpreter_gets_finite_times_from_work_alone() -> None:
    target = Target.for_arch("interpreter")
    assert target.peak_tflops == 0
    small, large = Problem.of("gemm", 16, 64, 64), Problem.of("gemm", 256, 256, 256)
    for config in (Config(backend="torch"), _tile(target, 16, 32, bk=16, num_stages=1)):
        t_small, t_large = predict_us(small, config, target), predict_us(large, config, target)
        assert 0 < t_small < t_large < math.inf


def test_unknown_backend_is_an_error() -> None:
    with pytest.raises(ValueError, match="backend"):
        predict_us(PREFILL, Config(backend="cutlass"), Target.for_arch("sm_90"))


def test_the_model_imports_neither_torch_nor_triton() -> None:
    code = "import sys, autotune.engine.model; print(sorted({'torch', 'triton'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_op_says_the_rate_its_elements_run_at() -> None:
    """The peak is the op's: MX formats at their element's rate where the target has MX instructions
    (gfx950), at bf16's where the kernel dequantizes (gfx942); FP8 twice bf16's; no op named here."""
    from autotune.core.registry import rules_of

    mx4 = Problem.quant("gemm_mxfp4", 64, 4096, 4096)
    mx4a = Problem.quant("gemm_mxfp4_bf16a", 64, 4096, 4096)
    fp8 = Problem.quant("gemm_fp8_rowwise", 64, 4096, 4096)
    gfx950, gfx942 = Target.for_arch("gfx950"), Target.for_arch("gfx942")
    assert rules_of("gemm_mxfp4").element_bytes(mx4, gfx950) == 0.5
    assert rules_of("gemm_mxfp4_bf16a").element_bytes(mx4a, gfx950) == 0.5
    assert rules_of("gemm_mxfp4").element_bytes(mx4, gfx942) == 2.0
    assert rules_of("gemm_fp8_rowwise").element_bytes(fp8, gfx942) == 1.0
    assert rules_of("gemm").element_bytes(Problem.of("gemm", 64, 4096, 4096), gfx942) == 2.0
    # and the cost model's peak follows: FP4 four times bf16's where it runs natively, bf16's elsewhere
    from autotune.engine.model import _peak_flops_per_us

    bf16 = Problem.of("gemm", 64, 4096, 4096)
    assert _peak_flops_per_us(mx4, gfx950) == 4 * _peak_flops_per_us(bf16, gfx950)
    assert _peak_flops_per_us(mx4, gfx942) == _peak_flops_per_us(bf16, gfx942)
