"""The run-time fused MoE (`autotune.kernels.fused_moe`): the table's config or the default, both kernel
structures, a block alignment with no host sync, workspaces kept per shape, bad input before any launch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.engine.bench import rel_error
from autotune.kernels import MOE, fused_moe, fused_topk
from autotune.kernels.moe.ref import align_block_size, moe_reference, routing_logits
from autotune.kernels.moe.routing import align_fixed, fixed_padded

INTERP = Target.interpreter_target()
needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)


def _routing(M: int, E: int, topk: int, zipf: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, 8, generator=gen)
    return fused_topk(x, routing_logits(M, E, zipf=zipf, generator=gen), topk)


@pytest.mark.parametrize("M, E, topk, block_m, zipf", [
    (1, 8, 2, 16, 0.0), (7, 8, 2, 16, 0.0), (33, 4, 2, 16, 1.5), (40, 16, 4, 32, 0.0), (3, 64, 8, 16, 1.0),
    # several steps of pair ids (moe.align.CHUNK) over E not a power of two; more blocks than a step holds
    (300, 60, 8, 64, 1.2), (2100, 3, 1, 1, 3.0),
])  # fmt: skip
def test_align_fixed_is_align_block_size_then_padding_blocks(
    M: int, E: int, topk: int, block_m: int, zipf: float
) -> None:
    _, ids = _routing(M, E, topk, zipf, seed=M)
    sorted_ids, expert_ids, padded = align_fixed(ids, block_m, E)
    want_ids, want_experts, want_padded = align_block_size(ids, block_m, E)
    assert padded == fixed_padded(M * topk, E, block_m) >= want_padded and padded % block_m == 0
    assert torch.equal(sorted_ids[:want_padded], want_ids)
    assert torch.equal(expert_ids[: want_padded // block_m], want_experts)
    assert (sorted_ids[want_padded:] == M * topk).all() and (expert_ids[want_padded // block_m :] == -1).all()
    # the worst routing fills the grid: every pair on its own expert, each padded to a block
    spread = torch.arange(M * topk).remainder(E).reshape(M, topk).int()
    if M * topk <= E:
        assert align_block_size(spread, block_m, E)[2] == padded


def test_the_alignment_spans_long_routings() -> None:
    """One span for a short routing; long ones cut into spans so that about PROGRAMS programs run, at most
    one a CHUNK of ids and TABLE counts in all."""
    from autotune.kernels.moe.align import CHUNK, PROGRAMS, TABLE, spans_for

    assert spans_for(8, 8) == spans_for(1024, 256) == 1
    assert spans_for(32768, 8) == 32768 // CHUNK  # a span a chunk
    assert spans_for(32768, 128) == PROGRAMS // 128
    assert spans_for(1 << 20, 2048) * 2048 <= TABLE


def test_align_fixed_reads_nothing_back() -> None:
    """On the meta device there is no data: sizes come from the shapes alone, so no host sync can hide."""
    ids = torch.empty(5, 2, dtype=torch.int32, device="meta")
    sorted_ids, expert_ids, padded = align_fixed(ids, 16, 8)
    assert padded == fixed_padded(10, 8, 16) == 144
    assert sorted_ids.shape == (144,) and expert_ids.shape == (9,)
    assert sorted_ids.is_meta and expert_ids.is_meta


def _case(
    M: int, E: int, N: int, K: int, topk: int, zipf: float = 0.0, fp8: bool = False
) -> tuple[tuple[torch.Tensor, ...], dict[str, Any], Problem]:
    problem = Problem.of("moe", M, N, K, variant="fp8e4m3" if fp8 else None, E=E, topk=topk)
    x, w1, w2, _, _, w1s, w2s = MOE.make_inputs(problem, "cpu", seed=M + E)
    weights, ids = _routing(M, E, topk, zipf, seed=K)
    kw: dict[str, Any] = {}
    if fp8:
        kw = dict(w1_scale=w1s, w2_scale=w2s, block_shape=[128, 128])
    return (x, w1, w2, weights, ids), kw, problem


def _serve(monkeypatch: pytest.MonkeyPatch, problem: Problem, config: Config | None) -> None:
    """Installs a dispatcher whose only table holds `config` for `problem`'s shape (none: no table)."""
    from autotune.dispatch import Dispatcher, Table

    tables = [] if config is None else [Table.from_winners(INTERP, [(problem, config, 1.0)])]
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher(tables, device_key=INTERP.device_key())
    )


def _config(fused: int, **extra: int) -> Config:
    knobs = dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=1, num_warps=4, num_stages=1)
    return Config(backend="triton", **knobs, GATE_UP_FUSED=fused, **extra)


@needs_interpreter
@pytest.mark.parametrize("fused", [0, 1])
@pytest.mark.parametrize("M, E, N, K, topk, zipf", [(5, 4, 32, 64, 2, 0.0), (9, 8, 32, 64, 3, 2.0)])
def test_served_call_matches_the_reference_in_both_structures(
    monkeypatch: pytest.MonkeyPatch, fused: int, M: int, E: int, N: int, K: int, topk: int, zipf: float
) -> None:
    args, kw, problem = _case(M, E, N, K, topk, zipf)
    _serve(monkeypatch, problem, _config(fused))
    out = fused_moe(*args, target=INTERP, **kw)
    err = rel_error(out, moe_reference(*args, fused_gate_up=bool(fused)))
    assert out.shape == (M, K) and out.dtype == args[0].dtype and err <= 1e-2, err


