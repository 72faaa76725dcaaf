"""The MLA decode's problems, spec fields, search space and heuristic default (pure: nothing compiled)."""

from __future__ import annotations

import pytest

from autotune import Config, Problem, Target
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.space import default_splits, mla_default_candidates
from autotune.sweeps.spec import load_spec, parse_spec

ARCHS = ("gfx942", "gfx950", "sm_90")


def _problem(B: int = 4, heads: int = 128, context: int = 8192, kv: str = "bf16", page: int = 64) -> Problem:
    return Problem.of("mla_decode", B, 512, 576, heads=heads, context=context, kv_dtype=kv, page_size=page)


def test_problem_counts_the_cache_and_keys_its_parameters() -> None:
    p = _problem(2, 16, 4096, "fp8e4m3", 64)
    assert p.params_key == "context=4096,heads=16,kv_dtype=fp8e4m3,page_size=64"
    assert p.min_bytes() == 2 * 4096 * 576 + 2 * 64 * 4 + 2 * 16 * (576 + 512) * 2
    assert p.flops() == 2.0 * 2 * 16 * 4096 * (576 + 512)
    assert MLA_DECODE.label(p) == "B2 ctx4096 H16 fp8e4m3 p64"
    assert MLA_DECODE.key_problem(("mla_decode", "bf16", "nk", 512, 576, p.params_key)) == p.with_m(1)


@pytest.mark.parametrize("kw, message", [
    (dict(kv_dtype="fp16"), "caches are bf16, fp8e4m3, fp8e4m3fnuz"),
    (dict(context=0), "must be positive"),
    (dict(N=500), "powers of two"),
])  # fmt: skip
def test_bad_problems_are_refused(kw: dict[str, object], message: str) -> None:
    own = dict(heads=16, context=1024, kv_dtype="bf16", page_size=64)
    n = int(kw.pop("N", 512))  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=message):
        Problem.of("mla_decode", 1, n, n + 64, **{**own, **kw})  # type: ignore[arg-type]


def test_the_spec_sweeps_page_sizes_and_cache_dtypes() -> None:
    spec = parse_spec(
        'name = "t"\n[[sweep]]\nop = "mla_decode"\nm = [1, 64]\nnk = [[512, 576]]\nheads = 16\n'
        'context = [1024, 8192]\npage_size = [16, 64]\nkv_dtype = ["bf16", "fp8e4m3"]\n'
    )
    problems = [p for _, p in spec.problems()]
    assert len(problems) == 2 * 2 * 2 * 2
    assert {dict(p.extra)["page_size"] for p in problems} == {16, 64}
    shipped = load_spec("mla-deepseek-v3")
    assert {dict(p.extra)["heads"] for _, p in shipped.problems()} == {16, 128}


@pytest.mark.parametrize("arch", ARCHS)
def test_the_space_prunes_with_reasons_and_holds_the_default(arch: str) -> None:
    target = Target.for_arch(arch)
    space = MLA_DECODE.space(_problem(1, 16, 1024), target)
    assert space.backends[:2] == ("torch", "triton")
    assert all(space.check(c) is None for c in mla_default_candidates(_problem(1, 16, 1024), target))
    pruned = space.prune_summary()
    assert {"splits_past_context", "block_h_waste"} <= set(pruned)
    sub = space.subspace("triton")
    # 64 splits of 32 tokens exceed a context of 1024; 64 heads a program of 16 heads idle rows
    base = dict(mla_default_candidates(_problem(1, 16, 1024), target)[0].items())
    assert "splits_past_context" in (sub.check(Config({**base, "num_kv_splits": 64, "BLOCK_N": 32})) or "")
    assert "block_h_waste" in (sub.check(Config({**base, "BLOCK_H": 64})) or "")
    assert ("matrix_instr_nonkdim" in sub.params) == target.is_amd
    assert "Q_FP8" in MLA_DECODE.space(_problem(kv="fp8e4m3"), target).subspace("triton").params
    assert "Q_FP8" not in sub.params


