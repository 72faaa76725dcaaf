"""`autotune.nn.Linear` and `autotune.nn.FusedMoE` against plain torch references, on small shapes (the
dense GEMMs run the vendor fallback on the CPU, the fused MoE its Triton kernel in the interpreter)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from nn_checks import TOLERANCE, no_launch, rel_err
from torch import nn

import autotune.nn.calls as calls
from autotune.kernels.common.formats import dequantize_fp8, fp8_dtype, quantize_fp8
from autotune.kernels.moe.ref import dequantize_blockwise, moe_reference
from autotune.nn import FusedMoE, Linear, quantize_groups, quantize_rows

DTYPES = [torch.bfloat16, torch.float16]
FP8_BLOCKS = {"fp8_rowwise": ((1, 0), (1, 0)), "fp8_blockwise": ((1, 128), (128, 128))}
#: FP8 outputs against the dequantized operands (`gemm_quant`'s bf16 tolerance) and against the unquantized
#: GEMM (e4m3 keeps 3 mantissa bits: a few percent).
FP8_TOLERANCE, FP8_VS_EXACT = 1e-2, 8e-2


def _linear(K: int, N: int, dtype: torch.dtype, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    module = nn.Linear(K, N, bias=bias).to(dtype)
    with torch.no_grad():
        module.weight.normal_(0, K**-0.5)
        if module.bias is not None:
            module.bias.normal_()
    return module


def _exact(x: torch.Tensor, module: nn.Linear) -> torch.Tensor:
    """The GEMM of the same inputs in fp32."""
    b = None if module.bias is None else module.bias.float()
    return torch.nn.functional.linear(x.float(), module.weight.float(), b)


# -- activation quantizers ------------------------------------------------------------------------------


def test_the_activation_quantizers_are_the_formats_own() -> None:
    """Per row and per 1x128 group, bit for bit what `quantize_fp8` gives (the kernels' reference)."""
    x = torch.randn(5, 256) * torch.logspace(-2, 2, 5)[:, None]
    dt = fp8_dtype("fp8e4m3", "interpreter")
    for ours, block in ((quantize_rows(x, dt), (1, 0)), (quantize_groups(x, dt), (1, 128))):
        q, scale = quantize_fp8(x, dt, block)
        assert ours[0].dtype == dt and ours[1].shape == scale.shape
        assert torch.equal(ours[0].view(torch.uint8), q.view(torch.uint8))
        assert torch.equal(ours[1], scale)


# -- Linear ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_nn_linear(dtype: torch.dtype, bias: bool) -> None:
    module = _linear(96, 80, dtype, bias)
    ours = Linear.from_linear(module)
    assert ours.weight is module.weight and (ours.bias is module.bias)
    assert (ours.in_features, ours.out_features) == (96, 80)
    for shape in [(7, 96), (2, 3, 96), (96,)]:
        x = torch.randn(shape, dtype=dtype)
        with torch.no_grad():
            out = ours(x)
            assert out.dtype == dtype and out.shape == (*shape[:-1], 80)
            assert rel_err(out, _exact(x, module)) < TOLERANCE[dtype]
            assert rel_err(out, module(x)) < TOLERANCE[dtype]


def test_linear_calls_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, ...]] = []
    real = calls.linear

    def spy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(calls, "linear", spy)
    ours = Linear.from_linear(_linear(64, 32, torch.bfloat16))
    ours(torch.randn(2, 5, 64, dtype=torch.bfloat16))
    assert seen == [(10, 64)]


@pytest.mark.parametrize("weights", ["fp8_rowwise", "fp8_blockwise"])
@pytest.mark.parametrize("bias", [True, False])
def test_fp8_linear_equals_the_dequantized_gemm(weights: str, bias: bool) -> None:
    module = _linear(256, 136, torch.bfloat16, bias, seed=1)
    ours = Linear.from_linear(module, weights=weights)  # type: ignore[arg-type]
    dt = fp8_dtype("fp8e4m3", "interpreter")
    a_block, w_block = FP8_BLOCKS[weights]
    assert ours.weight.dtype == dt and ours.weight.shape == (136, 256)
    assert ours.weight_scale is not None and ours.weight_scale.dtype == torch.float32
    q_w, s_w = quantize_fp8(module.weight.detach(), dt, w_block)  # quantized once, as the formats do
    assert torch.equal(ours.weight.view(torch.uint8), q_w.view(torch.uint8))
    assert torch.equal(ours.weight_scale, s_w)
    w = dequantize_fp8(ours.weight, ours.weight_scale, w_block)
    x = torch.randn(2, 9, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        out = ours(x)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 9, 136)
    xq, xs = quantize_fp8(x.reshape(-1, 256).float(), dt, a_block)
    ref = dequantize_fp8(xq, xs, a_block) @ w.t()
    if bias:
        ref = ref + module.bias.float()
    assert rel_err(out.reshape(-1, 136), ref) < FP8_TOLERANCE
    assert rel_err(out, _exact(x, module)) < FP8_VS_EXACT
    assert torch.equal(ours.weight.view(torch.uint8), q_w.view(torch.uint8))  # calls leave the weights


