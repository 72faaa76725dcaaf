"""Model catalogs: every GEMM and MoE problem of one transformer layer of a known model, per shard.

A `[[sweep]]` table may name a model instead of shapes (`model = "llama-3.1-70b"`, `tp = [1, 8]`,
`m = "decode"`); `model_problems` turns (model, TP, EP, M values) into the problems one GPU of that
deployment runs. The sizes below come from the models' public config.json files (the Hugging Face
repositories named in each entry's `source`); nothing is measured or guessed.

Per shard, with tensor parallelism `tp` (Megatron-style, as vLLM and SGLang split these models):

- GQA attention: ``attn.qkv`` (column parallel, Q, K and V fused): N = (heads/tp + 2·kv_local)·head_dim,
  K = hidden, where kv_local = kv_heads/tp, or 1 when kv_heads < tp (KV heads are then replicated, which
  needs tp to be a multiple of kv_heads); ``attn.o`` (row parallel): N = hidden, K = heads/tp·head_dim.
- MLA attention (DeepSeek-V3): ``attn.q_a`` (N = q_lora_rank, K = hidden, replicated), ``attn.q_b``
  (N = heads/tp·(qk_nope_head_dim + qk_rope_head_dim), K = q_lora_rank), ``attn.kv_a`` (kv_a_proj_with_mqa:
  N = kv_lora_rank + qk_rope_head_dim, K = hidden, replicated), ``attn.kv_b`` (N = heads/tp·
  (qk_nope_head_dim + v_head_dim), K = kv_lora_rank; the unabsorbed prefill form), ``attn.o`` (N = hidden,
  K = heads/tp·v_head_dim).
- Dense MLP (dense models, and the first `dense_layers` layers of an MoE model): ``mlp.gate_up`` (gate and
  up fused: N = 2·intermediate/tp, K = hidden) and ``mlp.down`` (N = hidden, K = intermediate/tp). Shared
  experts (DeepSeek-V3) are a dense MLP of their own, split the same way: ``shared.gate_up``,
  ``shared.down``.
- MoE: ``moe.router`` (the gate, N = experts, K = hidden, replicated) and ``moe.experts``, a fused MoE
  problem. Without expert parallelism (ep = 1) every rank holds all E experts, each split by TP:
  N = moe_intermediate/tp, E = experts. With expert parallelism (ep > 1) the experts are divided over the
  ep ranks and each is whole on its rank: N = moe_intermediate, E = experts/ep (TP then applies to
  attention and the dense MLPs only). K = hidden and topk is the model's in both cases.
- ``lm_head``: N = vocab/tp, K = hidden (vocab parallel).

A size that does not divide (heads, KV heads, intermediate, vocab by tp; experts by ep), `ep` for a dense
model, fewer experts on a rank than topk, or FP8 block-scaled expert weights whose per-shard N or K is
not a multiple of 128 is a SpecError naming the model, the split and what does not divide.

Dtypes: the dense GEMMs run in the activation dtype (bf16 or fp16: the dense GEMM op has no FP8 mode),
and so do the routed experts unless `weights` says otherwise. DeepSeek-V3 ships its weights FP8 (e4m3)
with 128x128 block scales, so its routed experts default to ``weights = "fp8e4m3"``; its dense GEMMs are
tuned in bf16. gpt-oss-120b ships MXFP4 experts, which the MoE op does not implement: its experts default
to the activation dtype.

M presets (token counts per rank): ``"decode"`` = 1, 2, 4, …, 256 (a batch of sequences, one token each)
and ``"prefill"`` = 512, 1024, 2048, 4096, 8192 (chunked-prefill sized token batches). The LM head only
sees the last token of each sequence during prefill; it is listed at every M anyway.

Layers repeat, so each distinct shape is one problem: where two layers share a shape their labels are
joined ("attn.o+mlp.down").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autotune.core.problem import Problem, normalize_dtype
from autotune.core.registry import layer_op, rules_of
from autotune.sweeps.errors import SpecError

__all__ = [
    "FP8_BLOCK",
    "MLA",
    "MODELS",
    "M_PRESETS",
    "ModelSpec",
    "Shape",
    "get_model",
    "layer_shapes",
    "mla_decode_problems",
    "model_problems",
    "resolve_ms",
]

#: Token counts (M) per rank of the named presets.
M_PRESETS: dict[str, tuple[int, ...]] = {
    "decode": (1, 2, 4, 8, 16, 32, 64, 128, 256),
    "prefill": (512, 1024, 2048, 4096, 8192),
}

#: The block size of FP8 block-scaled weights (128x128 scales): per-shard N and K must be multiples.
FP8_BLOCK = 128


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention sizes (DeepSeek-V2/V3 config.json names)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """The sizes of a model that decide its GEMM and MoE shapes (from its public config.json).

    `intermediate` is the dense MLP's intermediate size (0 when no layer has a dense MLP); an MoE model
    (`experts` > 0) has a dense MLP in its first `dense_layers` layers only. `shared_intermediate` is the
    intermediate size of the shared experts' MLP (0: none). `weights` is the default weight dtype of
    the routed experts (None: the activation dtype).
    """

    name: str
    source: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int = 0
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    dense_layers: int = 0
    shared_intermediate: int = 0
    mla: MLA | None = None
    weights: str | None = None

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def has_dense_mlp(self) -> bool:
        return self.intermediate > 0 and (not self.is_moe or self.dense_layers > 0)


_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("llama-3.1-8b", "meta-llama/Llama-3.1-8B", hidden=4096, layers=32, heads=32, kv_heads=8,
              head_dim=128, vocab=128256, intermediate=14336),
    ModelSpec("llama-3.1-70b", "meta-llama/Llama-3.1-70B", hidden=8192, layers=80, heads=64, kv_heads=8,
              head_dim=128, vocab=128256, intermediate=28672),
    ModelSpec("llama-3.1-405b", "meta-llama/Llama-3.1-405B", hidden=16384, layers=126, heads=128,
              kv_heads=8, head_dim=128, vocab=128256, intermediate=53248),
    ModelSpec("qwen2.5-72b", "Qwen/Qwen2.5-72B", hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128,
              vocab=152064, intermediate=29568),
    # Every layer is sparse (decoder_sparse_step 1, no mlp_only_layers), no shared expert; head_dim 128 is
    # given explicitly (64 heads x 128 = 8192 > hidden 4096).
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", hidden=4096, layers=94, heads=64, kv_heads=4,
              head_dim=128, vocab=151936, experts=128, topk=8, moe_intermediate=1536),
    ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", hidden=2048, layers=48, heads=32, kv_heads=4,
              head_dim=128, vocab=151936, experts=128, topk=8, moe_intermediate=768),
    ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", hidden=4096, layers=32, heads=32, kv_heads=8,
              head_dim=128, vocab=32000, experts=8, topk=2, moe_intermediate=14336),
    # MLA attention; the first 3 layers (first_k_dense_replace) have a dense MLP of 18432, the other 58 an
    # MoE of 256 routed experts (top-8) plus 1 shared expert of moe_intermediate 2048. The checkpoint's
    # weights are FP8 e4m3 with 128x128 block scales. head_dim here is the query/key head dimension
    # (qk_nope + qk_rope); MLA's shapes use the `mla` sizes.
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", hidden=7168, layers=61, heads=128, kv_heads=128,
              head_dim=192, vocab=129280, intermediate=18432, experts=256, topk=8, moe_intermediate=2048,
              dense_layers=3, shared_intermediate=2048,
              mla=MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                      v_head_dim=128),
              weights="fp8e4m3"),
    # DeepSeek-V3's architecture with 64 heads, 384 routed experts and one dense layer; FP8 e4m3 weights
    # with 128x128 block scales.
    ModelSpec("kimi-k2", "moonshotai/Kimi-K2-Instruct", hidden=7168, layers=61, heads=64, kv_heads=64,
              head_dim=192, vocab=163840, intermediate=18432, experts=384, topk=8, moe_intermediate=2048,
              dense_layers=1, shared_intermediate=2048,
              mla=MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                      v_head_dim=128),
              weights="fp8e4m3"),
    # Attention projections carry biases (irrelevant to shapes); the checkpoint's experts are MXFP4, which
    # the MoE op does not implement, so they are tuned in the activation dtype. intermediate_size 2880
    # is the experts' size; there is no dense MLP and no shared expert.
    ModelSpec("gpt-oss-120b", "openai/gpt-oss-120b", hidden=2880, layers=36, heads=64, kv_heads=8,
              head_dim=64, vocab=201088, experts=128, topk=4, moe_intermediate=2880),
)  # fmt: skip

#: The known models by name.
MODELS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}


#: The kinds of layer a model's shapes are: a linear layer (N, K), and the routed experts of one rank
#: (N, K, E experts, top-k); the op of each is the registry's (`ProblemRules.layer`).
LINEAR, EXPERTS, MLA_ATTENTION = "linear", "experts", "mla_attention"


@dataclass(frozen=True)
class Shape:
    """One layer's problem shape without M: a `layer` kind (LINEAR: N, K; EXPERTS: N, K, E experts on this
    rank, top-k), whose problems the op that serves that layer builds."""

    label: str
    layer: str
    N: int
    K: int
    E: int = 0
    topk: int = 0

    @property
    def op(self) -> str:
        """The op that serves this layer (`autotune.core.registry.layer_op`)."""
        return layer_op(self.layer)

    def problem(self, m: int, dtype: str, weights: str | None) -> Problem:
        op = self.op
        return rules_of(op).layer_problem(op, m, self, dtype, weights)


def get_model(name: str) -> ModelSpec:
    """The catalog entry of `name`; SpecError listing the known models otherwise."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise SpecError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def resolve_ms(ms: str | Iterable[int | str]) -> tuple[int, ...]:
    """M values from a preset name ("decode", "prefill"), or a list of ints and preset names (in order,
    duplicates dropped); SpecError for an unknown preset or a value that is not a positive integer."""
    items = [ms] if isinstance(ms, str) else list(ms)
    out: list[int] = []
    for item in items:
        if isinstance(item, str):
            if item not in M_PRESETS:
                raise SpecError(
                    f"unknown M preset {item!r}; known: {', '.join(M_PRESETS)} (or a list of integers)"
                )
            out.extend(M_PRESETS[item])
        elif isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise SpecError(f"M values must be positive integers or preset names, got {item!r}")
        else:
            out.append(item)
    if not out:
        raise SpecError("no M values: give a preset name or a non-empty list")
    return tuple(dict.fromkeys(out))


