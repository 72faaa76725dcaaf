"""What a call no table covers runs (`fallback_config`), and `autotune.kernels.serve` (CPU; the launches in
Triton's interpreter, tiny shapes)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.dense.api as api
import autotune.kernels.quant.vendor as vendor
import autotune.kernels.serve as serve
from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.dispatch import Dispatcher, Table, UntunedShapeWarning
from autotune.engine.bench import rel_error
from autotune.kernels import GEMM, MOE, QUANT_GEMMS, gemm_quant, served_config, served_launch
from autotune.kernels.common.geometry import GEMV_ROWS
from autotune.kernels.dense.op import FALLBACK_GEMV_ROWS
from autotune.kernels.quant.op import QUANT_DEFAULT_MAX_M

TORCH = Config(backend="torch")
SM90 = Target.for_arch("sm_90")
GFX942 = Target.for_arch("gfx942")
GFX950 = Target.for_arch("gfx950")
INTERP = Target.interpreter_target()
ROWWISE, BLOCKWISE = "gemm_fp8_rowwise", "gemm_fp8_blockwise"

needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)


def tcfg(bn: int = 16, bk: int = 16, split_k: int = 1) -> Config:
    """A Triton GEMM config the interpreter runs quickly."""
    return Config(backend="triton", BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=split_k,
                  num_warps=4, num_stages=1)  # fmt: skip


def gemv_cfg() -> Config:
    return Config(backend="triton_gemv", BLOCK_N=16, BLOCK_K=64, num_warps=4, num_stages=1)


@pytest.fixture
def no_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No tables: a fresh process-wide dispatcher, an untuned-shapes log in tmp_path, empty caches."""
    log = tmp_path / "untuned.jsonl"
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)
    monkeypatch.setenv("AUTOTUNE_UNTUNED_LOG", str(log))
    monkeypatch.setattr(dispatcher_mod, "_default", None)
    monkeypatch.setattr(serve, "_fallbacks", {})
    monkeypatch.setattr(api, "_plans", {})
    yield log


@pytest.fixture
def install(no_tables: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Dispatcher]:
    """Installs a process-wide dispatcher holding the table of these winners (restored afterwards)."""

    def make(
        target: Target, winners: list[tuple[Problem, Config, float]], m_policy: str = "round_up"
    ) -> Dispatcher:
        table = Table.from_winners(target, winners, m_policy=m_policy)
        d = Dispatcher([table], device_key=target)
        monkeypatch.setattr(dispatcher_mod, "_default", d)
        return d

    return make


@contextmanager
def quiet() -> Iterator[None]:
    """Untuned shapes warn once: not what these tests are about."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntunedShapeWarning)
        yield


# -- fallback_config: the regimes ----------------------------------------------------------------------------


@pytest.mark.parametrize("M", [1, 2, 3, 96, 4096])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_gemm_fallback_on_nvidia_is_torch_at_every_m(
    M: int, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = Problem.of("gemm", M, 4096, 4096, "bf16", layout=layout)
    assert FALLBACK_GEMV_ROWS == 0  # the GEMV default lost to cuBLAS at M = 1 on an H200
    assert GEMM.fallback_config(problem, SM90) == TORCH
    # where a regime of the heuristic were set, it would run there
    monkeypatch.setattr("autotune.kernels.dense.op.FALLBACK_GEMV_ROWS", 2)
    fallback = GEMM.fallback_config(problem, SM90)
    if M <= 2:
        assert fallback == GEMM.default_config(problem, SM90) and fallback.backend == "triton_gemv"
    else:
        assert fallback == TORCH
    assert fallback in GEMM.space(problem, SM90)


@pytest.mark.parametrize("target", [GFX942, GFX950, INTERP], ids=lambda t: t.arch)
@pytest.mark.parametrize("M", [1, 2, 3, 96, 4096])
def test_gemm_fallback_on_amd_and_the_interpreter_is_torch(target: Target, M: int) -> None:
    problem = Problem.of("gemm", M, 1024, 512, "fp16")
    assert GEMM.fallback_config(problem, target) == TORCH


def _vendor_runs(monkeypatch: pytest.MonkeyPatch, reason: Callable[[str, Problem, Target], str]) -> None:
    """Replaces the probe of whether torch._scaled_mm runs a problem (the space asks it at call time)."""
    monkeypatch.setattr(vendor, "vendor_reason", reason)


@pytest.mark.parametrize("op", [ROWWISE, BLOCKWISE])
def test_fp8_fallback_on_nvidia_keeps_the_heuristic_at_decode(
    monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    """With a _scaled_mm that runs every M: our kernels up to QUANT_DEFAULT_MAX_M, torch above."""
    _vendor_runs(monkeypatch, lambda backend, problem, target: "")
    quant = QUANT_GEMMS[op]
    top = QUANT_DEFAULT_MAX_M[op]
    assert top == (64 if op == ROWWISE else 32)
    for M in (1, 16, top):
        problem = Problem.quant(op, M, 4096, 4096)
        fallback = quant.fallback_config(problem, SM90)
        assert fallback == quant.default_config(problem, SM90) and fallback.backend != "torch", M
    for M in (top + 1, 2048):
        problem = Problem.quant(op, M, 4096, 4096)
        assert TORCH in quant.space(problem, SM90)
        assert quant.fallback_config(problem, SM90) == TORCH, M


def test_fp8_fallback_without_a_vendor_kernel_is_the_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where _scaled_mm cannot run the problem (cuBLAS has no blockwise kernel at that M, say), the
    heuristic default runs at every M."""
    _vendor_runs(monkeypatch, lambda backend, problem, target: "no kernel for this M (test)")
    quant = QUANT_GEMMS[BLOCKWISE]
    for M in (16, 2048):
        problem = Problem.quant(BLOCKWISE, M, 4096, 4096)
        assert TORCH not in quant.space(problem, SM90)
        assert quant.fallback_config(problem, SM90) == quant.default_config(problem, SM90)


