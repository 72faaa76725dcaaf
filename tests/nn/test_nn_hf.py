"""`autotune.nn` on the installed transformers: `FusedMoE` against Mixtral's and Qwen3-MoE's own sparse MoE
blocks, and `autotune.patch` on tiny Llama, Qwen3-MoE and Mixtral models built from configs with random
weights (bf16), eager and under torch.compile."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from nn_checks import TOLERANCE, rel_err
from torch import nn

import autotune
import autotune.nn.calls as calls
from autotune.nn import FusedMoE, Linear

transformers = pytest.importorskip(
    "transformers", reason="transformers is a test dependency: pip install -e '.[triton,dev,test]'"
)

BF16 = torch.bfloat16
VOCAB = 128
#: Patched against unpatched logits of the same bf16 model: bf16 rounding through two layers.
MODEL_TOLERANCE = 2 * TOLERANCE[BF16]
SMALL: dict[str, Any] = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB
)


def _llama() -> nn.Module:
    config = transformers.LlamaConfig(intermediate_size=128, **SMALL)
    return _build(transformers.LlamaForCausalLM, config)


def _qwen3_moe(norm_topk_prob: bool = True) -> nn.Module:
    config = transformers.Qwen3MoeConfig(
        intermediate_size=128, moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2, head_dim=16,
        norm_topk_prob=norm_topk_prob, **SMALL,
    )  # fmt: skip
    return _build(transformers.Qwen3MoeForCausalLM, config)


def _mixtral() -> nn.Module:
    experts = dict(num_local_experts=4, num_experts_per_tok=2)
    config = transformers.MixtralConfig(intermediate_size=32, **experts, **SMALL)
    return _build(transformers.MixtralForCausalLM, config)


def _build(cls: Any, config: Any) -> nn.Module:
    torch.manual_seed(0)
    model = cls(config)
    with torch.no_grad():  # random everywhere (routers and norms included), of a scale that keeps logits O(1)
        for p in model.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.1 if p.dim() == 1 else p.shape[-1] ** -0.5)
    return model.to(BF16).eval()


def _ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits  # type: ignore[no-any-return]


def _linear_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if type(m) is nn.Linear]


def _blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("SparseMoeBlock")]


# -- FusedMoE against the blocks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "norm"), [(_mixtral, True), (lambda: _qwen3_moe(True), True), (lambda: _qwen3_moe(False), False)]
)
def test_fused_moe_equals_the_transformers_block(make: Any, norm: bool) -> None:
    _, block = _blocks(make())[0]
    moe = FusedMoE.from_block(block)
    assert moe.renormalize is norm and moe.topk == 2
    x = torch.randn(2, 5, 64, dtype=BF16)
    with torch.no_grad():
        ref, out = block(x), moe(x)
    # what the block returns: a tensor in 5.x, (hidden states, router logits) in 4.x
    assert type(out) is type(ref) and moe.return_router_logits == isinstance(ref, tuple)
    if isinstance(ref, tuple):
        assert torch.equal(out[1], ref[1])
        out, ref = out[0], ref[0]
    assert rel_err(out, ref) < 2 * TOLERANCE[BF16]


def test_fused_moe_from_the_wrong_family_is_refused() -> None:
    _, block = _blocks(_mixtral())[0]
    with pytest.raises(ValueError, match="expected a Qwen3MoeSparseMoeBlock, got MixtralSparseMoeBlock"):
        FusedMoE.from_qwen3_moe(block)


# -- patch ----------------------------------------------------------------------------------------------


def test_patch_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _llama()
    ids = _ids()
    ref = _logits(model, ids)
    names = _linear_names(model)
    assert len(names) == 2 * 7 + 1
    report = autotune.patch(model, exclude="lm_head")
    assert report.swapped == tuple(n for n in names if n != "lm_head")
    assert report.reason("lm_head") == "excluded by name" and len(report.left) == 1
    assert type(model.lm_head) is nn.Linear
    assert all(isinstance(model.get_submodule(n), Linear) for n in report.swapped)
    seen: list[int] = []
    real = calls.linear
    monkeypatch.setattr(calls, "linear", lambda x, w, b: seen.append(1) or real(x, w, b))
    out = _logits(model, ids)
    assert len(seen) == 14  # every swapped layer ran through the entry point
    assert rel_err(out, ref) < MODEL_TOLERANCE
    monkeypatch.undo()
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, backend="aot_eager")(ids).logits
    assert rel_err(compiled, ref) < MODEL_TOLERANCE


@pytest.mark.parametrize("make", [_qwen3_moe, _mixtral])
def test_patch_moe_models(make: Any) -> None:
    model = make()
    ids = _ids()
    ref = _logits(model, ids)
    blocks = [name for name, _ in _blocks(model)]  # model.layers.N.mlp (block_sparse_moe: Mixtral in 4.x)
    assert len(blocks) == 2
    outside = [n for n in _linear_names(model) if not any(n.startswith(f"{b}.") for b in blocks)]
    report = autotune.patch(model)
    assert set(report.swapped) == set(blocks) | set(outside) and len(outside) == 2 * 4 + 1
    for block in blocks:
        assert isinstance(model.get_submodule(block), FusedMoE)
        assert f"{block}.gate" not in report.swapped
        router = report.reason(f"{block}.gate")
        assert router == f"the router of {block}, which is swapped whole (FusedMoE routes)"
    out = _logits(model, ids)
    assert rel_err(out, ref) < MODEL_TOLERANCE
    if make is _qwen3_moe:
        torch._dynamo.reset()
        with torch.no_grad():
            compiled = torch.compile(model, backend="eager")(ids).logits
        assert rel_err(compiled, ref) < MODEL_TOLERANCE


def test_patch_with_fp8_weights() -> None:
    """FP8 row-wise Linears and FP8 blockwise experts: the patched model stays near the bf16 one (e4m3
    through every layer: 0.14 measured; each module's own error is checked in test_nn_modules.py)."""
    model = _qwen3_moe()
    ids = _ids()
    ref = _logits(model, ids)
    report = autotune.patch(model, linear_weights="fp8_rowwise", moe_weights="fp8_blockwise")
    assert "model.layers.1.mlp" in report.swapped and "lm_head" in report.swapped
    assert model.lm_head.weights == "fp8_rowwise" and model.model.layers[0].mlp.weights == "fp8_blockwise"
    assert rel_err(_logits(model, ids), ref) < 0.2
