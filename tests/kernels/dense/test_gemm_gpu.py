"""GPU tests of the dense GEMM's kernels: right against the reference, repeatable, launched through tables
and pinned launches. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import pytest
import torch

from autotune import Config, Problem
from autotune.kernels import GEMM

pytestmark = pytest.mark.gpu


CASES = [(1, 4096, 4096, "nk"), (16, 6144, 4096, "kn"), (77, 1000, 3000, "nk"), (1024, 1024, 4096, "kn")]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mnk", CASES)
def test_kernel_matches_reference_on_gpu(target, mnk, dtype) -> None:
    M, N, K, layout = mnk
    problem = Problem.of("gemm", M, N, K, dtype, layout=layout)
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


def test_dispatched_gemm_uses_the_table(target, tmp_path, monkeypatch) -> None:
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm

    problem = Problem.of("gemm", 16, 512, 1024)
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
    from autotune.kernels.common.target import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.of("gemm", 200, 1280 if width == 128 else 1000, 4096, "bf16", layout=layout)
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
    from autotune.kernels.common.target import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.of("gemm", 1000 if persistent else 200, 3000, 4096, "bf16", layout=layout)
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

    problem = Problem.of("gemm", M, 1000, 4100, "bf16", layout=layout)
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


@pytest.mark.parametrize(
    "mnk, tile",
    [
        ((4096, 1280, 8192), (128, 128, 64)),  # 320 tiles: 2 waves, then 56 tiles split in 2
        ((4096, 1280, 8192), (128, 256, 64)),  # 160 tiles: 1 wave, then 28 tiles split in 4
        ((256, 1280, 8192), (256, 128, 64)),  # 10 tiles, no whole wave: split in 13
        ((1000, 1000, 3000), (128, 128, 64)),  # ragged edges: 64 tiles split in 2
    ],
)
def test_tail_split_on_gpu_is_right_and_repeatable(right_and_repeatable, target, mnk, tile) -> None:
    """The slices of a split tile meet through a counter and a workspace across SMs: a missing fence shows
    as a wrong or run-to-run different result, so the kernel runs many times and every result must match."""
    from autotune.kernels.common.target import has_tma

    if not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")
    problem = Problem.of("gemm", *mnk, "bf16")
    bm, bn, bk = tile
    config = Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1,
                    PERSISTENT=1, TAIL_SPLIT=1, num_warps=8 if bm * bn > 128 * 128 else 4,
                    num_stages=3)  # fmt: skip
    right_and_repeatable(GEMM, problem, config, target, "the split tail")


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
def test_in_launch_sums_on_gpu_are_right_and_repeatable(
    right_and_repeatable, target, op_name, mnk, knobs
) -> None:
    """FUSED_SPLIT and STREAM_K parts of a tile meet through a counter and a workspace across SMs: a
    missing fence or a wrong last-arriver test shows as a wrong or run-to-run different result."""
    from autotune.kernels import get_op

    op = get_op(op_name)
    problem = Problem.of("gemm", *mnk, "bf16") if op_name == "gemm" else Problem.quant(op_name, *mnk)
    values = dict(BLOCK_M=16, GROUP_M=1, SPLIT_K=1, FUSED_SPLIT=0, STREAM_K=0, num_warps=4, num_stages=3)
    if op_name.startswith("gemm_fp8"):
        values["SWAP_AB"] = 0
    if op_name == "gemm_fp8_blockwise":
        values["SCALES_AHEAD"] = 0
    config = Config(backend="triton", **(values | knobs))
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the in-launch sum")


def _launchers(config, target, monkeypatch):
    """(pinned, plain) launch functions of `config`: the plain one with the pinned shortcut off."""
    from autotune.kernels.dense.kernel import launcher
    from autotune.kernels.dense.tma import tma_launcher

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
    from autotune.kernels.common import splitk
    from autotune.kernels.common.target import has_tma
    from autotune.kernels.dense import kernel as gemm_triton
    from autotune.kernels.dense import tma as gemm_tma

    if knobs["backend"] == "triton_tma" and not has_tma(target):
        pytest.skip("no tensor-memory accelerator on this GPU")

    config = Config(**{"GROUP_M": 8, "num_warps": 4, "num_stages": 3} | knobs)
    fast, plain = _launchers(config, target, monkeypatch)
    jit_runs = {"fast": 0, "plain": 0}
    which = ["fast"]
    for kernel in (gemm_triton.gemm_kernel, gemm_triton.gemm_sum_kernel, splitk.splitk_reduce_kernel,
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
    from autotune.kernels.common.target import has_tma

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
