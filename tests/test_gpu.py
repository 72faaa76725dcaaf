"""GPU tests: the real compiler and device. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import itertools

import pytest
import torch

from autotune import Config, Problem
from autotune.core.result import Source, TrialStatus
from autotune.engine.bench import Benchmarker
from autotune.kernels import GEMM

pytestmark = pytest.mark.gpu

CASES = [(1, 4096, 4096, "nk"), (16, 6144, 4096, "kn"), (77, 1000, 3000, "nk"), (1024, 1024, 4096, "kn")]


@pytest.fixture(scope="module")
def target():
    from autotune.core.target import local_target

    return local_target()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mnk", CASES)
def test_kernel_matches_reference_on_gpu(target, mnk, dtype) -> None:
    M, N, K, layout = mnk
    problem = Problem.gemm(M, N, K, dtype, layout)
    space = GEMM.space(problem, target)
    configs = [c for c in space.configs() if c.backend == "triton"]
    picked = configs[:: max(1, len(configs) // 6)][:6] + [c for c in configs if c["SPLIT_K"] > 1][:2]
    inputs = GEMM.make_inputs(problem, "cuda", seed=1)
    ref = GEMM.reference(problem, inputs)
    for config in picked:
        out = GEMM.make_output(problem, "cuda").fill_(float("nan"))
        GEMM.prepare(problem, config, target, inputs, out)()
        torch.cuda.synchronize()
        err = float((out.double() - ref.double()).norm() / ref.double().norm())
        assert err < GEMM.tolerance(problem), (config.short(), err)


def test_benchmarker_times_both_backends(target) -> None:
    bench = Benchmarker(GEMM, target)
    small = Problem.gemm(1, 1024, 1024)
    r = bench.run(small, Config(backend="torch"))
    assert r.ok and r.timing is not None and r.timing.method == "graph" and r.time_us > 0
    big = Problem.gemm(4096, 4096, 4096)
    r2 = bench.run(big, GEMM.default_config(big, target))
    assert r2.ok and r2.timing is not None and r2.timing.method == "events"
    # 137 GFLOP cannot take under 50 µs on any GPU we know, nor over a second
    assert 50 < r2.time_us < 1e6


def test_served_timing_at_many_m_holds_no_memory(target) -> None:
    """Timing split-K and TMA configs as served at one M after another (an M profile) keeps no buffer per
    timing: no scratch per capture stream, no tensor in the descriptor cache."""
    from autotune.engine.bench import ServedTiming
    from autotune.kernels import scratch

    bench = Benchmarker(ServedTiming(GEMM), target)
    fam = Problem.gemm(1, 4096, 4096)
    split = GEMM.default_config(fam.with_m(64), target)
    configs = [c for c in (split, GEMM.default_config(fam.with_m(2048), target)) if c.backend != "torch"]
    for M in (8, 16, 24):  # the first M allocate what every later one reuses
        for c in configs:
            assert bench.run(fam.with_m(M), c).ok
    torch.cuda.synchronize()
    before, streams = torch.cuda.memory_allocated(), len(scratch._scratch)
    for M in (32, 40, 48, 56, 64):
        for c in configs:
            assert bench.run(fam.with_m(M), c).ok
    torch.cuda.synchronize()
    assert len(scratch._scratch) == streams
    # two problems' states are kept (KEEP_STATES): inputs of M = 64 rows weigh 0.5 MB each
    assert torch.cuda.memory_allocated() - before < 64 << 20


def test_out_of_resources_is_a_status(target) -> None:
    bench = Benchmarker(GEMM, target)
    problem = Problem.gemm(256, 256, 1024)
    huge = Config(
        backend="triton",
        BLOCK_M=256,
        BLOCK_N=256,
        BLOCK_K=256,
        GROUP_M=1,
        SPLIT_K=1,
        num_warps=8,
        num_stages=5,
    )
    r = bench.run(problem, huge)
    assert r.status in (TrialStatus.OUT_OF_RESOURCES, TrialStatus.COMPILE_ERROR), r
    assert r.error


def test_dispatched_gemm_uses_the_table(target, tmp_path, monkeypatch) -> None:
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm

    problem = Problem.gemm(16, 512, 1024)
    config = Config(
        backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=4, num_warps=4, num_stages=3
    )
    table = Table.from_winners(target, [(problem, config, 1.0)])
    d = Dispatcher([table], device_key=target.device_key())
    assert d.lookup("gemm", 16, 512, 1024) == config
    monkeypatch.setattr("autotune.dispatch.dispatcher._default", d)
    a, b = GEMM.make_inputs(problem, "cuda", seed=3)
    out = gemm(a, b)
    ref = GEMM.reference(problem, (a, b))
    assert float((out.double() - ref.double()).norm() / ref.double().norm()) < 1e-2


@pytest.mark.parametrize(
    "split_k, persistent, width, warps, stages",
    [
        (1, 0, 128, 8, 3), (1, 1, 128, 8, 3), (2, 0, 128, 8, 3), (3, 0, 128, 8, 3), (4, 1, 128, 8, 3),
        # tiles of two or three column parts (BLOCK_N not a power of two), ragged N
        (1, 0, 96, 4, 4), (1, 0, 112, 4, 4), (3, 0, 80, 4, 4), (1, 0, 320, 8, 2), (2, 0, 192, 8, 3),
    ],
)  # fmt: skip
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_tma_backend_on_gpu(target, split_k: int, persistent: int, width: int, warps: int, stages: int,
                            layout: str) -> None:  # fmt: skip
    from autotune.kernels.gemm_space import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.gemm(200, 1280 if width == 128 else 1000, 4096, "bf16", layout)
    config = Config(backend="triton_tma", BLOCK_M=128, BLOCK_N=width, BLOCK_K=64, GROUP_M=8, SPLIT_K=split_k,
                    PERSISTENT=persistent, TAIL_SPLIT=0, num_warps=warps, num_stages=stages)  # fmt: skip
    inputs = GEMM.make_inputs(problem, "cuda", seed=4)
    out = GEMM.make_output(problem, "cuda").fill_(float("nan"))
    GEMM.prepare(problem, config, target, inputs, out)()
    torch.cuda.synchronize()
    ref = GEMM.reference(problem, inputs)
    assert float((out.double() - ref.double()).norm() / ref.double().norm()) < GEMM.tolerance(problem)


@pytest.mark.parametrize(
    "width, stages, persistent, tail",
    [(256, 4, 0, 0), (320, 3, 0, 0), (384, 3, 1, 0), (256, 3, 1, 1)],  # a stage freed, two parts, split tail
)
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_sliced_c_stores_on_gpu(
    target, width: int, stages: int, persistent: int, tail: int, layout: str
) -> None:
    """C stored in 64-column slices through one shared-memory buffer (EPILOGUE_N = 64), on ragged M and N:
    right, and bit-identical to the same tile stored whole where that fits."""
    from autotune.kernels.gemm_space import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.gemm(1000 if persistent else 200, 3000, 4096, "bf16", layout)
    knobs = dict(BLOCK_M=128, BLOCK_N=width, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, PERSISTENT=persistent,
                 TAIL_SPLIT=tail, num_warps=8, num_stages=stages)  # fmt: skip
    inputs = GEMM.make_inputs(problem, "cuda", seed=9)
    ref = GEMM.reference(problem, inputs)
    out = GEMM.make_output(problem, "cuda").fill_(float("nan"))
    GEMM.prepare(problem, Config(backend="triton_tma", EPILOGUE_N=64, **knobs), target, inputs, out)()
    torch.cuda.synchronize()
    assert float((out.double() - ref.double()).norm() / ref.double().norm()) < GEMM.tolerance(problem)
    if width == 256 and stages == 3:  # the whole store fits beside 3 stages of 128 x 256
        whole = GEMM.make_output(problem, "cuda").fill_(float("nan"))
        GEMM.prepare(problem, Config(backend="triton_tma", EPILOGUE_N=0, **knobs), target, inputs, whole)()
        torch.cuda.synchronize()
        assert torch.equal(out, whole)


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_gemv_backend_on_gpu(target, M: int, layout: str) -> None:
    """The GEMV kernel on ragged N and K, then the untuned M = 1 call of `gemm`, which runs the fallback
    (torch.mm: the GEMV default is not safe untuned)."""
    from autotune.kernels import gemm

    problem = Problem.gemm(M, 1000, 4100, "bf16", layout)
    inputs = GEMM.make_inputs(problem, "cuda", seed=M)
    ref = GEMM.reference(problem, inputs)
    for bn, bk, stages in [(4, 1024, 3), (16, 256, 1)]:
        config = Config(backend="triton_gemv", BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=stages)
        out = GEMM.make_output(problem, "cuda").fill_(float("nan"))
        GEMM.prepare(problem, config, target, inputs, out)()
        torch.cuda.synchronize()
        assert float((out.double() - ref.double()).norm() / ref.double().norm()) < GEMM.tolerance(problem)
    if M == 1 and layout == "nk" and target.is_nvidia:
        assert GEMM.default_config(problem, target).backend == "triton_gemv"
        assert GEMM.fallback_config(problem, target).backend == "torch"
        out = gemm(*inputs)
        assert float((out.double() - ref.double()).norm() / ref.double().norm()) < GEMM.tolerance(problem)


@pytest.mark.parametrize("op_name", ["gemm_fp8_rowwise", "gemm_fp8_blockwise"])
@pytest.mark.parametrize("M", [1, 4])
def test_fp8_gemv_backend_on_gpu(target, op_name: str, M: int) -> None:
    """The FP8 GEMV kernel on ragged N and a K off its steps, against the dequantized reference."""
    from autotune.kernels.gemm_quant_op import QUANT_GEMMS

    op = QUANT_GEMMS[op_name]
    problem = Problem.quant(op_name, M, 1000, 4224)
    inputs = op.make_inputs(problem, "cuda", seed=M)
    ref = op.reference(problem, inputs)
    step_sum = [{"STEP_SUM": 0}, {"STEP_SUM": 1}] if op_name == "gemm_fp8_rowwise" else [{}]
    for (bn, bk, warps, stages), knobs in itertools.product([(4, 1024, 8, 3), (16, 256, 4, 1)], step_sum):
        config = Config(backend="triton_gemv", BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                        **knobs)  # fmt: skip
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        op.prepare(problem, config, target, inputs, out)()
        torch.cuda.synchronize()
        err = float((out.float() - ref).abs().max() / ref.abs().max())
        assert err < op.tolerance(problem), (config.short(), err)
    if M == 1 and target.is_nvidia:  # the default there: the untuned call of `gemm_quant` runs it
        from autotune.kernels import gemm_quant

        assert op.default_config(problem, target).backend == "triton_gemv"
        out = gemm_quant(op_name, *inputs)
        assert float((out.float() - ref).abs().max() / ref.abs().max()) < op.tolerance(problem)


def _right_and_repeatable(op, problem, config, target, what: str) -> None:
    """`config` computes `problem` within tolerance, then gives bit-identical results 50 times over: parts
    of a tile that meet across SMs through a counter and a workspace show a missing fence or a wrong
    last-arriver test as a wrong or run-to-run different result."""
    inputs = op.make_inputs(problem, "cuda", seed=9)
    ref = op.reference(problem, inputs)
    out = op.make_output(problem, "cuda").fill_(float("nan"))
    launch = op.prepare(problem, config, target, inputs, out)
    launch()
    torch.cuda.synchronize()
    first = out.clone()
    assert float((first.double() - ref.double()).norm() / ref.double().norm()) < op.tolerance(problem)
    for _ in range(50):
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert torch.equal(out, first), f"{what} gave a different result on a repeat"


@pytest.mark.parametrize(
    "mnk, tile",
    [
        ((4096, 1280, 8192), (128, 128, 64)),  # 320 tiles: 2 waves, then 56 tiles split in 2
        ((4096, 1280, 8192), (128, 256, 64)),  # 160 tiles: 1 wave, then 28 tiles split in 4
        ((256, 1280, 8192), (256, 128, 64)),  # 10 tiles, no whole wave: split in 13
        ((1000, 1000, 3000), (128, 128, 64)),  # ragged edges: 64 tiles split in 2
    ],
)
def test_tail_split_on_gpu_is_right_and_repeatable(target, mnk, tile) -> None:
    """The slices of a split tile meet through a counter and a workspace across SMs: a missing fence shows
    as a wrong or run-to-run different result, so the kernel runs many times and every result must match."""
    from autotune.kernels.gemm_space import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.gemm(*mnk, "bf16")
    bm, bn, bk = tile
    config = Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1,
                    PERSISTENT=1, TAIL_SPLIT=1, num_warps=8 if bm * bn > 128 * 128 else 4,
                    num_stages=3)  # fmt: skip
    _right_and_repeatable(GEMM, problem, config, target, "the split tail")


@pytest.mark.parametrize(
    "op_name, mnk, knobs",
    [
        ("gemm", (16, 4096, 14336), dict(BLOCK_N=64, BLOCK_K=256, SPLIT_K=4, FUSED_SPLIT=1)),
        ("gemm", (16, 4096, 14336), dict(BLOCK_N=64, BLOCK_K=256, STREAM_K=2)),  # 64 tiles on 2 x SMs
        ("gemm", (7, 1000, 3000), dict(BLOCK_N=32, BLOCK_K=128, STREAM_K=1)),  # ragged N and K
        ("gemm_fp8_blockwise", (16, 4608, 7168), dict(BLOCK_N=64, BLOCK_K=256, STREAM_K=2)),
        ("gemm_fp8_rowwise", (16, 4608, 7168), dict(BLOCK_N=64, BLOCK_K=512, SPLIT_K=2, FUSED_SPLIT=1)),
        (
            "gemm_fp8_rowwise",
            (16, 4608, 7168),
            dict(BLOCK_N=64, BLOCK_K=256, SPLIT_K=2, FUSED_SPLIT=1, SWAP_AB=1),
        ),
        ("gemm_fp8_rowwise", (16, 4608, 7168), dict(BLOCK_N=64, BLOCK_K=256, STREAM_K=1, SWAP_AB=1)),
        ("gemm_fp8_blockwise", (16, 4608, 7168), dict(BLOCK_N=64, BLOCK_K=256, STREAM_K=2, SWAP_AB=1)),
        # ragged: the last weight tile crosses into a partial scale block; the scales loaded ahead
        (
            "gemm_fp8_blockwise",
            (13, 1000, 3072),
            dict(BLOCK_N=128, BLOCK_K=128, SPLIT_K=2, FUSED_SPLIT=1, SWAP_AB=1, SCALES_AHEAD=1),
        ),
        (
            "gemm_fp8_blockwise",
            (16, 4608, 7168),
            dict(BLOCK_N=128, BLOCK_K=256, SPLIT_K=4, FUSED_SPLIT=1, SWAP_AB=1, SCALES_AHEAD=1),
        ),
    ],
)
def test_in_launch_sums_on_gpu_are_right_and_repeatable(target, op_name, mnk, knobs) -> None:
    """FUSED_SPLIT and STREAM_K parts of a tile meet through a counter and a workspace across SMs: a
    missing fence or a wrong last-arriver test shows as a wrong or run-to-run different result."""
    from autotune.kernels import get_op

    op = get_op(op_name)
    problem = Problem.gemm(*mnk, "bf16") if op_name == "gemm" else Problem.quant(op_name, *mnk)
    values = dict(BLOCK_M=16, GROUP_M=1, SPLIT_K=1, FUSED_SPLIT=0, STREAM_K=0, num_warps=4, num_stages=3)
    if op_name.startswith("gemm_fp8"):
        values["SWAP_AB"] = 0
    if op_name == "gemm_fp8_blockwise":
        values["SCALES_AHEAD"] = 0
    config = Config(backend="triton", **(values | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the in-launch sum")


@pytest.mark.parametrize(
    "mnk, knobs",
    [
        ((64, 8192, 3584), {}),  # the default at M = 64
        ((16, 4608, 7168), dict(BLOCK_M=16, BLOCK_K=512, SWAP_AB=1, num_stages=4)),  # 64-row weight tiles
        ((13, 1000, 3008), dict(BLOCK_M=16, SWAP_AB=1, SPLIT_K=2)),  # ragged, K slices through the reduce
        ((77, 1000, 3008), dict(PERSISTENT=1, SPLIT_K=3)),
        ((2048, 4608, 7168), dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, SWAP_AB=0, num_stages=4, GROUP_M=8)),
    ],
)
def test_fp8_rowwise_tma_on_gpu_is_right_and_repeatable(target, mnk, knobs) -> None:
    """The row-wise TMA kernel on Hopper: swapped tiles stored transposed, split-K, persistent programs."""
    from autotune.kernels import get_op

    if "triton_tma" not in get_op("gemm_fp8_rowwise").backends(target):
        pytest.skip(f"no TMA kernel on {target.arch}")
    op = get_op("gemm_fp8_rowwise")
    problem = Problem.quant("gemm_fp8_rowwise", *mnk)
    base = op.default_config(Problem.quant("gemm_fp8_rowwise", 64, 8192, 3584), target)
    assert base.backend == "triton_tma", base.short()
    config = base.replace(**knobs)
    _right_and_repeatable(op, problem, config, target, "the TMA kernel")


@pytest.mark.parametrize(
    "mnk, knobs",
    [
        ((64, 8192, 3584), dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, SWAP_AB=0, num_stages=4)),
        ((16, 4608, 7168), dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, SWAP_AB=1, num_stages=3)),  # 4 sub-tiles
        # ragged; the K slices summed by the reduce kernel
        ((13, 1008, 3072), dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, SWAP_AB=1, SPLIT_K=2)),
        ((64, 8208, 3072), dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, SWAP_AB=0, PERSISTENT=1, SPLIT_K=2)),
    ],
)
def test_fp8_blockwise_tma_on_gpu_is_right_and_repeatable(target, mnk, knobs) -> None:
    """The TMA kernel with blockwise scales on Hopper: K sub-tiles of one scale group, the next tile's
    scales loaded ahead, swapped tiles (the weight's scales on the kernel's A side) stored transposed,
    a last weight tile in a partial scale block, split-K, persistent programs."""
    from autotune.kernels import get_op

    op = get_op("gemm_fp8_blockwise")
    if "triton_tma" not in op.backends(target):
        pytest.skip(f"no TMA kernel on {target.arch}")
    problem = Problem.quant("gemm_fp8_blockwise", *mnk)
    base = dict(GROUP_M=1, PERSISTENT=0, SPLIT_K=1, num_warps=4, num_stages=3)
    config = Config(backend="triton_tma", **(base | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the blockwise TMA kernel")


@pytest.mark.parametrize("op_name", ["gemm_fp8_blockwise", "gemm_fp8_rowwise"])
def test_fp8_pdl_waits_for_the_kernel_that_writes_its_activations_on_gpu(target, op_name) -> None:
    """PDL: launched as a programmatic dependent launch, the kernel may start before the previous kernel
    in the stream ends. It reads only its weight before it waits: right after a kernel that rewrites its
    activations (and their scales), every one of 20 launches computes the product of the new ones."""
    from autotune.kernels import get_op

    op = get_op(op_name)
    problem = Problem.quant(op_name, 16, 4608, 7168)
    config = op.default_config(problem, target).replace(PDL=1, PREFETCH_K=512)
    a, b, sa, sb = op.make_inputs(problem, "cuda", seed=9)
    a2, _, sa2, _ = op.make_inputs(problem, "cuda", seed=10)
    sources = [(a, sa), (a2, sa2)]
    refs = [op.reference(problem, (x, b, sx, sb)) for x, sx in sources]
    live_a, live_sa = a.clone(), sa.clone()
    out = op.make_output(problem, "cuda")
    launch = op.prepare(problem, config, target, (live_a, b, live_sa, sb), out)
    outs = []
    for i in range(20):
        x, sx = sources[i % 2]
        live_a.copy_(x)
        live_sa.copy_(sx)
        launch()
        outs.append(out.clone())
    torch.cuda.synchronize()
    for i, got in enumerate(outs):
        ref = refs[i % 2]
        err = float((got.double() - ref.double()).norm() / ref.double().norm())
        assert err < op.tolerance(problem), (i, err)


@pytest.mark.parametrize(
    "mnk, e, topk, weights, split",
    [
        ((1, 128, 7168), 256, 8, "fp8e4m3", 8),  # DeepSeek-V3 TP16 decode: 16 gate/up tiles in 8 slices
        ((1, 768, 2048), 128, 8, "bf16", 2),  # Qwen3-30B-A3B: the down GEMM (K = 768) is split too
    ],
)
def test_moe_split_k_on_gpu_is_right_and_repeatable(target, mnk, e, topk, weights, split) -> None:
    """The fused MoE's K slices meet through a counter and a workspace across SMs (gate and up parts):
    the result must match the reference and be bit-identical on every repeat."""
    from autotune.kernels import get_op

    op = get_op("moe")
    problem = Problem.moe(*mnk, e, topk, weights=weights)
    config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                    SPLIT_K=split, num_warps=4, num_stages=3)  # fmt: skip
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the MoE split-K sum")


def _launchers(config, target, monkeypatch):
    """(pinned, plain) launch functions of `config`: the plain one with the pinned shortcut off."""
    from autotune.kernels.gemm_tma import tma_launcher
    from autotune.kernels.gemm_triton import launcher

    def make():
        if config.backend == "triton_tma":
            return tma_launcher(config, num_sms=target.cu_count)
        return launcher(config, is_amd=target.is_amd, num_sms=target.cu_count)

    fast = make()
    with monkeypatch.context() as m:
        m.setenv("AUTOTUNE_PINNED_LAUNCH", "0")
        plain = make()
    return fast, plain


@pytest.mark.parametrize(
    "knobs",
    [
        dict(backend="triton", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, SPLIT_K=1),
        dict(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=4),  # + the reduce kernel
        dict(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=2, FUSED_SPLIT=1),
        dict(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, SPLIT_K=1, PERSISTENT=1),
        dict(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, SPLIT_K=2, PERSISTENT=0),
        dict(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, PERSISTENT=1, TAIL_SPLIT=1),
        dict(backend="triton_tma", BLOCK_M=128, BLOCK_N=112, BLOCK_K=64, SPLIT_K=1, PERSISTENT=0),  # 3 parts
    ],
)
def test_pinned_launches_give_triton_s_own_results(target, monkeypatch, knobs) -> None:
    """Launches after a key's first skip Triton's binder: over new inputs, another M and (pointer kernel)
    an A that is not 16-byte aligned, each result must equal Triton's own launch bit for bit."""
    from autotune.kernels import gemm_tma, gemm_triton
    from autotune.kernels.gemm_space import has_tma

    if knobs["backend"] == "triton_tma" and not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")

    config = Config(**{"GROUP_M": 8, "num_warps": 4, "num_stages": 3} | knobs)
    fast, plain = _launchers(config, target, monkeypatch)
    jit_runs = {"fast": 0, "plain": 0}
    which = ["fast"]
    for kernel in (gemm_triton.gemm_kernel, gemm_triton.gemm_sum_kernel, gemm_triton.splitk_reduce_kernel,
                   gemm_tma.gemm_tma_kernel, gemm_tma.gemm_tma_tail_kernel):  # fmt: skip

        def counted(*args, _run=kernel.run, **kwargs):
            jit_runs[which[0]] += 1
            return _run(*args, **kwargs)

        monkeypatch.setattr(kernel, "run", counted)
    fast_launches = 0
    N, K = 1280, 4096
    torch.manual_seed(3)
    for M, offset in [(200, 0), (200, 0), (77, 0), (200, 0), (77, 8), (200, 1)]:
        if offset and config.backend == "triton_tma":
            continue  # descriptors need aligned rows (the dispatcher copies such inputs)
        a = torch.randn(M * K + offset, device="cuda", dtype=torch.bfloat16)[offset:].view(M, K)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        outs = []
        for run in (fast, plain, fast):
            which[0] = "fast" if run is fast else "plain"
            fast_launches += run is fast
            split_k = int(config.get("SPLIT_K", 1))
            ws = torch.empty(split_k * M * N, device="cuda") if split_k > 1 else None
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            if config.backend == "triton_tma":
                run(a, b, out, False, M, N, K, ws)
            else:
                run(a, b, out, b.stride(1), b.stride(0), M, N, K, ws)
            outs.append(out)
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        assert float((outs[0].double() - ref.double()).norm() / ref.double().norm()) < 1e-2, (M, offset)
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[2], outs[1]), (M, offset)
    # the shortcut was taken: Triton's own launch ran once per launch key, not once per launch
    assert jit_runs["fast"] < fast_launches and jit_runs["plain"] >= fast_launches // 2


