"""The Triton GEMM kernel and the run-time gemm()/linear() API, in Triton's CPU interpreter (tiny shapes)."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.common.grid as grid
import autotune.kernels.dense.api as api
from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.dispatch import Dispatcher, Table, UntunedShapeWarning
from autotune.engine.bench import rel_error
from autotune.kernels import GEMM, gemm, launch_config, linear

pytestmark = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(scope="module")
def target() -> Target:
    return Target.interpreter_target()


def tcfg(
    bm: int = 16, bn: int = 16, bk: int = 16, group_m: int = 1, split_k: int = 1, **extra: int
) -> Config:
    """A Triton config with interpreter-friendly defaults."""
    return Config(
        backend="triton",
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=group_m,
        SPLIT_K=split_k,
        num_warps=4,
        num_stages=1,
        **extra,
    )


def assert_close_to(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "") -> None:
    """Norm-wise relative error within `tol` (NaN/inf never pass) and element-wise closeness."""
    assert out.shape == ref.shape, what
    err = rel_error(out, ref)
    assert err <= tol, f"{what}: relative error {err} > {tol}"
    atol = tol * float(ref.abs().max())
    torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=atol, msg=lambda m: f"{what}: {m}")


def run_op(
    problem: Problem, config: Config, target: Target, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launches `config` once through GEMM.prepare on a NaN-poisoned output; returns (out, reference)."""
    inputs = GEMM.make_inputs(problem, "cpu", seed)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, target, inputs, out)()
    return out, GEMM.reference(problem, inputs)


def check(problem: Problem, config: Config, target: Target, seed: int = 0) -> torch.Tensor:
    out, ref = run_op(problem, config, target, seed)
    assert out.dtype == TORCH_DTYPES[problem.dtype]
    assert_close_to(out, ref, GEMM.tolerance(problem), f"{problem} {config.short()}")
    return out


# -- the kernel through the TunableOp -----------------------------------------------------------------


def test_inputs_are_random_not_zero() -> None:
    """make_inputs draws random, seed-dependent, non-zero inputs of the right shapes."""
    p = Problem.of("gemm", 5, 37, 70, "bf16", layout="kn")
    a, b = GEMM.make_inputs(p, "cpu", 0)
    a2, _ = GEMM.make_inputs(p, "cpu", 1)
    assert a.shape == (5, 70) and b.shape == (70, 37) and a.dtype == torch.bfloat16
    assert float(a.float().std()) > 0.5 and float(b.float().std()) > 0.5
    assert int((a == 0).sum()) == 0 and int((b == 0).sum()) == 0
    assert not torch.equal(a, a2)
    assert float(GEMM.reference(p, (a, b)).abs().mean()) > 0.5


@pytest.mark.parametrize("split_k", [1, 2, 4])
def test_split_k_on_odd_shape(target: Target, split_k: int) -> None:
    """5x37x70: partial M/N tiles, K not a multiple of BLOCK_K; SPLIT_K 4 leaves an empty K slice."""
    check(Problem.of("gemm", 5, 37, 70), tcfg(bn=32, bk=32, split_k=split_k), target)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_dtypes_and_layouts(target: Target, dtype: str, layout: str) -> None:
    """33x17x100 with split-K 4 in both dtypes and both B layouts."""
    check(Problem.of("gemm", 33, 17, 100, dtype, layout=layout), tcfg(split_k=4), target, seed=3)


@pytest.mark.parametrize(
    "mnk, config",
    [
        ((1, 64, 64), tcfg(bn=32, bk=32)),  # decode: one row
        ((16, 32, 64), tcfg(split_k=2)),  # EVEN_K: K a multiple of BLOCK_K x SPLIT_K
        ((16, 16, 7), tcfg(bk=32)),  # K smaller than one BLOCK_K
        ((3, 5, 1), tcfg(split_k=2)),  # K = 1: one slice holds everything, the other nothing
    ],
    ids=["decode", "even-k-split", "k-lt-block", "k1-split"],
)
def test_edge_shapes(target: Target, mnk: tuple[int, int, int], config: Config) -> None:
    check(Problem.of("gemm", *mnk, "fp16", layout="nk"), config, target, seed=7)