def test_sm90_takes_64_heads_a_program_with_warpgroup_mmas_at_128_heads() -> None:
    """On sm_90 the queries of a 64-head tile are a warpgroup MMA's shared-memory operand, so the
    register model admits 64 x 64 tiles on 8 warps (not 4), and the default takes them; not elsewhere."""
    h100, mi300 = Target.for_arch("sm_90"), Target.for_arch("gfx942")
    sub = MLA_DECODE.space(_problem(64, 128, 4096), h100).subspace("triton")
    wide = dict(num_kv_splits=1, BLOCK_H=64, BLOCK_N=64, num_warps=8, num_stages=2)
    assert sub.check(Config(backend="triton", **wide)) is None
    assert "registers" in (sub.check(Config(backend="triton", **{**wide, "num_warps": 4})) or "")
    first = mla_default_candidates(_problem(64, 128, 4096), h100)[0]
    assert (first["BLOCK_H"], first["BLOCK_N"], first["num_warps"]) == (64, 64, 8)
    assert mla_default_candidates(_problem(64, 16, 4096), h100)[0]["BLOCK_H"] == 16
    assert mla_default_candidates(_problem(64, 128, 4096), mi300)[0]["BLOCK_N"] == 32


@pytest.mark.parametrize("arch", ARCHS)
def test_fp16_tiles_are_a_knob_of_nvidia_fp8_caches_that_keeps_the_fp8_warpgroup_mma(arch: str) -> None:
    """F16_TILES exists on NVIDIA with an FP8 cache only, the default leaves it 0 on tiles of more than 16
    heads, and on sm_90 it is never 1 where the scores are an FP8 warpgroup MMA (FP8 queries, 64 heads a
    program)."""
    target = Target.for_arch(arch)
    fp8, bf16 = _problem(64, 128, 4096, "fp8e4m3"), _problem(64, 128, 4096)
    sub = MLA_DECODE.space(fp8, target).subspace("triton")
    assert ("F16_TILES" in sub.params) == (not target.is_amd)
    assert "F16_TILES" not in MLA_DECODE.space(bf16, target).subspace("triton").params
    first = mla_default_candidates(fp8, target)[0]
    assert sub.check(first) is None and first.get("F16_TILES", 0) == 0
    if target.is_amd:
        return
    narrow_default = mla_default_candidates(_problem(1, 16, 4096, "fp8e4m3"), target)[0]
    assert narrow_default["BLOCK_H"] == 16 and narrow_default["F16_TILES"] == 1
    unquartered = {"QUARTERS": 0} if "QUARTERS" in sub.params else {}
    wide = dict(first.items()) | dict(num_kv_splits=1, BLOCK_H=64, BLOCK_N=64, num_warps=8, num_stages=2)
    wide |= unquartered
    narrow = wide | dict(BLOCK_H=32)
    assert sub.check(Config(wide | dict(F16_TILES=1, Q_FP8=0))) is None
    assert sub.check(Config(narrow | dict(F16_TILES=1, Q_FP8=1))) is None
    why = sub.check(Config(wide | dict(F16_TILES=1, Q_FP8=1))) or ""
    assert ("f16_tiles_past_fp8_wgmma" in why) == (target.arch == "sm_90")


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_fp8_caches_on_64_head_tiles_default_to_quarters_with_fp8_queries(arch: str) -> None:
    """On sm_90 an FP8 cache's 64-head default takes FP8 queries and the latent dims in quarters
    (on the rule's 8 warps and 2 stages); 16- and 32-head tiles, bf16 caches and AMD GPUs (where the
    knob is searched only) do not."""
    target = Target.for_arch(arch)
    for heads in (64, 128):
        for batch, context in ((1, 1024), (64, 8192), (256, 32768)):
            problem = _problem(batch, heads, context, "fp8e4m3")
            first = mla_default_candidates(problem, target)[0]
            assert MLA_DECODE.space(problem, target).subspace("triton").check(first) is None
            if target.is_amd:
                assert first["QUARTERS"] == 0 and first["Q_FP8"] == 0
                continue
            assert first["BLOCK_H"] == 64 and first["QUARTERS"] == 1 and first["Q_FP8"] == 1
            assert first["num_warps"] == 8 and first["num_stages"] == 2
    for heads in (16, 32):
        first = mla_default_candidates(_problem(64, heads, 8192, "fp8e4m3"), target)[0]
        assert first.get("QUARTERS", 0) == 0
    assert "QUARTERS" not in mla_default_candidates(_problem(64, 128, 8192), target)[0]


def test_splits_follow_batch_and_context() -> None:
    h100 = Target.for_arch("sm_90")
    # batch 1: the context is split to fill the GPU; batch 256: the sequences fill it, one split
    assert default_splits(_problem(1, 16, 32768), h100, 16, 32) == 64
    assert default_splits(_problem(1, 16, 1024), h100, 16, 32) == 8  # each split >= 4 tiles
    assert default_splits(_problem(256, 128, 8192), h100, 32, 32) == 1


