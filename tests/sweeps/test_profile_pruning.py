"""M profiles skip clearly losing candidates: one more than HOPELESS times the fastest at its last timing
(or failed there) is skipped for REPROBE timed M, then timed again; never the vendor nor an imported
file's pick, never at a tuned M, never a candidate not timed before; a resumed profile skips the same
ones."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.core.result import Source
from autotune.db import Store
from autotune.engine.runner import SweepStopped
from autotune.sweeps.profile import (
    HOPELESS,
    REPROBE,
    VENDOR_SAMPLES,
    FamilyProfile,
    Plan,
    ProfileReport,
    profile_family,
)

GPU = Target.for_arch("sm_90")
VENDOR = Config(backend="torch")
A, B, C = (Config(backend="triton", BLOCK_M=m) for m in (16, 32, 64))

#: Time (µs) of a config at an M; None: the timing fails.
Times = Callable[[int, Config], float | None]


class Timed:
    """A measurer of made-up times; counts its calls per (M, config)."""

    def __init__(self, times: Times) -> None:
        self.times = times
        self.calls: Counter[tuple[int, Config]] = Counter()

    def run(self, problem: Problem, config: Config) -> TrialResult:
        self.calls[(problem.M, config)] += 1
        t = self.times(problem.M, config)
        if t is None:
            return TrialResult(config, TrialStatus.RUNTIME_ERROR, error="boom")
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "graph"))


class Refuses:
    """A measurer that must not be called."""

    def run(self, problem: Problem, config: Config) -> TrialResult:
        raise AssertionError(f"timed {config.short()} at M = {problem.M}: it was stored")


def _job(ladder: Sequence[int], tuned: Sequence[int]) -> FamilyProfile:
    from autotune.kernels import GEMM

    return FamilyProfile(GEMM, tuple(Problem.of("gemm", m, 256, 512) for m in tuned), tuple(ladder))


def _plan(job: FamilyProfile, configs: Callable[[int], list[Config]]) -> tuple[Plan, int]:
    """The plan of `job`: at each ladder M, `configs(M)` (a given plan: no space checks, no store)."""
    return [(job.buckets[0].with_m(m), configs(m)) for m in job.ladder], 0


def _profile(
    tmp: Path,
    job: FamilyProfile,
    configs: Callable[[int], list[Config]],
    times: Times,
    *,
    name: str = "p.db",
    sparse: bool = False,
) -> tuple[ProfileReport, Timed]:
    measurer = Timed(times)
    with Store(str(tmp / name)) as store:
        report = profile_family(
            job, store=store, target=GPU, measurer=measurer, plan=_plan(job, configs), sparse=sparse
        )
    return report, measurer


def _at(measurer: Timed, config: Config) -> list[int]:
    """The M at which `config` was timed, each as often as it was."""
    return sorted(m for (m, c), n in measurer.calls.items() if c == config for _ in range(n))


LADDER = tuple(range(1, 17))  # 16 points, index i at M = i + 1


def _reprobed(start: int, end: int) -> list[int]:
    """The M a config hopeless at every timing is timed at, first timed at ladder M `start`."""
    return [m for m in LADDER if start <= m <= end and (m - start) % (REPROBE + 1) == 0]


def test_a_hopeless_config_is_skipped_then_reprobed_after_reprobe_points(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float:
        return {VENDOR: 10.0, A: 8.0, B: 8.0 * 1.5}[config]

    job = _job(LADDER, [1])
    report, measurer = _profile(tmp_path, job, lambda m: [VENDOR, A, B], times)
    # hopeless at M = 1: skipped at the next REPROBE points, timed again, hopeless again, ...
    assert _at(measurer, B) == _reprobed(1, 16)
    assert _at(measurer, B)[:2] == [1, 2 + REPROBE]
    assert _at(measurer, A) == list(LADDER)
    assert _at(measurer, VENDOR) == sorted(list(LADDER) * VENDOR_SAMPLES)  # beaten by A: timed again
    assert all(n == 1 for (_, c), n in measurer.calls.items() if c != VENDOR)
    assert report.pruned == len(LADDER) - len(_reprobed(1, 16))
    assert report.ran + report.retimed == sum(measurer.calls.values())
    assert report.cached == 0 and report.points == 16


def test_the_vendor_is_timed_at_every_point_however_slow_or_failing(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float | None:
        if config == VENDOR:
            return None if M % 2 else 100.0  # fails at odd M, else 12x the fastest
        return 8.0

    report, measurer = _profile(tmp_path, _job(LADDER, [1]), lambda m: [VENDOR, A], times)
    assert sorted(set(_at(measurer, VENDOR))) == list(LADDER)  # beaten at even M: timed again there
    assert _at(measurer, A) == list(LADDER)
    assert report.pruned == 0 and report.failed == 8


def test_a_failed_timing_is_hopeless_and_reprobed(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float | None:
        if config == B and M == 3:
            return None  # a crashed worker, say: B is as fast as A otherwise
        return {VENDOR: 10.0, A: 8.0, B: 8.0}[config]

    report, measurer = _profile(tmp_path, _job(LADDER, [1]), lambda m: [VENDOR, A, B], times)
    assert _at(measurer, B) == [1, 2, 3, *range(4 + REPROBE, 17)]
    assert report.failed == 1 and report.pruned == REPROBE


def test_a_tuned_m_times_every_candidate(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float:
        return {VENDOR: 10.0, A: 8.0, B: 20.0}[config]

    tuned = [1, 3, 16]  # M = 3 falls inside the skip after M = 1
    report, measurer = _profile(tmp_path, _job(LADDER, tuned), lambda m: [VENDOR, A, B], times)
    assert _at(measurer, B) == sorted({1, 3, *_reprobed(3, 15), 16})
    assert _at(measurer, B)[:3] == [1, 3, 4 + REPROBE]
    assert _at(measurer, A) == list(LADDER)
    assert report.pruned == len(LADDER) - len(_at(measurer, B))


def test_a_candidate_never_timed_before_is_timed(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float:
        return {VENDOR: 10.0, A: 8.0, B: 20.0, C: 20.0}[config]

    def configs(M: int) -> list[Config]:  # C (a new bucket's finalist) comes in at M = 3
        return [VENDOR, A, B] + ([C] if M >= 3 else [])

    report, measurer = _profile(tmp_path, _job(LADDER, [1]), configs, times)
    # B is skipped at M = 3 (hopeless at M = 1); C, never timed, is timed there, then skipped in turn
    assert 3 not in _at(measurer, B)
    assert _at(measurer, C) == _reprobed(3, 16)
    assert _at(measurer, B) == _reprobed(1, 16)
    assert report.pruned == (16 - len(_reprobed(1, 16))) + (14 - len(_reprobed(3, 16)))


def test_a_candidate_within_hopeless_keeps_being_timed(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float:
        # A exactly HOPELESS times the fastest (B) everywhere: within, so timed at every point
        return {VENDOR: 9.0, A: 8.0 * HOPELESS, B: 8.0}[config]

    report, measurer = _profile(tmp_path, _job(LADDER, [1]), lambda m: [VENDOR, A, B], times)
    assert _at(measurer, A) == list(LADDER) and _at(measurer, B) == list(LADDER)
    assert report.pruned == 0


def test_a_candidate_that_comes_back_within_hopeless_is_timed_again_at_every_point(tmp_path: Path) -> None:
    def times(M: int, config: Config) -> float:
        # B is hopeless until its reprobe, then as fast as A: once reprobed, it is timed at every point
        return {VENDOR: 10.0, A: 8.0, B: 20.0 if M < 2 + REPROBE else 8.0}[config]

    _, measurer = _profile(tmp_path, _job(LADDER, [1]), lambda m: [VENDOR, A, B], times)
    assert _at(measurer, B) == [1, *range(2 + REPROBE, 17)]


def _varying(M: int, config: Config) -> float | None:
    """Times where who is hopeless changes along the ladder, and one failure."""
    if config == VENDOR:
        return 10.0 + M
    if config == A:
        return 8.0 + 2 * M  # loses to the vendor from M = 3, hopeless from M = 9
    if config == B:
        return None if M == 8 else 30.0 - M  # hopeless until M = 12; fails at the tuned M = 8
    return 9.0 + M


def _configs(M: int) -> list[Config]:
    return [VENDOR, A, B] + ([C] if M >= 5 else [])


def test_a_resumed_profile_times_nothing_again_and_reports_the_same(tmp_path: Path) -> None:
    job = _job(LADDER, [1, 8])
    with Store(str(tmp_path / "r.db")) as store:
        plan = _plan(job, _configs)
        first = profile_family(
            job, store=store, target=GPU, measurer=Timed(_varying), plan=plan, sparse=False
        )
        assert first.pruned > 0 and first.ran > 0 and first.failed == 1
        again = profile_family(job, store=store, target=GPU, measurer=Refuses(), plan=plan, sparse=False)
        assert again.ran == 0 and again.cached == first.ran
        assert (again.pruned, again.failed, again.points) == (first.pruned, 0, first.points)
        assert len(store.trials(source=Source.PROFILE)) == first.ran


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("stop_after", [1, 7, 20, 33])
def test_a_profile_stopped_and_resumed_times_what_an_uninterrupted_one_does(
    tmp_path: Path, stop_after: int, sparse: bool
) -> None:
    job = _job(LADDER, [1, 8])
    whole, straight = _profile(tmp_path, job, _configs, _varying, name="whole.db", sparse=sparse)
    assert whole.pruned > 0
    with Store(str(tmp_path / "stopped.db")) as store:
        plan = _plan(job, _configs)
        first = Timed(_varying)
        with pytest.raises(SweepStopped):
            profile_family(
                job,
                store=store,
                target=GPU,
                measurer=first,
                plan=plan,
                should_stop=lambda: sum(first.calls.values()) >= stop_after,
                sparse=sparse,
            )
        second = Timed(_varying)
        resumed = profile_family(job, store=store, target=GPU, measurer=second, plan=plan, sparse=sparse)
        # what was stored is read back, the point being timed when it stopped is timed again (its results
        # were not stored), and the skips are the same
        stored = {(t.problem.M, t.config) for t in store.trials(source=Source.PROFILE)}
        assert stored == set(straight.calls)
        assert resumed.cached + resumed.ran == whole.ran and resumed.pruned == whole.pruned
        assert resumed.left_out == whole.left_out
        assert set(second.calls) <= set(straight.calls)
        assert set(second.calls) | {k for k in first.calls if k in stored} == set(straight.calls)


def test_the_log_line_counts_pruned_timings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def times(M: int, config: Config) -> float:
        return {VENDOR: 10.0, A: 8.0, B: 20.0}[config]

    with caplog.at_level(logging.INFO, logger="autotune.sweeps.profile"):
        report, _ = _profile(tmp_path, _job(LADDER, [1]), lambda m: [VENDOR, A, B], times)
    assert report.pruned > 0
    assert f"{report.pruned} pruned as hopeless" in caplog.text


def test_a_sparse_profile_fills_in_only_the_m_where_a_candidate_comes_close_to_the_vendor(
    tmp_path: Path,
) -> None:
    from autotune.sweeps.profile import CLOSE

    job = _job(LADDER, [1, 8])
    anchors = [1, 8, 16]  # the tuned M, the first and the last
    # then every COARSE-th M (COARSE = 4: M = 5, 9, 13) where a timed M beside it is contested

    def behind(M: int, config: Config) -> float:  # A 20% behind the vendor everywhere: none filled in
        return {VENDOR: 10.0, A: 12.0}[config]

    report, measurer = _profile(tmp_path, job, lambda m: [VENDOR, A], behind, name="a.db", sparse=True)
    assert _at(measurer, VENDOR) == _at(measurer, A) == anchors
    assert report.left_out == len(LADDER) - len(anchors) and report.points == len(LADDER)

    def close_below_6(M: int, config: Config) -> float:  # A at CLOSE times the vendor up to M = 5
        return {VENDOR: 10.0, A: 10.0 * (CLOSE if M <= 5 else CLOSE + 0.01)}[config]

    report, measurer = _profile(tmp_path, job, lambda m: [VENDOR, A], close_below_6, name="b.db", sparse=True)
    # M = 5 lies beside a contested anchor (1); M = 9 and 13 lie between uncontested ones (8, 16).
    # Halving the step: M = 3 and 7 lie beside contested M (1 and 5), then M = 2, 4 and 6 beside
    # contested M (1, 3, 5); M = 7 is not contested, so M = 9-15 are left to the vendor
    assert _at(measurer, VENDOR) == sorted([*anchors, 5, 3, 7, 2, 4, 6])
    assert report.left_out == len(LADDER) - len(anchors) - 6

    def vendor_fails_at_13(M: int, config: Config) -> float | None:  # no vendor time: contested
        return None if (M, config) == (13, VENDOR) else behind(M, config)

    report, measurer = _profile(
        tmp_path, job, lambda m: [VENDOR, A], vendor_fails_at_13, name="c.db", sparse=True
    )
    assert _at(measurer, VENDOR) == anchors  # M = 13 is never timed: nothing beside it is contested

    def wins_at_16(M: int, config: Config) -> float:  # A ahead at the last M only
        return {VENDOR: 10.0, A: 9.0 if M == 16 else 12.0}[config]

    report, measurer = _profile(tmp_path, job, lambda m: [VENDOR, A], wins_at_16, name="d.db", sparse=True)
    # coarse M upwards: M = 5 between uncontested anchors; M = 9, then 13, with the contested last M the
    # nearest timed above; halving: only M = 15 lies beside a contested M (16), and M = 14 between 13
    # and 15, where A lost
    assert _at(measurer, A) == sorted([*anchors, 9, 13, 15])
    assert report.left_out == len(LADDER) - len(anchors) - 3


def test_a_sparse_profile_times_a_candidate_between_two_m_only_where_it_was_near_the_fastest(
    tmp_path: Path,
) -> None:
    from autotune.sweeps.profile import CLOSE

    def times(M: int, config: Config) -> float:  # A at CLOSE times the vendor (contested); B hopeless
        return {VENDOR: 10.0, A: 10.0 * CLOSE, B: 30.0}[config]

    job = _job(LADDER, [1])
    report, measurer = _profile(tmp_path, job, lambda m: [VENDOR, A, B], times, sparse=True)
    assert _at(measurer, VENDOR) == _at(measurer, A) == list(LADDER)  # every M contested: all filled in
    timed_b = _at(measurer, B)
    # anchors M = 1 and 16, then coarse M 5, 9, 13: hopeless at M = 1, skipped at the next REPROBE
    # timed M (16, 5), reprobed at M = 9, skipped at M = 13; never timed between two timed M
    assert REPROBE == 2 and timed_b == [1, 9]
    assert report.left_out == 0 and report.pruned == 3 * len(LADDER) - len(measurer.calls)


def test_the_vendor_beaten_at_an_m_is_timed_again_and_its_fastest_stored(tmp_path: Path) -> None:
    """The vendor's call runs at one of two speeds per capture on some shapes: where a candidate beat its
    first timing, it is timed VENDOR_SAMPLES times and the fastest counts (and is stored)."""
    draws: Counter[int] = Counter()

    def times(M: int, config: Config) -> float:
        if config != VENDOR:
            return 10.0
        draws[M] += 1
        return 11.0 if draws[M] == 1 else 9.5  # slow first draw; fast later

    job = _job([1, 2, 3], [1])
    with Store(str(tmp_path / "v.db")) as store:
        measurer = Timed(times)
        report = profile_family(
            job,
            store=store,
            target=GPU,
            measurer=measurer,
            plan=_plan(job, lambda m: [VENDOR, A]),
            sparse=False,
        )
        stored = {t.problem.M: t.time_us for t in store.trials(source=Source.PROFILE) if t.config == VENDOR}
    assert _at(measurer, VENDOR) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert stored == {1: 9.5, 2: 9.5, 3: 9.5}  # A (10.0) no longer looks faster than the vendor
    assert report.ran + report.retimed == sum(measurer.calls.values()) and report.retimed == 6


def test_an_imported_files_pick_is_timed_at_every_m_however_far_behind(tmp_path: Path) -> None:
    """The file's pick is the baseline of an op without a vendor library (`autotune emit` serves another
    config only where it beats the pick): a profile never leaves it out as hopeless."""
    import json

    from autotune.db.interop import import_files
    from autotune.kernels import MOE
    from autotune.sweeps.profile import imported_pick

    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    shipped = {"1": (16, 32, 64, 1, 4, 3), "8": (16, 64, 32, 8, 4, 4)}
    vllm = tmp_path / "E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3.json"
    vllm.write_text(json.dumps({m: dict(zip(keys, v, strict=True)) for m, v in shipped.items()}))
    family = Problem.of("moe", 1, 64, 128, E=8, topk=2)
    job = FamilyProfile(MOE, (family,), LADDER)
    ours = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                  num_warps=4, num_stages=2, GATE_UP_FUSED=1, SPLIT_K=1)  # fmt: skip
    measurer = Timed(lambda M, c: 10.0 if c == ours else 10.0 * HOPELESS * 2)
    with Store(str(tmp_path / "m.db")) as store:
        import_files(store, [vllm], k=128, topk=2)
        imported = store.imported_configs(family, device_key=GPU.device_key())
        picks = {m: imported_pick(imported, m) for m in LADDER}
        plan = [(family.with_m(m), [ours, *imported.values()]) for m in LADDER], 0
        report = profile_family(job, store=store, target=GPU, measurer=measurer, plan=plan, sparse=False)
    assert {c for m, c in measurer.calls if c != ours} == set(imported.values())
    for m in LADDER:
        assert measurer.calls[(m, picks[m])] == 1, m
    assert report.pruned > 0  # the file's other config, hopeless where it is not the pick


def test_emit_serves_the_files_own_config_between_profiled_m(tmp_path: Path) -> None:
    """A MoE profiled at M = 1 and 16 with a vLLM file of keys 1 and 8 imported: ours is behind the file
    at 1 and ahead at 16, so no pick clears both ends of the gap, and there the table serves what the file
    serves at each M (its key 1 up to M = 4, its key 8 above)."""
    import json

    from autotune.core.op import kernel_versions
    from autotune.db import NewTrial
    from autotune.db.interop import import_files
    from autotune.dispatch.emit import emit_table
    from autotune.kernels import MOE

    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    shipped = {"1": (16, 32, 64, 1, 4, 3), "8": (16, 64, 32, 8, 4, 4)}
    vllm = tmp_path / "E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3.json"
    vllm.write_text(json.dumps({m: dict(zip(keys, v, strict=True)) for m, v in shipped.items()}))
    family = Problem.of("moe", 1, 64, 128, E=8, topk=2)
    ladder = (1, 16)
    job = FamilyProfile(MOE, (family, family.with_m(16)), ladder)
    ours = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                  num_warps=4, num_stages=2, GATE_UP_FUSED=1, SPLIT_K=1)  # fmt: skip
    with Store(str(tmp_path / "m.db")) as store:
        import_files(store, [vllm], k=128, topk=2)
        imported = store.imported_configs(family, device_key=GPU.device_key())
        first, eighth = imported[1], imported[8]
        times = {(1, ours): 11.0, (1, first): 10.0, (1, eighth): 12.0, (16, ours): 15.0, (16, first): 22.0,
                 (16, eighth): 20.0}  # fmt: skip
        measurer = Timed(lambda M, c: times[(M, c)])
        plan = [(family.with_m(m), [ours, first, eighth]) for m in ladder], 0
        profile_family(job, store=store, target=GPU, measurer=measurer, plan=plan, sparse=False)
        kernels = kernel_versions(MOE, MOE.backends(GPU))
        searched = [measurer.run(p, ours) for p in job.buckets]  # the buckets' searches
        store.record_many([NewTrial(GPU, *kernels["triton"], p, r, Source.MEASURED)
                           for p, r in zip(job.buckets, searched, strict=True)])  # fmt: skip
        table = emit_table(store, range_slack_us=0.0)
    served = {m: table.lookup("moe", m, 64, 128, params="E=8,topk=2") for m in (1, 2, 4, 5, 15, 16)}
    assert served[1] == first and served[16] == ours
    assert served[2] == served[4] == first and served[5] == served[15] == eighth


def test_a_tuned_m_takes_its_final_rounds_medians_and_times_the_vendor_anew(tmp_path: Path) -> None:
    from autotune.core.op import kernel_versions
    from autotune.kernels import GEMM

    def result(config: Config, t: float) -> TrialResult:
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 3, "graph"))

    job = _job(LADDER, [1, 9])
    kernels = kernel_versions(GEMM, GEMM.backends(GPU))
    measurer = Timed(lambda M, c: {VENDOR: 10.0, A: 9.0, B: 9.5}[c])
    with Store(str(tmp_path / "p.db")) as store:
        final = [result(A, 8.25), result(VENDOR, 10.5)]  # A's median differs from what the measurer says
        store.record_final(target=GPU, problem=job.buckets[0], results=[
            (*kernels[r.config.backend], r) for r in final])  # fmt: skip
        report = profile_family(
            job, store=store, target=GPU, measurer=measurer, plan=_plan(job, lambda m: [VENDOR, A, B])
        )
        stored = {(t.problem.M, t.config): t.time_us for t in store.trials(source=Source.PROFILE)}
    assert report.reused == 1 and measurer.calls[(1, A)] == 0
    assert stored[(1, A)] == pytest.approx(8.25)  # the final round's median
    assert measurer.calls[(1, VENDOR)] == VENDOR_SAMPLES  # timed anew (beaten: its fastest of three)
    assert stored[(1, VENDOR)] == pytest.approx(10.0)
    assert measurer.calls[(1, B)] == 1  # not in the final round: timed
    assert measurer.calls[(9, A)] == 1  # no final round stored at M = 9: timed


def test_a_buckets_finalist_is_planned_where_it_runs_past_a_search_only_rule(tmp_path: Path) -> None:
    """The profile times a tuned bucket's finalist at the M beside it where it runs, even where a rule of
    the search alone (`split_k_needless`: the split-K grid overfills the GPU there) keeps the search from
    trying it; a config that cannot run there (a parameter outside its values) is left out."""
    from autotune.core.op import kernel_versions
    from autotune.kernels import MOE
    from autotune.sweeps.profile import family_plan

    def result(config: Config, t: float) -> TrialResult:
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 3, "graph"))

    split = Config(backend="triton", BLOCK_SIZE_K=128, BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, GATE_UP_FUSED=1,
                   B_TMA=0, PERSISTENT=0, GROUP_SIZE_M=16, SPLIT_K=8, num_stages=3, num_warps=4)  # fmt: skip
    broken = split.replace(BLOCK_SIZE_N=48)  # no value of the knob: cannot run anywhere
    buckets = (
        Problem.of("moe", 1, 128, 7168, E=256, topk=8),
        Problem.of("moe", 16, 128, 7168, E=256, topk=8),
    )
    job = FamilyProfile(MOE, buckets, (1, 2, 3, 4, 8, 16))
    backend = MOE.backend("triton")
    assert backend.check(buckets[0].with_m(3), GPU, split) is not None  # the search's rule
    assert backend.check(buckets[0].with_m(3), GPU, split, search_only=False) is None  # it runs
    kernels = kernel_versions(MOE, MOE.backends(GPU))
    with Store(str(tmp_path / "p.db")) as store:
        store.record_final(target=GPU, problem=buckets[0], results=[
            (*kernels["triton"], result(c, t)) for c, t in ((split, 30.0), (broken, 31.0))])  # fmt: skip
        plan, _ = family_plan(job, store=store, target=GPU)
    at = {problem.M: configs for problem, configs in plan}
    assert all(split in at[m] for m in (1, 2, 3, 4, 8)), {m: split in c for m, c in at.items()}
    assert not any(broken in configs for configs in at.values())
