"""The quantized GEMMs: problems, quantization round trips, every op against its reference in Triton's CPU
interpreter (several configs, split-K, both MX paths), spaces, vendor backends and bad inputs."""

from __future__ import annotations

import sys

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.core.space import SearchSpace
from autotune.core.target import interpreting
from autotune.engine.bench import Benchmarker, rel_error
from autotune.kernels import OPS, QUANT_GEMMS, get_op
from autotune.kernels.common import formats as q
from autotune.kernels.common.target import mx_native
from autotune.kernels.quant.op import QuantGemmOp
from autotune.kernels.quant.problem import QUANT_OPS
from autotune.kernels.quant.space import quant_default_config, triton_default
from autotune.sweeps import SpecError, parse_spec

needs_interpreter = pytest.mark.skipif(not interpreting(), reason="runs kernels in the CPU interpreter")
INTERP = Target.interpreter_target()


def tcfg(
    bm: int = 16,
    bn: int = 16,
    bk: int = 32,
    group_m: int = 1,
    split_k: int = 1,
    fused: int = 0,
    stream: int = 0,
    swap: int = 0,
) -> Config:
    """A Triton config; FUSED_SPLIT, STREAM_K and SWAP_AB only where set (the FP8 kernels have them, MX
    not)."""
    extra = {k: v for k, v in (("FUSED_SPLIT", fused), ("STREAM_K", stream), ("SWAP_AB", swap)) if v}
    return Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, SPLIT_K=split_k,
                  num_warps=4, num_stages=1, **extra)  # fmt: skip


# -- problems -------------------------------------------------------------------------------------------


def test_quant_problems_key_everything_that_changes_the_answer() -> None:
    keys = {Problem.quant(op, 16, 256, 512).key() for op in QUANT_OPS}
    keys.add(Problem.quant("gemm_fp8_rowwise", 16, 256, 512, fp8="fp8e4m3fnuz").key())
    keys.add(Problem.quant("gemm_fp8_rowwise", 16, 256, 512, dtype="fp16").key())
    assert len(keys) == len(QUANT_OPS) + 2
    p = Problem.quant("gemm_mxfp4_bf16a", 16, 256, 512)
    assert (p.dtype_a, p.dtype_b, p.dtype_out) == ("bf16", "fp4e2m1", "bf16")
    assert str(p) == "gemm_mxfp4_bf16a M=16 N=256 K=512 A bf16 B fp4e2m1 -> bf16"
    assert p.flops() == 2.0 * 16 * 256 * 512


def test_min_bytes_count_packed_data_and_scales() -> None:
    M, N, K = 16, 256, 512
    out = M * N * 2
    assert Problem.quant("gemm_fp8_rowwise", M, N, K).min_bytes() == M * K + N * K + out + 4 * (M + N)
    assert Problem.quant("gemm_fp8_blockwise", M, N, K).min_bytes() == M * K + N * K + out + 4 * (
        M * 4 + 2 * 4
    )
    assert Problem.quant("gemm_mxfp8", M, N, K).min_bytes() == M * K + N * K + out + (M + N) * K // 32
    assert Problem.quant("gemm_mxfp4", M, N, K).min_bytes() == (M + N) * K / 2 + out + (M + N) * K // 32
    assert Problem.quant("gemm_mxfp4_bf16a", M, N, K).min_bytes() == 2 * M * K + N * K / 2 + out + N * K // 32


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Problem.quant("gemm_fp8_blockwise", 16, 256, 500), "multiple of its scale block 128"),
        (lambda: Problem.quant("gemm_mxfp4", 16, 256, 80), "multiple of its scale block 32"),
        (lambda: Problem("gemm_mxfp8", 16, 256, 512), "takes A in fp8e4m3"),
        (lambda: Problem("gemm_fp8_rowwise", 1, 8, 64, dtype_a="fp8e4m3", dtype_b="fp8e4m3fnuz"), "one FP8"),
        (lambda: Problem.quant("gemm_mxfp4", 16, 256, 512, dtype="fp32"), "writes bf16 or fp16"),
        (lambda: Problem.quant("gemm_nvfp4", 16, 256, 512), "unknown op .gemm_nvfp4."),
    ],
)
def test_bad_problems_are_one_clear_error(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_ops_are_registered_everywhere() -> None:
    for name in QUANT_OPS:
        assert get_op(name) is QUANT_GEMMS[name] is OPS[name] and get_op(name).name == name
    spec = parse_spec(
        'name = "q"\n[[sweep]]\nop = "gemm_fp8_rowwise"\nm = [1, 64]\nnk = [[256, 512]]\n'
        'fp8 = "fp8e4m3fnuz"\n[[sweep]]\nop = "gemm_mxfp4_bf16a"\nm = [2]\nnk = [[64, 256]]\ndtype = "fp16"\n'
    )
    problems = [p for _, p in spec.problems()]
    assert problems[0] == Problem.quant("gemm_fp8_rowwise", 1, 256, 512, fp8="fp8e4m3fnuz")
    assert problems[2] == Problem.quant("gemm_mxfp4_bf16a", 2, 64, 256, dtype="fp16")
    assert spec.entries[1].make_op() is QUANT_GEMMS["gemm_mxfp4_bf16a"]
    base = 'name = "q"\n[[sweep]]\nop = "gemm_mxfp8"\nm = [1]\n'
    for bad, message in [
        (base + "nk = [[64, 100]]\n", "multiple of its scale block 32"),
        (base + 'nk = [[64, 128]]\nfp8 = "fp8e4m3"\n', "`fp8` belongs to op gemm_fp8_rowwise and"),
        (base + 'nk = [[64, 128]]\nlayout = "kn"\n', "layout nk"),
        (base.replace("gemm_mxfp8", "gemm_fp8_rowwise") + 'nk = [[64, 128]]\nfp8 = "e5m2"\n', "`fp8` is"),
    ]:
        with pytest.raises(SpecError, match=message):
            parse_spec(bad)


# -- quantization -----------------------------------------------------------------------------------------


def test_e2m1_codes_round_to_nearest_even_and_saturate() -> None:
    values = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0])
    assert torch.equal(q.e2m1_decode(q.e2m1_encode(values)), values)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -5.0])
    want = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -4.0])
    assert torch.equal(q.e2m1_decode(q.e2m1_encode(ties)), want)
    codes = torch.randint(0, 16, (3, 64), dtype=torch.uint8)
    assert torch.equal(q.unpack_fp4(q.pack_fp4(codes)), codes)
    assert q.pack_fp4(torch.tensor([[1, 2]], dtype=torch.uint8)).item() == 0x21  # first element low


def test_mx_scales_come_from_the_exponent_of_amax() -> None:
    amax = torch.tensor([1.0, 3.9, 4.0, 1e-3, 448.0])
    for fmt, emax in (("e2m1", 2), ("e4m3", 8)):
        want = (torch.floor(torch.log2(amax)) + 127 - emax).to(torch.uint8)
        assert torch.equal(q.mx_scale_exponent(amax, fmt), want)
    assert torch.equal(q.e8m0_to_float(torch.tensor([127, 130, 1], dtype=torch.uint8)),
                       torch.tensor([1.0, 8.0, 2.0**-126]))  # fmt: skip


@pytest.mark.parametrize("fmt, tol", [("e4m3", 0.04), ("e2m1", 0.15)])
def test_mx_round_trip(fmt: str, tol: float) -> None:
    x = torch.randn(7, 128, generator=torch.Generator().manual_seed(0)) * 3
    data, scale = q.quantize_mx(x, fmt)
    assert scale.shape == (7, 4) and scale.dtype == torch.uint8
    assert data.shape == ((7, 128) if fmt == "e4m3" else (7, 64))
    back = q.dequantize_mx(data, scale, fmt)
    assert 0 < rel_error(back, x) < tol
    again = q.dequantize_mx(*q.quantize_mx(back, fmt), fmt)  # quantized values are fixed points
    assert torch.equal(again, back)