def test_the_catalog_gives_deepseek_v3_and_kimi_k2_decode_attention() -> None:
    from autotune.sweeps.catalog import mla_decode_problems
    from autotune.sweeps.errors import SpecError

    ds = dict(mla_decode_problems("deepseek-v3", tp=8, batches=[4], contexts=[8192], kv_dtypes=["fp8e4m3"]))
    assert ds == {"attn.decode tp8": _problem(4, 16, 8192, "fp8e4m3")}
    kimi = mla_decode_problems("kimi-k2", tp=1, batches=[1, 64], contexts=[4096])
    assert [dict(p.extra)["heads"] for _, p in kimi] == [64, 64] and kimi[0][1].K == 576
    with pytest.raises(SpecError, match="no multi-head latent attention"):
        mla_decode_problems("llama-3.1-8b", tp=1, batches=[1], contexts=[1024])


def test_a_sweep_of_several_page_sizes_reports_the_fastest_per_shape() -> None:
    from autotune.sweeps.layouts import fastest_layouts

    results: list[tuple[Problem, float | None]] = [
        (_problem(4, 128, 8192, "bf16", page), us) for page, us in ((16, 30.0), (256, 21.0), (2048, 25.0))
    ]
    results += [(_problem(64, 128, 8192, "bf16", 16), 90.0), (_problem(64, 128, 8192, "bf16", 256), None)]
    results += [(_problem(64, 128, 8192, "fp8e4m3", page), 50.0 - page / 100) for page in (16, 256)]
    picks = fastest_layouts(results)
    assert [(p.problem.M, dict(p.problem.extra)["kv_dtype"], p.fastest) for p in picks] == [
        (4, "bf16", 256), (64, "fp8e4m3", 256),
    ]  # fmt: skip
    assert picks[0].param == "page_size" and picks[0].times_us == ((16, 30.0), (256, 21.0), (2048, 25.0))
    assert (
        fastest_layouts(
            [(Problem.of("gemm", 16, 64, 64), 1.0), (Problem.of("gemm", 16, 64, 64, "fp16"), 2.0)]
        )
        == []
    )


def test_fp16_tiles_need_the_fp8_conversions_of_sm_89_on() -> None:
    """The kernel upcasts fp16 tiles with sm_89's FP8 conversions: an older NVIDIA GPU has no such knob."""
    import dataclasses

    fp8 = _problem(64, 16, 4096, "fp8e4m3")
    for arch, has in (("sm_80", False), ("sm_89", True), ("sm_90", True), ("sm_100", True)):
        target = dataclasses.replace(Target.for_arch("sm_90"), arch=arch)
        assert ("F16_TILES" in MLA_DECODE.space(fp8, target).subspace("triton").params) == has, arch


def test_swapped_dots_are_an_sm90_fp8_knob_searched_with_fp8_scores_on_whole_warpgroups() -> None:
    """SWAP exists on sm_90 with an FP8 cache and at most 32 heads only; it is searched with FP8 queries
    (fp16 tiles or not: P·V's dtype), on 64 tokens a warpgroup, and never with one stage (a rule of the
    kernel, asked also where a config must run)."""
    import dataclasses

    h100 = Target.for_arch("sm_90")
    fp8 = _problem(64, 16, 4096, "fp8e4m3")
    others = [Target.for_arch("gfx942"), *(dataclasses.replace(h100, arch=a) for a in ("sm_89", "sm_100"))]
    for target in others:
        assert "SWAP" not in MLA_DECODE.space(fp8, target).subspace("triton").params, target.arch
    assert "SWAP" not in MLA_DECODE.space(_problem(64, 16, 4096), h100).subspace("triton").params
    assert "SWAP" in MLA_DECODE.space(_problem(64, 32, 4096, "fp8e4m3"), h100).subspace("triton").params
    assert "SWAP" not in MLA_DECODE.space(_problem(64, 64, 4096, "fp8e4m3"), h100).subspace("triton").params
    sub = MLA_DECODE.space(fp8, h100).subspace("triton")
    good = dict(num_kv_splits=4, BLOCK_H=16, BLOCK_N=64, num_warps=4, num_stages=2, Q_FP8=1, F16_TILES=0)
    good.update(SWAP=1, QUARTERS=0)
    assert sub.check(Config(good)) is None and sub.check(Config(good | dict(F16_TILES=1))) is None
    cases = [
        (dict(Q_FP8=0), "swap_needs_fp8_scores", True),
        (dict(BLOCK_N=32), "swap_tile", False),
        (dict(num_warps=8), "swap_tile", False),
        (dict(num_stages=1), "swap_one_stage", False),
    ]
    for change, rule, search_only in cases:
        config = Config(good | change)
        assert rule in (sub.check(config) or ""), change
        assert (sub.check(config, search_only=False) is None) == search_only, change
    assert "swap_tile" in (sub.check(Config(good | dict(BLOCK_N=64, num_warps=8))) or "")
    assert "quarters_swapped" in (sub.check(Config(good | dict(QUARTERS=1)), search_only=False) or "")