@pytest.mark.parametrize("M", [16, 2048])
def test_fp8_rowwise_fallback_on_sm90_follows_its_space(M: int) -> None:
    """No probe replaced: on a machine without an H100 the space prunes _scaled_mm, so the heuristic runs;
    on an H100 with a _scaled_mm that runs row-wise scales, torch runs at M = 2048."""
    quant = QUANT_GEMMS[ROWWISE]
    problem = Problem.quant(ROWWISE, M, 4096, 4096)
    fallback = quant.fallback_config(problem, SM90)
    top = QUANT_DEFAULT_MAX_M[ROWWISE]
    if top < M and TORCH in quant.space(problem, SM90):
        assert fallback == TORCH
    else:
        assert fallback == quant.default_config(problem, SM90) and fallback.backend != "torch"


@pytest.mark.parametrize("op", ["gemm_mxfp8", "gemm_mxfp4"])
def test_mx_fallback_follows_the_vendor_at_every_m(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """MX formats keep no decode threshold: torch wherever _scaled_mm runs them (sm_100, gfx950), our kernel
    where it does not (sm_90: cuBLAS has no MX kernels there)."""
    quant = QUANT_GEMMS[op]
    problem = Problem.quant(op, 16, 4096, 4096)
    assert quant.fallback_config(problem, SM90) == quant.default_config(problem, SM90)  # no H100 here
    _vendor_runs(monkeypatch, lambda backend, p, target: "" if target.is_amd else "no MX on sm_90 (test)")
    for M in (16, 2048):
        problem = Problem.quant(op, M, 4096, 4096)
        assert quant.fallback_config(problem, SM90) == quant.default_config(problem, SM90)
        assert quant.fallback_config(problem, SM90).backend != "torch"
        assert quant.fallback_config(problem, GFX950) == TORCH


def test_fp8_fallback_on_amd_has_no_decode_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    _vendor_runs(monkeypatch, lambda backend, problem, target: "")
    for op in (ROWWISE, BLOCKWISE):
        assert QUANT_GEMMS[op].fallback_config(Problem.quant(op, 16, 4096, 4096), GFX942) == TORCH


def test_mxfp4_bf16a_has_no_vendor_so_its_fallback_is_the_heuristic() -> None:
    quant = QUANT_GEMMS["gemm_mxfp4_bf16a"]
    for target in (SM90, GFX950, INTERP):
        problem = Problem.quant("gemm_mxfp4_bf16a", 2048, 256, 256)
        assert quant.fallback_config(problem, target) == quant.default_config(problem, target)


def test_quant_fallback_on_the_interpreter_follows_the_cpu_scaled_mm() -> None:
    """The interpreter probes torch._scaled_mm on the CPU: no decode threshold there (it is no NVIDIA GPU)."""
    for op in (ROWWISE, BLOCKWISE, "gemm_mxfp8"):
        quant = QUANT_GEMMS[op]
        for M in (3, 2048):
            problem = Problem.quant(op, M, 256, 256)
            vendor_runs = TORCH in quant.space(problem, INTERP)
            expected = TORCH if vendor_runs else quant.default_config(problem, INTERP)
            assert quant.fallback_config(problem, INTERP) == expected, (op, M)


@pytest.mark.parametrize("target", [SM90, GFX942, INTERP], ids=lambda t: t.arch)
@pytest.mark.parametrize("M", [1, 64, 4096])
def test_moe_fallback_is_always_the_heuristic(target: Target, M: int) -> None:
    problem = Problem.of("moe", M, 1408, 2048, E=64, topk=6)
    fallback = MOE.fallback_config(problem, target)
    assert fallback == MOE.default_config(problem, target) and fallback.backend == "triton"


# -- served_config -------------------------------------------------------------------------------------------


def test_served_config_reads_the_table_else_the_fallback(install: Callable[..., Dispatcher]) -> None:
    tuned = Problem.of("gemm", 16, 64, 32)
    install(SM90, [(tuned, tcfg(), 5.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a covered shape warns about nothing
        assert served_config(GEMM, tuned, SM90) == tcfg()
        assert served_config(GEMM, tuned.with_m(9), SM90) == tcfg()  # M rounds up to the bucket
        assert served_config(GEMM, tuned.with_m(900), SM90) == tcfg()  # above all buckets: the largest
    with pytest.warns(UntunedShapeWarning, match="N=65 K=32"):
        assert served_config(GEMM, Problem.of("gemm", 16, 65, 32), SM90) == TORCH
    with quiet():
        assert served_config(GEMM, Problem.of("gemm", 16, 64, 32, "fp16"), SM90) == TORCH  # another dtype
        assert (
            served_config(GEMM, Problem.of("gemm", 16, 64, 32, "bf16", layout="kn"), SM90) == TORCH
        )  # another layout
        untuned_one = Problem.of("gemm", 1, 64, 33)
        assert served_config(GEMM, untuned_one, SM90) == GEMM.fallback_config(untuned_one, SM90) == TORCH


def test_served_config_never_serves_a_gemv_config_above_its_rows(install: Callable[..., Dispatcher]) -> None:
    """A GEMV bucket at M = 1 and rounding down: up to GEMV_ROWS rows the GEMV config, above the fallback."""
    install(SM90, [(Problem.of("gemm", 1, 64, 128), gemv_cfg(), 2.0)], m_policy="round_down")
    for M in range(1, GEMV_ROWS + 1):
        assert served_config(GEMM, Problem.of("gemm", M, 64, 128), SM90) == gemv_cfg(), M
    for M in (GEMV_ROWS + 1, 100):
        assert served_config(GEMM, Problem.of("gemm", M, 64, 128), SM90) == TORCH, M
    quant = QUANT_GEMMS[ROWWISE]
    install(SM90, [(Problem.quant(ROWWISE, 1, 64, 128), gemv_cfg(), 2.0)], m_policy="round_down")
    assert served_config(quant, Problem.quant(ROWWISE, 3, 64, 128), SM90) == gemv_cfg()
    beyond = Problem.quant(ROWWISE, 8, 64, 128)
    assert served_config(quant, beyond, SM90) == quant.fallback_config(beyond, SM90) != gemv_cfg()


def test_served_config_keys_quantized_and_moe_problems_as_their_tables(
    install: Callable[..., Dispatcher],
) -> None:
    rowwise = Problem.quant(ROWWISE, 128, 256, 512)
    moe = Problem.of("moe", 16, 128, 256, E=8, topk=2)
    moe_config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=64, GROUP_SIZE_M=1,
                        SPLIT_K=1, num_warps=4, num_stages=2)  # fmt: skip
    install(SM90, [(rowwise, tcfg(), 3.0), (moe, moe_config, 9.0)])
    quant = QUANT_GEMMS[ROWWISE]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert served_config(quant, rowwise.with_m(100), SM90) == tcfg()
        assert served_config(MOE, moe.with_m(3), SM90) == moe_config
    with quiet():
        other = Problem.quant(BLOCKWISE, 128, 256, 512)  # the same shape, another op
        assert served_config(QUANT_GEMMS[BLOCKWISE], other, SM90) == QUANT_GEMMS[BLOCKWISE].fallback_config(
            other, SM90
        )
        more_experts = Problem.of("moe", 16, 128, 256, E=16, topk=2)
        assert served_config(MOE, more_experts, SM90) == MOE.default_config(more_experts, SM90)
        top3 = Problem.of("moe", 16, 128, 256, E=8, topk=3)
        assert served_config(MOE, top3, SM90) == MOE.default_config(top3, SM90)


def test_served_config_refuses_another_ops_problem(no_tables: Path) -> None:
    with pytest.raises(ValueError, match="gemm cannot serve a moe problem"):
        served_config(GEMM, Problem.of("moe", 16, 128, 256, E=8, topk=2), SM90)


def test_served_config_caches_the_fallback(no_tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Problem] = []
    real = type(GEMM).fallback_config

    def counting(self: Any, problem: Problem, target: Target) -> Config:
        calls.append(problem)
        return real(self, problem, target)

    monkeypatch.setattr(type(GEMM), "fallback_config", counting)
    problem = Problem.of("gemm", 8, 48, 48)
    with quiet():
        assert served_config(GEMM, problem, GFX942) == served_config(GEMM, problem, GFX942) == TORCH
        assert served_config(GEMM, problem.with_m(1), SM90) == TORCH
        assert served_config(GEMM, problem.with_m(1), SM90) == TORCH
    assert calls == [problem, problem.with_m(1)]  # once per (problem, target)


# -- served_launch -------------------------------------------------------------------------------------------


def _run(op: Any, problem: Problem, target: Target, seed: int = 0) -> tuple[torch.Tensor, float]:
    """served_launch on random inputs into a NaN-poisoned output: (out, relative error to the reference)."""
    inputs = op.make_inputs(problem, "cpu", seed)
    out = op.make_output(problem, "cpu").fill_(float("nan"))
    with quiet():
        served_launch(op, problem, target, inputs, out)()
    return out, rel_error(out, op.reference(problem, inputs))


@needs_interpreter
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_served_launch_of_an_untuned_gemm_runs_torch(
    no_tables: Path, launched: list[Config], layout: str
) -> None:
    problem = Problem.of("gemm", 5, 24, 40, "bf16", layout=layout)
    with quiet():
        assert served_config(GEMM, problem, INTERP) == TORCH
    out, err = _run(GEMM, problem, INTERP, seed=3)
    assert err < GEMM.tolerance(problem)
    a, b = GEMM.make_inputs(problem, "cpu", 3)
    assert torch.equal(out, torch.mm(a, b.t() if layout == "nk" else b))  # torch.mm itself ran
    assert launched == []  # no Triton launcher was built
    assert no_tables.exists()  # the shape went to the untuned-shapes log


@needs_interpreter
def test_served_launch_of_a_tuned_gemm_runs_the_tables_config(
    install: Callable[..., Dispatcher], launched: list[Config]
) -> None:
    problem = Problem.of("gemm", 6, 20, 70)
    chosen = tcfg(bn=32, split_k=2)
    install(INTERP, [(problem, chosen, 1.0)])
    assert served_config(GEMM, problem, INTERP) == chosen
    _, err = _run(GEMM, problem, INTERP, seed=4)
    assert err < GEMM.tolerance(problem)
    assert launched == [chosen]


@needs_interpreter
def test_served_launch_checks_its_arguments(no_tables: Path) -> None:
    problem = Problem.of("gemm", 5, 24, 40)
    inputs = GEMM.make_inputs(problem, "cpu", 0)
    out = GEMM.make_output(problem, "cpu")
    with pytest.raises(ValueError, match="not on NVIDIA H100"):
        served_launch(GEMM, problem, SM90, inputs, out)
    with pytest.raises(ValueError, match="not gemm M=6"):
        served_launch(GEMM, problem.with_m(6), INTERP, inputs, out)
    with pytest.raises(ValueError, match=r"out must be a \(5, 24\)"):
        served_launch(GEMM, problem, INTERP, inputs, out[:, :20])
    with pytest.raises(ValueError, match="gemm cannot serve"):
        served_launch(GEMM, Problem.quant(ROWWISE, 5, 24, 64), INTERP, inputs, out)


@needs_interpreter
def test_served_launch_of_an_untuned_rowwise_gemm_is_the_entry_points_call(no_tables: Path) -> None:
    """gemm_quant through its fallback on the interpreter: whatever that is (torch where the CPU's
    _scaled_mm runs row-wise scales), into the caller's buffer, within tolerance."""
    quant = QUANT_GEMMS[ROWWISE]
    problem = Problem.quant(ROWWISE, 3, 32, 64)
    out, err = _run(quant, problem, INTERP, seed=5)
    assert err < quant.tolerance(problem)
    with pytest.raises(ValueError, match="the inputs are those of gemm_fp8_rowwise M=3"):
        served_launch(quant, problem.with_m(4), INTERP, quant.make_inputs(problem, "cpu", 0), out)


@needs_interpreter
def test_served_launch_of_moe_is_the_entry_points_call(
    install: Callable[..., Dispatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune.kernels.moe.kernel as kernel

    problem = Problem.of("moe", 5, 32, 64, E=4, topk=2)
    chosen = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
                    num_warps=4, num_stages=1, GATE_UP_FUSED=0)  # fmt: skip
    install(INTERP, [(problem, chosen, 1.0)])
    seen: list[dict[str, Any]] = []
    real = kernel.fused_moe

    def spy(*a: Any, **k: Any) -> torch.Tensor:
        seen.append(dict(a[5]))
        assert k["alignment"][0].shape[0] % 16 == 0  # the entry point's worst-case alignment
        return real(*a, **k)

    monkeypatch.setattr(kernel, "fused_moe", spy)
    _, err = _run(MOE, problem, INTERP, seed=6)
    assert err < MOE.tolerance(problem)
    assert seen == [{k: v for k, v in chosen.items() if k != "backend"}]
    with pytest.raises(ValueError, match="the inputs are those of moe M=5"):
        served_launch(MOE, problem.with_m(6), INTERP, MOE.make_inputs(problem, "cpu", 0),
                      MOE.make_output(problem, "cpu"))  # fmt: skip


# -- gemm_quant(out=...) -------------------------------------------------------------------------------------


@needs_interpreter
def test_gemm_quant_writes_into_out(no_tables: Path) -> None:
    quant = QUANT_GEMMS[ROWWISE]
    problem = Problem.quant(ROWWISE, 3, 32, 64, "fp16")
    a, b, sa, sb = quant.make_inputs(problem, "cpu", seed=7)
    ref = quant.reference(problem, (a, b, sa, sb))
    out = torch.full((3, 32), float("nan"), dtype=torch.float16)
    with quiet():
        got = gemm_quant(ROWWISE, a, b, sa, sb, out_dtype=torch.float16, target=INTERP, out=out)
        assert got is out and rel_error(out, ref) < quant.tolerance(problem)
        plain = gemm_quant(ROWWISE, a, b, sa, sb, out_dtype=torch.float16, target=INTERP)
    assert torch.equal(plain, out)


@needs_interpreter
@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (lambda: torch.empty(3, 33, dtype=torch.bfloat16), r"out must be a contiguous \(3, 32\)"),
        (lambda: torch.empty(3, 32, dtype=torch.float16), r"torch\.bfloat16 tensor"),
        (lambda: torch.empty(32, 3, dtype=torch.bfloat16).t(), "with strides"),
        (lambda: torch.empty(3, 32, dtype=torch.bfloat16, device="meta"), "on cpu"),
    ],
)
def test_gemm_quant_refuses_an_out_that_does_not_fit(
    no_tables: Path, bad: Callable[[], Any], error: str
) -> None:
    quant = QUANT_GEMMS[ROWWISE]
    a, b, sa, sb = quant.make_inputs(Problem.quant(ROWWISE, 3, 32, 64), "cpu", seed=8)
    with pytest.raises(ValueError, match=error):
        gemm_quant(ROWWISE, a, b, sa, sb, target=INTERP, out=bad())
    with pytest.raises(TypeError, match=r"out must be a torch\.Tensor"):
        gemm_quant(ROWWISE, a, b, sa, sb, target=INTERP, out=[[0.0] * 32] * 3)  # type: ignore[arg-type]
    assert not no_tables.exists()  # refused before the lookup


@needs_interpreter
def test_served_launch_of_an_mxfp4_moe_is_the_entry_points_call(no_tables: Path) -> None:
    """Packed e2m1 weights with their e8m0 scales: no FP8 block shape passed, the default served."""
    problem = Problem.of("moe", 5, 32, 64, variant="mxfp4", E=4, topk=2)
    _, err = _run(MOE, problem, INTERP, seed=7)
    assert err < MOE.tolerance(problem)


def test_a_tables_config_of_a_backend_the_entry_point_does_not_run_gets_the_fallback(
    install: Callable[..., Dispatcher],
) -> None:
    """The MoE's per-expert loop in a table (an older emit, say) is never what a call runs."""
    problem = Problem.of("moe", 5, 32, 64, E=4, topk=2)
    install(INTERP, [(problem, Config(backend="torch"), 1.0)])
    with quiet():
        assert served_config(MOE, problem, INTERP) == MOE.fallback_config(problem, INTERP)
        assert served_config(MOE, problem, INTERP).backend == "triton"
