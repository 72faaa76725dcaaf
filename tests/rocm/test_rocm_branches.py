"""ROCm branches no other test ran (tests/rocm/rocm_coverage.py finds them), each on the fake GPU: the XCD
remap of the GEMMs' program ids, the HIP_VISIBLE_DEVICES of sweep workers, the launch key's storage
size on ROCm, the FP8 flavour of an FP8 `autotune.nn.Linear`, and what is refused on AMD."""

from __future__ import annotations

import pytest
import torch
from fake_rocm import MI300X, FakeRocm, on_gpu, uninstall_all

from autotune import Config, Problem
from autotune.core.target import Target, local_target
from autotune.engine.bench import rel_error


def _serve(problem: Problem, config: Config) -> object:
    """Installs a table that serves `config` for `problem` on this GPU; returns the previous dispatcher."""
    from autotune.dispatch import Dispatcher, Table, install_dispatcher

    return install_dispatcher(Dispatcher([Table.from_winners(local_target(), [(problem, config, 1.0)])]))


@pytest.mark.parametrize("M, N", [(64, 128), (48, 176), (80, 112)])  # 16, 33 and 35 tiles of 16x16/16x32
def test_xcd_remapped_tiles_are_each_computed_once(rocm: FakeRocm, M: int, N: int) -> None:
    """NUM_XCDS = 8 (both GPUs' XCDs) deals consecutive tiles to one XCD's L2 (`_remap_xcd`): a
    bijection, so every tile of a NaN-poisoned C is written once and right, whether or not 8 divides the
    tile count."""
    from autotune.dispatch import install_dispatcher
    from autotune.kernels import GEMM, gemm

    assert local_target().xcds == 8
    problem = Problem.of("gemm", M, N, 64)
    knobs = {"matrix_instr_nonkdim": 16, "waves_per_eu": 0, **({"kpack": 1} if rocm.gpu is MI300X else {})}
    tiles = dict(BLOCK_M=16, BLOCK_N=16 if N % 32 else 32, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, NUM_XCDS=8)
    config = Config(backend="triton", FUSED_SPLIT=0, STREAM_K=0, num_warps=4, num_stages=2, **tiles, **knobs)
    previous = _serve(problem, config)
    try:
        a, b = GEMM.make_inputs(problem, "cuda", seed=M + N)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm(a, b, out=out)
    finally:
        install_dispatcher(previous)
    assert rel_error(out, GEMM.reference(problem, (a, b))) <= GEMM.tolerance(problem)
    assert any(x.kernel == "gemm_kernel" and x.options.get("waves_per_eu") == 0 for x in rocm.launches)


def test_xcd_remap_in_the_fp8_gemm(rocm: FakeRocm) -> None:
    from autotune.dispatch import install_dispatcher
    from autotune.kernels import QUANT_GEMMS, gemm_quant

    op = "gemm_fp8_blockwise"
    quant = QUANT_GEMMS[op]
    problem = Problem.quant(op, 64, 256, 256)
    default = quant.default_config(problem, local_target())
    config = Config({**default, "BLOCK_M": 16, "BLOCK_N": 64, "SPLIT_K": 1, "NUM_XCDS": 8})
    previous = _serve(problem, config)
    try:
        a, b, sa, sb = quant.make_inputs(problem, "cuda", seed=3)
        out = gemm_quant(op, a, b, sa, sb)
    finally:
        install_dispatcher(previous)
    assert rel_error(out, quant.reference(problem, (a, b, sa, sb))) <= quant.tolerance(problem)


def test_gfx950_s_fp4_conversion_is_launched_there_only(rocm: FakeRocm) -> None:
    """gemm_mxfp4_bf16a with HW_FP4_CVT (gfx950's v_cvt_scalef32_pk_fp4_bf16) runs on the MI355X, where
    the launch asks for the instruction, and is refused on the MI300X, which lacks it."""
    from autotune.dispatch import install_dispatcher
    from autotune.kernels import QUANT_GEMMS, gemm_quant

    op = "gemm_mxfp4_bf16a"
    quant = QUANT_GEMMS[op]
    problem = Problem.quant(op, 16, 128, 256)
    config = Config({**quant.default_config(problem, local_target()), "HW_FP4_CVT": 1})
    previous = _serve(problem, config)
    try:
        a, b, sa, sb = quant.make_inputs(problem, "cuda", seed=5)
        if rocm.gpu is MI300X:
            with pytest.raises(ValueError, match="HW_FP4_CVT needs gfx950"):
                gemm_quant(op, a, b, sa, sb)
            return
        out = gemm_quant(op, a, b, sa, sb)
    finally:
        install_dispatcher(previous)
    assert rel_error(out, quant.reference(problem, (a, b, sa, sb))) <= quant.tolerance(problem)
    assert any(x.kernel == "gemm_mx_kernel" and x.numerics.get("CVT_MODEL") for x in rocm.launches)


