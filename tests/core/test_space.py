from __future__ import annotations

import pytest

from autotune import Config, Problem, Target, TrialResult, TrialStatus
from autotune.kernels import GEMM
from autotune.kernels.dense.space import gemm_default_config, triton_params

AMD_KNOBS = {"matrix_instr_nonkdim", "waves_per_eu", "kpack", "NUM_XCDS"}


def test_amd_knobs_exist_only_on_amd() -> None:
    assert not AMD_KNOBS & set(triton_params(Target.for_arch("sm_90")))
    gfx942 = set(triton_params(Target.for_arch("gfx942")))
    gfx950 = set(triton_params(Target.for_arch("gfx950")))
    assert gfx942 >= AMD_KNOBS
    assert AMD_KNOBS - {"kpack"} <= gfx950 and "kpack" not in gfx950  # kpack is a gfx942 knob


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950", "interpreter"])
@pytest.mark.parametrize("mnk", [(1, 4096, 4096), (16, 6144, 4096), (4096, 4096, 4096), (33, 17, 100)])
def test_default_config_is_in_the_space_and_vendor_first(arch: str, mnk: tuple[int, int, int]) -> None:
    target = Target.for_arch(arch)
    problem = Problem.of("gemm", *mnk)
    space = GEMM.space(problem, target)
    default = gemm_default_config(problem, target)
    assert space.check(default) is None, space.check(default)
    configs = space.configs()
    assert configs[0] == Config(backend="torch")
    assert configs[1] == default
    assert len(set(configs)) == len(configs)


def test_constraints_prune_with_reasons() -> None:
    target = Target.for_arch("gfx942")
    problem = Problem.of("gemm", 4096, 4096, 4096)
    space = GEMM.space(problem, target)
    big = Config(
        backend="triton",
        BLOCK_M=256,
        BLOCK_N=256,
        BLOCK_K=256,
        GROUP_M=8,
        SPLIT_K=1,
        FUSED_SPLIT=0,
        STREAM_K=0,
        num_warps=8,
        num_stages=2,
        matrix_instr_nonkdim=16,
        waves_per_eu=0,
        NUM_XCDS=8,
        kpack=2,
    )
    reason = space.check(big)
    assert reason is not None and reason.startswith("lds_overflow") and "65536" in reason
    # the same tile fits gfx950's 160 KiB LDS? (256+256)*256*2 = 256 KiB: no; 128-deep K does not either
    ok = big.replace(BLOCK_K=64)
    assert space.check(ok) is None
    summary = space.prune_summary()
    assert summary["lds_overflow"] > 0 and sum(summary.values()) == space.raw_size() - len(space) + 0 * 1


def test_decode_space_has_split_k_and_narrow_tiles() -> None:
    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", 1, 4096, 4096)
    configs = [c for c in GEMM.space(problem, target).configs() if c.backend == "triton"]
    assert {c["BLOCK_M"] for c in configs} == {16}
    assert {c["SPLIT_K"] for c in configs} >= {1, 2, 4, 8, 16}
    assert {c["GROUP_M"] for c in configs} == {1}  # one row of tiles: GROUP_M is redundant
    assert gemm_default_config(problem, target).backend == "triton_gemv"  # one row: the GEMV kernel
    default = gemm_default_config(Problem.of("gemm", 16, 4096, 4096), target)
    assert default.backend == "triton" and default["SPLIT_K"] > 1  # 64 tiles underfill 132 SMs


def test_prefill_space_drops_split_k() -> None:
    target = Target.for_arch("sm_90")
    configs = GEMM.space(Problem.of("gemm", 8192, 8192, 8192), target).configs()
    assert all(c.get("SPLIT_K", 1) == 1 or c["BLOCK_M"] * c["BLOCK_N"] >= 128 * 256 for c in configs[1:])


def test_unknown_backend_and_foreign_configs_are_rejected() -> None:
    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", 64, 64, 64)
    with pytest.raises(ValueError, match="unknown gemm backend 'cutlass'"):
        GEMM.space(problem, target, ("cutlass",))
    space = GEMM.space(problem, target)
    assert "not in this space" in (space.check(Config(backend="cutlass")) or "")
    amd_cfg = gemm_default_config(problem, Target.for_arch("gfx942"))
    assert "unknown parameters" in (space.check(amd_cfg) or "")


