"""The search space of the MLA decode's Gluon kernel (backend "gluon"): where it exists, its knobs and
constraints, where it is the default, its cost and its launches as captured (pure: nothing compiled,
no GPU; the launches are captured with inputs on torch's meta device)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import Config, Problem, Target
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla import backends, gluon_space
from autotune.kernels.mla.gluon_space import GLUON_PARAMS, SMEM_SCRATCH, gluon_smem_bytes

H100 = Target.for_arch("sm_90")


def _problem(B: int = 32, heads: int = 128, context: int = 4096, kv: str = "bf16", page: int = 64) -> Problem:
    return Problem.of("mla_decode", B, 512, 576, heads=heads, context=context, kv_dtype=kv, page_size=page)


def _gluon(**knobs: int) -> Config:
    return Config(
        backend="gluon", **({"num_kv_splits": 1, "BLOCK_N": 64, "num_stages": 2, "SCHEDULE": 0} | knobs)
    )


def test_the_backend_exists_on_hopper_only() -> None:
    assert "gluon" in MLA_DECODE.backends(H100)
    assert "gluon" in MLA_DECODE.backends(dataclasses.replace(H100, arch="sm_90a"))
    others = [Target.for_arch(a) for a in ("gfx942", "gfx950", "interpreter")]
    others += [dataclasses.replace(H100, arch=a) for a in ("sm_100", "sm_89")]
    for target in others:
        assert "gluon" not in MLA_DECODE.backends(target), target.arch
    assert MLA_DECODE.space(_problem(), H100).backends == ("torch", "triton", "gluon")


def test_its_knobs_are_splits_tiles_stages_and_schedule_and_the_ring_fits_shared_memory() -> None:
    """BLOCK_N 32 or 64, 1 to 4 stages, SCHEDULE 0 (lockstep), 1 (seesaw) or 2 (swapped): the queries (72
    KiB), the ring and P within the H100's 227 KiB (2 stages of 64 tokens, 4 of 32), pruned with the
    reason beyond."""
    sub = MLA_DECODE.space(_problem(), H100).subspace("gluon")
    assert dict(sub.params) == dict(GLUON_PARAMS)
    assert set(GLUON_PARAMS) == {"num_kv_splits", "BLOCK_N", "num_stages", "SCHEDULE"}
    assert GLUON_PARAMS["SCHEDULE"] == (0, 1, 2)
    rings = {(int(c["BLOCK_N"]), int(c["num_stages"])) for c in sub.configs() if c["SCHEDULE"] == 0}
    assert rings == {(64, 1), (64, 2), (32, 1), (32, 2), (32, 3), (32, 4)}
    for block_n, stages in ((64, 3), (64, 4)):
        assert (sub.check(_gluon(BLOCK_N=block_n, num_stages=stages)) or "").startswith("lds_overflow")
    assert gluon_smem_bytes(64, 2) == 73728 + 2 * 73728 + 8192 + 16
    assert gluon_smem_bytes(64, 2) + SMEM_SCRATCH <= H100.lds_bytes < gluon_smem_bytes(64, 3)


def test_the_seesaw_schedule_needs_two_stages_and_counts_its_shared_memory() -> None:
    """SCHEDULE 1 (`mla.gluon_seesaw`): 2 stages at least (one slot would deadlock: `seesaw_one_stage`),
    64 x 2 and 32 x 2-4 within the shared memory; it adds the row maxima and sums and the extra mbarriers
    to the lockstep kernel's (the same single P buffer)."""
    sub = MLA_DECODE.space(_problem(), H100).subspace("gluon")
    rings = {(int(c["BLOCK_N"]), int(c["num_stages"])) for c in sub.configs() if c["SCHEDULE"] == 1}
    assert rings == {(64, 2), (32, 2), (32, 3), (32, 4)}
    for block_n in (32, 64):
        why = sub.check(_gluon(SCHEDULE=1, BLOCK_N=block_n, num_stages=1)) or ""
        assert why.startswith("seesaw_one_stage"), why
    assert (sub.check(_gluon(SCHEDULE=1, num_stages=3)) or "").startswith("lds_overflow")
    for block_n, stages in rings:
        assert sub.check(_gluon(SCHEDULE=1, BLOCK_N=block_n, num_stages=stages, num_kv_splits=2)) is None
    assert gluon_smem_bytes(64, 2, 1) == gluon_smem_bytes(64, 2) + 2 * 64 * 4 + 8 * (2 + 2)
    assert gluon_smem_bytes(64, 2, 1) + SMEM_SCRATCH <= H100.lds_bytes < gluon_smem_bytes(64, 3, 1)
    assert gluon_smem_bytes(32, 4, 1) + SMEM_SCRATCH <= H100.lds_bytes
    # where the page or the splits rule, the seesaw is pruned as the lockstep kernel is
    paged = MLA_DECODE.space(_problem(page=32), H100).subspace("gluon")
    assert paged.check(_gluon(SCHEDULE=1, BLOCK_N=32, num_stages=4)) is None