def test_sweep_workers_see_one_gpu_through_hip_s_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """On ROCm, HIP_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES, which HIP honours too) name the GPUs; a
    worker's child gets HIP_VISIBLE_DEVICES of its one GPU."""
    from autotune.engine.workers import check_devices, device_env, visible_devices

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    fake = FakeRocm(MI300X, count=2)
    fake.installed(monkeypatch)
    try:
        assert visible_devices() == ["0", "1"] and device_env("1") == {"HIP_VISIBLE_DEVICES": "1"}
        monkeypatch.setenv("HIP_VISIBLE_DEVICES", "4,5")
        assert visible_devices() == ["4", "5"] and check_devices([1]) == ["5"]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
        assert visible_devices() == ["4", "5"]
        assert device_env("5") == {"HIP_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "0"}
        with pytest.raises(ValueError, match="GPU index 2 does not exist"):
            check_devices([2])
    finally:
        uninstall_all()


def test_the_launch_key_holds_the_storage_size_on_rocm(rocm: FakeRocm) -> None:
    """ROCm's buffer loads specialize on whether a tensor's storage fits in 2 GiB: part of the key there."""
    from autotune.kernels.launch import tensor_key

    x = torch.randn(64, device="cuda")
    assert tensor_key(x) == (torch.float32, x.data_ptr() % 16 == 0, True)


@pytest.mark.filterwarnings("ignore::autotune.dispatch.UntunedShapeWarning")
def test_an_fp8_linear_quantizes_to_the_gpu_s_own_e4m3(rocm: FakeRocm) -> None:
    from autotune.nn import Linear

    gen = torch.Generator(device="cuda").manual_seed(4)
    w = torch.randn(128, 256, generator=gen, device="cuda").to(torch.bfloat16)
    x = torch.randn(8, 256, generator=gen, device="cuda").to(torch.bfloat16)
    layer = Linear(w, weights="fp8_rowwise")
    assert layer.fp8_dtype == rocm.gpu.fp8 and layer.weight.dtype == rocm.gpu.fp8 and on_gpu(layer.weight)
    y = layer(x)
    assert y.is_cuda and rel_error(y, x.double() @ w.double().t()) < 0.05


def test_what_amd_refuses() -> None:
    """Tensor-descriptor (TMA) weights of the MoE are NVIDIA's; aiter is ROCm's; the arch aliases."""
    from autotune.kernels.moe.kernel import _launch_options
    from autotune.kernels.quant.vendor import vendor_reason

    config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, B_TMA=1)
    with pytest.raises(ValueError, match="NVIDIA sm_90 and newer only"):
        _launch_options(config, is_amd=True, fp8=False)
    problem = Problem.quant("gemm_fp8_rowwise", 16, 256, 256)
    assert vendor_reason("aiter", problem, Target.for_arch("sm_90")) == "aiter runs on ROCm only"
    assert "no gfx942 is present" in vendor_reason("aiter", problem, Target.for_arch("gfx942"))
    for alias, arch in (
        ("MI300X", "gfx942"),
        ("mi300", "gfx942"),
        ("MI355X", "gfx950"),
        ("mi350x", "gfx950"),
    ):
        assert Target.for_arch(alias).arch == arch


def test_aiter_is_asked_for_on_the_gpu(rocm: FakeRocm) -> None:
    """On the GPU the aiter backend is offered where aiter imports: here it does not, and says so."""
    from autotune.kernels.quant.vendor import vendor_reason

    reason = vendor_reason("aiter", Problem.quant("gemm_fp8_rowwise", 16, 256, 256), local_target())
    assert reason.startswith("aiter is not importable") or reason == ""


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_the_package_s_amd_facts_are_triton_s(arch: str) -> None:
    """What the package assumes of Triton's AMD backend, read off that backend (HIPBackend.parse_options:
    HIPOptions): the wave size, the default warps and stages (vLLM's fallback config on ROCm takes them),
    every AMD launch option a kernel passes, and the FP8 flavour a gfx950 dot no longer takes (e4m3fnuz,
    Triton's fp8e4b8, is deprecated there; our e4m3fnuz is an error there)."""
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import GPUTarget

    import autotune.kernels.common.formats as formats
    from autotune.core.target import ARCH_LIMITS
    from autotune.kernels.common.knobs import AMD_LAUNCH_OPTIONS as SHARED
    from autotune.kernels.mla.kernel import AMD_LAUNCH_OPTIONS as MLA
    from autotune.kernels.moe.formats.vllm_rules import fallback_config

    options = HIPBackend(GPUTarget("hip", arch, 64)).parse_options({"enable_fp_fusion": True})
    assert ARCH_LIMITS[arch]["wave_size"] == options.warp_size == 64
    vllm = fallback_config(64, 8, False, rocm=True)
    assert (vllm["num_warps"], vllm["num_stages"]) == (options.num_warps, options.num_stages)
    assert set(SHARED) | set(MLA) <= set(options.__dict__)
    fnuz_deprecated = "fp8e4b8" in options.deprecated_fp8_dot_operand_dtypes
    assert fnuz_deprecated == (arch == "gfx950")
    if fnuz_deprecated:
        with pytest.raises(ValueError, match="no e4m3fnuz"):
            formats.fp8_dtype("fp8e4m3fnuz", arch)
    else:
        assert formats.fp8_dtype("fp8e4m3", arch) == torch.float8_e4m3fnuz


def test_the_cost_model_gives_gfx950_its_mx_instructions() -> None:
    """MX GEMMs run natively on gfx950 (4-bit and 8-bit MFMA) and dequantized to bf16 on gfx942: the
    compile-only ranking of an MI355X sweep sees the difference."""
    from autotune.engine.model import predict_us
    from autotune.kernels import QUANT_GEMMS

    for op, factor in (("gemm_mxfp4", 4.0), ("gemm_mxfp8", 2.0)):
        problem = Problem.quant(op, 8192, 8192, 8192)
        us = {}
        for arch in ("gfx942", "gfx950"):
            target = Target.for_arch(arch)
            us[arch] = predict_us(problem, QUANT_GEMMS[op].default_config(problem, target), target)
        assert us["gfx950"] * factor < us["gfx942"], (op, us)
