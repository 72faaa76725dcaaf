"""The moe op in the pipeline: problems, spaces, specs, the benchmarker's correctness gate under the
interpreter, a sweep through the CLI, and the launches a compile-only check captures."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from autotune import Config, Problem, Target
from autotune.cli import main
from autotune.core.result import Source, TrialStatus
from autotune.core.target import interpreting
from autotune.db import Store
from autotune.engine.bench import Benchmarker
from autotune.kernels import MOE, get_op
from autotune.kernels.moe.formats.vllm import fallback_config
from autotune.kernels.moe.op import MoeOp
from autotune.kernels.moe.params import experts, experts_touched
from autotune.kernels.moe.space import WIDE_TILE_MIN_TPE, moe_default_config
from autotune.sweeps import SpecError, parse_spec

needs_interpreter = pytest.mark.skipif(not interpreting(), reason="runs kernels in the CPU interpreter")

TINY = Problem.of("moe", 5, 32, 64, E=4, topk=2)


def test_moe_problems_validate() -> None:
    p = Problem.of("moe", 16, 2048, 7168, variant="fp8e4m3", E=32, topk=8)
    assert p.key() == "moe:M=16,N=2048,K=7168:bf16,fp8e4m3,bf16:nk:E=32,topk=8"
    assert (
        p.extra == (("E", 32), ("topk", 8))
        and experts(p) == (32, 8)
        and p.table_params == "E=32,topk=8,b=fp8e4m3"
    )
    assert p == Problem.of("moe", 16, 2048, 7168, "bf16", "fp8e4m3", E=32, topk=8)  # the op's own parameters
    assert p.flops() == 6.0 * 16 * 8 * 2048 * 7168
    assert 0 < experts_touched(p) <= 32
    with pytest.raises(ValueError, match="E >= topk"):
        Problem.of("moe", 16, 64, 64, E=4, topk=8)
    with pytest.raises(ValueError, match="topk >= 1"):
        Problem("moe", 16, 64, 64, extra={"E": 4, "topk": 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="moe problems need the parameter"):
        Problem("moe", 16, 64, 64)
    with pytest.raises(ValueError, match="moe parameter topk must be int"):
        Problem.of("moe", 16, 64, 64, E=4, topk=2.0)
    with pytest.raises(ValueError, match="gemm has no parameter 'E'"):
        Problem.of("gemm", 16, 64, 64, E=4, topk=2)
    with pytest.raises(ValueError, match="multiples of 128"):
        MOE.space(Problem.of("moe", 16, 100, 256, variant="fp8e4m3", E=8, topk=2), Target.for_arch("sm_90"))


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950", "interpreter"])
@pytest.mark.parametrize("problem", [Problem.of("moe", 1, 7168, 4096, E=8, topk=2),
                                     Problem.of("moe", 4096, 768, 2048, E=128, topk=8),
                                     Problem.of("moe", 16, 128, 7168, "bf16", "fp8e4m3", E=256, topk=8),
                                     ])  # fmt: skip
def test_default_config_is_in_the_space(arch: str, problem: Problem) -> None:
    target = Target.for_arch(arch)
    space = MOE.space(problem, target)
    default = moe_default_config(problem, target)
    assert default in space and space.configs()[1] == default  # right after the torch baseline
    assert Config(backend="torch") in space
    if problem.dtype_b == "fp8e4m3":
        assert all(128 % int(c["BLOCK_SIZE_K"]) == 0 for c in space.configs() if c.backend == "triton")
    if target.is_amd:
        assert all("matrix_instr_nonkdim" in c for c in space.configs() if c.backend == "triton")


def test_decode_space_prunes_padded_row_blocks() -> None:
    # one token per expert on average: BLOCK_SIZE_M of 64 or 128 would be padding
    h100 = Target.for_arch("sm_90")
    space = MOE.space(Problem.of("moe", 1, 128, 7168, E=256, topk=8), h100)
    assert {int(c["BLOCK_SIZE_M"]) for c in space.configs() if c.backend == "triton"} <= {16}
    assert space.prune_summary()["block_m_waste"] > 0
    # FP8 weights on sm_90: up to a warp group's 64 rows at any routing (128 is still padding)
    for target, most in ((h100, 64), (Target.for_arch("gfx942"), 16)):
        fp8 = MOE.space(Problem.of("moe", 1, 128, 7168, variant="fp8e4m3", E=256, topk=8), target)
        assert max(int(c["BLOCK_SIZE_M"]) for c in fp8.configs() if c.backend == "triton") == most
        assert fp8.prune_summary()["block_m_waste"] > 0


def test_group_size_m_is_pruned_only_where_it_changes_nothing() -> None:
    # The grid walks the row blocks of every expert: with one block per expert the group still decides the
    # order (vLLM ships GROUP_SIZE_M 64 with BLOCK_SIZE_M 64 for DeepSeek-V3 TP16 at M = 1024, and it is
    # fast); only a group at least as large as all the row blocks equals a smaller such group.
    h100 = Target.for_arch("sm_90")
    prefill = Problem.of("moe", 1024, 128, 7168, variant="fp8e4m3", E=256, topk=8)  # 32 rows per expert
    shipped = Config(backend="triton", BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=64,
                     SPLIT_K=1, GATE_UP_FUSED=0, B_TMA=0, PERSISTENT=0, num_warps=4,
                     num_stages=3)  # fmt: skip
    assert MOE.space(prefill, h100).check(shipped) is None
    decode = Problem.of(
        "moe", 1, 2048, 7168, variant="fp8e4m3", E=256, topk=8
    )  # 8 (token, expert) pairs: 8 row blocks
    space = MOE.space(decode, h100)
    groups = {int(c["GROUP_SIZE_M"]) for c in space.configs() if c.backend == "triton"}
    assert groups == {1, 16}  # 32 and 64 walk the 8 blocks as 16 does
    assert any(r.startswith("group_m_redundant") for _, r in space.pruned())


def test_split_k_only_where_the_gate_up_grid_is_small() -> None:
    h100 = Target.for_arch("sm_90")
    # DeepSeek-V3 TP16 at M = 1: 8 row blocks x 2 column tiles of 64: slices fill the 132 SMs
    decode = MOE.space(Problem.of("moe", 1, 128, 7168, variant="fp8e4m3", E=256, topk=8), h100)
    splits = {int(c["SPLIT_K"]) for c in decode.configs() if c.backend == "triton"}
    assert splits == {1, 2, 4, 8}
    # M = 4: up to 32 row blocks; 32 x 4 column tiles of 32 in 4 slices are more than twice the SMs
    four = MOE.space(Problem.of("moe", 4, 128, 7168, variant="fp8e4m3", E=256, topk=8), h100)
    too_many = [c for c, r in four.pruned() if r.startswith("split_k_needless")]
    assert too_many and "2 x the 132 CUs" in four.check(too_many[0])
    unsplit = four.check(too_many[0].replace(SPLIT_K=1)) or ""
    assert not unsplit.startswith("split")
    # Mixtral at M = 4096: thousands of tiles, never split
    prefill = MOE.space(Problem.of("moe", 4096, 7168, 4096, E=8, topk=2), h100)
    assert {int(c["SPLIT_K"]) for c in prefill.configs() if c.backend == "triton"} == {1}
    # a short K: no more slices than K steps
    short = MOE.space(Problem.of("moe", 1, 128, 256, E=64, topk=2), h100)
    wide = [c for c in short.configs() if c.backend == "triton" and c["BLOCK_SIZE_K"] == 128]
    assert max(int(c["SPLIT_K"]) for c in wide) == 2
    assert any(r.startswith("split_k_steps") for _, r in short.pruned())


def test_default_splits_k_only_for_a_small_gate_up_grid() -> None:
    h100, mi300x = Target.for_arch("sm_90"), Target.for_arch("gfx942")
    for target in (h100, mi300x):
        one = Problem.of(
            "moe", 1, 128, 7168, variant="fp8e4m3", E=256, topk=8
        )  # 8 row blocks x 2 tiles of 64 columns
        config = moe_default_config(one, target)
        assert config["SPLIT_K"] == 8 and MOE.space(one, target).check(config) is None
    two = Problem.of(
        "moe", 2, 128, 7168, variant="fp8e4m3", E=256, topk=8
    )  # 32 tiles: 4 slices fill the 132 SMs
    assert moe_default_config(two, h100)["SPLIT_K"] == 4
    for wide in (
        Problem.of("moe", 1, 768, 2048, E=128, topk=8),
        Problem.of("moe", 4096, 7168, 4096, E=8, topk=2),
    ):
        assert moe_default_config(wide, h100)["SPLIT_K"] == 1  # 96 tiles and more: the grid is full


def test_fp8_past_decode_takes_vllms_fallback_config() -> None:
    """FP8 block weights: our 16-row decode tiles up to FP8_OWN_TILES_MAX_TPE tokens an expert, vLLM's
    fallback config (its structure, 64 x 128 tiles) above, on every target; bf16 keeps our fused tiles below
    the wide-tile rule's tokens an expert."""
    from autotune.kernels.moe.formats.vllm import fallback_at
    from autotune.kernels.moe.space import FP8_OWN_TILES_MAX_TPE

    h100 = Target.for_arch("sm_90")
    edge = FP8_OWN_TILES_MAX_TPE * 32 // 8  # tokens at which 32 experts of top-8 get that many each
    for M, own in ((1, True), (edge, True), (edge + 1, False), (4096, False)):
        problem = Problem.of("moe", M, 2048, 7168, variant="fp8e4m3", E=32, topk=8)
        config = moe_default_config(problem, h100)
        assert (config == fallback_at(problem, h100, M)) is not own, M
        assert config["GATE_UP_FUSED"] == int(own) and config["BLOCK_SIZE_M"] == (16 if own else 64)
    for arch in ("gfx942", "gfx950"):
        amd = Target.for_arch(arch)
        config = moe_default_config(Problem.of("moe", 4096, 2048, 7168, variant="fp8e4m3", E=32, topk=8), amd)
        vllm = {k: config[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")}
        assert vllm == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32}
        assert config["GATE_UP_FUSED"] == 0 and config["num_stages"] == 2
    assert (
        moe_default_config(Problem.of("moe", 200, 2048, 7168, E=32, topk=8), h100)["GATE_UP_FUSED"] == 1
    )  # 50 an expert


def test_fp8_decode_tiles_take_a_deeper_ring_for_few_pairs() -> None:
    """FP8 block weights in 16-row tiles: 4 stages up to FP8_DEEP_RING_MAX_PAIRS token-expert pairs on
    NVIDIA, 3 above; bf16 weights keep 3, AMD 2."""
    from autotune.kernels.moe.space import FP8_DEEP_RING_MAX_PAIRS

    h100, mi300x = Target.for_arch("sm_90"), Target.for_arch("gfx942")
    edge = FP8_DEEP_RING_MAX_PAIRS // 8
    for M, stages in ((1, 4), (edge, 4), (edge + 1, 3)):
        problem = Problem.of("moe", M, 2048, 7168, variant="fp8e4m3", E=32, topk=8)
        config = moe_default_config(problem, h100)
        assert (config["BLOCK_SIZE_M"], config["num_stages"]) == (16, stages), M
        assert MOE.space(problem, h100).check(config) is None
    top2 = Problem.of("moe", 16, 2048, 7168, variant="fp8e4m3", E=32, topk=2)  # 32 pairs at M = 16
    assert moe_default_config(top2, h100)["num_stages"] == 4
    assert moe_default_config(Problem.of("moe", 1, 2048, 7168, E=32, topk=8), h100)["num_stages"] == 3
    assert (
        moe_default_config(Problem.of("moe", 1, 2048, 7168, variant="fp8e4m3", E=32, topk=8), mi300x)[
            "num_stages"
        ]
        == 2
    )


def test_fp8_tiles_are_sized_for_fp8_activations() -> None:
    # With FP8 weights the kernel loads FP8 activations: A and two B tiles of 64 + 2 x 128 rows, 128 wide,
    # in 3 stages, are 120 KiB, well inside the H100's shared memory (bf16 would be 240 KiB).
    h100 = Target.for_arch("sm_90")
    config = Config(backend="triton", BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=16,
                    SPLIT_K=1, GATE_UP_FUSED=1, B_TMA=1, PERSISTENT=0, num_warps=4, num_stages=3)  # fmt: skip
    fp8 = Problem.of("moe", 4096, 2048, 7168, variant="fp8e4m3", E=32, topk=8)
    bf16 = Problem.of("moe", 4096, 2048, 7168, E=32, topk=8)
    assert MOE.space(fp8, h100).check(config) is None
    reason = MOE.space(bf16, h100).check(config)
    assert reason is not None and reason.startswith("lds_overflow")


def test_moe_spec_fields() -> None:
    text = 'name = "m"\n[[sweep]]\nop = "moe"\nm = [1, 64]\nnk = [[128, 256]]\ne = [8, 16]\ntopk = 2\n'
    spec = parse_spec(text + 'weights = "fp8e4m3"\nzipf = 1.2\n')
    problems = [p for _, p in spec.problems()]
    assert (
        len(problems) == 4
        and {experts(p)[0] for p in problems} == {8, 16}
        and problems[0].dtype_b == "fp8e4m3"
    )
    entry = spec.entries[0]
    op = entry.make_op()
    assert isinstance(op, MoeOp) and op.zipf == 1.2
    assert op.source_hash("triton") != MOE.source_hash("triton")  # other routing, other results
    for bad, message in [
        (text.replace("topk = 2", "topk = 0"), "`topk` must be a positive integer"),
        (text.replace("topk = 2", "topk = 9"), "more than the 8 experts"),
        (text.replace("e = [8, 16]\n", ""), "needs `e`"),
        (text + 'weights = "fp16"\n', "bf16, fp8e4m3 or mxfp4"),
        (text + "zipf = -1\n", "`zipf` must be a number >= 0"),
        (
            'name = "g"\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[64, 64]]\ntopk = 2\n',
            "`topk` belongs to op moe",
        ),
    ]:
        with pytest.raises(SpecError, match=message.replace("(", r"\(")):
            parse_spec(bad)


@needs_interpreter
@pytest.mark.parametrize("weights", ["bf16", "fp8e4m3"])
def test_benchmarker_checks_both_backends(weights: str) -> None:
    problem = Problem.of("moe", 5, 128, 128, variant=weights, E=4, topk=2) if weights != "bf16" else TINY
    bench = Benchmarker(MOE, Target.interpreter_target())
    space = MOE.space(problem, bench.target)
    for config in [Config(backend="torch"), space.configs()[1], space.configs()[-1]]:
        result = bench.run(problem, config)
        assert result.ok, (config.short(), result.status, result.error[:500])
        assert result.rel_error is not None and result.rel_error < MOE.tolerance(problem)


@needs_interpreter
@pytest.mark.parametrize(
    ("problem", "tiles"),
    [
        (TINY, (64, 64, 32, 8)),  # 5 tokens for 4 experts: M > E takes the wide tiles
        (Problem.of("moe", 3, 32, 64, E=4, topk=2), (16, 32, 64, 1)),
        (Problem.of("moe", 5, 128, 128, variant="fp8e4m3", E=4, topk=2), (64, 128, 128, 32)),
    ],
)
def test_vllm_fallback_configs_run_right_in_our_kernel(problem: Problem, tiles: tuple[int, ...]) -> None:
    fallback = fallback_config(problem.M, experts(problem)[0], problem.dtype_b == "fp8e4m3")
    assert tuple(fallback.values())[:4] == tiles and (fallback["num_warps"], fallback["num_stages"]) == (4, 3)
    result = Benchmarker(MOE, Target.interpreter_target()).run(problem, Config(backend="triton", **fallback))
    assert result.ok, (result.status, result.error[:500])
    assert result.rel_error is not None and result.rel_error < MOE.tolerance(problem)


def test_vllm_fallback_config_refuses_empty_sizes() -> None:
    assert fallback_config(8, 8, False, rocm=True)["num_stages"] == 2
    with pytest.raises(ValueError, match="M and E must be positive"):
        fallback_config(0, 8, False)


@needs_interpreter
def test_moe_sweep_through_the_cli(tmp_path: Path) -> None:
    spec = tmp_path / "moe.toml"
    spec.write_text('name = "moe"\n[[sweep]]\nop = "moe"\nm = [3]\nnk = [[32, 64]]\ne = 4\ntopk = 2\n'
                    'strategy = "exhaustive"\ntrials = 3\n')  # fmt: skip
    db = tmp_path / "m.db"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["sweep", str(spec), "--interpret", "--db", str(db), "--no-progress"])
    assert code == 0, out.getvalue()
    with Store(str(db)) as store:
        trials = store.trials(problem=Problem.of("moe", 3, 32, 64, E=4, topk=2), source=Source.MEASURED)
    assert len(trials) == 3 and all(t.status is TrialStatus.OK for t in trials)
    assert {t.config.backend for t in trials} == {"torch", "triton"}