@pytest.mark.parametrize("block, shape", [((0, 0), (1, 1)), ((1, 0), (130, 1)), ((1, 128), (130, 2)),
                                          ((128, 128), (2, 2))])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_round_trip(block: tuple[int, int], shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = torch.randn(130, 256, generator=torch.Generator().manual_seed(1))
    data, scale = q.quantize_fp8(x, dtype, block)
    assert data.dtype == dtype and scale.shape == shape and scale.dtype == torch.float32
    back = q.dequantize_fp8(data, scale, block)
    assert 0 < rel_error(back, x) < 0.04
    assert float(back.abs().max()) <= float(x.abs().max()) * 1.001  # amax maps onto the largest value


def test_fp8_flavour_follows_the_target() -> None:
    assert q.fp8_dtype("fp8e4m3", "gfx942") == torch.float8_e4m3fnuz
    assert q.fp8_dtype("fp8e4m3", "gfx950") == q.fp8_dtype("fp8e4m3", "sm_90") == torch.float8_e4m3fn
    assert q.fp8_dtype("fp8e4m3fnuz", "gfx942") == torch.float8_e4m3fnuz
    with pytest.raises(ValueError, match="gfx950 has no e4m3fnuz"):
        q.fp8_dtype("fp8e4m3fnuz", "gfx950")


# -- kernels against their references ----------------------------------------------------------------------

# (op, M, N, K, configs): edge tiles in M and N, split-K with a partial last K slice, K tiles wider than a
# blockwise scale group (sub-tiles) and narrower than one.
CASES = [
    ("gemm_fp8_rowwise", 20, 48, 160,
     [tcfg(), tcfg(32, 32, 64, group_m=4, split_k=2), tcfg(bk=16, split_k=4),
      tcfg(bk=16, split_k=4, fused=1), tcfg(bk=32, stream=1),
      # C^T = B . A^T: edge tiles on both sides, slices summed in the launch, stream-K
      tcfg(16, 32, 32, swap=1), tcfg(32, 16, 16, split_k=4, fused=1, swap=1),
      tcfg(16, 16, 32, stream=1, swap=1)]),
    ("gemm_fp8_blockwise", 20, 48, 384,
     [tcfg(bk=64), tcfg(16, 32, 32, split_k=4), tcfg(32, 16, 256, split_k=2),
      tcfg(16, 32, 64, split_k=4, fused=1), tcfg(16, 16, 64, stream=1),
      # swapped: the weight's scales per 128 rows on the kernel's A side, K sub-tiles, in-launch sums
      tcfg(16, 32, 64, swap=1), tcfg(16, 16, 256, split_k=2, fused=1, swap=1),
      tcfg(16, 32, 64, stream=1, swap=1),
      # the scales of the next K tile loaded ahead: K tiles narrower and wider than a group, split
      tcfg(bk=64).replace(SCALES_AHEAD=1), tcfg(32, 16, 256, split_k=2).replace(SCALES_AHEAD=1),
      tcfg(16, 32, 64, swap=1).replace(SCALES_AHEAD=1),
      tcfg(16, 16, 256, split_k=2, fused=1, swap=1).replace(SCALES_AHEAD=1),
      # four sub-tiles a K tile (the most the kernel holds ahead), K smaller than one tile
      tcfg(16, 16, 512, swap=1).replace(SCALES_AHEAD=1)]),
    # three B scale blocks along N: one B scale per tile (BLOCK_N 64) and several per tile (BLOCK_N 256),
    # each also swapped (a last tile that wraps past N onto the first scale block)
    ("gemm_fp8_blockwise", 8, 272, 256,
     [tcfg(16, 64, 128), tcfg(16, 256, 64, split_k=2), tcfg(16, 64, 128, swap=1),
      tcfg(16, 256, 64, split_k=2, fused=1, swap=1), tcfg(16, 64, 256).replace(SCALES_AHEAD=1),
      tcfg(16, 256, 64, swap=1, stream=1).replace(SCALES_AHEAD=1)]),
    ("gemm_mxfp8", 20, 48, 192, [tcfg(), tcfg(32, 16, 64, group_m=4, split_k=2)]),
    ("gemm_mxfp4", 20, 48, 192, [tcfg(), tcfg(16, 32, 64, split_k=4)]),
    ("gemm_mxfp4_bf16a", 20, 48, 192, [tcfg(), tcfg(32, 16, 64, split_k=2)]),
]  # fmt: skip


@needs_interpreter
@pytest.mark.parametrize("name, M, N, K, configs", CASES, ids=[c[0] for c in CASES])
def test_op_matches_its_reference(name: str, M: int, N: int, K: int, configs: list[Config]) -> None:
    op = get_op(name)
    problem = Problem.quant(name, M, N, K)
    inputs = op.make_inputs(problem, "cpu", seed=3)
    ref = op.reference(problem, inputs)
    if name == "gemm_mxfp4_bf16a":  # the reference quantizes A as the kernel must: skipping it shows
        _, b = op.dequantized(problem, inputs)  # type: ignore[attr-defined]
        assert rel_error(ref, inputs[0].float() @ b.t()) > 5 * op.tolerance(problem)
    paths = [op, QuantGemmOp(name, native_mx=True)] if name in ("gemm_mxfp4", "gemm_mxfp4_bf16a") else [op]
    for path in paths:
        for config in configs:
            out = op.make_output(problem, "cpu").fill_(float("nan"))
            path.prepare(problem, config, INTERP, inputs, out)()
            err = rel_error(out, ref)
            assert err <= op.tolerance(problem), (name, path.native_mx, config.short(), err)


@needs_interpreter
def test_fused_split_sums_every_slice_in_a_fixed_order_and_resets_its_counters() -> None:
    from autotune.kernels import scratch

    op = get_op("gemm_fp8_blockwise")
    problem = Problem.quant("gemm_fp8_blockwise", 20, 48, 512)
    inputs = op.make_inputs(problem, "cpu", seed=4)
    ref = op.reference(problem, inputs)
    outs = []
    for config in (tcfg(16, 32, 128, split_k=4, fused=1), tcfg(16, 32, 128, split_k=4, fused=1),
                   tcfg(16, 32, 128, split_k=4)):  # fmt: skip
        out = op.make_output(problem, "cpu").fill_(float("nan"))
        op.prepare(problem, config, INTERP, inputs, out)()
        assert rel_error(out, ref) <= op.tolerance(problem), config.short()
        outs.append(out)
    assert torch.equal(outs[0], outs[1]), "the second launch relies on the first having reset the counters"
    assert torch.equal(outs[0], outs[2]), "summed in slice order, as the reduce kernel does"
    for _ws, counts in scratch._scratch.values():
        if counts.device.type != "meta":  # the compile-only checks record launches on meta tensors
            assert not counts.any(), "a tile counter was left non-zero"
    # one slice's partial alone (each slice holds a quarter of K) is far from the answer
    one = tcfg(16, 32, 128)
    part = Problem.quant("gemm_fp8_blockwise", 20, 48, 128)
    a, b, sa, sb = inputs
    out = op.make_output(part, "cpu")
    op.prepare(part, one, INTERP, (a[:, :128].contiguous(), b[:, :128].contiguous(), sa[:, :1].contiguous(),
                                   sb[:, :1].contiguous()), out)()  # fmt: skip
    assert rel_error(out, ref) > 10 * op.tolerance(problem)


def tma_cfg(bm: int = 16, bn: int = 16, bk: int = 32, split_k: int = 1, persistent: int = 0, swap: int = 0,
            group_m: int = 1) -> Config:  # fmt: skip
    return Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, SPLIT_K=split_k,
                  PERSISTENT=persistent, SWAP_AB=swap, num_warps=4, num_stages=1)  # fmt: skip


