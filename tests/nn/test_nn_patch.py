"""`autotune.patch` on small torch models: what it swaps, what it leaves and why, and that the patched
model computes what the original did. The MoE blocks here mirror transformers 4.x's (an `nn.Linear` router
and a ModuleList of expert MLPs; the block returns (hidden states, router logits)); tests/nn/test_nn_hf.py
runs the installed transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from nn_checks import TOLERANCE, rel_err
from torch import nn

import autotune
import autotune.nn as atn
from autotune.nn import FusedMoE, Linear, PatchReport, patch

BF16 = torch.bfloat16


class _Expert(nn.Module):
    """A 4.x expert MLP: Mixtral's w1 (gate), w3 (up), w2 (down), or Qwen3's gate/up/down_proj."""

    def __init__(self, K: int, N: int, names: tuple[str, str, str]) -> None:
        super().__init__()
        self.names = names
        for name, shape in zip(names, ((N, K), (N, K), (K, N)), strict=True):
            setattr(self, name, nn.Linear(shape[1], shape[0], bias=False))
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(self.act_fn(gate(x)) * up(x))


class _LegacyBlock(nn.Module):
    """transformers 4.x's sparse MoE block, as 4.57 computes it."""

    names: tuple[str, str, str] = ("w1", "w3", "w2")

    def __init__(self, K: int, N: int, E: int, topk: int, norm_topk_prob: bool = True) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = topk, norm_topk_prob
        self.gate = nn.Linear(K, E, bias=False)
        self.experts = nn.ModuleList([_Expert(K, N, self.names) for _ in range(E)])

    def renormalizes(self) -> bool:
        return self.norm_topk_prob

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, S, K = hidden_states.shape
        x = hidden_states.view(-1, K)
        router_logits = self.gate(x)
        weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        if self.renormalizes():
            weights /= weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(self.top_k):
                out[t] += (self.experts[int(chosen[t, j])](x[t : t + 1]) * weights[t, j])[0]
        return out.reshape(B, S, K), router_logits


class MixtralSparseMoeBlock(_LegacyBlock):
    def renormalizes(self) -> bool:
        return True  # Mixtral always renormalizes its top-k


class Qwen3MoeSparseMoeBlock(_LegacyBlock):
    names = ("gate_proj", "up_proj", "down_proj")


class _Layer(nn.Module):
    def __init__(self, K: int, block: nn.Module) -> None:
        super().__init__()
        self.proj = nn.Linear(K, K)
        self.mlp = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h + self.mlp(h)[0]


class _Toy(nn.Module):
    """Two layers with MoE blocks, and beside them Linears that patch must leave: float32, on another
    device, a subclass, with a hook."""

    def __init__(self, K: int = 64) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [_Layer(K, MixtralSparseMoeBlock(K, 32, 4, 2)), _Layer(K, Qwen3MoeSparseMoeBlock(K, 32, 4, 2))]
        )
        self.head = nn.Linear(K, 48)
        self.fp32 = nn.Linear(48, 16)
        self.meta = nn.Linear(K, K, device="meta")
        self.sub = _Sub(48, 16)
        self.hooked = nn.Linear(48, 16)

    def to_model_dtype(self) -> _Toy:
        for name, module in self.named_children():
            if name not in ("fp32", "meta"):
                module.to(BF16)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        h = self.head(x)
        return torch.cat([self.fp32(h.float()).to(BF16), self.sub(h), self.hooked(h)], dim=-1)


class _Sub(nn.Linear):
    pass


def _toy(seed: int = 0) -> _Toy:
    torch.manual_seed(seed)
    toy = _Toy()
    with torch.no_grad():
        for p in toy.parameters():
            if not p.is_meta:
                p.normal_(0, p.shape[-1] ** -0.5)
    toy.to_model_dtype()
    toy.hooked.register_forward_hook(lambda module, args, out: out * 2)
    return toy


@pytest.mark.parametrize("cls", [MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock])
@pytest.mark.parametrize("norm", [True, False])
def test_fused_moe_of_a_4x_block_returns_what_it_returns(cls: type[_LegacyBlock], norm: bool) -> None:
    torch.manual_seed(1)
    block = cls(64, 32, 4, 2, norm_topk_prob=norm)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    block.to(BF16)
    moe = FusedMoE.from_mixtral(block) if cls is MixtralSparseMoeBlock else FusedMoE.from_qwen3_moe(block)
    assert moe.renormalize == (norm or cls is MixtralSparseMoeBlock) and moe.return_router_logits
    x = torch.randn(2, 5, 64, dtype=BF16)
    with torch.no_grad():
        out, logits = moe(x)  # type: ignore[misc]
        ref, ref_logits = block(x)
    assert torch.equal(logits, ref_logits)
    assert rel_err(out, ref) < 2 * TOLERANCE[BF16]
    w1 = moe.w1[1]
    assert torch.equal(w1[:32], getattr(block.experts[1], block.names[0]).weight)  # the gate rows first
    assert torch.equal(w1[32:], getattr(block.experts[1], block.names[1]).weight)