def test_kernel_calls_capture_the_launches_without_running_them() -> None:
    target = Target.for_arch("gfx942")
    problem = Problem.of("moe", 16, 256, 512, E=8, topk=2)
    config = moe_default_config(problem, target)
    calls = MOE.kernel_calls(problem, config, target)
    # 40 gate/up tiles at most, on MI300X's 304 CUs: the default splits K
    act = [] if config.get("GATE_UP_FUSED", 0) else ["silu_mul_kernel"]  # vLLM's structure: SiLU·up apart
    assert config["SPLIT_K"] == 4 and [c.fn.__name__ for c in calls] == ["moe_gemm_split_kernel"] * 2 + act
    assert calls[0].grid[1] == calls[0].kwargs["SPLIT_K"] == 4
    assert calls[0].kwargs["matrix_instr_nonkdim"] == 16
    unsplit = MOE.kernel_calls(problem, config.replace(SPLIT_K=1), target)
    assert [c.fn.__name__ for c in unsplit] == ["moe_gemm_kernel"] * 2 + act
    fused = MOE.kernel_calls(problem, config.replace(SPLIT_K=1, GATE_UP_FUSED=1), target)
    assert [c.fn.__name__ for c in fused] == ["moe_gemm_kernel"] * 2 and fused[0].kwargs["SWIGLU"]
    assert MOE.kernel_calls(problem, Config(backend="torch"), target) == []