def layer_shapes(
    name: str, *, tp: int, ep: int = 1, weights: str | None = None, dtype: str = "bf16"
) -> list[Shape]:
    """The distinct shapes of one layer of `name` (and its LM head) on one rank of a TP `tp`, EP `ep`
    deployment, in layer order; SpecError for an unknown model or a split that does not divide."""
    model = get_model(name)
    for what, value in (("tp", tp), ("ep", ep)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(f"model {name}: `{what}` must be a positive integer, got {value!r}")
    split = f"TP {tp}" + (f", EP {ep}" if ep > 1 else "")
    if ep > 1 and not model.is_moe:
        raise SpecError(f"model {name} is dense: `ep` (expert parallelism) applies to MoE models only")
    bad: list[str] = []

    def div(value: int, by: int, what: str, par: str = "TP") -> int:
        if value % by:
            bad.append(f"{what} ({value}) not divisible by {par} {by}")
            return max(1, value // by)
        return value // by

    h = model.hidden
    shapes: list[Shape] = []
    if model.mla is not None:
        a = model.mla
        heads = div(model.heads, tp, "attention heads")
        if a.q_lora_rank:
            shapes.append(Shape("attn.q_a", LINEAR, a.q_lora_rank, h))
            shapes.append(Shape("attn.q_b", LINEAR, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim),
                                a.q_lora_rank))  # fmt: skip
        else:
            shapes.append(Shape("attn.q", LINEAR, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), h))
        shapes.append(Shape("attn.kv_a", LINEAR, a.kv_lora_rank + a.qk_rope_head_dim, h))
        shapes.append(Shape("attn.kv_b", LINEAR, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank))
        shapes.append(Shape("attn.o", LINEAR, h, heads * a.v_head_dim))
    else:
        heads = div(model.heads, tp, "attention heads")
        if model.kv_heads >= tp:
            kv = div(model.kv_heads, tp, "KV heads")
        else:  # fewer KV heads than ranks: each is replicated over tp / kv_heads ranks
            kv = 1
            if tp % model.kv_heads:
                bad.append(f"KV heads ({model.kv_heads}) cannot be replicated evenly over TP {tp}")
        shapes.append(Shape("attn.qkv", LINEAR, (heads + 2 * kv) * model.head_dim, h))
        shapes.append(Shape("attn.o", LINEAR, h, heads * model.head_dim))
    if model.has_dense_mlp:
        inter = div(model.intermediate, tp, "MLP intermediate size")
        shapes.append(Shape("mlp.gate_up", LINEAR, 2 * inter, h))
        shapes.append(Shape("mlp.down", LINEAR, h, inter))
    if model.is_moe:
        wdtype = _weights(model, weights, dtype)
        if model.shared_intermediate:
            inter = div(model.shared_intermediate, tp, "shared expert intermediate size")
            shapes.append(Shape("shared.gate_up", LINEAR, 2 * inter, h))
            shapes.append(Shape("shared.down", LINEAR, h, inter))
        shapes.append(Shape("moe.router", LINEAR, model.experts, h))
        if ep > 1:
            e_local, n = div(model.experts, ep, "experts", "EP"), model.moe_intermediate
            if e_local < model.topk and not model.experts % ep:
                bad.append(f"EP {ep} leaves {e_local} expert(s) per rank, fewer than top-{model.topk}")
        else:
            e_local, n = model.experts, div(model.moe_intermediate, tp, "expert intermediate size")
        if wdtype == "fp8e4m3" and (n % FP8_BLOCK or h % FP8_BLOCK):
            bad.append(
                f"FP8 block-scaled expert weights need N and K multiples of {FP8_BLOCK}, got N={n}, K={h}"
            )
        shapes.append(Shape("moe.experts", EXPERTS, n, h, e_local, model.topk))
    shapes.append(Shape("lm_head", LINEAR, div(model.vocab, tp, "vocabulary"), h))
    if bad:
        raise SpecError(f"model {name} cannot be split at {split}: {'; '.join(bad)}")
    merged: dict[tuple[str, int, int, int, int], list[str]] = {}
    for s in shapes:
        merged.setdefault((s.layer, s.N, s.K, s.E, s.topk), []).append(s.label)
    return [Shape("+".join(labels), kind, n, k, e, t) for (kind, n, k, e, t), labels in merged.items()]


