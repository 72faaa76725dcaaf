"""M ranges: built from a replayed profile, stored in table files (version 2), served by the dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import Config, Problem, Target
from autotune.core.ladder import parse_ladder, serving_ladder
from autotune.dispatch import Dispatcher, Entry, Table, TableError
from autotune.dispatch.ranges import Range, ranges_from_profile

VENDOR = Config(backend="torch")
GEMV = Config(backend="triton_gemv", BLOCK_N=32)
SPLIT = Config(backend="triton", BLOCK_M=16, SPLIT_K=4)
TILE = Config(backend="triton", BLOCK_M=64, SPLIT_K=1)
BIG = Config(backend="triton_tma", BLOCK_M=128, BLOCK_N=256)
H100 = Target.for_arch("sm_90")


def is_vendor(c: Config) -> bool:
    return c.backend == "torch"


def served(ranges: tuple[Range, ...], M: int) -> Config:
    hits = [r for r in ranges if M in r]
    assert len(hits) == 1, (M, ranges)
    return hits[0].config


# -- the ladder ----------------------------------------------------------------------------------------


def test_serving_ladder_holds_what_engines_run() -> None:
    ladder = serving_ladder(4096, [1, 16, 64, 256, 1024, 4096])
    assert ladder[:7] == (1, 2, 3, 4, 6, 8, 16)
    assert all(m in ladder for m in range(8, 513, 8))
    assert {768, 1024, 1536, 2048, 3072, 4096} <= set(ladder)
    # beside each log-spaced point from 1024 up, one 1/16 below it: another phase between tile boundaries
    assert [m for m in ladder if m > 512] == [768, 960, 1024, 1440, 1536, 1920, 2048, 2880, 3072, 3840, 4096]
    assert max(ladder) == 4096 and list(ladder) == sorted(set(ladder))
    assert serving_ladder(16, [1, 16]) == (1, 2, 3, 4, 6, 8, 16)
    # a tuned M off the ladder is profiled too, and a wide gap between tuned M gets its midpoint
    assert 5 in serving_ladder(64, [5, 64])
    assert 5792 in serving_ladder(16384, [2048, 16384])  # 8 * round(sqrt(2048 * 16384) / 8)
    with pytest.raises(ValueError, match="positive integer"):
        serving_ladder(0)


def test_parse_ladder() -> None:
    assert parse_ladder("1,2,8-32:8", 10) == (1, 2, 8, 16, 24, 32)
    assert parse_ladder("serving", 16) == serving_ladder(16)
    assert parse_ladder(None, 16) == serving_ladder(16)
    assert parse_ladder("none", 16) == () and parse_ladder(False, 16) == ()
    assert parse_ladder([4, 1, 4], 16) == (1, 4)
    with pytest.raises(ValueError, match="bad M ladder item"):
        parse_ladder("1,x", 16)
    with pytest.raises(ValueError, match="LO <= HI"):
        parse_ladder("32-8", 16)
    with pytest.raises(ValueError, match="positive integers"):
        parse_ladder([0, 2], 16)


# -- building ranges from a profile ------------------------------------------------------------------


def test_a_files_pick_stands_in_for_the_vendor_where_the_op_has_none() -> None:
    """No vendor library (a MoE): the imported file's config at each M is served unless another config
    beats it there by the margin; in a gap neither end's pick clears, the lower end's file config."""
    file_a, file_b = Config(backend="triton", BLOCK_M=16, F=1), Config(backend="triton", BLOCK_M=64, F=1)
    profile = {
        1: {file_a: 10.0, SPLIT: 9.9},  # 1% ahead: not by the 5% margin, the file's config
        8: {file_a: 20.0, SPLIT: 15.0},  # clearly ahead: ours
        16: {
            file_a: 30.0,
            TILE: 29.0,
            file_b: 31.0,
        },  # the file switches to file_b at 16: file_b is the baseline
        32: {file_a: 40.0, file_b: 35.0, TILE: 36.0},
        40: {file_b: 50.0, TILE: 46.0},  # 8% ahead: ours
    }
    baseline = {1: file_a, 8: file_a, 16: file_b, 32: file_b, 40: file_b}
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.05, baseline=baseline)
    assert served(ranges, 1) == file_a and served(ranges, 8) == SPLIT
    assert served(ranges, 16) == TILE  # 29 against file_b's 31: 6.9% ahead
    assert served(ranges, 32) == file_b and served(ranges, 40) == TILE
    assert served(ranges, 2) == file_a  # the gap 2-7: SPLIT does not clear at 1, file_a measured at 8
    assert served(ranges, 33) == file_b  # TILE clears at 40 but not at 32, file_b is measured at both
    # without the baseline the fastest competes with no margin
    plain = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.05)
    assert served(plain, 1) == SPLIT and served(plain, 32) == TILE  # kept from 16: within the margin


def test_between_profiled_m_the_file_serves_its_own_config_of_each_m() -> None:
    """With the file's configs by M key (`imported`), a gap that no pick clears at both ends serves the
    file's own config of each M (its nearest key, the smaller on a tie), as the file would; without them,
    a config slower than the file at one end could serve the whole gap."""
    f64, f96 = Config(backend="triton", BLOCK_M=64, F=1), Config(backend="triton", BLOCK_M=96, F=1)
    ours = Config(backend="triton", BLOCK_M=32, F=0)
    profile = {64: {f64: 10.0, ours: 10.5}, 96: {f96: 12.0, ours: 11.0}}  # ours: behind at 64, ahead at 96
    baseline = {64: f64, 96: f96}
    imported = {1: f64, 64: f64, 96: f96}
    ranges = ranges_from_profile(
        profile, is_vendor=is_vendor, margin=0.05, baseline=baseline, imported=imported
    )
    assert served(ranges, 64) == f64 and served(ranges, 96) == ours
    assert [served(ranges, m) for m in (65, 80, 81, 95)] == [f64, f64, f96, f96]  # 80: a tie, the smaller key
    assert served(ranges, 97) == ours  # above the profile: the last profiled M's pick
    without = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.05, baseline=baseline)
    assert served(without, 70) == ours  # 5% slower than the file's config at 64
    # a pick that clears the file at both ends serves the gap whole
    ahead = {64: {f64: 10.0, ours: 9.0}, 96: {f96: 12.0, ours: 11.0}}
    whole = ranges_from_profile(ahead, is_vendor=is_vendor, margin=0.05, baseline=baseline, imported=imported)
    assert all(served(whole, m) == ours for m in range(64, 97))


def test_vendor_served_unless_beaten_by_the_margin() -> None:
    profile = {
        1: {VENDOR: 10.0, GEMV: 8.0},  # GEMV wins clearly
        2: {VENDOR: 10.0, GEMV: 9.95},  # within the margin: the vendor
        4: {VENDOR: 10.0, GEMV: 12.0},
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.01)
    assert served(ranges, 1) == GEMV
    assert served(ranges, 2) == VENDOR and served(ranges, 3) == VENDOR and served(ranges, 4) == VENDOR
    assert ranges[0].speedup == pytest.approx(1.25) and ranges[0].points == 1
    # a zero margin takes the small win
    assert served(ranges_from_profile(profile, is_vendor=is_vendor, margin=0.0), 2) == GEMV


def test_a_gap_is_served_only_by_a_config_no_slower_than_the_vendor_at_both_ends() -> None:
    profile = {
        16: {VENDOR: 10.0, SPLIT: 8.0, TILE: 9.0},
        24: {VENDOR: 10.0, SPLIT: 8.5, TILE: 9.8},  # SPLIT at both ends of (16, 24): it fills the gap
        64: {VENDOR: 20.0, SPLIT: 25.0, TILE: 17.0},  # TILE wins here; SPLIT lost at this end
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert all(served(ranges, m) == SPLIT for m in range(16, 25))
    assert served(ranges, 64) == TILE
    # (24, 64): SPLIT is slower than the vendor at 64; TILE is at 0.98 of the vendor at 24 and faster at
    # 64: no slower at both ends, so TILE serves the gap
    assert all(served(ranges, m) == TILE for m in range(25, 64))
    # had TILE been slower than the vendor at 24, the vendor would serve the gap
    profile[24][TILE] = 10.3
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert all(served(ranges, m) == VENDOR for m in range(25, 64))


def test_the_slack_asks_short_calls_for_a_larger_win_than_long_ones() -> None:
    """A config must beat the vendor by the margin and by `slack_us` besides: 0.75 µs is 10% of a 7.5 µs
    call (the vendor's two speeds on short calls) and under 1% of a 100 µs one."""
    profile = {
        16: {VENDOR: 7.9, SPLIT: 6.5},  # 7.9 > 6.5 * 1.05 + 0.75 = 7.575: served
        32: {VENDOR: 8.1, SPLIT: 7.6},  # 6.6% ahead, but 7.6 * 1.05 + 0.75 = 8.73: the vendor
        1024: {VENDOR: 100.0, TILE: 94.0},  # 94 * 1.05 + 0.75 = 99.45: served
        2048: {VENDOR: 200.0, TILE: 190.0},  # 190 * 1.05 + 0.75 = 200.25: the vendor
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.05, slack_us=0.75)
    assert [served(ranges, m) for m in (16, 32, 1024, 2048)] == [SPLIT, VENDOR, TILE, VENDOR]
    # without the slack the 6.6% win at 32 is served, and so is TILE at 2048
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.05)
    assert [served(ranges, m) for m in (16, 32, 1024, 2048)] == [SPLIT, SPLIT, TILE, TILE]
    # a gap is served by its ends' pick only where it clears the margin and the slack at both ends
    gap = {16: {VENDOR: 7.9, SPLIT: 6.5}, 24: {VENDOR: 8.0, SPLIT: 7.0}}
    assert served(ranges_from_profile(gap, is_vendor=is_vendor, margin=0.05), 20) == SPLIT
    assert served(ranges_from_profile(gap, is_vendor=is_vendor, margin=0.05, slack_us=0.75), 20) == VENDOR