#: A config of the swapped kernel (its stages given apart).
SWAPPED = dict(SCHEDULE=2, BLOCK_N=64, Q_FP8=1, num_kv_splits=2)


def test_the_swapped_kernel_takes_few_heads_and_an_fp8_cache_and_waits_for_its_gpu_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SCHEDULE 2 (`mla.gluon_swapped`): an e4m3 cache scored by FP8 queries, at most 32 heads, 64-token
    tiles (`swapped_form`), its ring within the shared memory with the fp16 V tile (`lds_overflow`: 4
    stages at 16 heads, 3 at 32); and until it has run right on a GPU the space prunes it
    (`swapped_unmeasured`)."""
    sub = MLA_DECODE.space(_problem(heads=16, kv="fp8e4m3"), H100).subspace("gluon")
    assert (sub.check(_gluon(**SWAPPED, num_stages=2)) or "").startswith("swapped_unmeasured")
    assert not [c for c in sub.configs() if c["SCHEDULE"] == 2]
    monkeypatch.setattr(gluon_space, "SWAPPED_MEASURED", True)
    backends._space.cache_clear()  # (spaces are cached; none built here may outlive the test)
    try:
        _swapped_rules()
    finally:
        backends._space.cache_clear()


def _swapped_rules() -> None:
    fp8 = SWAPPED
    for heads, deepest in ((16, 4), (32, 3), (8, 4)):
        sub = MLA_DECODE.space(_problem(heads=heads, kv="fp8e4m3"), H100).subspace("gluon")
        rings = {(c["BLOCK_N"], c["num_stages"], c["Q_FP8"]) for c in sub.configs() if c["SCHEDULE"] == 2}
        assert rings == {(64, n, 1) for n in range(1, deepest + 1)}, (heads, rings)
        why = sub.check(_gluon(**fp8, num_stages=deepest + 1)) or ""
        assert deepest == 4 or why.startswith("lds_overflow"), why
    rules = MLA_DECODE.space(_problem(heads=16, kv="fp8e4m3"), H100).subspace("gluon")
    for bad in (dict(fp8, Q_FP8=0), dict(fp8, BLOCK_N=32)):
        assert (rules.check(_gluon(**bad, num_stages=2)) or "").startswith("swapped_form"), bad
    for problem in (_problem(heads=64, kv="fp8e4m3"), _problem(heads=16)):
        sub = MLA_DECODE.space(problem, H100).subspace("gluon")
        knobs = {k: v for k, v in fp8.items() if k in sub.params}
        assert (sub.check(_gluon(**knobs, num_stages=2)) or "").startswith("swapped_form"), problem
    assert gluon_smem_bytes(64, 4, 2, kv_bytes=1, q_fp8=True, heads=16) == (
        16 * 576 + 4 * 64 * 576 + 64 * (512 + 16) * 2 + 8 * 4
    )


def test_tiles_lie_inside_a_page_and_splits_follow_the_triton_kernel_s_rules() -> None:
    sub = MLA_DECODE.space(_problem(page=32), H100).subspace("gluon")
    assert (sub.check(_gluon(BLOCK_N=64)) or "").startswith("tile_past_page")
    assert sub.check(_gluon(BLOCK_N=32)) is None
    assert MLA_DECODE.space(_problem(page=128), H100).subspace("gluon").check(_gluon()) is None
    # B = 32 at 64 heads a program: 64 programs; 8 splits fill 2 programs an SM with half of them already
    sub = MLA_DECODE.space(_problem(32, context=8192), H100).subspace("gluon")
    assert sub.check(_gluon(num_kv_splits=8)) is None
    assert (sub.check(_gluon(num_kv_splits=16)) or "").startswith("splits_needless")
    short = MLA_DECODE.space(_problem(1, context=256), H100).subspace("gluon")
    assert (short.check(_gluon(num_kv_splits=8)) or "").startswith("splits_past_context")


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(kv="fp8e4m3fnuz"), "reads a bf16 or fp8e4m3 cache"),
        (dict(page=16), "lie inside a page"),
    ],
)
def test_problems_it_cannot_run_prune_its_one_config_with_the_reason(kw: dict[str, object], why: str) -> None:
    space = MLA_DECODE.space(_problem(**kw), H100)  # type: ignore[arg-type]
    assert not [c for c in space.configs() if c.backend == "gluon"]
    assert why in (space.subspace("gluon").check(Config(backend="gluon")) or "")
    kimi = Problem.of("mla_decode", 8, 256, 320, heads=128, context=4096, kv_dtype="bf16", page_size=64)
    assert "512 + 64 dims" in (
        MLA_DECODE.space(kimi, H100).subspace("gluon").check(Config(backend="gluon")) or ""
    )


@pytest.mark.parametrize("B, context", [(1, 1024), (32, 4096), (64, 8192), (128, 32768), (256, 4096)])
def test_its_first_config_is_of_its_space_with_one_wave_of_splits(B: int, context: int) -> None:
    """The seesaw on 32-token tiles in 4 stages (bf16), splits for one wave of one program an SM."""
    problem = _problem(B, context=context)
    sub = MLA_DECODE.space(problem, H100).subspace("gluon")
    (first,) = sub.first
    assert sub.check(first) is None
    assert (first["SCHEDULE"], first["BLOCK_N"], first["num_stages"]) == (1, 32, 4)
    assert MLA_DECODE.predict_us(problem, first, H100) > 0
    assert first["num_kv_splits"] == {1: 4, 32: 2, 64: 1, 128: 1, 256: 1}[B]  # (1024 tokens: 4 of 256)


@pytest.mark.parametrize(
    "B, heads, context, kv, gluon",
    [
        (32, 128, 4096, "bf16", True),  # the smallest batch and context measured
        (256, 128, 32768, "fp8e4m3", True),
        (64, 64, 8192, "bf16", True),  # whole groups, as at 128 heads
        (128, 16, 4096, "bf16", True),  # padded groups: 128 programs
        (64, 16, 4096, "bf16", False),  # padded groups: 64 programs
        (256, 16, 8192, "fp8e4m3", False),  # padded groups, e4m3: the swapped Triton form wins
        (16, 128, 4096, "bf16", False),  # under batch 32: not measured
        (64, 128, 2048, "bf16", False),  # under 4K: not measured
    ],
)
def test_it_is_the_default_on_hopper_only_where_it_was_measured_to_win(
    B: int, heads: int, context: int, kv: str, gluon: bool
) -> None:
    """`gluon_default`: the Gluon kernel's first config leads the op's candidates where it was measured to
    win on an H100; the Triton kernel's candidates follow (and lead everywhere else)."""
    from autotune.kernels.mla.gluon_space import gluon_default

    problem = _problem(B, heads, context, kv)
    found = MLA_DECODE.default_candidates(problem, H100)
    assert (found[0].backend == "gluon") is gluon
    assert (gluon_default(problem, H100) is not None) is gluon
    if gluon:
        assert found[0] == MLA_DECODE.space(problem, H100).subspace("gluon").first[0]
    assert [c.backend for c in found[1:]] == ["triton"] * (len(found) - 1)
    for arch in ("gfx942", "gfx950", "interpreter"):
        assert MLA_DECODE.default_candidates(problem, Target.for_arch(arch))[0].backend == "triton"