@needs_interpreter
def test_rowwise_tma_kernel_matches_its_reference() -> None:
    """The descriptor kernel: ragged tiles on both sides and along K, the K slices of SPLIT_K summed by
    the reduce kernel, persistent programs, grouped order, and each of these swapped (C^T = B . A^T, tiles
    stored transposed)."""
    op = get_op("gemm_fp8_rowwise")
    problem = Problem.quant("gemm_fp8_rowwise", 20, 48, 160)
    inputs = op.make_inputs(problem, "cpu", seed=6)
    ref = op.reference(problem, inputs)
    for swap in (0, 1):
        for config in (tma_cfg(swap=swap), tma_cfg(32, 16, 64, split_k=2, swap=swap),
                       tma_cfg(16, 16, 32, persistent=1, group_m=4, swap=swap),
                       tma_cfg(16, 16, 32, split_k=2, persistent=1, swap=swap)):  # fmt: skip
            out = op.make_output(problem, "cpu").fill_(float("nan"))
            op.prepare(problem, config, INTERP, inputs, out)()
            assert rel_error(out, ref) <= op.tolerance(problem), config.short()


@needs_interpreter
def test_blockwise_tma_kernel_matches_its_reference() -> None:
    """The descriptor kernel with blockwise scales: K tiles narrower than a scale group and wider (up to
    four sub-tiles, the next tile's scales loaded ahead), a last K tile past K, ragged tiles, three weight
    scale blocks along N, SPLIT_K, persistent programs, grouped order, each also swapped (the weight's
    scales on the kernel's A side)."""
    op = get_op(BLOCKWISE)
    for M, N, K in ((20, 48, 384), (8, 272, 256)):
        problem = Problem.quant(BLOCKWISE, M, N, K)
        inputs = op.make_inputs(problem, "cpu", seed=7)
        ref = op.reference(problem, inputs)
        for swap in (0, 1):
            # BLOCK_N tiles the weight's rows, swapped or not: 64 of them lie in one scale block
            for config in (tma_cfg(16, 64, 64, swap=swap), tma_cfg(16, 64, 256, swap=swap),
                           tma_cfg(16, 64, 512, swap=swap), tma_cfg(32, 16, 128, split_k=2, swap=swap),
                           tma_cfg(16, 16, 64, split_k=2, persistent=1, group_m=4, swap=swap)):  # fmt: skip
                out = op.make_output(problem, "cpu").fill_(float("nan"))
                op.prepare(problem, config, INTERP, inputs, out)()
                assert rel_error(out, ref) <= op.tolerance(problem), (M, N, K, config.short())