def test_group_m_with_several_tile_rows(target: Target) -> None:
    """GROUP_M 4 over 5 rows of tiles (the last group is short) x 3 columns: every tile written once."""
    check(Problem.of("gemm", 80, 48, 32), tcfg(group_m=4), target, seed=1)


@pytest.mark.parametrize(
    "mnk, config",
    [
        ((48, 112, 32), tcfg(NUM_XCDS=8)),  # 21 tiles: not a multiple of 8
        ((64, 64, 40), tcfg(group_m=4, split_k=2, NUM_XCDS=8)),  # 16 tiles, with GROUP_M and split-K
        ((16, 48, 16), tcfg(NUM_XCDS=8)),  # 3 tiles: fewer than XCDs
    ],
    ids=["21-tiles", "16-tiles-group-split", "3-tiles"],
)
def test_xcd_remap_writes_every_tile(target: Target, mnk: tuple[int, int, int], config: Config) -> None:
    """NUM_XCDS=8 remaps program ids; any tile it skipped would keep the NaN poison."""
    out = check(Problem.of("gemm", *mnk, "bf16", layout="kn"), config, target, seed=2)
    assert bool(torch.isfinite(out.float()).all())


def test_remap_xcd_is_a_bijection() -> None:
    """The kernels' own `remap_xcd` (its Python body, called with ints) permutes [0, num_pids)."""
    remap = grid.remap_xcd.fn
    for xcds in (1, 2, 3, 8):
        for num_pids in range(1, 70):
            assert sorted(remap(pid, num_pids, xcds) for pid in range(num_pids)) == list(range(num_pids)), (
                xcds,
                num_pids,
            )
    # Consecutive hardware pids go to consecutive XCDs; each XCD then gets a contiguous run of tiles.
    assert [remap(pid, 16, 8) for pid in range(16)] == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]


def test_split_k_is_deterministic(target: Target) -> None:
    """Split-K sums its slices in a fixed order: two runs give bit-identical results."""
    p = Problem.of("gemm", 33, 17, 100, "bf16")
    first, _ = run_op(p, tcfg(split_k=4), target, seed=5)
    second, _ = run_op(p, tcfg(split_k=4), target, seed=5)
    assert torch.equal(first, second)


@pytest.mark.parametrize(
    "mnk, config",
    [
        ((33, 17, 100), tcfg(split_k=4, FUSED_SPLIT=1)),  # ragged M, N and K; 4 slices summed in-launch
        ((5, 37, 70), tcfg(bn=32, bk=32, split_k=4, FUSED_SPLIT=1)),  # an empty last K slice
        ((20, 48, 160), tcfg(group_m=4, STREAM_K=1)),  # 6 tiles x 10 K steps over 4 programs: shared tiles
        ((20, 48, 150), tcfg(STREAM_K=1)),  # K not a multiple of BLOCK_K
        ((33, 17, 64), tcfg(STREAM_K=1)),  # 6 tiles x 4 steps: tiles split 3:1 and 2:2 between programs
        ((5, 40, 96), tcfg(bk=32, STREAM_K=1)),  # 3 tiles x 3 steps over 4 programs
        ((16, 16, 16), tcfg(STREAM_K=1)),  # one K step: every program has a whole tile or nothing
    ],
    ids=["fused-ragged", "fused-empty-slice", "stream-shared", "stream-ragged-k", "stream-uneven",
         "stream-few-tiles", "stream-one-step"],
)  # fmt: skip
def test_in_launch_sums_match_the_reference_and_repeat_exactly(
    target: Target, mnk: tuple[int, int, int], config: Config
) -> None:
    """FUSED_SPLIT and STREAM_K sum a tile's K parts in the GEMM's own launch, the last part to arrive
    adding them up in a fixed order; the second launch relies on the first having reset its counters."""
    from autotune.kernels import scratch

    p = Problem.of("gemm", *mnk, "bf16")
    first = check(p, config, target, seed=4)
    second = check(p, config, target, seed=4)
    assert torch.equal(first, second)
    for _ws, counts in scratch._scratch.values():
        if counts.device.type != "meta":  # the compile-only checks record launches on meta tensors
            assert not counts.any(), "a tile counter was left non-zero"