@pytest.mark.parametrize(
    "knobs",
    [
        dict(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=4),  # the reduce kernel
        dict(backend="triton_tma", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, SPLIT_K=1, PERSISTENT=0),
        dict(backend="torch"),
    ],
)
def test_out_gets_the_bits_of_a_fresh_c_on_gpu(target, knobs) -> None:
    """`gemm(..., out=)` into a dense and into a transposed buffer (through a temporary where the kernel
    needs a dense C) equals the C the call would have allocated."""
    from autotune.kernels import launch_config
    from autotune.kernels.gemm_space import has_tma

    if knobs["backend"] == "triton_tma" and not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    config = Config(**({"GROUP_M": 8, "num_warps": 4, "num_stages": 3} if knobs["backend"] != "torch" else {})
                    | knobs)  # fmt: skip
    torch.manual_seed(5)
    a = torch.randn(200, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1280, 4096, device="cuda", dtype=torch.bfloat16)
    want = launch_config(config, a, b)
    for out in (torch.empty(200, 1280, device="cuda", dtype=torch.bfloat16),
                torch.empty(1280, 200, device="cuda", dtype=torch.bfloat16).t()):  # fmt: skip
        out.fill_(float("nan"))
        assert launch_config(config, a, b, out=out) is out
        torch.cuda.synchronize()
        assert torch.equal(out, want), (config.short(), out.stride())