def _weights(model: ModelSpec, weights: str | None, dtype: str) -> str:
    if weights is None:
        return model.weights or dtype
    try:
        w = normalize_dtype(weights)
    except ValueError as exc:
        raise SpecError(f"model {model.name}: {exc}") from None
    if w not in (dtype, "fp8e4m3"):
        raise SpecError(f"model {model.name}: expert `weights` are {dtype} or fp8e4m3, not {w}")
    return w


def model_problems(
    name: str,
    *,
    tp: int,
    ep: int = 1,
    ms: str | Sequence[int | str],
    dtype: str = "bf16",
    weights: str | None = None,
) -> list[tuple[str, Problem]]:
    """(layer label, problem) for every distinct GEMM and MoE problem of one layer of `name` (and its LM
    head) on one rank of a TP `tp`, EP `ep` deployment, at each M of `ms` (ints or preset names).

    `dtype` is the activation dtype (bf16 or fp16) of every problem; `weights` the routed experts' weight
    dtype (None: the model's default, see the module docstring). SpecError for an unknown model, a split
    that does not divide, `ep` or `weights` for a dense model, or a bad dtype.
    """
    model = get_model(name)
    try:
        act = normalize_dtype(dtype)
    except ValueError as exc:
        raise SpecError(f"model {name}: {exc}") from None
    if act not in ("bf16", "fp16"):
        raise SpecError(f"model {name}: activations are bf16 or fp16, not {act}")
    if weights is not None and not model.is_moe:
        raise SpecError(f"model {name} is dense: `weights` applies to the routed experts of MoE models")
    m_values = resolve_ms(ms)
    w = _weights(model, weights, act) if model.is_moe else act
    return [
        (s.label, s.problem(m, act, w if w != act else None))
        for s in layer_shapes(name, tp=tp, ep=ep, weights=weights, dtype=act)
        for m in m_values
    ]