def test_pdl_is_refused_where_it_cannot_run() -> None:
    """PDL (a programmatic dependent launch, a probe knob of the FP8 pointer kernel): NVIDIA only, the
    unsplit kernel only, never the interpreter."""
    op = get_op(BLOCKWISE)
    problem = Problem.quant(BLOCKWISE, 16, 4608, 7168)
    pdl = tcfg(16, 64, 512, swap=1).replace(PDL=1, PREFETCH_K=512)
    for config, target, message in (
        (pdl, INTERP, "on NVIDIA only"),
        (pdl, Target.for_arch("gfx942"), "on NVIDIA only"),
        (pdl.replace(SPLIT_K=2, FUSED_SPLIT=1), SM90, "unsplit kernel only"),
    ):
        with pytest.raises(ValueError, match=message):
            op.kernel_calls(problem, config, target)
    assert len(op.kernel_calls(problem, pdl, SM90)) == 1
    # the L2 prefetch walks the weight's rows a byte a column: a weight whose K stride is not 1 is refused
    launch = op._pointer_launcher(pdl, SM90, [])  # type: ignore[attr-defined]
    a = torch.empty(16, 7168, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(7168, 4608, device="meta", dtype=torch.float8_e4m3fn).t()  # (N, K), K stride 4608
    sa, sb = torch.empty(16, 56, device="meta"), torch.empty(36, 56, device="meta")
    out = torch.empty(16, 4608, device="meta", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="K stride 1"):
        launch(a, b, out, sa, sb, (56, 1, 56, 1), 16, 4608, 7168, None)


def test_every_backend_of_every_op_has_a_source_hash() -> None:
    """The runner keys stored trials by each backend's source hash: a backend without one cannot tune."""
    for target in (SM90, INTERP, Target.for_arch("gfx942"), Target.for_arch("gfx950")):
        for name in QUANT_OPS:
            op = get_op(name)
            hashes = {backend: op.source_hash(backend) for backend in op.backends(target)}
            assert len(set(hashes.values())) == len(hashes), (name, target.arch, hashes)


def test_blockwise_tma_refuses_a_weight_tile_across_scale_blocks() -> None:
    op = get_op(BLOCKWISE)
    problem = Problem.quant(BLOCKWISE, 64, 512, 1024)
    inputs = op.make_inputs(problem, "cpu", seed=1)
    for config in (tma_cfg(64, 256, 128), tma_cfg(16, 256, 128, swap=1), tma_cfg(64, 64, 1024)):
        with pytest.raises(ValueError, match="one 128-row scale block"):
            op.prepare(problem, config, INTERP, inputs, op.make_output(problem, "cpu"))
    space = op.space(Problem.quant(BLOCKWISE, 64, 4608, 7168), SM90)
    wide = tma_cfg(64, 256, 128).replace(num_stages=3)
    assert (space.check(wide) or "").startswith("tma_weight_scale_block"), space.check(wide)
    assert space.check(wide.replace(BLOCK_N=128)) is None, space.check(wide.replace(BLOCK_N=128))
    # at prefill, where the gluon kernel runs, the blockwise TMA kernel is not searched, with the reason
    prefill = op.space(Problem.quant(BLOCKWISE, 2048, 4608, 7168), SM90)
    assert prefill.prune_summary()["tma_blockwise_prefill"] == prefill.subspace("triton_tma").raw_size()
    assert not any(c.backend == "triton_tma" for c in prefill.configs())
    assert any(c.backend == "triton_tma" for c in space.configs())


@needs_interpreter
def test_rowwise_takes_per_tensor_scales() -> None:
    op = get_op("gemm_fp8_rowwise")
    problem = Problem.quant("gemm_fp8_rowwise", 5, 32, 96)
    gen = torch.Generator().manual_seed(5)
    a, sa = q.quantize_fp8(torch.randn(5, 96, generator=gen), torch.float8_e4m3fn, (0, 0))
    b, sb = q.quantize_fp8(torch.randn(32, 96, generator=gen), torch.float8_e4m3fn, (1, 0))
    ref = op.reference(problem, (a, b, sa, sb))
    assert sa.shape == (1, 1)
    for config in (tcfg(), tcfg(swap=1), tma_cfg(), tma_cfg(swap=1, split_k=2), Config(backend="torch")):
        out = op.make_output(problem, "cpu").fill_(float("nan"))
        op.prepare(problem, config, INTERP, (a, b, sa, sb), out)()
        assert rel_error(out, ref) <= op.tolerance(problem), config.short()


@pytest.mark.parametrize(
    "name, config, message",
    [
        ("gemm_mxfp8", tcfg(swap=1), "FP8 kernel only"),
        ("gemm_fp8_rowwise", tcfg(split_k=2, swap=1), "needs FUSED_SPLIT"),
        ("gemm_fp8_blockwise", tcfg(split_k=2, swap=1), "needs FUSED_SPLIT"),
    ],
)
def test_swap_ab_is_refused_where_the_kernel_cannot_take_it(name: str, config: Config, message: str) -> None:
    op = get_op(name)
    problem = Problem.quant(name, 4, 32, 128)
    with pytest.raises(ValueError, match=message):
        inputs = op.make_inputs(problem, "cpu", seed=1)
        op.prepare(problem, config, INTERP, inputs, op.make_output(problem, "cpu"))


@needs_interpreter
def test_benchmarker_gate_passes_every_op() -> None:
    for name in QUANT_OPS:
        op = get_op(name)
        problem = Problem.quant(name, 3, 32, 128, dtype="fp16")
        result = Benchmarker(op, INTERP).run(problem, quant_default_config(problem, INTERP))
        assert result.ok, (name, result.status, result.error[:300])
        assert result.rel_error is not None and result.rel_error <= op.tolerance(problem)


# -- spaces and vendor backends ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "sm_90", "interpreter"])
@pytest.mark.parametrize("name", list(QUANT_OPS))
def test_spaces_hold_the_default_and_both_regimes(arch: str, name: str) -> None:
    target = Target.for_arch(arch)
    op = get_op(name)
    decode, prefill = Problem.quant(name, 8, 7168, 4096), Problem.quant(name, 4096, 7168, 4096)
    for problem in (decode, prefill):
        space = op.space(problem, target)
        default = op.default_config(problem, target)
        assert default in space
        assert next(c for c in space.configs() if c.backend == default.backend) == default
        triton = [c for c in space.configs() if c.backend == "triton"]
        assert triton[0] == (default if default.backend == "triton" else triton_default(problem, target))
        if target.interpreter:
            continue
        if problem is decode:  # memory-bound: narrow M tiles, wide K tiles and split-K
            assert {int(c["BLOCK_M"]) for c in triton} == {16}
            assert max(int(c["BLOCK_K"]) for c in triton) >= 256
            assert max(int(c["SPLIT_K"]) for c in triton) >= 8
        else:
            assert max(int(c["BLOCK_M"]) for c in triton) >= 128
        if target.is_amd:
            assert all(k in default for k in ("matrix_instr_nonkdim", "waves_per_eu", "NUM_XCDS"))
            assert ("kpack" in default) == (arch == "gfx942")
            assert {int(c["NUM_XCDS"]) for c in triton} == {1, 8} or problem is decode
        else:
            assert "matrix_instr_nonkdim" not in default


def test_vendor_backends_are_absent_with_their_reason() -> None:
    problem = Problem.quant("gemm_fp8_blockwise", 16, 256, 512)
    space = get_op("gemm_fp8_blockwise").space(problem, Target.for_arch("gfx942"))
    assert space.backends == ("torch", "aiter", "triton", "triton_gemv")  # the GEMV: pruned at M = 16

    def pruned(*backends: str) -> list[tuple[Config, str]]:
        """`space.pruned()` of those backends only (the Triton GEMM's million configs not walked)."""
        return list(SearchSpace([space.subspace(b) for b in backends]).pruned())

    reasons = dict((c.backend, r) for c, r in pruned("torch", "aiter"))
    assert "no gfx942 is present" in reasons["torch"] and "no gfx942 is present" in reasons["aiter"]
    assert space.prune_summary()["torch_unsupported"] == 1
    assert all(r.startswith("gemv_rows") for c, r in pruned("triton_gemv"))
    bf16a = get_op("gemm_mxfp4_bf16a").space(Problem.quant("gemm_mxfp4_bf16a", 1, 64, 64), INTERP)
    assert any("quantizes bf16 activations" in r for _, r in bf16a.pruned())
    with pytest.raises(ValueError, match="unknown gemm_mxfp8 backend 'cublas'"):
        get_op("gemm_mxfp8").space(Problem.quant("gemm_mxfp8", 1, 64, 64), INTERP, ("cublas",))


def test_torch_scaled_mm_support_is_probed() -> None:
    """On the CPU torch runs per-row FP8 but not blockwise: the probe finds out; nothing is assumed."""
    from autotune.kernels.quant.vendor import probe_scaled_mm

    row = probe_scaled_mm("cpu", "row")
    block = probe_scaled_mm("cpu", "blockwise")
    assert (row.builder is not None) == (row.reason == "")
    assert block.builder is None or block.reason == ""
    space = get_op("gemm_fp8_rowwise").space(Problem.quant("gemm_fp8_rowwise", 4, 64, 64), INTERP)
    assert (Config(backend="torch") in space) == (row.builder is not None)
    assert probe_scaled_mm("cpu", "row") is row  # cached


def test_mx_is_native_on_gfx950_only() -> None:
    assert mx_native(Target.for_arch("gfx950"))
    assert not any(mx_native(Target.for_arch(a)) for a in ("gfx942", "sm_90", "interpreter"))


# -- the gluon backend (Hopper) ----------------------------------------------------------------------------

SM90 = Target.for_arch("sm_90")
BLOCKWISE = "gemm_fp8_blockwise"


def _gluon_imports() -> bool:
    from autotune.kernels.quant.space import gluon_missing

    return not gluon_missing()


needs_gluon = pytest.mark.skipif(not _gluon_imports(), reason="this Triton has no Gluon for Hopper")


def gcfg(bm: int = 128, bn: int = 128, warps: int = 8, stages: int = 4, persistent: int = 0,
         group_m: int = 8, warp_spec: int = 0, split_k: int = 1, swap: int = 0) -> Config:  # fmt: skip
    return Config(backend="gluon", BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages,
                  PERSISTENT=persistent, GROUP_M=group_m, WARP_SPEC=warp_spec, SPLIT_K=split_k,
                  SWAP_AB=swap)  # fmt: skip


def test_gluon_is_a_backend_of_blockwise_fp8_on_hopper_only() -> None:
    from dataclasses import replace

    op = get_op(BLOCKWISE)
    prefill = Problem.quant(BLOCKWISE, 2048, 4608, 7168)
    assert op.backends(SM90) == ("torch", "triton", "gluon", "triton_tma", "triton_gemv")
    assert all("gluon" not in get_op(name).backends(SM90) for name in QUANT_OPS if name != BLOCKWISE)
    blackwell = replace(SM90, arch="sm_100")  # no wgmma
    for target in (Target.for_arch("gfx942"), Target.for_arch("gfx950"), INTERP, blackwell):
        assert "gluon" not in op.backends(target)
        assert "gluon" not in op.space(prefill, target).backends
        assert op.default_config(prefill, target).backend == "triton"
        with pytest.raises(ValueError, match="unknown gemm_fp8_blockwise backend 'gluon'"):
            op.space(prefill, target, ("gluon",))
    rowwise = Problem.quant("gemm_fp8_rowwise", 2048, 4608, 7168)
    with pytest.raises(ValueError, match="unknown gemm_fp8_rowwise backend 'gluon'"):
        get_op(rowwise.op).space(rowwise, SM90, ("gluon",))
    assert op.source_hash("gluon") != op.source_hash("triton")
    with pytest.raises(ValueError, match="unknown gemm_mxfp8 backend 'gluon'"):
        get_op("gemm_mxfp8").source_hash("gluon")


@needs_gluon
def test_gluon_space_on_hopper_prunes_what_the_kernel_cannot_do_with_the_reason() -> None:
    op = get_op(BLOCKWISE)
    prefill = Problem.quant(BLOCKWISE, 2048, 4608, 7168)
    space = op.space(prefill, SM90)
    # the default's backend right after the vendor's; the GEMV's (pruned at this M) last
    assert space.backends == ("torch", "gluon", "triton", "triton_tma", "triton_gemv")
    gluon = [c for c in space.configs() if c.backend == "gluon"]
    assert gluon[0] == op.default_config(prefill, SM90) == gcfg(stages=5, persistent=1, warp_spec=1)
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in gluon} == {(64, 64), (64, 128), (128, 64), (128, 128)}
    assert {c["num_stages"] for c in gluon} == {3, 4, 5, 6} and {c["GROUP_M"] for c in gluon} == {1, 8}
    assert {c["PERSISTENT"] for c in gluon} == {0, 1} and {c["WARP_SPEC"] for c in gluon} == {0, 1}
    assert gcfg(warp_spec=1, persistent=1) in space and gcfg(64, 128, 4, warp_spec=1) in space
    # 16 rows a warp: a 64-row tile takes 4 warps; 128x128 on 4 warps spills, 128x64 on 4 does not
    assert space.check(gcfg(64, 128, warps=8)).startswith("gluon_warp_rows")  # type: ignore[union-attr]
    assert space.check(gcfg(128, 128, warps=4)).startswith("gluon_register_spill")  # type: ignore[union-attr]
    assert gcfg(128, 64, warps=4) in space and gcfg(64, 64, warps=4, stages=5) in space
    assert "BLOCK_N=256 is not among" in str(space.check(gcfg(bn=256)))
    assert "BLOCK_K" in str(space.check(gcfg().replace(BLOCK_K=128)))  # fixed: one scale group
    # 3 x 8 tiles: fewer than the SMs, so persistent programs would each do one
    small = op.space(Problem.quant(BLOCKWISE, 300, 1000, 1024), SM90)
    assert str(small.check(gcfg(persistent=1))).startswith("persistent_needless")
    # C rows of 1001 bf16 are not 16-byte aligned: no TMA store, no gluon config, the Triton default
    ragged = Problem.quant(BLOCKWISE, 2048, 1001, 1024)
    unaligned = op.space(ragged, SM90)
    assert not [c for c in unaligned.configs() if c.backend == "gluon"]
    assert unaligned.prune_summary()["gluon_tma_alignment"] == unaligned.subspace("gluon").raw_size()
    assert op.default_config(ragged, SM90).backend == "triton"


