"""GPU tests of the quantized GEMMs' kernels (FP8 GEMV, TMA, PDL, the gluon kernel). Skipped without a
CUDA or ROCm GPU."""

from __future__ import annotations

import itertools

import pytest
import torch

from autotune import Config, Problem
from autotune.engine.bench import Benchmarker

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op_name", ["gemm_fp8_rowwise", "gemm_fp8_blockwise"])
@pytest.mark.parametrize("M", [1, 4])
def test_fp8_gemv_backend_on_gpu(target, op_name: str, M: int) -> None:
    """The FP8 GEMV kernel on ragged N and a K off its steps, against the dequantized reference."""
    from autotune.kernels.quant.op import QUANT_GEMMS

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
def test_fp8_rowwise_tma_on_gpu_is_right_and_repeatable(right_and_repeatable, target, mnk, knobs) -> None:
    """The row-wise TMA kernel on Hopper: swapped tiles stored transposed, split-K, persistent programs."""
    from autotune.kernels import get_op

    if "triton_tma" not in get_op("gemm_fp8_rowwise").backends(target):
        pytest.skip(f"no TMA kernel on {target.arch}")
    op = get_op("gemm_fp8_rowwise")
    problem = Problem.quant("gemm_fp8_rowwise", *mnk)
    base = op.default_config(Problem.quant("gemm_fp8_rowwise", 64, 8192, 3584), target)
    assert base.backend == "triton_tma", base.short()
    config = base.replace(**knobs)
    right_and_repeatable(op, problem, config, target, "the TMA kernel")


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
def test_fp8_blockwise_tma_on_gpu_is_right_and_repeatable(right_and_repeatable, target, mnk, knobs) -> None:
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
    right_and_repeatable(op, problem, config, target, "the blockwise TMA kernel")


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
    from autotune.kernels.quant.space import gluon_missing

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
def test_gluon_backend_on_hopper_is_right_and_repeatable(
    right_and_repeatable, target, mnk, knobs, dtype
) -> None:
    """Gluon configs of the op's space through `prepare`, against the op's reference; the repeats (the
    pinned launch's shortcut) must give the same bits."""
    op = _gluon_op_or_skip(target)
    M, N, K = mnk
    problem = Problem.quant("gemm_fp8_blockwise", M, N, K, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the gluon kernel")


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
def test_gluon_split_k_is_right_repeatable_and_replays_in_a_graph(
    right_and_repeatable, target, mnk, knobs, dtype
) -> None:
    """The K slices of a block of C meet across SMs through the workspace and its counter: right, the same
    bits 50 times over (the last slice resets the counter), and the same bits again from a CUDA graph
    replayed several times, as the Benchmarker and serving engines run it."""
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", *mnk, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the split gluon kernel")
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
def test_gluon_swapped_is_right_and_repeatable(right_and_repeatable, target, mnk, knobs, dtype) -> None:
    op = _gluon_op_or_skip(target)
    problem = Problem.quant("gemm_fp8_blockwise", *mnk, dtype=dtype)
    config = Config(backend="gluon", **(GLUON | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the swapped gluon kernel")


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
    from autotune.kernels.quant.api import gemm_quant
    from autotune.kernels.quant.op import QuantGemmOp

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