@pytest.mark.parametrize("weights", ["bf16", "fp8e4m3", "mxfp4"])
def test_kernel_calls_record_on_meta_tensors_what_a_real_launch_records(weights: str) -> None:
    """The compile pool's recording (meta tensors, nothing computed) specializes the kernels exactly as a
    launch on real tensors with the same routing does: same launches, arguments and constexprs."""
    import torch

    from autotune.core.op import KernelCall
    from autotune.kernels.moe.backends import fused_launch
    from autotune.kernels.moe.op import main_first
    from autotune.kernels.moe.ref import route, routing_logits

    target = Target.for_arch("sm_90")
    problem = Problem.of("moe", 40, 256, 384, variant=weights, E=8, topk=2)
    config = moe_default_config(problem, target)
    recorded = MOE.kernel_calls(problem, config, target)
    x, w1, w2, _, _, w1s, w2s = MOE.make_inputs(problem, "cpu", seed=1)
    gen = torch.Generator().manual_seed(0)  # the routing kernel_calls uses
    E, topk = experts(problem)
    topk_weights, ids = route(routing_logits(problem.M, E, generator=gen), topk)
    real: list[KernelCall] = []
    out = MOE.make_output(problem, "cpu")
    fused_launch(config, target, (x, w1, w2, topk_weights, ids, w1s, w2s), out, calls=real)()
    real = main_first(real)
    # the gate/up GEMM first (rows of x: pair id // topk): the kernel a compile-only check reads
    assert recorded[0].kwargs["A_ROW_DIV"] == topk

    def signature(call: KernelCall) -> list[object]:
        tensor = torch.Tensor
        return [(tuple(a.shape), a.stride(), a.dtype) if isinstance(a, tensor) else a for a in call.args]

    # the GEMMs, SiLU·up apart in vLLM's structure, and with FP8 weights the activations' quantization
    act = 0 if config.get("GATE_UP_FUSED", 0) else 1
    assert len(recorded) == len(real) == (4 if weights == "fp8e4m3" else 2) + act
    for mine, theirs in zip(recorded, real, strict=True):
        assert mine.fn is theirs.fn and mine.kwargs == theirs.kwargs
        assert signature(mine) == signature(theirs)
        assert all(a.is_meta for a in mine.args if isinstance(a, torch.Tensor))