def _cached_kernels(cache_dir) -> set[str]:
    return {p.parent.name for p in cache_dir.rglob("gemm_kernel.json")}


def test_compile_pool_features_and_warm_cache_on_local_gpu(target, tmp_path, monkeypatch) -> None:
    """Features of the local GPU's binary, compiled in worker processes; the launch that follows in this
    process loads that binary from Triton's cache instead of compiling another one."""
    from autotune.engine.compile import CompilePool

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    problem = Problem.gemm(64, 2048, 1024)
    config = next(c for c in GEMM.space(problem, target, ("triton",)).configs() if c["SPLIT_K"] == 1)
    with CompilePool(target, workers=2) as pool:
        features = dict(pool.map(GEMM, problem, [config]))[config]
    assert features.compiled, features.error
    assert features.vgprs > 0 and features.occupancy >= 1 and features.lds_bytes > 0
    assert features.mma, "the GEMM must use matrix instructions"
    before = _cached_kernels(tmp_path)
    assert len(before) == 1
    inputs = GEMM.make_inputs(problem, "cuda", seed=0)
    out = GEMM.make_output(problem, "cuda")
    GEMM.prepare(problem, config, target, inputs, out)()
    torch.cuda.synchronize()
    assert _cached_kernels(tmp_path) == before, "the launch compiled a different binary"