def mla_decode_problems(
    name: str,
    *,
    tp: int,
    batches: Sequence[int],
    contexts: Sequence[int],
    kv_dtypes: Sequence[str] = ("bf16",),
    page_sizes: Sequence[int] = (64,),
) -> list[tuple[str, Problem]]:
    """("attn.decode tp{tp}", problem) for the MLA decode attention of a model with MLA (DeepSeek-V3,
    Kimi-K2) on one rank: N = kv_lora_rank (the latent dims), K = kv_lora_rank + qk_rope_head_dim, heads/tp
    heads (TP 1 also stands for DP attention), every batch size (M), context, cache dtype and page size.
    SpecError for a model without MLA or heads that TP does not divide."""
    model = get_model(name)
    if model.mla is None:
        raise SpecError(f"model {name} has no multi-head latent attention")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0 or model.heads % tp:
        raise SpecError(f"model {name}: {model.heads} attention heads are not divisible by TP {tp}")
    a, label, op = model.mla, f"attn.decode tp{tp}", layer_op(MLA_ATTENTION)
    return [
        (label, Problem.of(op, b, a.kv_lora_rank, a.kv_lora_rank + a.qk_rope_head_dim,
                           heads=model.heads // tp, context=c, kv_dtype=kv, page_size=p))
        for kv in kv_dtypes
        for p in page_sizes
        for c in contexts
        for b in batches
    ]  # fmt: skip