@needs_interpreter
@pytest.mark.parametrize("fused", [0, 1])
def test_fp8_weights_and_split_k_are_served(monkeypatch: pytest.MonkeyPatch, fused: int) -> None:
    args, kw, problem = _case(3, 4, 128, 128, 2, fp8=True)
    _serve(monkeypatch, problem, _config(fused, SPLIT_K=2))
    out = fused_moe(*args, target=INTERP, **kw)
    assert rel_error(out, moe_reference(*args, **kw, fused_gate_up=bool(fused))) <= 1e-2


@needs_interpreter
def test_an_untuned_shape_runs_the_default_and_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import UntunedShapeWarning

    args, kw, problem = _case(4, 4, 32, 64, 2)
    _serve(monkeypatch, problem, None)
    with pytest.warns(UntunedShapeWarning, match="moe"):
        out = fused_moe(*args, target=INTERP, **kw)
    assert rel_error(out, moe_reference(*args)) <= 2e-2


@needs_interpreter
def test_inplace_out_and_workspaces_kept_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.kernels.moe import api

    args, _, problem = _case(6, 4, 32, 64, 2)
    _serve(monkeypatch, problem, _config(0))
    api._workspaces.clear()
    want = moe_reference(*args)
    first = fused_moe(*args, target=INTERP)
    (held,) = api._workspaces.values()
    buffers = {name: t.data_ptr() for name, t in held.items()}
    assert {"sorted_ids", "expert_ids", "gate_up", "inter", "down"} <= set(buffers)
    out = torch.full_like(args[0], float("nan"))
    assert fused_moe(*args, out=out, target=INTERP) is out and torch.equal(out, first)
    assert {name: t.data_ptr() for name, t in held.items()} == buffers and len(api._workspaces) == 1
    x = args[0].clone()
    assert fused_moe(x, *args[1:], inplace=True, target=INTERP) is x
    assert torch.equal(x, first) and rel_error(first, want) <= 2e-2


@needs_interpreter
def test_a_given_config_runs_instead_of_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's override_config: the table holds the fused structure, the call asks for vLLM's."""
    import autotune.kernels.moe.kernel as kernel

    args, _, problem = _case(5, 4, 32, 64, 2, zipf=1.0)
    _serve(monkeypatch, problem, _config(1))
    seen: list[dict[str, Any]] = []
    real = kernel.fused_moe

    def spy(*a: Any, **k: Any) -> torch.Tensor:
        seen.append(dict(a[5]))
        return real(*a, **k)

    monkeypatch.setattr(kernel, "fused_moe", spy)
    given = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GATE_UP_FUSED": 0}
    out = fused_moe(*args, target=INTERP, config=given)
    assert seen == [given]
    assert rel_error(out, moe_reference(*args, fused_gate_up=False)) <= 1e-2
    fused_moe(*args, target=INTERP)
    assert seen[1]["GATE_UP_FUSED"] == 1 and seen[1]["BLOCK_SIZE_N"] == 32


def _bad(args: tuple[torch.Tensor, ...], how: str) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    x, w1, w2, weights, ids = args
    if how == "ids":
        ids = ids.clone()
        ids[1, 0] = w1.shape[0]
    elif how == "negative ids":
        ids = ids.clone()
        ids[0, 1] = -1
    elif how == "w2 shape":
        w2 = w2[:, :, :-1]
    elif how == "dtype":
        w1 = w1.half()
    elif how == "routing shape":
        weights = weights[:-1]
    kw: dict[str, Any] = {}
    if how == "out and inplace":
        kw = dict(out=torch.empty_like(x), inplace=True)
    if how == "out shape":
        kw = dict(out=torch.empty(x.shape[0] + 1, x.shape[1], dtype=x.dtype))
    if how == "torch config":
        kw = dict(config=Config(backend="torch"))
    if how == "config without tiles":
        kw = dict(config={"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32})
    return (x, w1, w2, weights, ids), kw


@pytest.mark.parametrize(
    "how, message",
    [
        ("ids", "topk_ids out of range"),
        ("negative ids", "topk_ids out of range"),
        ("w2 shape", "w2 must be"),
        ("dtype", "w1 and w2 must have x's dtype"),
        ("routing shape", "topk_weights shape"),
        ("out and inplace", "not both"),
        ("out shape", "out must be a contiguous"),
        ("torch config", "backend 'triton'"),
        ("config without tiles", "lacks BLOCK_SIZE_K"),
    ],
)
def test_bad_input_is_one_clear_error_before_any_launch(
    monkeypatch: pytest.MonkeyPatch, how: str, message: str
) -> None:
    import autotune.kernels.moe.kernel as kernel

    args, _, problem = _case(4, 4, 32, 64, 2)
    _serve(monkeypatch, problem, _config(0))

    def no_launch(*a: Any, **k: Any) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(kernel, "fused_moe", no_launch)
    bad, kw = _bad(args, how)
    with pytest.raises(ValueError, match=message):
        fused_moe(*bad, target=INTERP, **kw)


def test_fused_topk_follows_vllms_conventions() -> None:
    gen = torch.Generator().manual_seed(3)
    x, logits = torch.randn(6, 16, generator=gen), torch.randn(6, 8, generator=gen)
    weights, ids = fused_topk(x, logits, 3)
    probs = torch.softmax(logits, dim=-1)
    assert ids.dtype == torch.int32 and weights.dtype == torch.float32 and ids.shape == (6, 3)
    assert torch.equal(ids.long(), probs.topk(3).indices)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6))
    raw, _ = fused_topk(x, logits, 3, renormalize=False)
    torch.testing.assert_close(raw, probs.topk(3).values)
    with pytest.raises(ValueError, match="gating_output must be"):
        fused_topk(x[:5], logits, 3)