@needs_gluon
@pytest.mark.parametrize(
    "M, backend",
    [(1, "triton_gemv"), (2, "triton"), (16, "triton"), (32, "triton"), (33, "triton"), (64, "triton"),
     (65, "triton"), (255, "triton"), (256, "gluon"), (2048, "gluon")],
)  # fmt: skip
def test_hopper_default_of_blockwise_fp8_by_m(M: int, backend: str) -> None:
    """On an H100 the gluon kernel (warp-specialized, 5 stages) ran 1.6x the Triton kernel at M = 2048,
    and its decode config (64x64 tiles, 6 stages, split along K while the programs fit the SMs) beat the
    Triton kernel's decode default at M = 16 and 64; the Triton kernel swapped with the scales loaded
    ahead beat it in turn at M = 2 to 32. M = 1 keeps the GEMV, M of 65 to 255 the Triton kernel. The
    row-wise op has no gluon kernel."""
    from autotune.kernels.quant.space import gluon_default_config

    problem = Problem.quant(BLOCKWISE, M, 4608, 7168)
    default = quant_default_config(problem, SM90)
    assert default.backend == backend and default in get_op(BLOCKWISE).space(problem, SM90)
    if (
        backend == "gluon" and M >= 256
    ):  # 36 columns of 128-wide tiles: persistent once they outnumber the SMs
        tiles = -(-M // 128) * 36
        assert default == gcfg(stages=5, persistent=int(tiles > SM90.cu_count), warp_spec=1)
    elif 33 <= M <= 64:  # 72 column tiles and K of 7168: unswapped, K tiles of 512, the scales ahead
        assert (default["SWAP_AB"], default["SCALES_AHEAD"], default["BLOCK_K"]) == (0, 1, 512)
        assert (default["BLOCK_M"], default["BLOCK_N"], default["num_stages"], default["SPLIT_K"]) == (
            64,
            64,
            3,
            1,
        )
        # the gluon kernel's decode config where the unsplit grid would underfill the GPU (DeepSeek-V3
        # attn.q_a: 24 tiles) or K is short (attn.o): 64 x 64 tiles, 6 stages
        for n, k in ((1536, 7168), (7168, 2048)):
            narrow = quant_default_config(Problem.quant(BLOCKWISE, M, n, k), SM90)
            assert narrow.backend == "gluon" and (narrow["BLOCK_N"], narrow["num_stages"]) == (64, 6)
    elif 2 <= M <= 32:  # the weight's 64 rows on wgmma's M side; 72 tiles, one wave: K tiles of 512
        assert (default["SWAP_AB"], default["SCALES_AHEAD"], default["num_stages"]) == (1, 1, 3)
        assert default["BLOCK_M"] == max(16, M) and default["BLOCK_N"] == 64, default.short()
        assert (default["BLOCK_K"], default["SPLIT_K"]) == (512, 1), default.short()
    else:
        assert gluon_default_config(problem, SM90) in get_op(BLOCKWISE).space(problem, SM90)
    rowwise = Problem.quant("gemm_fp8_rowwise", M, 4608, 7168)
    want = "triton_tma" if M == 1 or 32 < M <= 64 else "triton"  # M = 1: 72 tiles fill half the SMs
    assert quant_default_config(rowwise, SM90).backend == want


@pytest.mark.parametrize(
    "arch, N, K, backend",
    [("sm_90", 4608, 7168, "triton_tma"), ("sm_90", 8192, 3584, "triton_tma"),
     ("sm_90", 7168, 2048, "triton_tma"),
     ("sm_90", 4224, 7168, "triton_tma"),  # 66 tiles: half the 132 SMs
     ("sm_90", 4160, 7168, "triton_gemv"),  # 65 tiles
     ("sm_90", 1536, 7168, "triton_gemv"), ("sm_90", 1280, 8192, "triton_gemv"),
     ("gfx942", 4608, 7168, "triton")],  # AMD keeps the tiled kernel at M = 1
)  # fmt: skip
def test_rowwise_default_at_one_row_by_width(arch: str, N: int, K: int, backend: str) -> None:
    """Row-wise FP8 at M = 1 on NVIDIA: the TMA kernel swapped (64 weight rows by 16) where the weight's
    64-row tiles number at least half the SMs (H100: 1.107x the GEMV on 5 such layers), else the GEMV
    (0.79-0.83x on the narrow ones); blockwise keeps the GEMV."""
    target = Target.for_arch(arch)
    problem = Problem.quant("gemm_fp8_rowwise", 1, N, K)
    default = quant_default_config(problem, target)
    assert default.backend == backend and default in get_op("gemm_fp8_rowwise").space(problem, target)
    if backend == "triton_tma":
        assert (default["SWAP_AB"], default["BLOCK_M"], default["BLOCK_N"], default["BLOCK_K"]) == (
            1,
            16,
            64,
            256,
        )
        assert (default["SPLIT_K"], default["num_stages"], default["num_warps"]) == (1, 5, 4)
    blockwise = quant_default_config(Problem.quant(BLOCKWISE, 1, N, K), target).backend
    assert blockwise == ("triton" if backend == "triton" else "triton_gemv")


@pytest.mark.parametrize(
    "M, N, K, long_k",
    [(16, 4608, 7168, True), (32, 8192, 3584, True),  # unsplit, one wave, at least 4 K tiles of 512
     (16, 3072, 1536, False),  # 48 tiles: the default splits K
     (16, 16160, 7168, False),  # an lm_head: 253 tiles, more than one wave
     (16, 8192, 1024, False), (16, 4096, 512, False)],  # K of 2 and 1 tiles of 512
)  # fmt: skip
def test_swapped_blockwise_default_takes_long_k_tiles_on_one_unsplit_wave(
    M: int, N: int, K: int, long_k: bool
) -> None:
    """The swapped blockwise default with its scales ahead: K tiles of 512 and 3 stages where its tiles fit
    one wave unsplit and K holds 4 such tiles (H100: 1.00-1.08x on those layers), else 256 and 4 stages."""
    default = quant_default_config(Problem.quant(BLOCKWISE, M, N, K), SM90)
    assert (default["SWAP_AB"], default["SCALES_AHEAD"]) == (1, 1), default.short()
    want = (512, 3, 1) if long_k else (256, 4)
    got = (default["BLOCK_K"], default["num_stages"], default["SPLIT_K"])
    assert got[: len(want)] == want, default.short()
    assert long_k or (int(default["SPLIT_K"]) > 1) == (N == 3072), default.short()


@pytest.mark.parametrize(
    "M, N, backend, swap",
    [(2, 4608, "triton", 1), (16, 8192, "triton", 1), (32, 7168, "triton", 1), (48, 7168, "triton_tma", 0),
     (64, 8192, "triton_tma", 0), (16, 576, "triton", 1), (64, 576, "triton", 0), (2048, 4608, "triton", 0)],
)  # fmt: skip
def test_hopper_rowwise_decode_default(M: int, N: int, backend: str, swap: int) -> None:
    """FP8 row-wise on the H100: the pointer kernel swapped from M = 2 to 32, the TMA kernel from 33 to 64
    where its 64 x 64 tiles fill the GPU without a split; the pointer kernel where split-K is needed (one
    launch, FUSED_SPLIT), and at prefill. AMD has neither TMA nor SWAP_AB."""
    problem = Problem.quant("gemm_fp8_rowwise", M, N, 7168)
    default = quant_default_config(problem, SM90)
    assert (default.backend, default["SWAP_AB"]) == (backend, swap), default.short()
    assert default in get_op("gemm_fp8_rowwise").space(problem, SM90)
    amd = Target.for_arch("gfx942")
    space = get_op("gemm_fp8_rowwise").space(problem, amd)
    assert "triton_tma" not in space.backends and all("SWAP_AB" not in c for c in space.configs())


def test_swap_ab_and_tma_rows_are_pruned_with_the_reason() -> None:
    op = get_op("gemm_fp8_rowwise")
    problem = Problem.quant("gemm_fp8_rowwise", 16, 4608, 7168)
    space = op.space(problem, SM90)
    base = tma_cfg(16, 64, 512, swap=1).replace(num_stages=4)
    assert space.check(base) is None, space.check(base)
    narrow = Problem.quant("gemm_fp8_rowwise", 16, 576, 7168)
    pointer = quant_default_config(narrow, SM90)
    wide = Problem.quant("gemm_fp8_rowwise", 64, 4608, 7168)
    wide_default = quant_default_config(wide, SM90)
    assert wide_default.backend == "triton_tma" and wide_default["SWAP_AB"] == 0
    for config, reason, where in (
        (base.replace(SWAP_AB=0), "tma_wgmma_rows", space),
        (wide_default.replace(SWAP_AB=1), "swap_ab_wide_m", op.space(wide, SM90)),
        (pointer.replace(BLOCK_N=32), "swap_ab_narrow_n", op.space(narrow, SM90)),
        (pointer.replace(SPLIT_K=2, FUSED_SPLIT=0), "swap_ab_reduce", op.space(narrow, SM90)),
    ):
        assert (where.check(config) or "").startswith(reason), (config.short(), where.check(config))


@pytest.mark.parametrize("N, K, split", [(1280, 8192, 4), (1536, 7168, 4), (2560, 7168, 3), (4608, 7168, 1)])
def test_hopper_decode_default_splits_k_while_the_programs_fit_the_sms(N: int, K: int, split: int) -> None:
    """The gluon kernel's decode config takes the largest SPLIT_K up to 4 with tiles x SPLIT_K <= 132: 20,
    24, 40 and 72 tiles of 64 x 64 (the last is not the op's default: see `_ahead_wide`)."""
    from autotune.kernels.quant.space import gluon_default_config

    default = gluon_default_config(Problem.quant(BLOCKWISE, 64, N, K), SM90)
    assert default is not None and default.backend == "gluon" and default["SPLIT_K"] == split, default
    assert default in get_op(BLOCKWISE).space(Problem.quant(BLOCKWISE, 64, N, K), SM90)


def test_gluon_without_gluon_is_pruned_with_the_reason(monkeypatch) -> None:
    from autotune.kernels.quant import space as gemm_quant_space

    monkeypatch.setattr(gemm_quant_space, "gluon_missing", lambda: "no Gluon in this Triton (test)")
    op = get_op(BLOCKWISE)
    prefill = Problem.quant(BLOCKWISE, 2048, 4608, 7168)
    space = op.space(prefill, SM90)
    assert "gluon" in space.backends and all(c.backend != "gluon" for c in space.configs())
    reasons = {c.backend: r for c, r in space.pruned() if c.backend == "gluon"}
    assert reasons == {"gluon": "gluon_unsupported: no Gluon in this Triton (test)"}
    assert op.default_config(prefill, SM90).backend == "triton"
    problem = Problem.quant(BLOCKWISE, 300, 1000, 1024)
    inputs, out = op.make_inputs(problem, "cpu", seed=0), op.make_output(problem, "cpu")
    with pytest.raises(ValueError, match=r"gemm_fp8_blockwise config .*no Gluon in this Triton"):
        op.prepare(problem, gcfg(), SM90, inputs, out)


@needs_gluon
def test_a_gluon_config_the_kernel_cannot_run_is_one_clear_error() -> None:
    op = get_op(BLOCKWISE)
    problem = Problem.quant(BLOCKWISE, 300, 1000, 1024)
    inputs, out = op.make_inputs(problem, "cpu", seed=0), op.make_output(problem, "cpu")
    assert callable(op.prepare(problem, gcfg(), SM90, inputs, out))  # built, not launched (no GPU here)
    for config, message in [
        (gcfg(bn=256), "BLOCK_N must divide 128"),  # two B scales per tile and K group
        (gcfg(64, 128, warps=8), "16 rows per warp"),
        (gcfg(stages=1), "num_stages must be at least 2"),
        (Config(backend="gluon", BLOCK_M=128), "lacks BLOCK_N"),
        (gcfg().replace(BLOCK_K=128), "has unknown BLOCK_K"),
    ]:
        with pytest.raises(ValueError, match=message):
            op.prepare(problem, config, SM90, inputs, out)
        with pytest.raises(ValueError, match=message):
            op.kernel_calls(problem, config, SM90)
    with pytest.raises(ValueError, match=r"on NVIDIA Hopper .* not gemm_fp8_blockwise on interpreter"):
        op.prepare(problem, gcfg(), INTERP, inputs, out)
    row = Problem.quant("gemm_fp8_rowwise", 300, 1000, 1024)
    with pytest.raises(ValueError, match="unknown gemm_fp8_rowwise backend 'gluon'"):
        get_op(row.op).prepare(row, gcfg(), SM90, get_op(row.op).make_inputs(row, "cpu", 0), out)
    # C, A and B go through TMA descriptors: unit column stride, 16-byte aligned rows
    strided = torch.empty(300, 1001, dtype=torch.bfloat16)[:, :1000]
    with pytest.raises(ValueError, match="moves out by TMA"):
        op.prepare(problem, gcfg(), SM90, inputs, strided)
    a_t = inputs[0].t().contiguous().t()
    with pytest.raises(ValueError, match="moves a by TMA"):
        op.prepare(problem, gcfg(), SM90, [a_t, *inputs[1:]], out)


@needs_gluon
def test_gluon_kernel_calls_capture_one_launch_of_the_gluon_kernel() -> None:
    op = get_op(BLOCKWISE)
    problem = Problem.quant(BLOCKWISE, 2048, 4608, 7168)
    for config, grid in [(gcfg(persistent=1), (SM90.cu_count, 1)), (gcfg(64, 64, 4, 3), (32 * 72, 1))]:
        (call,) = op.kernel_calls(problem, config, SM90)
        assert call.fn.fn.__name__ == "gluon_fp8_blockwise_kernel" and call.grid == grid
        assert call.kwargs == dict(GROUP_M=8, STAGES=int(config["num_stages"]),
                                   PERSISTENT=bool(config["PERSISTENT"]), WARP_SPEC=False, SPLIT_K=1,
                                   CONSUMERS=1, num_warps=int(config["num_warps"]), SWAP=False,
                                   enable_fp_fusion=True)  # fmt: skip
        a_desc, b_desc, c_desc = call.args[:3]
        assert a_desc.block_shape == [config["BLOCK_M"], 128]
        assert b_desc.block_shape == [config["BLOCK_N"], 128]
        assert str(a_desc.base.device) == "meta" and tuple(c_desc.shape) == (2048, 4608)
        assert call.args[5] is call.args[3] and call.args[6] is call.args[4]  # no split: no workspace
        assert call.args[7:] == (2048, 4608, 7168, 56, 1, 56, 1)  # M, N, K and the scales' strides


def test_a_tuned_gluon_row_where_gluon_cannot_run_is_a_clear_error(monkeypatch) -> None:
    """A table row of backend gluon on a machine that cannot run it fails as an unknown backend does."""
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels.quant import space as gemm_quant_space
    from autotune.kernels.quant.api import gemm_quant

    op = get_op(BLOCKWISE)
    problem = Problem.quant(BLOCKWISE, 300, 1000, 1024)
    table = Table.from_winners(SM90, [(problem, gcfg(), 1.0)])
    dispatcher = Dispatcher([table], device_key=SM90.device_key())
    monkeypatch.setattr("autotune.dispatch.dispatcher._default", dispatcher)
    a, b, sa, sb = op.make_inputs(problem, "cpu", seed=1)
    with pytest.raises(ValueError, match="gluon backend runs gemm_fp8_blockwise on NVIDIA Hopper"):
        gemm_quant(BLOCKWISE, a, b, sa, sb, target=INTERP)
    monkeypatch.setattr(gemm_quant_space, "gluon_missing", lambda: "no Gluon here (test)")
    with pytest.raises(ValueError, match="no Gluon here"):
        gemm_quant(BLOCKWISE, a, b, sa, sb, target=SM90)


# -- bad inputs ------------------------------------------------------------------------------------------


def _bad_inputs() -> list[tuple[str, int, str]]:
    """(op, index of the input to break, how): each must be one ValueError before any launch."""
    return [
        ("gemm_fp8_rowwise", 2, "shape"),
        ("gemm_fp8_rowwise", 3, "dtype"),
        ("gemm_fp8_blockwise", 2, "shape"),
        ("gemm_fp8_blockwise", 0, "dtype"),
        ("gemm_mxfp8", 3, "shape"),
        ("gemm_mxfp8", 2, "dtype"),
        ("gemm_mxfp4", 1, "shape"),
        ("gemm_mxfp4_bf16a", 2, "scale"),
    ]


@pytest.mark.parametrize("name, index, how", _bad_inputs())
def test_bad_inputs_fail_before_any_launch(name: str, index: int, how: str, monkeypatch) -> None:
    import autotune.kernels.quant.kernel as launcher_mod

    problem = Problem.quant(name, 4, 256, 256)
    op = get_op(name)
    inputs = list(op.make_inputs(problem, "cpu", seed=0))
    if how == "shape":
        inputs[index] = inputs[index][:, :-1]
    elif how == "dtype":
        inputs[index] = inputs[index].to(torch.float16)
    else:
        inputs[index] = torch.ones(4, 8, dtype=torch.uint8)
    launched = []
    monkeypatch.setattr(launcher_mod, "quant_launcher", lambda *a, **k: launched.append(1))
    with pytest.raises(ValueError, match=rf"{name}: .*(must|None)"):
        config = quant_default_config(problem, INTERP)
        op.prepare(problem, config, INTERP, inputs, op.make_output(problem, "cpu"))
    assert not launched


def test_unsupported_fp8_flavour_is_one_error() -> None:
    problem = Problem.quant("gemm_fp8_rowwise", 4, 64, 64, fp8="fp8e4m3fnuz")
    with pytest.raises(ValueError, match="sm_90 has no e4m3fnuz"):
        get_op("gemm_fp8_rowwise").space(problem, Target.for_arch("sm_90"))
    # e4m3fn data where the target's e4m3 is e4m3fnuz (MI300X)
    fn = Problem.quant("gemm_fp8_rowwise", 4, 64, 64)
    inputs = get_op(fn.op).make_inputs(fn, "cpu", 0)
    out = torch.empty(4, 64, dtype=torch.bfloat16)
    gfx942 = Target.for_arch("gfx942")
    with pytest.raises(ValueError, match=r"a must be torch\.float8_e4m3fnuz on gfx942"):
        get_op(fn.op).prepare(fn, quant_default_config(fn, gfx942), gfx942, inputs, out)


# -- captured launches -----------------------------------------------------------------------------------


def test_kernel_calls_capture_the_mode_of_each_op() -> None:
    gfx950, sm90 = Target.for_arch("gfx950"), Target.for_arch("sm_90")
    for name, target, kernel, mode in [
        ("gemm_fp8_blockwise", gfx950, "gemm_fp8_kernel", {"BLOCKWISE": True}),
        ("gemm_fp8_rowwise", sm90, "gemm_fp8_kernel", {"BLOCKWISE": False}),
        ("gemm_mxfp4", gfx950, "gemm_mx_kernel", {"NATIVE": True, "A_FMT": "e2m1"}),
        ("gemm_mxfp4_bf16a", sm90, "gemm_mx_kernel", {"NATIVE": False, "A_FMT": "bf16"}),
    ]:
        problem = Problem.quant(name, 16, 256, 1024)
        config = quant_default_config(problem, target)
        calls = get_op(name).kernel_calls(problem, config, target)
        summed = int(config.get("FUSED_SPLIT", 0)) or int(config.get("STREAM_K", 0))
        assert calls[0].fn.__name__ == (kernel.replace("_kernel", "_sum_kernel") if summed else kernel)
        assert all(calls[0].kwargs[k] == v for k, v in mode.items()), calls[0].kwargs
        assert all(str(t.device) == "meta" for t in calls[0].args[:3])
        if int(config["SPLIT_K"]) > 1 and not int(config.get("FUSED_SPLIT", 0)):
            assert [c.fn.__name__ for c in calls[1:]] == ["splitk_reduce_kernel"]
        else:  # one launch: no split, or the K slices summed in the GEMM's launch
            assert len(calls) == 1
        assert get_op(name).kernel_calls(problem, Config(backend="torch"), target) == []


@pytest.mark.parametrize("strategy", ["exhaustive", "random", "optuna"])
def test_strategies_never_ask_a_vendor_backend_that_cannot_run(strategy: str) -> None:
    from autotune.core.result import TrialResult, TrialStatus
    from autotune.engine.strategies import Budget, make_strategy

    problem = Problem.quant("gemm_mxfp4_bf16a", 1, 64, 128)
    space = get_op(problem.op).space(problem, INTERP)
    search = make_strategy(strategy, space, Budget(trials=6), seed=0)
    asked = []
    while (config := search.ask()) is not None:
        asked.append(config)
        search.tell(config, TrialResult(config, TrialStatus.COMPILE_ERROR, error="not run"))
    assert asked and all(c.backend == "triton" for c in asked)


def _bench_module(name: str = "gemm_quant"):  # type: ignore[no-untyped-def]
    import importlib.util
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "benchmarks"
    if str(folder) not in sys.path:  # the benchmarks import their shared harness
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"{name}_bench", folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_interpreter
def test_benchmark_script_runs_under_the_interpreter(tmp_path, capsys) -> None:
    import json

    module = _bench_module()
    out = tmp_path / "q.json"
    assert module.main(["--interpret", "--ops", "gemm_mxfp4_bf16a", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["op"] for r in rows] == ["gemm_mxfp4_bf16a"] and rows[0]["emulated_mx"]
    assert rows[0]["status"]["tuned"] == "ok" and rows[0]["tuned_us"] > 0 and rows[0]["bf16_us"] > 0
    assert "quantizes bf16 activations" in rows[0]["scaled_mm"]
    assert "MX emulated" in capsys.readouterr().out


@needs_interpreter
def test_benchmark_script_stops_at_its_deadline_and_resumes(tmp_path, capsys) -> None:
    """--stop-after: no trial or row starts past it; run again, the tuning resumes from the database."""
    import json

    module = _bench_module()
    out, db = tmp_path / "q.json", str(tmp_path / "q.db")
    argv = ["--interpret", "--ops", "gemm_fp8_rowwise", "--db", db, "--out", str(out)]
    assert module.main([*argv, "--stop-after", "1e-9"]) == 0
    text = capsys.readouterr().out
    assert "[tune] stopped at --stop-after, 1 problem(s) left" in text
    assert "[measure] stopped at --stop-after, 1 row(s) not measured" in text
    assert json.loads(out.read_text())["rows"] == []
    assert module.main([*argv, "--phase", "tune"]) == 0
    assert "ran 2, cached 0" in capsys.readouterr().out
    assert module.main(argv) == 0  # the same trials again: from the database, then measured
    assert "ran 0, cached 2" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["status"]["tuned"] == "ok" and rows[0]["tuned_us"] > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--prune", "spills,bogus"], "unknown static check(s) bogus"),
        (["--seconds", "0"], "--seconds must be positive"),
        (["--stop-after", "-5"], "--stop-after must be positive"),
        (["--layers", "mlp.gate_up,bogus.proj"], "--layers: no layer matches 'bogus.proj'"),
    ],
)
def test_benchmark_script_refuses_bad_flags(flags: list[str], message: str, capsys) -> None:
    module = _bench_module()
    with pytest.raises(SystemExit):
        module.parse_args(["--out", "x.json", *flags])
    assert message in capsys.readouterr().err