def test_worker_process_on_the_gpu_survives_a_gpu_fault_and_a_segfault(tmp_path) -> None:
    """An illegal memory access makes the device unusable to its process: the worker answers `crashed`,
    exits, and a new worker on the same GPU measures the next config."""
    from autotune.engine.workers import ProcessWorker, device_env, visible_devices
    from autotune.kernels.faults import FaultyOp

    op = FaultyOp(("none", "illegal_address", "segv"))
    problem = Problem.gemm(64, 256, 256)
    with ProcessWorker(name="gpu0", env=device_env(visible_devices()[0]), timeout_s=120,
                       log_path=tmp_path / "w.log") as worker:  # fmt: skip
        assert not worker.target.interpreter
        results = {f: worker.run(op, problem, Config(backend="faulty", fault=f, rep=0)) for f in op.faults}
        assert results["none"].ok and results["none"].time_us > 0
        assert results["illegal_address"].status is TrialStatus.CRASHED
        assert results["segv"].status is TrialStatus.CRASHED and "SIGSEGV" in results["segv"].error
        after = worker.run(op, problem, Config(backend="faulty", fault="none", rep=0))
        assert after.ok and worker.starts == 3


def test_sweep_cli_on_every_gpu_of_the_host(tmp_path) -> None:
    """`autotune sweep` with the default executor: a worker process per visible GPU, trials stored."""
    from autotune.cli import main
    from autotune.db import Store

    spec = tmp_path / "s.toml"
    spec.write_text('name = "gpus"\n[[sweep]]\nop = "gemm"\ndtype = "bf16"\nm = [16, 64]\n'
                    'nk = [[1024, 1024]]\nstrategy = "exhaustive"\ntrials = 4\n')  # fmt: skip
    db = tmp_path / "g.db"
    argv = ["sweep", str(spec), "--db", str(db), "--no-progress", "--log-dir", str(tmp_path / "logs")]
    assert main(argv) == 0
    with Store(str(db)) as store:
        stored = [t for t in store.trials() if t.status is not TrialStatus.PRUNED]
        [sweep] = store.sweeps()
    trials = [t for t in stored if t.source is Source.MEASURED]
    final = [t for t in stored if t.source is Source.FINAL]  # each problem's finalists, timed again
    profile = [t for t in stored if t.source is Source.PROFILE]  # the shape at its serving ladder of M
    assert len(trials) == 8 and all(t.extra.get("worker", "").startswith("gpu") for t in trials)
    assert {t.problem.M for t in final} == {16, 64} and all(t.extra["final_rounds"] >= 1 for t in final)
    assert {t.problem.M for t in profile} == {1, 2, 3, 4, 6, 8, 16, 24, 32, 40, 48, 56, 64}
    assert all(t.timing is not None and t.timing.method == "graph" for t in final + profile if t.ok)
    assert len(trials) + len(final) + len(profile) == len(stored)
    if torch.cuda.device_count() > 1:  # two problems on two or more GPUs: each on its own worker
        assert len({t.extra["worker"] for t in trials}) == 2
    assert sweep.status == "finished" and sweep.workers == torch.cuda.device_count()
    assert any(p.suffix == ".log" for p in (tmp_path / "logs").iterdir())


