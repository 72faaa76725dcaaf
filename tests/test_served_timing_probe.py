"""The pure helpers of `benchmarks/served_timing.py` (no GPU): the configs it picks, its cost estimate,
the nvidia-smi lines it parses, the telemetry windows and the table."""

from __future__ import annotations

import importlib
import math
import sys
import time
from datetime import datetime
from pathlib import Path
from types import ModuleType

import pytest

from autotune import Config, Problem
from autotune.kernels.gemm_space import gemm_default_config, gemm_space
from autotune.target import Target

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def st() -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("served_timing")


H100 = Target.for_arch("sm_90")


def test_argument_parsers(st: ModuleType) -> None:
    assert st.parse_nk("28672x4096, 6144X4096") == [(28672, 4096), (6144, 4096)]
    assert st.parse_ints("4096,1536,") == [4096, 1536]
    args = st.build_parser().parse_args(["--quick", "--m", "2048", "--config", '{"backend": "torch"}'])
    assert args.quick and args.m == [2048] and args.nk == list(st.DEFAULT_NK)


def test_input_sets_exceed_twice_the_cache(st: ModuleType) -> None:
    llc = 50 << 20
    assert st.input_sets(503e6, llc) == 2  # one set would do; two keep a launch off its own last buffers
    small = Problem.gemm(256, 4096, 4096).min_bytes()  # 37.7 MB
    assert st.input_sets(small, llc) == 3 and 3 * small > 2 * llc > 2 * small
    assert st.input_sets(1.0, llc) == st.MAX_SETS


def test_rotate_gives_each_label_a_turn_first(st: ModuleType) -> None:
    labels = ["a", "b", "c"]
    assert [st.rotate(labels, r)[0] for r in range(4)] == ["a", "b", "c", "a"]
    assert st.rotate([], 2) == []


@pytest.mark.parametrize("m", [4096, 3072, 1536])
@pytest.mark.parametrize("n, k", [(28672, 4096), (6144, 4096), (4096, 14336), (14336, 8192)])
def test_picked_configs_are_distinct_members_of_the_space(st: ModuleType, m: int, n: int, k: int) -> None:
    p = Problem.gemm(m, n, k)
    chosen, _ = st.pick_configs(p, H100)
    assert list(chosen)[:2] == ["cublas", "default"]
    assert chosen["cublas"] == Config(backend="torch")
    assert chosen["default"] == gemm_default_config(p, H100)
    assert len(chosen) == 5 and len(set(chosen.values())) == 5
    space = gemm_space(p, H100)
    assert all(space.check(c) is None for c in chosen.values())
    assert all(c.backend == "triton_tma" for label, c in chosen.items() if label != "cublas")


def test_extra_configs_are_checked_and_not_repeated(st: ModuleType) -> None:
    p = Problem.gemm(4096, 28672, 4096)
    default = gemm_default_config(p, H100)
    bad = default.replace(BLOCK_M=512)
    chosen, notes = st.pick_configs(p, H100, others=1, extra=[default, bad])
    assert list(chosen) == ["cublas", "default", "persist"]
    assert any("user1 left out: it is default" in n for n in notes)
    assert any(n.startswith("user2") and "BLOCK_M" in n for n in notes)


def test_estimate_at_the_defaults_is_under_four_minutes(st: ModuleType) -> None:
    shapes = [(m, n, k) for m in st.DEFAULT_M for n, k in st.DEFAULT_NK]
    est = st.estimate_s(shapes, 5, 3, 0.05, 2.0, 0.15)
    assert 120 < est < 240
    assert st.estimate_s(shapes[:1], 5, 2, 0.05, 2.0, 0.15) < 30


def test_smi_lines_parse_with_their_own_time(st: ModuleType) -> None:
    fields = ["clocks.sm", "power.draw", "temperature.gpu", "timestamp", "power.draw.instant",
              "clocks_event_reasons.active"]  # fmt: skip
    now = time.time()
    stamp = datetime.fromtimestamp(now - 0.5).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    s = st.parse_smi_line(f"1755, 512.31, 61, {stamp}, 690.5, 0x0000000000000004\n", fields, now)
    assert s.sm_mhz == 1755 and s.power_w == 690.5 and s.temp_c == 61
    assert abs(s.t - (now - 0.5)) < 0.01 and s.reasons == st.REASON_POWER_CAP
    # no instant power: the averaged one; a timestamp far off (another time zone): the read time
    far = datetime.fromtimestamp(now - 3600).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    s = st.parse_smi_line(f"1980, 300.0, 50, {far}, [N/A], 0x0", fields, now)
    assert s.power_w == 300.0 and s.t == now and s.reasons == 0
    assert st.parse_smi_line("1980, 300.0", fields, now) is None
    assert st.parse_smi_line("[N/A], [N/A], 50", fields[:3], now) is None


def test_window_stats_pool_the_samples_inside_the_windows(st: ModuleType) -> None:
    S = st.Sample
    samples = [S(1.0, 1980, 300, 50, 0), S(2.0, 1700, 700, 60, 4), S(3.0, 1800, 650, 61, None),
               S(4.0, 1900, math.nan, 62, 0x40)]  # fmt: skip
    w = st.window_stats(samples, [(1.5, 3.0), (3.9, 4.1)])
    assert w["samples"] == 3
    assert w["sm_mhz"] == pytest.approx((1700 + 1800 + 1900) / 3)
    assert w["power_w"] == pytest.approx(675)  # NaN left out
    assert w["power_capped"] == pytest.approx(0.5) and w["thermal"] == pytest.approx(0.5)
    empty = st.window_stats(samples, [(10.0, 11.0)])
    assert empty["samples"] == 0 and math.isnan(empty["sm_mhz"])


def test_summary_and_table(st: ModuleType) -> None:
    runs = []
    for r in range(3):
        for method in st.METHODS:
            runs.append(dict(method=method, config="cublas", round=r, t0=10.0 * r, t1=10.0 * r + 1,
                             median_us=1000.0 + r))  # fmt: skip
            runs.append(dict(method=method, config="default", round=r, t0=10.0 * r + 2, t1=10.0 * r + 3,
                             median_us=990.0 if method == "search" else 1070.0))  # fmt: skip
    samples = [st.Sample(0.5, 1755, 690, 60), st.Sample(2.5, 1600, 700, 62)]
    summary = st.summarize({"runs": runs}, ["cublas", "default", "failed"], samples)
    assert summary["cublas"]["search"]["median_us"] == 1001.0
    assert summary["default"]["search"]["ratio"] == pytest.approx(1001.0 / 990.0)
    assert summary["default"]["served"]["ratio"] == pytest.approx(1001.0 / 1070.0)
    assert summary["default"]["served"]["sm_mhz"] == 1600 and summary["cublas"]["served"]["power_w"] == 690
    assert math.isnan(summary["failed"]["sustained"]["median_us"])
    lines = st.format_table("title", summary)
    assert lines[0] == "title" and len(lines) == 3 + 3
    assert "1070.00" in lines[4] and " 0.936 " in lines[4] and "1600" in lines[4]
    assert lines[5].startswith("failed") and "-" in lines[5]
    assert len({len(line) for line in lines[1:]}) == 1  # columns line up