def test_the_structure_is_a_knob_and_the_fused_one_needs_twice_the_b_tile() -> None:
    """GATE_UP_FUSED 1 holds gate and up B tiles side by side: a vLLM prefill config that fits an H100's
    shared memory in vLLM's structure (0) overflows it in the fused one."""
    h100 = Target.for_arch("sm_90")
    problem = Problem.of("moe", 4096, 14336, 4096, E=8, topk=2)  # Mixtral TP1 prefill
    space = MOE.space(problem, h100)
    assert {c["GATE_UP_FUSED"] for c in space.configs() if c.backend == "triton"} == {0, 1}
    wide = Config(backend="triton", BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=16,
                  SPLIT_K=1, GATE_UP_FUSED=0, B_TMA=0, PERSISTENT=0, num_warps=8, num_stages=4)  # fmt: skip
    assert space.check(wide) is None
    assert "lds_overflow" in str(space.check(wide.replace(GATE_UP_FUSED=1)))


def test_weight_descriptors_are_a_knob_where_tma_is() -> None:
    """B_TMA exists on sm_90 (not on the MI300X or in the interpreter), is 1 in the default for bf16
    weights in row blocks of 64 or more only (not in 16-row decode tiles, not with FP8 weights), and
    needs weight rows of 16-byte multiples."""
    h100 = Target.for_arch("sm_90")
    mixtral = Problem.of("moe", 4096, 7168, 4096, E=8, topk=2)
    space = MOE.space(mixtral, h100)
    assert {c["B_TMA"] for c in space.configs() if c.backend == "triton"} == {0, 1}
    prefill = moe_default_config(mixtral, h100)
    assert prefill["B_TMA"] == 1 and int(prefill["BLOCK_SIZE_M"]) >= 64 and space.check(prefill) is None
    assert moe_default_config(mixtral.with_m(16), h100)["B_TMA"] == 0  # 4 tokens an expert: 16-row tiles
    assert (
        moe_default_config(Problem.of("moe", 4096, 2048, 7168, variant="fp8e4m3", E=32, topk=8), h100)[
            "B_TMA"
        ]
        == 0
    )
    odd_prefill = moe_default_config(
        Problem.of("moe", 4096, 7168, 4100, E=8, topk=2), h100
    )  # rows TMA cannot load
    assert odd_prefill["B_TMA"] == 0 and int(odd_prefill["BLOCK_SIZE_M"]) >= 64
    for arch in ("gfx942", "interpreter"):
        assert all("B_TMA" not in c for c in MOE.space(mixtral, Target.for_arch(arch)).configs())
    odd = Problem.of("moe", 64, 7168, 4100, E=8, topk=2)  # bf16 rows of 8200 bytes
    config = next(c for c in MOE.space(odd, Target.for_arch("sm_90")).configs() if c.backend == "triton")
    assert config["B_TMA"] == 0
    assert "b_tma_rows" in str(MOE.space(odd, Target.for_arch("sm_90")).check(config.replace(B_TMA=1)))