# -- the gluon backend of gemm_fp8_blockwise (Hopper only) ---------------------------------------------------

#: The gluon kernel's default tile (128x128 on two warpgroups, 4 stages).
GLUON = dict(
    BLOCK_M=128,
    BLOCK_N=128,
    num_warps=8,
    num_stages=4,
    PERSISTENT=0,
    GROUP_M=8,
    WARP_SPEC=0,
    SPLIT_K=1,
    SWAP_AB=0,
)
#: WARP_SPEC: each consumer warpgroup in a partition of its own, a loader warp; ragged M and N, even and
#: odd counts of K groups (one alone), persistent programs whose ring phases run on across their tiles.
GLUON_WARP_SPEC = [
    ((300, 1000, 1024), {}, "bf16"),  # rows 320-383 of the last row of tiles: its second consumer's, all out
    ((300, 1000, 1152), dict(num_stages=3, GROUP_M=1), "fp16"),
    ((300, 1000, 1152), dict(BLOCK_M=64, num_warps=4, num_stages=5), "bf16"),  # one consumer warpgroup
    ((2048, 200, 128), dict(BLOCK_N=64), "bf16"),  # one K group
    ((1000, 4600, 1152), dict(PERSISTENT=1), "bf16"),  # 288 tiles: two or three per program
    ((1000, 4600, 1024), dict(PERSISTENT=1, num_stages=3, BLOCK_N=64), "bf16"),
    ((1000, 4600, 128), dict(PERSISTENT=1, num_stages=5), "bf16"),  # one load per tile
    ((1000, 4600, 1152), dict(BLOCK_M=64, num_warps=4, PERSISTENT=1), "fp16"),
]