def test_without_gluon_the_default_is_the_triton_kernel_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hopper whose Triton has no Gluon: the Triton kernel's candidates alone."""
    monkeypatch.setattr(gluon_space, "_gluon_missing", lambda: "no Gluon here")
    found = MLA_DECODE.default_candidates(_problem(64, 128, 8192), H100)
    assert found and all(c.backend == "triton" for c in found)


def test_a_config_launches_one_program_per_sequence_head_group_and_split_then_the_reduce() -> None:
    """Captured on the meta device: an (H / 64, B, splits) grid of the Gluon kernel on 8 warps, the cache
    as (pages · page_size, 576) rows in a descriptor of BLOCK_N x 64 boxes, then (several splits) the
    Triton kernel's reduce over (B, H)."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    problem = _problem(32, context=4096)
    calls = MLA_DECODE.kernel_calls(problem, _gluon(num_kv_splits=4, BLOCK_N=32, num_stages=4), H100)
    assert [c.fn.__name__ for c in calls] == ["mla_gluon_kernel", "mla_reduce_kernel"]
    split, reduce = calls
    assert split.grid == (2, 32, 4) and reduce.grid == (32, 128)
    assert split.kwargs["num_warps"] == 8 and split.kwargs["STAGES"] == 4 and split.kwargs["PAGE"] == 64
    desc = split.args[1]
    assert list(desc.block_shape) == [32, 64] and list(desc.shape) == [(32 * 64 + 1) * 64, 576]
    (one,) = MLA_DECODE.kernel_calls(problem, _gluon(), H100)
    assert one.grid == (2, 32, 1) and one.kwargs["SPLITS"] == 1
    # the seesaw: the same grid and reduce; its kernel on 4 warps (the loader's; the consumers are workers)
    seesaw = _gluon(SCHEDULE=1, BLOCK_N=32, num_stages=4, num_kv_splits=2)
    split, reduce = MLA_DECODE.kernel_calls(problem, seesaw, H100)
    assert [split.fn.__name__, reduce.fn.__name__] == ["mla_seesaw_kernel", "mla_reduce_kernel"]
    assert split.grid == (2, 32, 2) and split.kwargs["num_warps"] == 4 and split.kwargs["STAGES"] == 4
    assert list(split.args[1].block_shape) == [32, 64]
    # the swapped kernel: one program a (sequence, split), its heads as 16 or 32 columns, one warpgroup
    for heads, columns in ((16, 16), (8, 16), (32, 32)):
        fp8 = _problem(32, heads=heads, context=4096, kv="fp8e4m3")
        swapped = _gluon(SCHEDULE=2, BLOCK_N=64, num_stages=3, num_kv_splits=4, Q_FP8=1)
        split, reduce = MLA_DECODE.kernel_calls(fp8, swapped, H100)
        assert [split.fn.__name__, reduce.fn.__name__] == ["mla_swapped_kernel", "mla_reduce_kernel"]
        assert split.grid == (32, 4) and reduce.grid == (32, heads)
        assert split.kwargs["HEADS"] == columns and split.kwargs["num_warps"] == 4
    for problem, config in (
        (_problem(32, heads=16, context=4096), _gluon(SCHEDULE=2, num_kv_splits=4)),
        (_problem(32, heads=64, context=4096, kv="fp8e4m3"), _gluon(SCHEDULE=2, num_kv_splits=4, Q_FP8=1)),
        (_problem(32, heads=16, context=4096, kv="fp8e4m3"), _gluon(SCHEDULE=2, num_kv_splits=4, Q_FP8=0)),
    ):
        with pytest.raises(ValueError, match="SCHEDULE 2 takes an e4m3 cache with Q_FP8 1"):
            MLA_DECODE.kernel_calls(problem, config, H100)


@pytest.mark.parametrize("heads, groups", [(16, 1), (64, 1), (96, 2), (128, 2)])
def test_any_head_count_runs_in_programs_of_64_heads(heads: int, groups: int) -> None:
    """16 or 96 heads: the space holds gluon configs (the last group padded), the grid has one program per
    64 heads rounded up, the reduce one per real head, and the split rules count the padded groups."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    problem = _problem(32, heads=heads, context=8192)
    space = MLA_DECODE.space(problem, H100)
    assert [c for c in space.configs() if c.backend == "gluon"]
    split, reduce = MLA_DECODE.kernel_calls(problem, _gluon(num_kv_splits=4), H100)
    assert split.grid == (groups, 32, 4) and reduce.grid == (32, heads)
    # half of 32 sequences x groups x splits programs already give the 132 SMs two each
    sub = space.subspace("gluon")
    assert sub.check(_gluon(num_kv_splits=8 // groups)) is None
    assert (sub.check(_gluon(num_kv_splits=32 // groups)) or "").startswith("splits_needless")


def test_an_fp8_cache_runs_the_lockstep_schedule_with_its_upcast_tile_counted() -> None:
    """e4m3: the ring holds FP8 tiles (half the bytes) and one fp16 tile more (its latent part alone with
    FP8 queries, whose buffer is half as large), so 64 tokens fit 2 stages (3 with FP8 queries) and 32
    tokens 4; Q_FP8 is a knob of FP8 caches only; the seesaw is pruned (it reads bf16). The first config:
    FP8 scores on 64-token tiles in 2 stages."""
    from autotune.kernels.mla.gluon_space import gluon_params

    sub = MLA_DECODE.space(_problem(kv="fp8e4m3"), H100).subspace("gluon")
    assert set(sub.params) == set(GLUON_PARAMS) | {"Q_FP8"} and "Q_FP8" not in gluon_params(_problem())
    assert (
        gluon_smem_bytes(64, 2, 0, kv_bytes=1)
        == 64 * 576 * 2 + 2 * 64 * 576 + 64 * 576 * 2 + 64 * 64 * 2 + 16
    )
    assert gluon_smem_bytes(64, 2, 0, kv_bytes=1, q_fp8=True) == (
        64 * 576 + 2 * 64 * 576 + 64 * 512 * 2 + 64 * 64 * 2 + 16
    )
    for q_fp8 in (0, 1):
        for block_n, stages in ((64, 1), (64, 2), (32, 2), (32, 4)):
            assert sub.check(_gluon(BLOCK_N=block_n, num_stages=stages, Q_FP8=q_fp8)) is None
    assert (sub.check(_gluon(BLOCK_N=64, num_stages=3, Q_FP8=0)) or "").startswith("lds_overflow")
    assert sub.check(_gluon(BLOCK_N=64, num_stages=3, Q_FP8=1)) is None
    assert (sub.check(_gluon(SCHEDULE=1, BLOCK_N=64, num_stages=2, Q_FP8=0)) or "").startswith("seesaw_bf16")
    assert [c for c in sub.configs() if c["SCHEDULE"] == 1] == []
    assert {c["Q_FP8"] for c in sub.configs()} == {0, 1}
    first = sub.first[0]
    assert (first["SCHEDULE"], first["BLOCK_N"], first["num_stages"], first["Q_FP8"]) == (0, 64, 2, 1)