def test_benchmark_script_runs_only_the_layers_named() -> None:
    module = _bench_module()
    args = module.parse_args(["--out", "x.json", "--ops", "gemm_fp8_rowwise", "--m", "16", "--layers",
                              "deepseek-v3 tp8 mlp.gate_up, llama-3.1-70b tp8 mlp.down"])  # fmt: skip
    labels = [label for label, _ in module.problems(args)]
    assert labels == ["deepseek-v3 tp8 mlp.gate_up", "llama-3.1-70b tp8 mlp.down"]
    every = module.problems(module.parse_args(["--out", "x.json", "--ops", "gemm_fp8_rowwise", "--m", "16"]))
    assert len(every) == 7


def test_benchmark_script_takes_the_final_rounds_pick_as_the_tuned_winner(tmp_path) -> None:
    """The measurement's "tuned" config is the fastest of ours in the final round where that round holds
    our fastest measured config (the selection bias of one timing each corrected), else our fastest."""
    from autotune.core.result import Timing, TrialResult, TrialStatus
    from autotune.db import Store

    module = _bench_module()
    assert module.parse_args(["--out", "x.json"]).final_rounds == 3
    assert module.parse_args(["--out", "x.json", "--interpret"]).final_rounds == 0
    problem = Problem.quant(BLOCKWISE, 16, 4608, 7168)
    fast, slow, vendor = tcfg(16, 64, 512), tcfg(16, 64, 256), Config(backend="torch")
    ours = ("triton", "triton_tma")

    def result(config: Config, us: float) -> TrialResult:
        return TrialResult(config, TrialStatus.OK, timing=Timing(us, us, us, us, us, 0.1, 20, "graph"))

    with Store(str(tmp_path / "q.db")) as store:
        fp = SM90.fingerprint()
        for config, us in ((fast, 16.0), (slow, 16.3), (vendor, 15.0)):
            store.record(target=SM90, kernel=f"{BLOCKWISE}.{config.backend}", source_hash="h",
                         problem=problem, result=result(config, us))  # fmt: skip
        assert module.tuned_config(store, problem, fp, ours) == fast  # no final round: the fastest of ours
        kernel = f"{BLOCKWISE}.triton"
        final = [(kernel, "h", result(fast, 16.4)), (kernel, "h", result(slow, 16.2)),
                 (f"{BLOCKWISE}.torch", "h", result(vendor, 15.1))]  # fmt: skip
        store.record_final(target=SM90, problem=problem, results=final)
        assert module.tuned_config(store, problem, fp, ours) == slow  # the head-to-head's pick of ours
        other = tcfg(16, 32, 512)
        store.record_final(
            target=SM90, problem=problem, results=[(kernel, "h", result(other, 15.5)), final[1]]
        )
        # a round without our fastest measured config is passed over
        assert module.tuned_config(store, problem, fp, ours) == fast