def _gluon_op_or_skip(target):
    from autotune.kernels import get_op
    from autotune.kernels.gemm_quant_space import gluon_missing

    op = get_op("gemm_fp8_blockwise")
    if "gluon" not in op.backends(target):
        pytest.skip(f"the gluon backend runs on Hopper (sm_90) only, not on {target.arch}")
    if gluon_missing():
        pytest.skip(gluon_missing())
    return op


@pytest.mark.parametrize(
    "mnk, knobs, dtype",
    [
        ((300, 1000, 1024), {}, "bf16"),  # M and N off the tiles, an even count of K groups
        ((300, 1000, 1024), dict(BLOCK_N=64, num_stages=5, GROUP_M=1), "fp16"),
        ((300, 1000, 1152), dict(BLOCK_M=64, num_warps=4, num_stages=3), "bf16"),  # 9 K groups: odd
        ((1000, 4600, 1152), dict(PERSISTENT=1), "bf16"),  # 288 tiles: each program walks several
        ((1000, 4600, 1024), dict(BLOCK_M=64, num_warps=4, num_stages=5, PERSISTENT=1), "bf16"),
        *[(mnk, dict(knobs, WARP_SPEC=1), dtype) for mnk, knobs, dtype in GLUON_WARP_SPEC],
    ],
)
def test_gluon_backend_on_hopper_is_right_and_repeatable(target, mnk, knobs, dtype) -> None:
    """Gluon configs of the op's space through `prepare`, against the op's reference; the repeats (the
    pinned launch's shortcut) must give the same bits."""
    op = _gluon_op_or_skip(target)
    M, N, K = mnk
    problem = Problem.quant("gemm_fp8_blockwise", M, N, K, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the gluon kernel")


#: SPLIT_K (decode grids of fewer tiles than SMs): K slices summed in the launch through a workspace and a
#: counter per block of C; even and uneven slices, one and two consumer warpgroups, ragged M and N.
GLUON_SPLIT = [
    ((16, 1000, 1152), dict(BLOCK_M=64, num_warps=4, GROUP_M=1, SPLIT_K=3), "bf16"),  # 9 groups: 3 + 3 + 3
    ((16, 1000, 1280), dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, GROUP_M=1, SPLIT_K=4, WARP_SPEC=1), "bf16"),
    (
        (64, 4600, 1024),
        dict(BLOCK_M=64, num_warps=4, num_stages=6, GROUP_M=1, SPLIT_K=2, WARP_SPEC=1),
        "fp16",
    ),
    ((100, 1000, 1152), dict(GROUP_M=1, SPLIT_K=2, WARP_SPEC=1), "bf16"),  # two consumers, 5 + 4 groups
]