@pytest.mark.parametrize(
    ("make", "weights", "match"),
    [
        (lambda: _linear(64, 32, torch.float32), None, "float32"),
        (lambda: _linear(64, 32, torch.float32), "fp8_rowwise", "float32"),
        (lambda: _linear(96, 32, torch.bfloat16), "fp8_blockwise", "multiple of its scale block 128"),
        (lambda: _linear(64, 32, torch.bfloat16), "int8", "weights must be None or one of"),
    ],
)
def test_linear_refuses_what_it_cannot_serve(make: object, weights: str | None, match: str) -> None:
    module = make()  # type: ignore[operator]
    with pytest.raises(ValueError, match=match) as info:
        Linear.from_linear(module, weights=weights)  # type: ignore[arg-type]
    assert str(info.value).startswith("autotune.nn.Linear cannot serve this layer")


def test_linear_refuses_bad_tensors() -> None:
    w = torch.randn(32, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="2-D"):
        Linear(w[None])
    with pytest.raises(ValueError, match=r"the bias must be \(32,\)"):
        Linear(w, torch.randn(31, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="the bias must be"):
        Linear(w, torch.randn(32, dtype=torch.float16))
    with pytest.raises(ValueError, match=re.escape("expected a torch.nn.Linear")):
        Linear.from_linear(nn.Conv1d(4, 4, 1))  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [None, "fp8_rowwise"])
