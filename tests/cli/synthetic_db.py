"""A small database of random measurements, for the tests of the verbs that read one (diff, report)."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from autotune import Config, Problem, Target
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.db import Store

#: The shape families (N, K) and the M values the database holds.
FAMILIES = ((4096, 4096), (1024, 8192))
MS = (1, 16, 128)
VENDOR = Config({"backend": "torch"})


def triton(block_m: int, warps: int) -> Config:
    return Config({"backend": "triton", "BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": warps})


def timed(config: Config, us: float, status: TrialStatus = TrialStatus.OK) -> TrialResult:
    timing = Timing(us, us * 0.98, us * 0.99, us * 1.01, us, us * 0.01, 20, "events")
    ok = status is TrialStatus.OK
    return TrialResult(
        config,
        status,
        timing if ok else None,
        error="" if ok else "pruned: LDS",
        compile_s=0.5,
        measure_s=0.25,
    )


@dataclass
class Filled:
    """What `fill` stored: per (arch, problem) the fastest time, its config and the vendor's time."""

    best: dict[tuple[str, Problem], tuple[float, Config]] = field(default_factory=dict)
    vendor: dict[tuple[str, Problem], float] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    profile: dict[tuple[str, Problem], tuple[float, float]] = field(default_factory=dict)


def fill(
    store: Store,
    rng: random.Random,
    archs: tuple[str, ...] = ("gfx942",),
    skip: tuple[Problem, ...] = (),
    toolchain: dict[str, str] | None = None,
) -> Filled:
    """Random measured trials of every (N, K) of `FAMILIES` and M of `MS` on each arch (but the problems
    of `skip`): the vendor library, three Triton configs (one of them failed) each; one finished sweep of
    each arch, and an M profile of the first family. `toolchain` replaces the arch's (a GPU of another
    fingerprint)."""
    out = Filled()
    for arch in archs:
        target = Target.for_arch(arch)
        if toolchain is not None:  # another toolchain: another fingerprint of the same device
            target = dataclasses.replace(target, toolchain=toolchain)
        out.targets[arch] = target
        sweep = store.start_sweep("synthetic", 'name = "synthetic"\n', target, problems_total=6)
        for n, k in FAMILIES:
            for m in MS:
                p = Problem.of("gemm", m, n, k)
                if p in skip:
                    continue
                vendor_us = rng.uniform(5.0, 50.0)
                store.record(
                    target=target,
                    kernel="gemm.torch",
                    source_hash="v",
                    problem=p,
                    result=timed(VENDOR, vendor_us),
                    sweep_id=sweep,
                )
                out.vendor[(arch, p)] = vendor_us
                best = (vendor_us, VENDOR)
                for block_m, warps in ((16, 4), (64, 8)):
                    us = vendor_us * rng.uniform(0.5, 1.6)
                    c = triton(block_m, warps)
                    store.record(
                        target=target,
                        kernel="gemm.triton",
                        source_hash="v",
                        problem=p,
                        result=timed(c, us),
                        sweep_id=sweep,
                    )
                    best = min(best, (us, c), key=lambda b: b[0])
                store.record(
                    target=target,
                    kernel="gemm.triton",
                    source_hash="v",
                    problem=p,
                    result=timed(triton(256, 8), 1.0, TrialStatus.PRUNED),
                    sweep_id=sweep,
                )
                out.best[(arch, p)] = best
        for m in (1, 2, 4, 8):
            p = Problem.of("gemm", m, *FAMILIES[0])
            v, c = rng.uniform(5.0, 9.0), rng.uniform(4.0, 9.0)
            for config, us in ((VENDOR, v), (triton(16, 4), c)):
                kernel = "gemm.torch" if config == VENDOR else "gemm.triton"
                store.record(
                    target=target,
                    kernel=kernel,
                    source_hash="v",
                    problem=p,
                    result=timed(config, us),
                    source=Source.PROFILE,
                )
            out.profile[(arch, p)] = (c, v)
        store.finish_sweep(sweep)
    return out


def verify_json(path: Path, rng: random.Random) -> dict[int, tuple[float, float]]:
    """A verify report of one family at four M in `path`; returns M -> (served µs, vendor µs)."""
    rows, times = [], {}
    for m in (1, 8, 64, 512):
        served, vendor = rng.uniform(3.0, 30.0), rng.uniform(3.0, 30.0)
        times[m] = (served, vendor)
        rows.append(
            {
                "family": "attn.o gemm N=8192 K=8192 bf16 B:nk",
                "op": "gemm",
                "M": m,
                "served": {},
                "served_us": served,
                "vendor_us": vendor,
                "ratio": vendor / served,
                "status": "timed",
            }
        )
    path.write_text(
        json.dumps(
            {
                "device": "AMD Instinct MI300X",
                "table": "t.json",
                "min_ratio": 0.98,
                "ok": True,
                "wall_s": 1.0,
                "summary": [],
                "rows": rows,
            }
        )
    )
    return times
