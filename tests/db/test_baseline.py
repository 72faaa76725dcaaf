"""What a vLLM deployment runs, as the baseline of a MoE profile and table: the imported file of the
table's device, else vLLM's fallback rule (`Store.baseline_configs`,
`autotune.kernels.moe.formats.vllm.fallback_configs`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.db import Store, import_files
from autotune.dispatch.ranges import imported_pick, ranges_from_profile
from autotune.kernels.moe.formats.vllm import fallback_config, fallback_configs

H100 = Target.for_arch("sm_90")
MI300X = Target.for_arch("gfx942")
LADDER = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512, 1024)


def test_the_fallback_by_nearest_key_is_the_rule_at_every_m() -> None:
    """Keys at the ladder and at the rule's step (M = E, E + 1): the nearest key's config is the rule's
    own at every M, on both sides of the step, above the ladder too."""
    for weights, fp8 in (("bf16", False), ("fp8e4m3", True)):
        problem = Problem.of("moe", 1, 7168, 4096, variant=weights, E=12, topk=2)
        found = fallback_configs(problem, H100, LADDER)
        assert {12, 13} <= set(found) and set(LADDER) <= set(found)
        for m in range(1, 3000):
            want = fallback_config(m, 12, fp8)
            got = imported_pick(found, m)
            assert {k: got[k] for k in want} == want, (weights, m)
            assert (
                got["SPLIT_K"] == 1 and got["GATE_UP_FUSED"] == 0 and got["B_TMA"] == got["PERSISTENT"] == 0
            )
    amd = fallback_configs(Problem.of("moe", 1, 7168, 4096, E=8, topk=2), MI300X, LADDER)
    assert all(c["num_stages"] == 2 and "B_TMA" not in c for c in amd.values())
    assert (
        fallback_configs(Problem.of("moe", 1, 2880, 2880, variant="fp4e2m1", E=32, topk=4), H100, LADDER)
        == {}
    )
    assert fallback_configs(Problem.of("gemm", 16, 4096, 4096), H100, LADDER) == {}


def test_the_devices_own_file_first_else_the_fallback(tmp_path: Path) -> None:
    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    vllm = tmp_path / "E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3.json"
    vllm.write_text(json.dumps({"1": dict(zip(keys, (16, 32, 64, 1, 4, 5), strict=True))}))
    family = Problem.of("moe", 1, 64, 128, E=8, topk=2)
    h200 = replace(H100, name="NVIDIA H200")
    with Store(str(tmp_path / "b.db")) as store:
        import_files(store, [vllm], k=128, topk=2)
        assert store.baseline_configs(family, H100, LADDER) == store.imported_configs(
            family, device_key=H100.device_key()
        )
        assert store.baseline_configs(family, h200, LADDER) == fallback_configs(family, h200, LADDER)


def test_between_profiled_m_the_fallback_serves_where_no_pick_clears_both_ends() -> None:
    """No file, no vendor: a decode tile that beats the fallback at M = 512 but loses at 768, and a
    prefill tile measured at 768 only. Between them neither clears the fallback at both ends, so each M
    runs the fallback rule's config (the step at E = 600 included), not the decode tile."""
    problem = Problem.of("moe", 1, 128, 7168, E=600, topk=8)
    fallback = fallback_configs(problem, H100, (512, 768))
    small = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=32,
                   SPLIT_K=1, GATE_UP_FUSED=1, B_TMA=1, PERSISTENT=0, num_warps=4, num_stages=3)  # fmt: skip
    big = small.replace(BLOCK_SIZE_M=64, GATE_UP_FUSED=0)
    profile = {
        512: {small: 300.0, imported_pick(fallback, 512): 350.0},
        768: {small: 520.0, big: 440.0, imported_pick(fallback, 768): 470.0},
    }
    ranges = ranges_from_profile(profile, is_vendor=lambda c: c.backend == "torch", margin=0.05,
                                 imported=fallback)  # fmt: skip

    def served(m: int) -> Config:
        return next(r.config for r in ranges if r.lo <= m and (r.hi is None or m <= r.hi))

    assert served(512) == small and served(768) == big
    for m in (513, 600, 601, 700, 767):
        assert served(m) == imported_pick(fallback, m), m
    assert served(600) != served(601)  # the rule's step: narrow tiles up to M = E