def test_a_router_gemm_with_fewer_columns_than_any_tile_has_a_space() -> None:
    """N = 8 (an MoE router over 8 experts) is narrower than every BLOCK_N: the narrowest tile stays."""
    from autotune.kernels import GEMM

    for arch in ("sm_90", "gfx942", "gfx950"):
        target = Target.for_arch(arch)
        problem = Problem.of("gemm", 16, 8, 4096)
        space = GEMM.space(problem, target)
        assert GEMM.default_config(problem, target) in space
        widths = {int(c["BLOCK_N"]) for c in space.configs() if c.backend == "triton"}
        assert widths == {min(int(v) for v in triton_params(target)["BLOCK_N"])}


def test_split_modes_exclude_each_other_with_reasons() -> None:
    """FUSED_SPLIT needs SPLIT_K > 1; STREAM_K deals K itself (SPLIT_K 1) and only where tiles are few."""
    target = Target.for_arch("sm_90")
    decode = GEMM.space(Problem.of("gemm", 16, 4096, 4096), target)
    base = gemm_default_config(Problem.of("gemm", 16, 4096, 4096), target)
    for change, reason in [
        (dict(SPLIT_K=1, FUSED_SPLIT=1), "fused_split_alone"),
        (dict(SPLIT_K=2, FUSED_SPLIT=0, STREAM_K=1), "stream_k_alone"),
    ]:
        got = decode.check(base.replace(**change))
        assert got is not None and got.startswith(reason), got
    assert decode.check(base.replace(SPLIT_K=1, FUSED_SPLIT=0, STREAM_K=2)) is None
    assert decode.check(base.replace(SPLIT_K=4, FUSED_SPLIT=1, STREAM_K=0)) is None
    prefill = Problem.of("gemm", 4096, 4096, 4096)  # 1024 tiles of 128 x 128: more than twice 132 SMs
    big = base.replace(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, FUSED_SPLIT=0, STREAM_K=1)
    got = GEMM.space(prefill, target).check(big)
    assert got is not None and got.startswith("stream_k_needless"), got


@pytest.mark.parametrize(
    "mnk, tile, stages",
    [
        ((1024, 4096, 14336), (128, 256), 3),  # 128 wide tiles: one wave; 256 square ones: two
        ((1024, 6144, 4096), (128, 384), 3),  # 128 tiles of 256 + 128 columns: one wave (2.8); 384 square: 3
        ((4096, 6144, 4096), (128, 256), 3),  # 4 waves of 384-wide tiles (11.2) lose to 6 wide ones (10.5)
        ((4096, 1280, 8192), (128, 320), 3),  # 128 tiles of 256 + 64 columns: one wave; 320 square: three
        ((4096, 28672, 4096), (128, 256), 3),  # many waves either way: wide
        ((256, 7168, 8192), (128, 128), 6),  # 56 wide tiles underfill the SMs as much as 112 square;
        # at M <= 256 a square tile's ring is 6 deep (7 do not fit beside its C buffer)
        ((1024, 1280, 8192), (128, 128), 5),  # from M = 1024 up, 5
    ],
)
def test_tma_default_picks_the_tile_whose_waves_finish_first(mnk, tile, stages) -> None:
    from autotune.kernels.dense.space import WIDE_TILE_COST

    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", *mnk)
    config = gemm_default_config(problem, target)
    assert config.backend == "triton_tma" and (config["BLOCK_M"], config["BLOCK_N"]) == tile
    assert config["num_stages"] == stages and config in GEMM.space(problem, target)
    # a tile of two parts stores C in slices: whole, its C buffer would leave no room for 3 stages
    assert config["EPILOGUE_N"] == (64 if tile[1] in (320, 384) else 0)
    assert config["num_warps"] == (4 if tile[1] == 128 else 8)
    assert (
        5 / 3 < WIDE_TILE_COST <= 9 / 5
    )  # the window the H100 measurements allow (docs/notes/2026-11-22-dense-tma-tiles.md)