def test_benchmark_script_prune_none_turns_static_checks_off() -> None:
    module = _bench_module()
    assert module.parse_args(["--out", "x.json", "--prune", "none"]).prune == ()
    assert module.parse_args(["--out", "x.json", "--prune", "compile,lds"]).prune == ("compile", "lds")


@needs_interpreter
def test_gemm_quant_runs_the_default_for_an_untuned_shape() -> None:
    import warnings

    from autotune.kernels.quant.api import gemm_quant

    op = get_op("gemm_fp8_blockwise")
    problem = Problem.quant("gemm_fp8_blockwise", 3, 32, 256)
    a, b, sa, sb = op.make_inputs(problem, "cpu", seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untuned shape may warn once
        out = gemm_quant("gemm_fp8_blockwise", a, b, sa, sb, target=INTERP)
    assert rel_error(out, op.reference(problem, (a, b, sa, sb))) <= op.tolerance(problem)
    with pytest.raises(ValueError, match="b_scale must have shape"):
        gemm_quant("gemm_fp8_blockwise", a, b, sa, sb[:, :1], target=INTERP)


def test_best_finds_a_quantized_problem_by_op(tmp_path, capsys) -> None:
    """`autotune best --op gemm_fp8_blockwise`: the op fixes the input formats, --dtype names the output."""
    from autotune.cli import main
    from autotune.core.config import Config
    from autotune.core.problem import Problem
    from autotune.core.result import Timing, TrialResult, TrialStatus
    from autotune.core.target import Target
    from autotune.db import Store

    db = str(tmp_path / "q.db")
    problem = Problem.quant("gemm_fp8_blockwise", 16, 4608, 7168)
    config = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128)
    timing = Timing(16.4, 16, 16, 17, 16.5, 0.2, 50, "events")
    result = TrialResult(config, TrialStatus.OK, timing=timing)
    with Store(db) as store:
        store.record(target=Target.for_arch("sm_90"), kernel="gemm_fp8_blockwise.triton", source_hash="h",
                     problem=problem, result=result)  # fmt: skip
    argv = ["best", "--op", "gemm_fp8_blockwise", "--m", "16", "--n", "4608", "--k", "7168", "--db", db]
    assert main(argv) == 0
    assert "16.4" in capsys.readouterr().out
    assert main([*argv[:-2], "--e", "8", "--db", db]) == 2
    assert "gemm_fp8_blockwise has no parameter 'E' (its own parameters: none)" in capsys.readouterr().err