def test_quartered_latent_dims_are_an_sm90_fp8_knob_searched_on_64_head_tiles_with_fp8_queries() -> None:
    """QUARTERS exists on sm_90 with an FP8 cache; it is searched with 64-head tiles and FP8 queries only
    (a search-only rule: such a config still runs); the default takes it on 64-head tiles only. On AMD it
    is searched on any tile, with either query dtype; sm_89 has no such knob."""
    import dataclasses

    h100 = Target.for_arch("sm_90")
    fp8 = _problem(64, 128, 4096, "fp8e4m3")
    assert (
        "QUARTERS"
        not in MLA_DECODE.space(fp8, dataclasses.replace(h100, arch="sm_89")).subspace("triton").params
    )
    for arch in ("gfx942", "gfx950"):
        amd = MLA_DECODE.space(fp8, Target.for_arch(arch)).subspace("triton")
        assert amd.params["QUARTERS"] == (0, 1), arch
        for heads, q_fp8 in ((64, 0), (32, 0), (64, 1)):
            config = Config(num_kv_splits=2, BLOCK_H=heads, BLOCK_N=32, num_warps=4, num_stages=2,
                            Q_FP8=q_fp8, QUARTERS=1, waves_per_eu=0, matrix_instr_nonkdim=16)  # fmt: skip
            assert amd.check(config) is None, (arch, heads, q_fp8, amd.check(config))
    assert "QUARTERS" not in MLA_DECODE.space(_problem(64, 128, 4096), h100).subspace("triton").params
    sub = MLA_DECODE.space(fp8, h100).subspace("triton")
    good = Config(num_kv_splits=2, BLOCK_H=64, BLOCK_N=64, num_warps=8, num_stages=2, Q_FP8=1, F16_TILES=0,
                  QUARTERS=1)  # fmt: skip
    assert sub.check(good) is None
    for change in (dict(Q_FP8=0), dict(BLOCK_H=32)):
        config = good.replace(**change)
        assert "quarters_need_fp8_wgmma" in (sub.check(config) or ""), change
        assert sub.check(config, search_only=False) is None, change
    assert all(c["QUARTERS"] == int(c["BLOCK_H"] >= 64) for c in mla_default_candidates(fp8, h100))
    assert mla_default_candidates(_problem(64, 16, 4096, "fp8e4m3"), h100)[0]["QUARTERS"] == 0


def test_the_fp8_default_swaps_where_the_context_takes_its_splits() -> None:
    """On sm_90, 16 heads on an FP8 cache: swapped 64-token tiles where the context is long enough for the
    splits wanted at 64 tokens a tile; unswapped fp16 tiles of 32 tokens where it is not (batch 1, 4K);
    never on a bf16 cache or with 128 heads."""
    h100 = Target.for_arch("sm_90")
    swapped = mla_default_candidates(_problem(64, 16, 4096, "fp8e4m3"), h100)
    assert swapped[0].get("SWAP") == 1 and swapped[0]["Q_FP8"] == 1 and swapped[0]["F16_TILES"] == 1
    assert swapped[0]["num_kv_splits"] == 4
    assert any(c.get("SWAP") == 0 for c in swapped[1:])  # the unswapped rule follows
    assert mla_default_candidates(_problem(1, 16, 32768, "fp8e4m3"), h100)[0]["SWAP"] == 1
    short = mla_default_candidates(_problem(1, 16, 4096, "fp8e4m3"), h100)[0]
    assert short["SWAP"] == 0 and short["BLOCK_N"] == 32 and short["F16_TILES"] == 1
    assert "SWAP" not in mla_default_candidates(_problem(64, 16, 4096), h100)[0]
    assert "SWAP" not in mla_default_candidates(_problem(64, 128, 4096, "fp8e4m3"), h100)[0]