def test_tma_space_prices_the_c_buffer_of_each_epilogue() -> None:
    """The shared-memory rule counts the C store's buffer: the whole tile, one EPILOGUE_N slice, or the fp32
    workspace tile with SPLIT_K > 1 (sizes the sm_90 compiles report, barriers aside)."""
    target = Target.for_arch("sm_90")
    space = GEMM.space(Problem.of("gemm", 4096, 1280, 8192), target, ("triton_tma",))
    base = dict(BLOCK_M=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, PERSISTENT=0, TAIL_SPLIT=0, num_warps=8)

    def why(**knobs: int) -> str | None:
        return space.check(Config(backend="triton_tma", **{**base, **knobs}))

    assert why(BLOCK_N=320, EPILOGUE_N=64, num_stages=3) is None  # 172 KB ring + 16 KB slice
    assert str(why(BLOCK_N=320, EPILOGUE_N=0, num_stages=3)).startswith("lds_overflow")  # + 80 KB tile
    assert why(BLOCK_N=256, EPILOGUE_N=64, num_stages=4) is None  # a stage more than whole C allows
    assert str(why(BLOCK_N=256, EPILOGUE_N=0, num_stages=4)).startswith("lds_overflow")
    # split along K, the workspace tile is stored whole in fp32: 144 KB ring + 128 KB
    assert str(why(BLOCK_N=256, SPLIT_K=2, EPILOGUE_N=0, num_stages=3)).startswith("lds_overflow")
    assert str(why(BLOCK_N=256, SPLIT_K=2, EPILOGUE_N=64, num_stages=2)).startswith("epilogue_needless")
    assert str(why(BLOCK_N=96, EPILOGUE_N=64, num_stages=3)).startswith("epilogue_needless")  # 64 + 32
    # 128 x 384 on 8 warps holds 192 accumulators a lane (compiles unspilled); on 4 warps, 384
    assert why(BLOCK_N=384, EPILOGUE_N=64, num_stages=3) is None
    assert str(why(BLOCK_N=384, EPILOGUE_N=64, num_stages=3, num_warps=4)).startswith("accumulator_spill")


def test_tma_search_starts_with_the_tiles_that_fill_the_sms() -> None:
    """After the default, a TMA search first sees the tiles whose grids fill their last wave of SMs (1024 x
    1280 on 132 SMs: 64 x 160 makes 128 tiles, 64 x 192 112), each a member of the space, at most six; the
    strategies ask them right after the default. The interpreter's space has none."""
    from autotune.core.problem import cdiv
    from autotune.engine.strategies import make_strategy
    from autotune.kernels.dense.space import WAVE_FILL, wave_filling_tiles

    target = Target.for_arch("sm_90")
    problem = Problem.of("gemm", 1024, 1280, 8192)
    space = GEMM.space(problem, target, ("triton_tma",))
    sub = space.subspaces[0]
    filling = wave_filling_tiles(problem, target, sub)
    assert 0 < len(filling) <= 6 and all(sub.check(c) is None for c in filling)
    assert [(c["BLOCK_M"], c["BLOCK_N"]) for c in filling[:2]] == [(64, 160), (64, 192)]
    assert filling[0]["EPILOGUE_N"] == 64 and filling[0]["num_stages"] == 5
    for c in filling:
        tiles = cdiv(1024, int(c["BLOCK_M"])) * cdiv(1280, int(c["BLOCK_N"]))
        assert tiles >= WAVE_FILL * cdiv(tiles, 132) * 132
    assert sub.first == (gemm_default_config(problem, target), *filling)
    strategy = make_strategy("optuna", space)
    asked = []
    for _ in range(1 + len(filling)):
        config = strategy.ask()
        assert config is not None
        asked.append(config)
        strategy.tell(config, TrialResult(config, TrialStatus.COMPILE_ERROR, error="not run"))
    assert asked == list(sub.first)
    interp = Target.interpreter_target()
    small = Problem.of("gemm", 64, 64, 64)
    assert wave_filling_tiles(small, interp, GEMM.space(small, interp, ("triton_tma",)).subspaces[0]) == ()


def test_a_search_only_constraint_is_not_asked_whether_a_config_runs() -> None:
    from autotune.core.space import Constraint, SubSpace

    rule = Constraint("wide_waste", "BLOCK {BLOCK} is wasteful", lambda c: int(c["BLOCK"]) <= 32,
                      knobs=("BLOCK",), search_only=True)  # fmt: skip
    hard = Constraint(
        "too_wide", "BLOCK {BLOCK} does not fit", lambda c: int(c["BLOCK"]) <= 64, knobs=("BLOCK",)
    )
    sub = SubSpace("triton", {"BLOCK": (16, 32, 64, 128)}, (rule, hard))
    wide, wider = Config(backend="triton", BLOCK=64), Config(backend="triton", BLOCK=128)
    assert sub.check(wide) == "wide_waste: BLOCK 64 is wasteful"
    assert sub.check(wide, search_only=False) is None
    assert sub.check(wider, search_only=False) == "too_wide: BLOCK 128 does not fit"
    assert Config(backend="triton", BLOCK=64) not in list(sub.configs())