@pytest.mark.parametrize("M", [1, 2, 7])
def test_blockwise_a_scales_for_cublas_are_m_major_at_every_m(M: int) -> None:
    """cuBLAS's blockwise A scales have strides exactly (1, M); at M = 1 a transposed copy kept (G, 1)."""
    from autotune.kernels.quant.vendor import m_major

    s = torch.rand(M, 56) + 0.5
    out = m_major(s)
    assert out.stride() == (1, M) and torch.equal(out, s)


def test_a_vendor_layout_that_refuses_some_m_is_pruned_there_with_the_reason(monkeypatch) -> None:
    """cuBLAS has blockwise kernels for some M only: the space asks the found layout at the problem's M."""
    from autotune.kernels.quant import vendor

    def build(a, b, sa, sb):
        def call(out):
            if a.shape[0] < 4:
                raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (test)")
            out.copy_(
                vendor.quant.dequantize_fp8(a, sa, (1, 128))
                @ vendor.quant.dequantize_fp8(b, sb, (128, 128)).t()
            )

        return call

    monkeypatch.setattr(
        vendor, "probe_scaled_mm", lambda device, mode, fp8="fp8e4m3": vendor._Probe(build, "")
    )
    vendor.probe_rows.cache_clear()
    try:
        assert "not with M=1" in vendor.probe_rows("cpu", "blockwise", "fp8e4m3", 1)
        assert vendor.probe_rows("cpu", "blockwise", "fp8e4m3", 16) == ""
        one = Problem.quant(BLOCKWISE, 1, 256, 384)
        assert "not with M=1" in vendor.vendor_reason("torch", one, INTERP)
        assert vendor.vendor_reason("torch", Problem.quant(BLOCKWISE, 16, 256, 384), INTERP) == ""
    finally:
        vendor.probe_rows.cache_clear()