def test_a_program_an_sm_is_a_knob_and_the_default_of_wide_bf16_prefill_tiles() -> None:
    """PERSISTENT exists on NVIDIA and AMD (not in the interpreter, not for MXFP4 weights), takes SPLIT_K
    1, and searches 2 programs an SM only where two fit the shared memory. The default takes it, with
    128 x 256 tiles on 8 warps in vLLM's structure and the weights through TMA, for bf16 and fp16 weights
    from WIDE_TILE_MIN_TPE tokens an expert on targets with TMA; not below that, not for FP8 weights,
    not on the MI300X."""
    h100, mi300x = Target.for_arch("sm_90"), Target.for_arch("gfx942")
    mixtral = Problem.of("moe", 4096, 7168, 4096, E=8, topk=2)
    for target in (h100, mi300x):
        space = MOE.space(mixtral, target)
        assert {c["PERSISTENT"] for c in space.configs() if c.backend == "triton"} == {0, 1, 2}
        decode = MOE.space(mixtral.with_m(1), target)  # where slices are searched
        one = next(
            c
            for c in decode.configs()
            if c.backend == "triton" and c["PERSISTENT"] == 1 and c["BLOCK_SIZE_N"] == 256
        )
        assert one["SPLIT_K"] == 1 and "persistent_split" in str(decode.check(one.replace(SPLIT_K=2)))
    wide = moe_default_config(mixtral, h100)  # 128 x 256 tiles, 4 stages: 192 KiB of the H100's 227
    space = MOE.space(mixtral, h100)
    assert space.check(wide) is None and "persistent_pair_lds" in str(space.check(wide.replace(PERSISTENT=2)))
    assert space.check(wide.replace(PERSISTENT=2, BLOCK_SIZE_M=64, BLOCK_SIZE_N=128)) is None  # 96 KiB
    assert all("PERSISTENT" not in c for c in MOE.space(mixtral, Target.for_arch("interpreter")).configs())
    mx = Problem.of("moe", 4096, 7168, 4096, variant="mxfp4", E=8, topk=2)
    assert all("PERSISTENT" not in c for c in MOE.space(mx, h100).configs())
    qwen3 = Problem.of("moe", 1, 768, 2048, E=128, topk=8)
    edge = WIDE_TILE_MIN_TPE * 128 // 8  # M at WIDE_TILE_MIN_TPE tokens an expert
    for problem in (mixtral, mixtral.with_m(256), qwen3.with_m(edge), qwen3.with_m(4096)):
        config = moe_default_config(problem, h100)
        assert MOE.space(problem, h100).check(config) is None
        got = {k: int(config[k]) for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "num_warps", "num_stages",
                                           "GATE_UP_FUSED", "PERSISTENT", "B_TMA", "SPLIT_K")}  # fmt: skip
        assert got == dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, num_warps=8, num_stages=4, GATE_UP_FUSED=0,
                           PERSISTENT=1, B_TMA=1, SPLIT_K=1), problem  # fmt: skip
    for problem, target in (
        (qwen3.with_m(edge - 16), h100),  # 62 tokens an expert
        (mixtral.with_m(64), h100),
        (mixtral, mi300x),
        (Problem.of("moe", 4096, 2048, 7168, variant="fp8e4m3", E=32, topk=8), h100),
    ):
        config = moe_default_config(problem, target)
        assert config["PERSISTENT"] == 0 and MOE.space(problem, target).check(config) is None, problem


def test_moe_is_a_registered_op() -> None:
    assert get_op("moe") is MOE and MOE.backends(Target.for_arch("sm_90")) == ("torch", "triton")


def test_the_moe_cost_model_takes_every_config_of_its_space() -> None:
    """Split-K configs included (the knob the dense GEMM's model also has)."""
    from autotune.engine.model import predict_us

    target = Target.for_arch("sm_90")
    problem = Problem.of("moe", 16, 256, 512, E=8, topk=2)
    configs = list(MOE.space(problem, target).configs())
    assert any(c.get("SPLIT_K", 1) > 1 for c in configs)
    times = [
        predict_us(problem, c, target)
        for c in configs[:200] + [c for c in configs if c.get("SPLIT_K", 1) > 1][:50]
    ]
    assert all(0 < t < float("inf") for t in times)