def test_a_config_that_wins_at_an_isolated_point_serves_that_point_alone() -> None:
    profile = {
        8: {VENDOR: 10.0, SPLIT: 10.5},
        16: {VENDOR: 10.0, SPLIT: 9.0},
        24: {VENDOR: 10.0, SPLIT: 10.5},
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert served(ranges, 16) == SPLIT
    assert [served(ranges, m) for m in (8, 9, 15, 17, 23, 24)] == [VENDOR] * 6
    assert [(r.lo, r.hi) for r in ranges] == [(1, 15), (16, 16), (17, 24), (25, None)]


def test_ties_and_hysteresis_keep_the_previous_pick() -> None:
    # SPLIT and TILE within the margin of each other at 24: the pick of 16 stays (no switch on noise)
    profile = {16: {VENDOR: 10.0, SPLIT: 8.0, TILE: 8.5}, 24: {VENDOR: 10.0, SPLIT: 8.05, TILE: 8.0}}
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert served(ranges, 24) == SPLIT and len([r for r in ranges if r.config == SPLIT]) == 1
    # exact ties between two configs: one deterministic pick, whatever the order they were given in
    a = ranges_from_profile({8: {VENDOR: 10.0, SPLIT: 8.0, TILE: 8.0}}, is_vendor=is_vendor)
    b = ranges_from_profile({8: {VENDOR: 10.0, TILE: 8.0, SPLIT: 8.0}}, is_vendor=is_vendor)
    assert a == b


def test_above_the_last_point_the_vendor_serves() -> None:
    profile = {1024: {VENDOR: 100.0, BIG: 90.0}, 4096: {VENDOR: 400.0, BIG: 350.0}}
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert served(ranges, 4096) == BIG and served(ranges, 3000) == BIG
    assert served(ranges, 4097) == VENDOR and served(ranges, 10**6) == VENDOR
    assert ranges[-1].lo == 4097 and ranges[-1].hi is None and ranges[-1].points == 0
    # below the first profiled M: the vendor too
    assert served(ranges, 1) == VENDOR and served(ranges, 1023) == VENDOR


def test_the_range_above_the_profile_stays_apart_even_when_the_vendor_served_the_last_point() -> None:
    ranges = ranges_from_profile({1: {VENDOR: 5.0}, 8: {VENDOR: 6.0}}, is_vendor=is_vendor)
    assert [(r.lo, r.hi) for r in ranges] == [(1, 8), (9, None)]
    assert all(r.config == VENDOR for r in ranges)


def test_failed_or_unmeasured_configs_never_serve() -> None:
    profile = {
        1: {VENDOR: 10.0, GEMV: 7.0},
        2: {VENDOR: 10.0, GEMV: float("inf")},  # failed there
        4: {VENDOR: 10.0},  # not measured (outside its space)
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert served(ranges, 1) == GEMV
    assert all(served(ranges, m) == VENDOR for m in (2, 3, 4, 5))


def test_a_vendor_time_above_both_neighbours_is_capped() -> None:
    # the vendor's 24.5 at M = 448 is above its 20.9 and 22.4 at the neighbouring M: noise, capped at 22.4,
    # so 23.7 does not beat it (it did by 3.4% uncapped)
    profile = {
        440: {VENDOR: 20.9, TILE: 23.7},
        448: {VENDOR: 24.5, TILE: 23.7},
        456: {VENDOR: 22.4, TILE: 23.6},
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.03)
    assert all(r.config == VENDOR for r in ranges)
    # a real win stays: below the neighbours' times the cap changes nothing
    profile[448] = {VENDOR: 22.0, TILE: 20.0}
    assert served(ranges_from_profile(profile, is_vendor=is_vendor, margin=0.03), 448) == TILE


def test_a_vendor_that_failed_at_an_m_is_not_taken_for_none() -> None:
    nan = float("inf")  # a failed trial's time, as `profiles_of` passes it
    profile = {
        272: {VENDOR: 800.0, BIG: 1127.0},
        280: {VENDOR: nan, BIG: 1007.0},
        288: {VENDOR: 850.0, BIG: 1096.0},
    }
    ranges = ranges_from_profile(profile, is_vendor=is_vendor, margin=0.03)
    assert all(r.config == VENDOR for r in ranges)  # the neighbours' 850 stands for the vendor at 280
    # failed at the last M, no cap: nothing may beat it there
    ranges = ranges_from_profile(
        {8: {VENDOR: 5.0, SPLIT: 4.0}, 16: {VENDOR: nan, SPLIT: 1.0}}, is_vendor=is_vendor
    )
    assert served(ranges, 8) == SPLIT and served(ranges, 16) == VENDOR


def test_without_a_vendor_the_fastest_serves() -> None:
    profile = {1: {SPLIT: 5.0, TILE: 6.0}, 16: {SPLIT: 9.0, TILE: 7.0}}
    ranges = ranges_from_profile(profile, is_vendor=is_vendor)
    assert served(ranges, 1) == SPLIT and served(ranges, 16) == TILE
    assert served(ranges, 17) == TILE  # no vendor above: the last pick
    assert all(r.speedup is None for r in ranges)
    # the gap: TILE is 1.2x the fastest at 1 and the fastest at 16; SPLIT 1.29x at 16: TILE
    assert served(ranges, 8) == TILE


def test_bad_profiles_are_refused() -> None:
    with pytest.raises(ValueError, match="no measured time"):
        ranges_from_profile({4: {}}, is_vendor=is_vendor)
    with pytest.raises(ValueError, match="margin"):
        ranges_from_profile({4: {VENDOR: 1.0}}, is_vendor=is_vendor, margin=-0.1)
    with pytest.raises(ValueError, match="slack"):
        ranges_from_profile({4: {VENDOR: 1.0}}, is_vendor=is_vendor, slack_us=-1.0)


# -- tables with ranges ------------------------------------------------------------------------------


def _ranged_table() -> Table:
    ranges = (
        Range(1, 2, GEMV, 1.1, 2),
        Range(3, 23, VENDOR, 1.0, 6),
        Range(24, 4096, SPLIT, 1.05, 70),
        Range(4097, None, VENDOR, None, 0),
    )
    buckets = Table.from_winners(H100, [(Problem.of("gemm", 16, 1024, 1024), TILE, 3.0)]).entries
    return Table(target=H100, entries=[Entry("gemm", "bf16", "nk", 4096, 4096, ranges=ranges), *buckets])


def test_ranged_table_round_trip(tmp_path: Path) -> None:
    table = _ranged_table()
    path = tmp_path / "t.json"
    table.save(path)
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["entries"][1]["ranges"][3] == {
        "lo": 4097,
        "hi": None,
        "config": {"backend": "torch"},
        "speedup": None,
        "points": 0,
    }
    back = Table.load(path)
    assert back.entries == table.entries and back.ranged == 1 and len(back) == 5
    for M, want in (
        (1, GEMV),
        (2, GEMV),
        (3, VENDOR),
        (23, VENDOR),
        (24, SPLIT),
        (4096, SPLIT),
        (5000, VENDOR),
    ):
        assert back.lookup("gemm", M, 4096, 4096) == want
        assert back.lookup("gemm", M, 4096, 4096, m_policy="round_down") == want  # ranges ignore the policy
        row = back.lookup_row("gemm", M, 4096, 4096)
        assert isinstance(row, Range) and M in row
    assert back.lookup_bucket("gemm", 8, 4096, 4096) is None
    assert back.lookup("gemm", 1, 1024, 1024) == TILE  # the bucketed entry keeps its policy
    assert back.lookup("gemm", 1, 4096, 4096, dtype="bfloat16") == GEMV  # aliases still work


def test_tables_without_ranges_stay_version_1_and_old_files_load(tmp_path: Path) -> None:
    table = Table.from_winners(H100, [(Problem.of("gemm", 16, 1024, 1024), TILE, 3.0)])
    path = tmp_path / "old.json"
    table.save(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and "ranges" not in data["entries"][0]
    assert Table.load(path).lookup("gemm", 5, 1024, 1024) == TILE


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e["ranges"].__setitem__(0, {**e["ranges"][0], "lo": 2}), "must start at M = 1"),
        (lambda e: e["ranges"].pop(1), "contiguous"),
        (lambda e: e["ranges"][-1].__setitem__("hi", 9000), "no upper end"),
        (lambda e: e.__setitem__("buckets", []), "both 'buckets' and 'ranges'"),
        (lambda e: e["ranges"][0].pop("config"), "needs a 'config' object"),
        (lambda e: e["ranges"][1].__setitem__("speedup", -1), "speedup must be finite and positive"),
    ],
)
def test_malformed_ranges_are_refused(tmp_path: Path, edit: object, message: str) -> None:
    data = json.loads(_ranged_table().to_json())
    entry = next(e for e in data["entries"] if "ranges" in e)
    edit(entry)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=message):
        Table.load(path)


def test_the_dispatcher_serves_ranges() -> None:
    from autotune.dispatch import dispatcher

    d = Dispatcher([_ranged_table()], device_key=H100)
    for M, want in ((1, GEMV), (2, GEMV), (3, VENDOR), (100, SPLIT), (4096, SPLIT), (4097, VENDOR)):
        assert d.lookup("gemm", M, 4096, 4096) == want
    previous = dispatcher.install_dispatcher(d)
    try:
        assert dispatcher.lookup("gemm", 100, 4096, 4096) == SPLIT  # the module-level fast path
        assert dispatcher.lookup("gemm", 5000, 4096, 4096) == VENDOR
    finally:
        dispatcher.install_dispatcher(previous)