def test_linear_bad_input_is_one_error_before_any_launch(
    weights: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = Linear.from_linear(_linear(64, 32, torch.bfloat16), weights=weights)  # type: ignore[arg-type]
    no_launch(monkeypatch)
    with pytest.raises(ValueError, match=r"expects x of shape \(\.\.\., 64\), got \(3, 63\)"):
        ours(torch.randn(3, 63, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=re.escape("takes torch.bfloat16 activations, got torch.float16")):
        ours(torch.randn(3, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="weight is on cpu, x on meta"):
        ours(torch.empty(3, 64, dtype=torch.bfloat16, device="meta"))
    with pytest.raises(TypeError, match=re.escape("takes a torch.Tensor")):
        ours([1.0] * 64)  # type: ignore[arg-type]


def test_linear_of_no_rows_launches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = Linear.from_linear(_linear(64, 32, torch.bfloat16))
    no_launch(monkeypatch)
    assert ours(torch.randn(0, 4, 64, dtype=torch.bfloat16)).shape == (0, 4, 32)


def test_linear_repr_says_what_it_serves() -> None:
    assert "in_features=64, out_features=32, bias=True, weights=bf16" in repr(
        Linear.from_linear(_linear(64, 32, torch.bfloat16))
    )
    text = repr(Linear.from_linear(_linear(128, 32, torch.float16, bias=False), weights="fp8_blockwise"))
    assert "bias=False, weights=fp8_blockwise (torch.float8_e4m3fn), out=fp16" in text


@pytest.mark.parametrize("weights", [None, "fp8_blockwise"])
def test_linear_compiles_to_one_graph(weights: str | None) -> None:
    """With the entry points registered as torch ops, a compiled Linear has no graph break."""
    if not calls.is_torch_op("linear") or not calls.is_torch_op("gemm_quant"):
        pytest.skip("the entry points are not registered torch ops in this build: calls break the graph")
    ours = Linear.from_linear(_linear(128, 48, torch.bfloat16), weights=weights)  # type: ignore[arg-type]
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)(x)
        assert rel_err(compiled, ours(x)) < 1e-6


# -- FusedMoE -------------------------------------------------------------------------------------------


def _experts(E: int, N: int, K: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    gate = (torch.randn(E, K, generator=gen) * K**-0.5).to(dtype)  # logits of unit scale
    w1 = (torch.randn(E, 2 * N, K, generator=gen) * K**-0.5).to(dtype)
    w2 = (torch.randn(E, K, N, generator=gen) * N**-0.5).to(dtype)
    return gate, w1, w2


def _loop(x: torch.Tensor, gate: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk: int, renorm: bool):
    """The MoE by a loop over tokens and their experts, in fp32; the router's logits in the input's dtype,
    as the module and the models compute them (fp32 logits would route a near-tie to another expert)."""
    xf = x.reshape(-1, x.shape[-1]).float()
    probs = torch.softmax(torch.nn.functional.linear(x.reshape(-1, x.shape[-1]), gate).float(), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    if renorm:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    N = w2.shape[2]
    out = torch.zeros_like(xf)
    for t in range(xf.shape[0]):
        for j in range(topk):
            e = int(ids[t, j])
            h = w1[e].float() @ xf[t]
            out[t] += weights[t, j] * (w2[e].float() @ (torch.nn.functional.silu(h[:N]) * h[N:]))
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("renormalize", [True, False])
def test_fused_moe_equals_a_loop_over_experts(dtype: torch.dtype, renormalize: bool) -> None:
    gate, w1, w2 = _experts(6, 32, 64, dtype)
    moe = FusedMoE(gate, w1, w2, topk=2, renormalize=renormalize)
    assert moe.w1 is not None and moe.w1.data_ptr() == w1.data_ptr()  # the weights are shared, not copied
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        out = moe(x)
    assert isinstance(out, torch.Tensor) and out.shape == x.shape and out.dtype == dtype
    assert rel_err(out, _loop(x, gate, w1, w2, 2, renormalize)) < 2 * TOLERANCE[dtype]
    # the flag is honoured: the other routing is far off
    assert rel_err(out, _loop(x, gate, w1, w2, 2, not renormalize)) > 0.05


def test_fp8_fused_moe_equals_the_dequantized_reference() -> None:
    gate, w1, w2 = _experts(4, 64, 128, torch.bfloat16, seed=3)
    moe = FusedMoE(gate, w1, w2, topk=2, renormalize=True, weights="fp8_blockwise")
    dt = fp8_dtype("fp8e4m3", "interpreter")
    assert moe.w1.dtype == dt and moe.w2.dtype == dt
    assert moe.w1_scale is not None and moe.w1_scale.shape == (4, 1, 1)
    assert moe.w2_scale is not None and moe.w2_scale.shape == (4, 1, 1)
    x = torch.randn(9, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        out = moe(x)
        weights, ids = torch.topk(torch.softmax(x.float() @ gate.float().t(), -1), 2, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        ref = moe_reference(x, moe.w1, moe.w2, weights, ids.int(), w1_scale=moe.w1_scale,
                            w2_scale=moe.w2_scale, block_shape=[128, 128])  # fmt: skip
    assert rel_err(out, ref) < 3e-2
    pairs = ((moe.w1, moe.w1_scale), (moe.w2, moe.w2_scale))
    deq = [dequantize_blockwise(w, s, (128, 128)) for w, s in pairs]
    assert rel_err(out, _loop(x, gate, *deq, 2, True)) < FP8_VS_EXACT
    assert rel_err(out, _loop(x, gate, w1, w2, 2, True)) < FP8_VS_EXACT


def test_fused_moe_can_return_the_router_logits() -> None:
    gate, w1, w2 = _experts(4, 32, 64, torch.bfloat16)
    moe = FusedMoE(gate, w1, w2, topk=2, renormalize=True, return_router_logits=True)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        out = moe(x)
    assert isinstance(out, tuple) and out[0].shape == x.shape
    assert torch.equal(out[1], torch.nn.functional.linear(x.reshape(6, 64), gate))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda g, a, b: (g.float(), a.float(), b.float()), "must all be bf16 or all fp16"),
        (lambda g, a, b: (g, a.half(), b), "must all be bf16 or all fp16"),
        (lambda g, a, b: (g, a[:, :-1], b), r"w1 \(E, 2N, K\)"),
        (lambda g, a, b: (g, a, b[:, :, :-1]), "to match"),
        (lambda g, a, b: (g[:-1], a, b), r"w1 \(E, 2N, K\)"),
    ],
)
def test_fused_moe_refuses_what_it_cannot_serve(change: object, match: str) -> None:
    gate, w1, w2 = change(*_experts(4, 32, 64, torch.bfloat16))  # type: ignore[operator]
    with pytest.raises(ValueError, match=match) as info:
        FusedMoE(gate, w1, w2, topk=2, renormalize=True)
    assert str(info.value).startswith("autotune.nn.FusedMoE cannot serve this block")


def test_fused_moe_refuses_bad_settings() -> None:
    gate, w1, w2 = _experts(4, 32, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"topk must be an int in \[1, E=4\]"):
        FusedMoE(gate, w1, w2, topk=5, renormalize=True)
    with pytest.raises(ValueError, match="weights must be None or 'fp8_blockwise'"):
        FusedMoE(gate, w1, w2, topk=2, renormalize=True, weights="fp8_rowwise")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot read Linear"):
        FusedMoE.from_block(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="expected a MixtralSparseMoeBlock"):
        FusedMoE.from_mixtral(nn.Linear(4, 4))


def test_fused_moe_bad_input_is_one_error_before_any_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    moe = FusedMoE(*_experts(4, 32, 64, torch.bfloat16), topk=2, renormalize=True)
    no_launch(monkeypatch)
    with pytest.raises(ValueError, match=r"hidden_states of shape \(\.\.\., 64\)"):
        moe(torch.randn(3, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=re.escape("takes torch.bfloat16 hidden states, got torch.float32")):
        moe(torch.randn(3, 64))
    with pytest.raises(ValueError, match="weights are on cpu, hidden states on meta"):
        moe(torch.empty(3, 64, dtype=torch.bfloat16, device="meta"))
    assert moe(torch.randn(0, 64, dtype=torch.bfloat16)).shape == (0, 64)


def test_fused_moe_repr_and_report_are_values() -> None:
    moe = FusedMoE(*_experts(4, 32, 64, torch.bfloat16), topk=2, renormalize=False)
    text = "experts=4, hidden_size=64, intermediate_size=32, topk=2, renormalize=False, weights=bf16"
    assert text in repr(moe)
    from autotune.nn import Left, PatchReport

    report = PatchReport(("a",), (Left("b", "why"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.swapped = ()  # type: ignore[misc]
    assert report.reason("b") == "why" and report.reason("a") is None