def test_stream_plan_deals_every_k_step_once() -> None:
    """Program p owns flat steps [p*per, (p+1)*per); no tile is shared by more than max_parts programs."""
    for tiles, iters, sms in [(6, 10, 4), (72, 28, 132), (1, 5, 8), (3, 3, 4), (64, 112, 264), (7, 1, 3)]:
        programs, per, max_parts = grid.stream_plan(tiles, iters, sms)
        assert programs <= sms and (programs - 1) * per < tiles * iters <= programs * per
        for tile in range(tiles):
            owners = {step // per for step in range(tile * iters, (tile + 1) * iters)}
            first, last = (tile * iters) // per, ((tile + 1) * iters - 1) // per  # as the kernel computes
            assert owners == set(range(first, last + 1)) and len(owners) <= max_parts


def test_strided_output_view_is_written_in_place(target: Target) -> None:
    """Without split-K, a non-contiguous `out` view is written through its strides and nothing around it."""
    p = Problem.of("gemm", 20, 24, 40)
    inputs = GEMM.make_inputs(p, "cpu", 0)
    big = torch.full((22, 27), float("nan"), dtype=torch.bfloat16)
    out = big[1:21, 1:25]
    GEMM.prepare(p, tcfg(), target, inputs, out)()
    assert_close_to(out, GEMM.reference(p, inputs), GEMM.tolerance(p))
    border = torch.ones_like(big, dtype=torch.bool)
    border[1:21, 1:25] = False
    assert bool(torch.isnan(big[border].float()).all())


def test_split_k_strided_output_view(target: Target) -> None:
    """Split-K reduces into C as a contiguous array, so a non-contiguous `out` view is refused up front."""
    p = Problem.of("gemm", 20, 24, 40)
    inputs = GEMM.make_inputs(p, "cpu", 0)
    big = torch.full((22, 27), float("nan"), dtype=torch.bfloat16)
    out = big[1:21, 1:25]
    with pytest.raises(ValueError, match="contiguous"):
        GEMM.prepare(p, tcfg(split_k=2), target, inputs, out)
    assert bool(torch.isnan(big.float()).all())  # nothing written


def test_space_configs_are_correct(target: Target) -> None:
    """The first Triton configs of the interpreter's search space (default first) all compute C."""
    p = Problem.of("gemm", 9, 40, 48, "bf16")
    configs = [c for c in GEMM.space(p, target).configs() if c.backend == "triton"]
    assert configs[0] == GEMM.default_config(p, target)
    picked = configs[:: max(1, len(configs) // 3)][:3]
    assert any(int(c["SPLIT_K"]) > 1 for c in configs)
    picked += [next(c for c in configs if int(c["SPLIT_K"]) > 1)]
    for config in picked:
        check(p, config, target)


def test_amd_only_knobs_are_refused_on_the_interpreter(target: Target) -> None:
    p = Problem.of("gemm", 16, 16, 16)
    inputs = GEMM.make_inputs(p, "cpu", 0)
    with pytest.raises(ValueError, match="only on AMD"):
        GEMM.prepare(p, tcfg(kpack=2), target, inputs, GEMM.make_output(p, "cpu"))


# -- the run-time API ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_dispatch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No tables, a fresh process-wide dispatcher and an untuned-shapes log in tmp_path."""
    log = tmp_path / "untuned.jsonl"
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)
    monkeypatch.setenv("AUTOTUNE_UNTUNED_LOG", str(log))
    monkeypatch.setattr(dispatcher_mod, "_default", None)
    monkeypatch.setattr(api, "_plans", {})
    yield log


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def test_gemm_untuned_runs_the_fallback_warns_once_and_logs(
    fresh_dispatch: Path, launched: list[Config], target: Target
) -> None:
    """No table covers the shape: the fallback runs (torch.mm on the interpreter), warned about once."""
    a, b = rand(6, 40, seed=1), rand(24, 40, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = gemm(a, b)
        c2 = gemm(a, b)  # same shape: no second warning, no second log line
        gemm(rand(7, 40, seed=3), b)  # same (N, K), new M: logged, not warned again
    untuned = [w for w in caught if issubclass(w.category, UntunedShapeWarning)]
    assert len(untuned) == 1
    assert "gemm bf16 B:nk N=24 K=40" in str(untuned[0].message) and "M=6" in str(untuned[0].message)
    assert c.shape == (6, 24) and c.dtype == torch.bfloat16 and torch.equal(c, c2)
    ref = a.float() @ b.float().t()
    assert_close_to(c, ref, 1e-2)
    problem = Problem.of("gemm", 6, 24, 40, "bf16", layout="nk")
    assert GEMM.fallback_config(problem, target) == Config(backend="torch")
    assert launched == [] and torch.equal(c, torch.mm(a, b.t()))  # torch.mm ran, no Triton launcher
    lines = [json.loads(line) for line in fresh_dispatch.read_text().splitlines()]
    assert [(r["op"], r["m"], r["n"], r["k"], r["dtype"], r["layout"]) for r in lines] == [
        ("gemm", 6, 24, 40, "bf16", "nk"),
        ("gemm", 7, 24, 40, "bf16", "nk"),
    ]


def tuned_or_not(
    monkeypatch: pytest.MonkeyPatch, target: Target, problem: Problem, config: Config | None
) -> contextlib.AbstractContextManager[Any]:
    """Installs a table holding `config` for `problem` (the Triton path of `gemm`) and expects no warning;
    None: no table, the fallback runs and the shape is warned about."""
    if config is None:
        return pytest.warns(UntunedShapeWarning)
    table = Table.from_winners(target, [(problem, config, 1.0)])
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    return contextlib.nullcontext()


@pytest.mark.parametrize("config", [None, tcfg(split_k=2)], ids=["untuned", "triton"])
def test_gemm_kn_layout_fp16(
    fresh_dispatch: Path, monkeypatch: pytest.MonkeyPatch, target: Target, config: Config | None
) -> None:
    a, b = rand(9, 33, dtype=torch.float16, seed=4), rand(33, 20, dtype=torch.float16, seed=5)
    with tuned_or_not(monkeypatch, target, Problem.of("gemm", 9, 20, 33, "fp16", layout="kn"), config):
        c = gemm(a, b, b_layout="kn")
    assert c.dtype == torch.float16 and c.shape == (9, 20)
    assert_close_to(c, a.float() @ b.float(), 2e-3)


@pytest.mark.parametrize("config", [None, tcfg()], ids=["untuned", "triton"])
def test_gemm_non_contiguous_inputs(
    fresh_dispatch: Path, monkeypatch: pytest.MonkeyPatch, target: Target, config: Config | None
) -> None:
    """A as a transposed view, B (N x K) as a transposed (K x N) tensor: strides are honoured."""
    at = rand(30, 7, seed=6)  # (K, M)
    bt = rand(30, 18, seed=7)  # (K, N)
    a, b = at.t(), bt.t()
    assert not a.is_contiguous() and not b.is_contiguous()
    with tuned_or_not(monkeypatch, target, Problem.of("gemm", 7, 18, 30), config):
        c = gemm(a, b)
    assert_close_to(c, a.float() @ b.float().t(), 1e-2)


def test_gemm_uses_split_k_config_from_table(
    monkeypatch: pytest.MonkeyPatch, fresh_dispatch: Path, launched: list[Config], target: Target
) -> None:
    """A table's split-K config is the one launched, with no untuned warning, and its result is right."""
    M, N, K = 12, 20, 70
    chosen = tcfg(bn=32, bk=16, split_k=4)
    table = Table.from_winners(target, [(Problem.of("gemm", M, N, K, "bf16", layout="nk"), chosen, 10.0)])
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    a, b = rand(M, K, seed=8), rand(N, K, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = gemm(a, b)
    assert launched == [chosen]
    assert_close_to(c, a.float() @ b.float().t(), 1e-2)
    assert not fresh_dispatch.exists()  # nothing was untuned


def test_gemm_torch_config_from_table(
    monkeypatch: pytest.MonkeyPatch, fresh_dispatch: Path, launched: list[Config], target: Target
) -> None:
    """A table naming the vendor backend runs torch (bit-identical to F.linear), no Triton launcher."""
    table = Table.from_winners(
        target, [(Problem.of("gemm", 4, 8, 16, "bf16", layout="nk"), Config(backend="torch"), 1.0)]
    )
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    a, b = rand(4, 16, seed=10), rand(8, 16, seed=11)
    assert torch.equal(gemm(a, b), torch.nn.functional.linear(a, b))
    assert launched == []


def test_launch_config_runs_that_config(launched: list[Config], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_plans", {})
    config = tcfg(split_k=2, NUM_XCDS=8)
    a, b = rand(10, 24, dtype=torch.float16, seed=12), rand(24, 17, dtype=torch.float16, seed=13)
    c = launch_config(config, a, b, b_layout="kn")
    assert launched == [config]
    assert_close_to(c, a.float() @ b.float(), 2e-3)


OUT_CONFIGS = {
    "triton": tcfg(),
    "triton-split": tcfg(split_k=2),
    "tma": Config(
        backend="triton_tma",
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=16,
        GROUP_M=1,
        SPLIT_K=1,
        PERSISTENT=0,
        TAIL_SPLIT=0,
        num_warps=4,
        num_stages=1,
    ),
    "torch": Config(backend="torch"),
}


@pytest.mark.parametrize("name", list(OUT_CONFIGS))
@pytest.mark.parametrize("strided", [False, True])
def test_out_receives_c_for_every_backend(
    fresh_dispatch: Path, monkeypatch: pytest.MonkeyPatch, target: Target, name: str, strided: bool
) -> None:
    """`out=` gets the very bits a fresh C would, also where out is a transposed view (the TMA kernel
    then writes a temporary and copies it)."""
    config = OUT_CONFIGS[name]
    a, b = rand(20, 32, seed=30), rand(24, 32, seed=31)
    want = launch_config(config, a, b)
    out = (
        torch.full((24, 20), float("nan"), dtype=torch.bfloat16).t()
        if strided
        else torch.full((20, 24), float("nan"), dtype=torch.bfloat16)
    )
    assert launch_config(config, a, b, out=out) is out
    assert torch.equal(out, want)
    table = Table.from_winners(target, [(Problem.of("gemm", 20, 24, 32, "bf16", layout="nk"), config, 1.0)])
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    out.fill_(float("nan"))
    assert gemm(a, b, out=out) is out
    assert torch.equal(out, want)


@pytest.mark.parametrize(
    "out, exc, match",
    [
        ([[0.0]], TypeError, "out must be a torch.Tensor"),
        (rand(4, 9), ValueError, r"out must be a \(4, 8\) torch.bfloat16 tensor on cpu"),
        (rand(4, 8).half(), ValueError, "got .* torch.float16"),
        (rand(4, 8).to("meta"), ValueError, "on meta"),
        (rand(32), ValueError, r"got \(32,\)"),
    ],
    ids=["list", "shape", "dtype", "device", "1d"],
)
def test_gemm_rejects_a_bad_out(fresh_dispatch: Path, out: Any, exc: type[Exception], match: str) -> None:
    a, b = rand(4, 16), rand(8, 16)
    with pytest.raises(exc, match=match):
        gemm(a, b, out=out)
    with pytest.raises(exc, match=match):
        launch_config(tcfg(), a, b, out=out)
    assert not fresh_dispatch.exists()  # rejected before any lookup


def test_linear_3d_with_bias(fresh_dispatch: Path) -> None:
    x = rand(2, 3, 40, seed=14)
    w = rand(24, 40, seed=15)
    bias = rand(24, seed=16)
    with pytest.warns(UntunedShapeWarning):
        y = linear(x, w, bias)
    assert y.shape == (2, 3, 24) and y.dtype == torch.bfloat16
    ref = x.float() @ w.float().t() + bias.float()
    assert_close_to(y, ref, 1e-2)


def test_linear_without_bias_and_1d_input(fresh_dispatch: Path) -> None:
    w = rand(16, 24, dtype=torch.float16, seed=17)
    x = rand(24, dtype=torch.float16, seed=18)
    with pytest.warns(UntunedShapeWarning):
        y = linear(x, w)
    assert y.shape == (16,)
    assert_close_to(y, w.float() @ x.float(), 2e-3)


A = rand(4, 8)


@pytest.mark.parametrize(
    "a, b, kwargs, exc, match",
    [
        (A.float(), rand(8, 8).float(), {}, TypeError, "bf16 or fp16"),
        (A, rand(8, 8, dtype=torch.float16), {}, TypeError, "one dtype"),
        (A, rand(8, 8).to("meta"), {}, ValueError, "one device"),
        (rand(2, 4, 8), rand(8, 8), {}, ValueError, "2-D"),
        (A, rand(8, 7), {}, ValueError, "inner dimensions differ"),
        (A, rand(7, 8), {"b_layout": "kn"}, ValueError, "inner dimensions differ"),
        (A, rand(8, 8), {"b_layout": "nn"}, ValueError, "b_layout must be 'nk'"),
        ([[1.0]], rand(8, 8), {}, TypeError, "torch.Tensors"),
        (rand(0, 8), rand(8, 8), {}, ValueError, "empty GEMM"),
    ],
    ids=[
        "fp32",
        "mixed-dtype",
        "devices",
        "3d",
        "k-mismatch",
        "k-mismatch-kn",
        "bad-layout",
        "list",
        "empty",
    ],
)
def test_gemm_rejects_bad_inputs(
    fresh_dispatch: Path, a: Any, b: Any, kwargs: dict[str, str], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        gemm(a, b, **kwargs)
    with pytest.raises(exc, match=match):
        launch_config(tcfg(), a, b, **kwargs)
    assert not fresh_dispatch.exists()  # rejected before any lookup


def test_linear_rejects_bad_inputs(fresh_dispatch: Path) -> None:
    w = rand(8, 4)
    with pytest.raises(ValueError, match=r"bias must have shape \(8,\)"):
        linear(rand(3, 4), w, rand(4))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., K\)"):
        linear("x", w)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inner dimensions differ"):
        linear(rand(3, 5), w)
    with pytest.raises(TypeError, match="bf16 or fp16"):
        linear(rand(3, 4), w.float())


def test_a_module_weight_takes_the_fast_check(fresh_dispatch: Path, monkeypatch) -> None:
    """nn.Linear's weight is an nn.Parameter: its calls must not fall through to the slow explaining check
    (the rejects above show that the explaining check still runs for bad input)."""
    from autotune.kernels.dense import api

    weight = torch.nn.Parameter(rand(16, 24, seed=19), requires_grad=False)
    x = rand(3, 24, seed=20)

    def explain(*args: Any) -> None:
        raise AssertionError("the fast check refused a valid call")

    monkeypatch.setattr(api, "_explain", explain)
    with pytest.warns(UntunedShapeWarning):
        y = linear(x, weight)
    assert_close_to(y, x.float() @ weight.float().t(), 1e-2)
    assert gemm(x, weight, out=torch.empty(3, 16, dtype=torch.bfloat16)).shape == (3, 16)