def test_patch_swaps_what_it_can_serve_and_says_why_it_left_the_rest() -> None:
    toy = _toy()
    x = torch.randn(2, 6, 64, dtype=BF16)
    with torch.no_grad():
        ref = toy(x)
    kept = {name: getattr(toy, name) for name in ("fp32", "meta", "sub", "hooked")}
    report = patch(toy)
    assert isinstance(report, PatchReport)
    assert report.swapped == (
        "layers.0.proj", "layers.0.mlp", "layers.1.proj", "layers.1.mlp", "head",
    )  # fmt: skip
    assert isinstance(toy.layers[0].mlp, FusedMoE) and isinstance(toy.layers[1].mlp, FusedMoE)
    assert isinstance(toy.head, Linear) and isinstance(toy.layers[0].proj, Linear)
    for name, module in kept.items():
        assert getattr(toy, name) is module, f"{name} was touched"
    reasons = dict((entry.name, entry.reason) for entry in report.left)
    assert "torch.float32" in reasons["fp32"] and "bf16 or fp16" in reasons["fp32"]
    assert reasons["meta"] == "weights on meta, the rest of the model on cpu"
    assert reasons["sub"].startswith("a subclass of nn.Linear (_Sub)")
    assert "forward hooks" in reasons["hooked"]
    for i in (0, 1):  # the routers inside swapped blocks, never swapped on their own
        router = reasons[f"layers.{i}.mlp.gate"]
        assert router.startswith(f"the router of layers.{i}.mlp, which is swapped whole")
    assert set(reasons) == {"fp32", "meta", "sub", "hooked", "layers.0.mlp.gate", "layers.1.mlp.gate"}
    assert report.reason("head") is None
    with torch.no_grad():
        out = toy(x)
    assert rel_err(out, ref) < 2 * TOLERANCE[BF16]


def test_patch_filters_by_name() -> None:
    toy = _toy()
    report = patch(toy, include=["layers.*", "head"], exclude="*.mlp")
    assert report.swapped == ("layers.0.proj", "layers.1.proj", "head")
    assert report.reason("layers.0.mlp") == "excluded by name"
    router = report.reason("layers.0.mlp.gate")
    assert router == "the router of layers.0.mlp, which is left whole (excluded by name)"
    assert report.reason("layers.1.mlp.experts.3.down_proj") == (
        "a layer of layers.1.mlp, which is left whole (excluded by name)"
    )
    assert report.reason("sub") is not None and report.reason("sub").startswith("a subclass")  # type: ignore[union-attr]
    assert report.reason("fp32") == "not included by name"
    assert type(toy.layers[0].mlp) is MixtralSparseMoeBlock and type(toy.layers[0].mlp.gate) is nn.Linear

    toy = _toy()
    report = patch(toy, include=lambda name: name.endswith("proj"), moe=False)
    assert report.swapped == ("layers.0.proj", "layers.1.proj")
    assert report.reason("layers.1.mlp") == "moe=False"


def test_patch_with_fp8_weights_leaves_the_shapes_it_cannot_quantize() -> None:
    model = nn.Sequential(nn.Linear(128, 96), nn.ReLU(), nn.Linear(96, 128)).to(BF16)
    x = torch.randn(4, 128, dtype=BF16)
    with torch.no_grad():
        ref = model(x)
    report = patch(model, linear_weights="fp8_blockwise")
    assert report.swapped == ("0",)
    assert model[0].weights == "fp8_blockwise"
    assert "needs K a multiple of its scale block 128, got K=96" in (report.reason("2") or "")
    with torch.no_grad():
        assert rel_err(model(x), ref) < 0.08


def test_patch_swaps_a_shared_layer_once() -> None:
    shared = nn.Linear(32, 32).to(BF16)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = patch(model)
    assert report.swapped == ("0",)
    assert isinstance(model[0], Linear) and model[2] is model[0]


def test_patch_refuses_bad_arguments() -> None:
    model = nn.Sequential(nn.Linear(32, 32).to(BF16))
    with pytest.raises(ValueError, match="linear_weights must be"):
        patch(model, linear_weights="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="moe_weights must be"):
        patch(model, moe_weights="fp8_rowwise")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="glob patterns"):
        patch(model, include=[3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="inside a model"):
        patch(nn.Linear(32, 32))
    assert type(model[0]) is nn.Linear


def test_autotune_patch_is_lazy() -> None:
    """`import autotune` stays light: torch comes only with `autotune.patch`."""
    probe = (
        "import json, sys\nimport autotune\nbefore = 'torch' in sys.modules\nfrom autotune import patch\n"
        "print(json.dumps([before, 'torch' in sys.modules, patch.__module__]))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [False, True, "autotune.nn.patch"]
    assert autotune.patch is atn.patch and "patch" in autotune.__all__