@pytest.mark.parametrize("mnk, knobs, dtype", GLUON_SPLIT)
def test_gluon_split_k_is_right_repeatable_and_replays_in_a_graph(target, mnk, knobs, dtype) -> None:
    """The K slices of a block of C meet across SMs through the workspace and its counter: right, the same
    bits 50 times over (the last slice resets the counter), and the same bits again from a CUDA graph
    replayed several times, as the Benchmarker and serving engines run it."""
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", *mnk, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the split gluon kernel")
    inputs = op.make_inputs(problem, "cuda", seed=9)
    out = op.make_output(problem, "cuda").fill_(float("nan"))
    launch = op.prepare(problem, config, target, inputs, out)
    launch()
    torch.cuda.synchronize()
    eager = out.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    for _ in range(5):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager), "a graph replay of the split gluon kernel gave other bits"


#: SWAP_AB (decode): the kernel on Cᵀ, the weight's rows on wgmma's M side and the activations' on its N
#: side, C stored transposed through shared memory; ragged M and N, odd and even K groups, split,
#: warp-specialized and persistent programs (two tiles along M, 288 tiles over the SMs).
_SWAP = dict(num_warps=4, GROUP_M=1, SWAP_AB=1)
GLUON_SWAP = [
    ((5, 1000, 1152), dict(_SWAP, BLOCK_M=16, BLOCK_N=64, num_stages=6), "bf16"),
    ((16, 1000, 1280), dict(_SWAP, BLOCK_M=16, BLOCK_N=128, SPLIT_K=2, WARP_SPEC=1), "fp16"),
    ((27, 4600, 1024), dict(_SWAP, BLOCK_M=32, BLOCK_N=64, num_stages=5), "bf16"),
    ((32, 9200, 1152), dict(_SWAP, BLOCK_M=16, BLOCK_N=64, num_stages=5, PERSISTENT=1), "bf16"),
    ((16, 4608, 7168), dict(_SWAP, BLOCK_M=16, BLOCK_N=64, num_stages=6, SPLIT_K=2), "bf16"),
]


