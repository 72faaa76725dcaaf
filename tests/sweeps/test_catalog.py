"""Model catalogs: (model, TP, EP, M) → the per-shard GEMM and MoE problems of one layer, checked against
shapes worked out by hand; impossible splits and mixed entries are one clear SpecError."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import Problem
from autotune.core.target import Target
from autotune.sweeps import M_PRESETS, MODELS, SpecError, load_spec, model_problems, parse_spec, plan
from autotune.sweeps.catalog import ModelSpec, layer_shapes

REPO = Path(__file__).resolve().parents[2]


def shapes(name: str, **split: int) -> dict[str, tuple[str, int, int, int, int]]:
    """label → (op, N, K, E, topk) of one layer of `name`."""
    return {s.label: (s.op, s.N, s.K, s.E, s.topk) for s in layer_shapes(name, **split)}


def model_spec(body: str) -> str:
    return f'name = "t"\n[[sweep]]\n{body}'


def test_llama_3_1_70b_at_tp8_by_hand() -> None:
    # hidden 8192, 64 heads, 8 KV heads, head_dim 128, intermediate 28672, vocab 128256; TP 8:
    #   qkv:     N = (64/8 + 2 * 8/8) * 128 = (8 + 2) * 128 = 1280,  K = 8192
    #   o:       N = 8192,  K = 64/8 * 128 = 1024
    #   gate_up: N = 2 * 28672/8 = 2 * 3584 = 7168,  K = 8192
    #   down:    N = 8192,  K = 28672/8 = 3584
    #   lm_head: N = 128256/8 = 16032,  K = 8192
    assert shapes("llama-3.1-70b", tp=8) == {
        "attn.qkv": ("gemm", 1280, 8192, 0, 0),
        "attn.o": ("gemm", 8192, 1024, 0, 0),
        "mlp.gate_up": ("gemm", 7168, 8192, 0, 0),
        "mlp.down": ("gemm", 8192, 3584, 0, 0),
        "lm_head": ("gemm", 16032, 8192, 0, 0),
    }
    # TP 1: qkv (64 + 16) * 128 = 10240; gate_up 2 * 28672 = 57344
    one = shapes("llama-3.1-70b", tp=1)
    assert one["attn.qkv"][1:3] == (10240, 8192) and one["mlp.gate_up"][1:3] == (57344, 8192)
    assert one["mlp.down"][1:3] == (8192, 28672) and one["lm_head"][1:3] == (128256, 8192)


def test_model_problems_expand_every_shape_at_every_m() -> None:
    pairs = model_problems("llama-3.1-70b", tp=8, ms=[1, 64])
    assert len(pairs) == 5 * 2
    assert pairs[0] == ("attn.qkv", Problem.of("gemm", 1, 1280, 8192))
    assert pairs[1] == ("attn.qkv", Problem.of("gemm", 64, 1280, 8192))
    assert pairs[-1] == ("lm_head", Problem.of("gemm", 64, 16032, 8192))
    fp16 = model_problems("llama-3.1-70b", tp=8, ms="decode", dtype="float16")
    assert {p.dtype for _, p in fp16} == {"fp16"} and len(fp16) == 5 * 9


def test_deepseek_v3_at_tp8_ep8_by_hand() -> None:
    # hidden 7168, 128 heads; MLA: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128;
    # TP 8 → 16 heads per rank:
    #   q_a:   N = 1536, K = 7168 (replicated)
    #   q_b:   N = 16 * (128 + 64) = 3072, K = 1536
    #   kv_a:  N = 512 + 64 = 576, K = 7168 (replicated)
    #   kv_b:  N = 16 * (128 + 128) = 4096, K = 512
    #   o:     N = 7168, K = 16 * 128 = 2048
    # dense MLP (first 3 layers), intermediate 18432: gate_up N = 2 * 18432/8 = 4608, down K = 2304
    # shared expert, 2048: gate_up N = 2 * 2048/8 = 512, down K = 256
    # router N = 256 experts; routed: EP 8 → 256/8 = 32 whole experts per rank, N = 2048, K = 7168, top-8
    # lm_head N = 129280/8 = 16160
    assert shapes("deepseek-v3", tp=8, ep=8) == {
        "attn.q_a": ("gemm", 1536, 7168, 0, 0),
        "attn.q_b": ("gemm", 3072, 1536, 0, 0),
        "attn.kv_a": ("gemm", 576, 7168, 0, 0),
        "attn.kv_b": ("gemm", 4096, 512, 0, 0),
        "attn.o": ("gemm", 7168, 2048, 0, 0),
        "mlp.gate_up": ("gemm", 4608, 7168, 0, 0),
        "mlp.down": ("gemm", 7168, 2304, 0, 0),
        "shared.gate_up": ("gemm", 512, 7168, 0, 0),
        "shared.down": ("gemm", 7168, 256, 0, 0),
        "moe.router": ("gemm", 256, 7168, 0, 0),
        "moe.experts": ("moe", 2048, 7168, 32, 8),
        "lm_head": ("gemm", 16160, 7168, 0, 0),
    }
    pairs = dict(model_problems("deepseek-v3", tp=8, ep=8, ms=[16]))
    # its experts are FP8 block-scaled by default, its dense GEMMs bf16
    assert pairs["moe.experts"] == Problem.of("moe", 16, 2048, 7168, "bf16", "fp8e4m3", E=32, topk=8)
    assert pairs["attn.o"] == Problem.of("gemm", 16, 7168, 2048, "bf16")
    bf16 = dict(model_problems("deepseek-v3", tp=8, ep=8, ms=[16], weights="bf16"))
    assert bf16["moe.experts"].dtype_b == "bf16"


def test_deepseek_v3_without_ep_splits_each_expert_by_tp() -> None:
    # EP 1, TP 8: all 256 experts on every rank, each with 2048/8 = 256 rows (a multiple of the 128 block)
    assert shapes("deepseek-v3", tp=8)["moe.experts"] == ("moe", 256, 7168, 256, 8)
    # TP 16: 128 rows, still FP8-block aligned; the existing moe-deepseek-v3.toml tunes exactly this
    assert shapes("deepseek-v3", tp=16)["moe.experts"] == ("moe", 128, 7168, 256, 8)


def test_kv_heads_are_replicated_when_fewer_than_tp() -> None:
    # Qwen3-235B-A22B: 64 heads, 4 KV heads, head_dim 128 (heads * head_dim = 8192 > hidden 4096).
    # TP 4: (16 + 2 * 1) * 128 = 2304; TP 8: 4 KV heads < 8 ranks → 1 per rank: (8 + 2 * 1) * 128 = 1280
    assert shapes("qwen3-235b-a22b", tp=4)["attn.qkv"][1:3] == (2304, 4096)
    eight = shapes("qwen3-235b-a22b", tp=8)
    assert eight["attn.qkv"][1:3] == (1280, 4096) and eight["attn.o"][1:3] == (4096, 1024)
    # no dense MLP and no shared expert; experts: 1536/8 = 192 rows, all 128 experts; EP 8: 16 whole ones
    assert not any(k.startswith(("mlp.", "shared.")) for k in eight)
    assert eight["moe.experts"] == ("moe", 192, 4096, 128, 8)
    assert shapes("qwen3-235b-a22b", tp=8, ep=8)["moe.experts"] == ("moe", 1536, 4096, 16, 8)


def test_gpt_oss_120b_and_mixtral() -> None:
    # gpt-oss-120b: hidden 2880, 64 heads, 8 KV heads, head_dim 64 → qkv (64 + 16) * 64 = 5120,
    # o K = 64 * 64 = 4096; 128 experts top-4 of 2880; vocab 201088
    assert shapes("gpt-oss-120b", tp=1) == {
        "attn.qkv": ("gemm", 5120, 2880, 0, 0),
        "attn.o": ("gemm", 2880, 4096, 0, 0),
        "moe.router": ("gemm", 128, 2880, 0, 0),
        "moe.experts": ("moe", 2880, 2880, 128, 4),
        "lm_head": ("gemm", 201088, 2880, 0, 0),
    }
    # Mixtral-8x7B at TP 2: the existing moe-mixtral-8x7b.toml shape (7168, 4096), 8 experts top-2
    assert shapes("mixtral-8x7b", tp=2)["moe.experts"] == ("moe", 7168, 4096, 8, 2)


def test_catalog_lists_the_required_models() -> None:
    required = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b", "qwen3-235b-a22b",
                "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"}  # fmt: skip
    assert required <= set(MODELS)
    for name, model in MODELS.items():
        assert model.name == name and model.source and model.hidden > 0
        assert model_problems(name, tp=1, ms=[1])  # every model expands at TP 1


def test_layers_that_share_a_shape_are_one_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    # attn.o (N = hidden, K = 8 * 64 / tp) and mlp.down (N = hidden, K = 512 / tp) coincide
    toy = ModelSpec("toy", "none", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=64, vocab=2048,
                    intermediate=512)  # fmt: skip
    monkeypatch.setitem(MODELS, "toy", toy)
    pairs = model_problems("toy", tp=2, ms=[4])
    assert [label for label, _ in pairs] == ["attn.qkv", "attn.o+mlp.down", "mlp.gate_up", "lm_head"]
    assert pairs[1][1] == Problem.of("gemm", 4, 256, 256)


def test_m_presets() -> None:
    assert M_PRESETS["decode"] == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert M_PRESETS["prefill"] == (512, 1024, 2048, 4096, 8192)
    one = parse_spec(model_spec('model = "llama-3.1-8b"\nm = "decode"\n')).entries[0]
    assert one.ms == M_PRESETS["decode"]
    both = parse_spec(model_spec('model = "llama-3.1-8b"\nm = ["decode", "prefill", 16384, 1]\n'))
    assert both.entries[0].ms == (*M_PRESETS["decode"], *M_PRESETS["prefill"], 16384)
    # presets work for op entries too
    op = parse_spec(model_spec('op = "gemm"\nm = "prefill"\nnk = [[64, 64]]\n')).entries[0]
    assert op.ms == M_PRESETS["prefill"]
    with pytest.raises(
        SpecError, match=r"`m` values must be integers, got 'serve' \(or a preset: decode, prefill\)"
    ):
        parse_spec(model_spec('model = "llama-3.1-8b"\nm = "serve"\n'))
    with pytest.raises(SpecError, match="unknown M preset 'serve'"):
        model_problems("llama-3.1-8b", tp=1, ms=["serve"])


def test_model_entry_gives_gemm_and_moe_problems_with_their_ops() -> None:
    text = model_spec('model = "qwen3-235b-a22b"\ntp = 8\nep = [1, 8]\nm = [1, 16]\nzipf = 1.1\n')
    s = parse_spec(text)
    entry = s.entries[0]
    assert entry.model == "qwen3-235b-a22b" and entry.tps == (8,) and entry.eps == (1, 8)
    pairs = s.problems()
    # (qkv, o, router, lm_head) shared by both EP layouts, plus two expert layouts: 6 shapes x 2 M
    assert len(pairs) == 6 * 2
    labels = dict((p, label) for label, p in entry.labeled_problems())
    assert labels[Problem.of("moe", 16, 1536, 4096, E=16, topk=8)] == "moe.experts tp8 ep8"
    assert labels[Problem.of("gemm", 1, 1280, 4096)] == "attn.qkv tp8"
    for e, p in pairs:
        op = e.op_for(p)
        assert op.name == p.op
        if p.op == "moe":
            assert op.zipf == 1.1
    with pytest.raises(ValueError, match="use op_for"):
        entry.make_op()
    rows = plan(s, Target.for_arch("sm_90"))  # every problem has a search space under its own op
    assert len(rows) == 12 and all(valid > 0 for _, valid, _ in rows)


def test_model_and_op_entries_dedupe_across_entries() -> None:
    text = (
        model_spec('model = "llama-3.1-8b"\nm = [1]\n')
        + '\n[[sweep]]\nop = "gemm"\nm = [1]\nnk = [[4096, 4096]]\n'
    )
    s = parse_spec(text)
    assert len(s.problems()) == 5  # the op entry's (4096, 4096) is the model's attn.o


def test_every_benchmark_spec_parses_and_most_held_out_layers_are_new() -> None:
    """The benchmarks' specs load; of serve_every_m_heldout.toml's 15 (N, K), only Qwen2.5-72B's four
    attention layers (Llama-3.1-70B's) are in serve_every_m.toml, whose layers the rules were read from."""
    specs = sorted((REPO / "benchmarks").glob("*.toml"))
    assert len(specs) >= 6
    shapes = {}
    for path in specs:
        problems = load_spec(path).problems()
        assert problems, path
        shapes[path.stem] = {(p.N, p.K) for _, p in problems}
    assert len(shapes["serve_every_m_heldout"]) == 15
    assert len(shapes["serve_every_m_heldout"] - shapes["serve_every_m"]) == 11


def test_every_shipped_spec_parses() -> None:
    specs = sorted((REPO / "autotune" / "sweeps").glob("*.toml"))
    assert len(specs) >= 8
    for path in specs:
        s = load_spec(path)
        assert s.problems(), path
    llama = load_spec(REPO / "autotune" / "sweeps" / "llama-3.1-70b-mi300x.toml")
    assert {(p.N, p.K) for _, p in llama.problems()} >= {(1280, 8192), (10240, 8192), (16032, 8192)}
    assert len(llama.problems()) == 5 * 2 * 14
    ds = load_spec(REPO / "autotune" / "sweeps" / "deepseek-v3-mi300x.toml")
    moe = {p for _, p in ds.problems() if p.op == "moe"}
    assert {(p.N, p.K, p.params_key, p.dtype_b) for p in moe} == {(2048, 7168, "E=32,topk=8", "fp8e4m3")}
    qwen = load_spec(REPO / "autotune" / "sweeps" / "qwen3-235b-a22b-h100.toml")
    qwen_moe = {(p.N, dict(p.extra)["E"]) for _, p in qwen.problems() if p.op == "moe"}
    assert qwen_moe == {(192, 128), (1536, 16)}


@pytest.mark.parametrize(
    ("body", "messages"),
    [
        # 64 heads, 8 KV heads and 28672 do not divide by 3; vocab 128256 = 3 * 42752 does
        (
            'model = "llama-3.1-70b"\ntp = [1, 3]\n',
            [
                "model llama-3.1-70b cannot be split at TP 3",
                "attention heads (64) not divisible by TP 3",
                "MLP intermediate size (28672) not divisible by TP 3",
            ],
        ),
        (
            'model = "deepseek-v3"\ntp = 8\nep = 3\n',
            ["model deepseek-v3 cannot be split at TP 8, EP 3", "experts (256) not divisible by EP 3"],
        ),
        # 2048 / 32 = 64 rows: not a multiple of the FP8 128x128 weight blocks
        (
            'model = "deepseek-v3"\ntp = 32\n',
            ["cannot be split at TP 32", "N and K multiples of 128, got N=64"],
        ),
        ('model = "mixtral-8x7b"\ntp = 8\nep = 8\n', ["EP 8 leaves 1 expert(s) per rank, fewer than top-2"]),
        ('model = "qwen3-235b-a22b"\ntp = 128\n', ["attention heads (64) not divisible by TP 128"]),
        (
            'model = "llama-3.1-70b"\nep = 8\n',
            ["model llama-3.1-70b is dense; drop `ep` (for MoE models only)"],
        ),
        ('model = "llama-3.1-70b"\nweights = "fp8e4m3"\n', ["is dense; drop `weights`"]),
        ('model = "llama-3.1-8b"\ntp = 0\n', ["`tp` must be positive, got 0"]),
        ('model = "llama-3.1-8b"\ntp = "8"\n', ["`tp` values must be integers, got '8'"]),
        ('model = "llama-3.1-8b"\ntp = []\n', ["`tp` must be a positive integer or a non-empty list"]),
        ('model = "llama-3.1-8b"\ndtype = "fp8e4m3"\n', ["bf16 or fp16, not fp8e4m3"]),
        (
            'model = "deepseek-v3"\ntp = 8\nweights = "fp16"\n',
            ["moe `weights` are bf16 or fp8e4m3, not fp16"],
        ),
        ('model = "deepseek-v3"\ntp = 8\nlayout = "kn"\n', ["`model` does not mix with `layout`"]),
        (
            'model = "deepseek-v3"\ntp = 8\nop = "gemm"\nnk = [[64, 64]]\n',
            ["`model` does not mix with `nk`, `op`"],
        ),
        ('model = "deepseek-v3"\ntp = 8\ne = 32\n', ["`model` does not mix with `e`"]),
        ('model = "deepseek-v3"\ntp = 8\ntensor_parallel = 8\n', ["unknown field(s) tensor_parallel"]),
        ('model = "llama-3-70b"\n', ["unknown model 'llama-3-70b'; known: llama-3.1-8b, llama-3.1-70b"]),
    ],
)
def test_bad_model_entry_is_one_clear_error(body: str, messages: list[str]) -> None:
    text = model_spec(body if "\nm = " in body else body + "m = [1]\n")
    with pytest.raises(SpecError) as info:
        parse_spec(text, source="bad.toml")
    text_of = str(info.value)
    assert text_of.startswith("bad.toml: [[sweep]] #1: ") and text_of.count("bad.toml") == 1
    for message in messages:
        assert message in text_of


def test_model_problems_errors() -> None:
    with pytest.raises(SpecError, match=r"unknown model 'gpt-5'; known: .*deepseek-v3.*gpt-oss-120b"):
        model_problems("gpt-5", tp=1, ms=[1])
    with pytest.raises(
        SpecError, match=r"cannot be split at TP 6: attention heads \(32\) not divisible by TP 6"
    ):
        model_problems("llama-3.1-8b", tp=6, ms=[1])
    with pytest.raises(SpecError, match=r"`ep` \(expert parallelism\) applies to MoE models only"):
        model_problems("llama-3.1-8b", tp=1, ep=2, ms=[1])
    with pytest.raises(SpecError, match="multiples of 128, got N=2880, K=2880"):
        model_problems("gpt-oss-120b", tp=1, ms=[1], weights="fp8e4m3")
    with pytest.raises(SpecError, match="missing field `m`"):
        parse_spec(model_spec('model = "llama-3.1-8b"\n'))
