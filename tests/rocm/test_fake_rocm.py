"""The fake ROCm GPU itself: torch reads as a ROCm build on an MI300X or MI355X (the values its source and
a ROCm machine give), "cuda" tensors live on the CPU but behave as a GPU's, launches go through Triton's
AMD option parsing, `torch._scaled_mm` keeps aten's ROCm checks, and everything is undone afterwards."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from fake_rocm import GPUS, MI300X, MI355X, FakeRocm, on_gpu, uninstall_all

from autotune.core.target import Target, TargetError, interpreting, local_target, running_target

GiB = 1 << 30
MiB = 1 << 20


def test_torch_reads_as_a_rocm_build(rocm: FakeRocm) -> None:
    gpu = rocm.gpu
    assert torch.version.hip and torch.version.cuda is None
    assert tuple(int(v) for v in torch.version.hip.split(".")[:2]) >= (6, 5)  # how torch parses it
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
    props = torch.cuda.get_device_properties(0)
    assert torch.cuda.get_device_name() == props.name == gpu.name
    assert props.gcnArchName.split(":")[0] == gpu.arch and ":sramecc+:xnack-" in props.gcnArchName
    assert (
        (props.major, props.minor)
        == torch.cuda.get_device_capability()
        == ((9, 4) if gpu is MI300X else (9, 5))
    )
    assert props.multi_processor_count == (304 if gpu is MI300X else 256)
    assert props.total_memory > (190 if gpu is MI300X else 280) * GiB
    assert props.L2_cache_size == 4 * MiB and props.warp_size == 64
    assert not hasattr(props, "shared_memory_per_block_optin")  # torch/cuda/_utils.py: HIP has none
    assert f"gcnArchName='{props.gcnArchName}'" in repr(props)
    with pytest.raises(AssertionError):
        torch.cuda.get_device_properties(1)
    assert hasattr(torch, "float8_e4m3fnuz") and gpu.fp8 == (
        torch.float8_e4m3fnuz if gpu is MI300X else torch.float8_e4m3fn
    )


def test_the_package_sees_the_gpu_and_no_interpreter(rocm: FakeRocm) -> None:
    """What the package reads: a present AMD target of the GPU's arch, wave 64, its CUs and XCDs, the HIP
    toolchain in the fingerprint, and no TRITON_INTERPRET (Triton still interprets)."""
    import triton

    target = local_target()
    assert running_target() == target and target.present and target.is_amd and not target.interpreter
    assert (target.arch, target.name, target.cu_count) == (
        rocm.gpu.arch,
        rocm.gpu.name,
        rocm.gpu.multi_processor_count,
    )
    assert target.wave_size == 64 and target.xcds == 8 and target.lds_bytes == rocm.gpu.lds_bytes
    assert target.llc_bytes == 256 * MiB  # HIP's L2 (4 MB an XCD) is not the last level: the 256 MB L3 is
    assert target.toolchain["hip"] == torch.version.hip and "cuda" not in target.toolchain
    assert target.device_key() == Target.for_arch(rocm.gpu.arch).device_key()  # compile-only tables apply
    assert not interpreting() and triton.knobs.runtime.interpret


def test_cuda_tensors_live_on_the_cpu_and_report_the_gpu(rocm: FakeRocm) -> None:
    x = torch.randn(4, 8, device="cuda")
    assert x.device == torch.device("cuda", 0) and x.is_cuda and not x.is_cpu and x.get_device() == 0
    assert on_gpu(torch.empty_like(x)) and on_gpu(x * 2) and on_gpu(x[1:]) and on_gpu(x.to(torch.bfloat16))
    host = x.cpu()
    assert host.device.type == "cpu" and not on_gpu(host) and torch.equal(host, x.cpu())
    back = host.to("cuda")
    assert on_gpu(back) and back is not host and host.cuda().is_cuda
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(x, host.t())
    assert on_gpu(x + torch.tensor(1.0))  # a 0-dim host tensor is a scalar on a GPU too
    with pytest.raises(TypeError, match="numpy"):
        x.numpy()
    gen = torch.Generator(device="cuda").manual_seed(0)
    assert on_gpu(torch.randn(3, generator=gen, device="cuda"))
    with pytest.raises(RuntimeError, match="generator"):
        torch.randn(3, generator=torch.Generator().manual_seed(0), device="cuda")


def test_streams_events_and_graphs_are_minimal_fakes(rocm: FakeRocm) -> None:
    s = torch.cuda.Stream()
    assert torch.cuda.current_stream().cuda_stream == 0  # the null stream
    with torch.cuda.stream(s):
        assert torch.cuda.current_stream() == s
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    end.record()
    assert start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError):
        torch.cuda.Event().elapsed_time(torch.cuda.Event())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        assert torch.cuda.is_current_stream_capturing()
    assert not torch.cuda.is_current_stream_capturing()
    g.replay()
    assert g.replays == 1


def test_a_launch_goes_through_triton_s_amd_option_parsing(rocm: FakeRocm) -> None:
    """The fixture parses a launch's options with Triton's HIP backend for the fake arch, as a real launch
    does: unknown options are refused, kpack 2 is Triton's deprecation warning on gfx950, and a host
    tensor is refused as the HIP driver refuses it."""
    import triton
    import triton.language as tl

    @triton.jit
    def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    x = torch.randn(16, device="cuda")
    y = torch.empty_like(x)
    knobs = dict(num_warps=4, waves_per_eu=2, matrix_instr_nonkdim=16, enable_fp_fusion=True)
    twice[(1,)](x, y, 16, BLOCK=16, **knobs)
    assert torch.equal(y, x * 2)
    launch = rocm.launches[-1]
    assert launch.kernel == "twice" and launch.options == knobs
    with pytest.raises(KeyError, match="unrecognised"):
        twice[(1,)](x, y, 16, BLOCK=16, enable_fp_fusion=True, waves_per_cu=2)
    with pytest.raises(AssertionError, match="power of 2"):
        twice[(1,)](x, y, 16, BLOCK=16, enable_fp_fusion=True, num_warps=3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        twice[(1,)](x, y, 16, BLOCK=16, enable_fp_fusion=True, kpack=2)
    assert any("kpack is deprecated" in str(w.message) for w in seen) == (rocm.gpu.arch == "gfx950")
    with pytest.raises(ValueError, match="cpu tensor"):
        twice[(1,)](x.cpu(), y, 16, BLOCK=16, enable_fp_fusion=True)


@pytest.mark.parametrize("gpu", GPUS, ids=[g.key for g in GPUS])
def test_scaled_mm_keeps_aten_s_rocm_checks(gpu: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row-wise scales: B must be the GPU's own e4m3 and C bf16; 1x128/128x128 blocks are not available
    with ROCm; a host scale is refused; the result is A·B scaled."""
    fake = FakeRocm(gpu).installed(monkeypatch)  # type: ignore[arg-type]
    try:
        F = torch.nn.functional
        own = fake.gpu.fp8
        other = torch.float8_e4m3fn if own == torch.float8_e4m3fnuz else torch.float8_e4m3fnuz
        x, w = torch.randn(32, 64, device="cuda"), torch.randn(48, 64, device="cuda")
        sa, sb = torch.rand(32, 1, device="cuda") + 0.5, torch.rand(1, 48, device="cuda") + 0.5
        c = torch._scaled_mm(x.to(own), w.to(own).t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        ref = (x.to(own).float() * sa) @ (w.to(own).float().t() * sb)
        assert float((c.float() - ref).norm() / ref.norm()) < 1e-2 and on_gpu(c)
        one = torch._scaled_mm(
            x[:1].to(own), w.to(own).t(), scale_a=sa[:1], scale_b=sb, out_dtype=torch.bfloat16
        )
        assert one.shape == (1, 48)  # a (1, 1) scale of one row is row-wise: RowWise is tried before blocks
        bad = sa.expand(32, 3).contiguous()  # neither a row's scale nor 1x128 blocks of K = 64
        with pytest.raises(RuntimeError, match="Invalid scaling"):
            torch._scaled_mm(x.to(own), w.to(own).t(), scale_a=bad, scale_b=sb, out_dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=r"mat_b\.dtype"):
            torch._scaled_mm(x.to(other), w.to(other).t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="BFloat16"):
            torch._scaled_mm(x.to(own), w.to(own).t(), scale_a=sa, scale_b=sb, out_dtype=torch.float16)
        with pytest.raises(RuntimeError, match="same device"):
            torch._scaled_mm(x.to(own), w.to(own).t(), scale_a=sa.cpu(), scale_b=sb, out_dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="row-major"):
            b_rows = w.to(own).t().contiguous()
            torch._scaled_mm(x.to(own), b_rows, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        S = F.ScalingType
        with pytest.raises(NotImplementedError, match="not available with ROCm"):
            F.scaled_mm(x.to(own), w.to(own).t(), torch.ones(32, 1, device="cuda"), S.BlockWise1x128,
                        torch.ones(1, 1, device="cuda"), S.BlockWise128x128)  # fmt: skip
    finally:
        uninstall_all()


def test_the_fixture_undoes_itself() -> None:
    """After the fake: no GPU, no HIP, TRITON_INTERPRET back, no device mode, no cached MI300X target."""
    if not interpreting():
        pytest.skip("runs where Triton interprets (no GPU)")
    before = os.environ.get("TRITON_INTERPRET")
    with pytest.MonkeyPatch.context() as mp:
        FakeRocm(MI355X).installed(mp)
        try:
            assert local_target().arch == "gfx950"
        finally:
            uninstall_all()
    assert not torch.cuda.is_available() and torch.version.hip is None
    assert os.environ.get("TRITON_INTERPRET") == before and interpreting()
    assert not torch._C._is_torch_function_mode_enabled()
    assert not torch.randn(2).is_cuda
    with pytest.raises(TargetError):
        local_target()
    assert running_target() == Target.interpreter_target()