@pytest.mark.parametrize("mnk, knobs, dtype", GLUON_SWAP)
def test_gluon_swapped_is_right_and_repeatable(target, mnk, knobs, dtype) -> None:
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", *mnk, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    _right_and_repeatable(op, problem, config, target, "the swapped gluon kernel")


@pytest.mark.parametrize("mnk, knobs, dtype", GLUON_WARP_SPEC[:2] + GLUON_WARP_SPEC[4:5])
def test_gluon_warp_spec_gives_the_bits_of_the_kernel_without(target, mnk, knobs, dtype) -> None:
    """WARP_SPEC moves the loads to a warp of their own and each consumer warpgroup to a partition: every
    element still takes the same wgmmas and FMAs in the same order, so the same bits (a race or a stale
    slot shows here even where it stays within the tolerance)."""
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", *mnk, dtype=dtype)
    inputs = op.make_inputs(problem, "cuda", seed=4)
    outs = []
    for warp_spec in (0, 1):
        out = op.make_output(problem, "cuda").fill_(float("nan"))
        config = Config(backend="gluon", **(GLUON | knobs | dict(WARP_SPEC=warp_spec)))
        op.prepare(problem, config, target, inputs, out)()
        torch.cuda.synchronize()
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), float((outs[0].float() - outs[1].float()).abs().max())


def test_gemm_quant_launches_gluon_configs_tuned_and_default(target, monkeypatch) -> None:
    """`gemm_quant` runs a tuned table row of backend gluon; an untuned prefill shape runs the fallback
    (`_scaled_mm` where it runs the mode, not the gluon default)."""
    import warnings

    from autotune.dispatch import Dispatcher, Table
    from autotune.engine.bench import rel_error
    from autotune.kernels.gemm_quant_op import QuantGemmOp
    from autotune.kernels.quant_api import gemm_quant

    op = _gluon_op_or_skip(target)
    tuned = Problem.quant("gemm_fp8_blockwise", 300, 1000, 1024)
    # a row stored before WARP_SPEC existed: it has none, and runs the kernel without
    config = Config(
        backend="gluon", **{k: v for k, v in (GLUON | dict(BLOCK_N=64)).items() if k != "WARP_SPEC"}
    )
    d = Dispatcher([Table.from_winners(target, [(tuned, config, 1.0)])], device_key=target.device_key())
    assert d.lookup("gemm_fp8_blockwise", 300, 1000, 1024, dtype=tuned.dtype) == config
    monkeypatch.setattr("autotune.dispatch.dispatcher._default", d)
    untuned = Problem.quant("gemm_fp8_blockwise", 512, 2048, 1024)
    assert op.default_config(untuned, target).backend == "gluon"
    fallback = op.fallback_config(untuned, target)
    launched = []
    real = QuantGemmOp._gluon_launch

    def spy(self, *args, **kwargs):
        launched.append(config)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(QuantGemmOp, "_gluon_launch", spy)
    for problem in (tuned, untuned):
        a, b, sa, sb = op.make_inputs(problem, "cuda", seed=6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the untuned shape may warn once
            out = gemm_quant("gemm_fp8_blockwise", a, b, sa, sb)
        assert rel_error(out, op.reference(problem, (a, b, sa, sb))) <= op.tolerance(problem), problem
    assert len(launched) == (1 if fallback.backend == "torch" else 2)


def test_benchmarker_times_the_gluon_default(target) -> None:
    """The sweep's path: checked against the reference (output poisoned first), then timed."""
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", 2048, 4608, 7168)
    default = op.default_config(problem, target)
    assert default.backend == "gluon"
    r = Benchmarker(op, target).run(problem, default)
    assert r.ok, (r.status, r.error[:500])
    # 135 GFLOP: over 20 µs on any Hopper, and the H100 ran it in about 143 µs
    assert r.time_us is not None and 20 < r.time_us < 10_000
