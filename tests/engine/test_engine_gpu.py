"""GPU tests of the engine: the benchmarker, served timing, compile pool and worker processes on a real
device. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import pytest
import torch

from autotune import Config, Problem
from autotune.core.result import TrialStatus
from autotune.engine.bench import Benchmarker
from autotune.kernels import GEMM

pytestmark = pytest.mark.gpu


def test_benchmarker_times_both_backends(target) -> None:
    bench = Benchmarker(GEMM, target)
    small = Problem.of("gemm", 1, 1024, 1024)
    r = bench.run(small, Config(backend="torch"))
    assert r.ok and r.timing is not None and r.timing.method == "graph" and r.time_us > 0
    big = Problem.of("gemm", 4096, 4096, 4096)
    r2 = bench.run(big, GEMM.default_config(big, target))
    assert r2.ok and r2.timing is not None and r2.timing.method == "events"
    # 137 GFLOP cannot take under 50 µs on any GPU we know, nor over a second
    assert 50 < r2.time_us < 1e6


def test_served_timing_at_many_m_holds_no_memory(target) -> None:
    """Timing split-K and TMA configs as served at one M after another (an M profile) keeps no buffer per
    timing: no scratch per capture stream, no tensor in the descriptor cache."""
    from autotune.engine.bench import ServedTiming
    from autotune.kernels import scratch

    bench = Benchmarker(ServedTiming(GEMM), target)
    fam = Problem.of("gemm", 1, 4096, 4096)
    split = GEMM.default_config(fam.with_m(64), target)
    configs = [c for c in (split, GEMM.default_config(fam.with_m(2048), target)) if c.backend != "torch"]
    for M in (8, 16, 24):  # the first M allocate what every later one reuses
        for c in configs:
            assert bench.run(fam.with_m(M), c).ok
    torch.cuda.synchronize()
    before, streams = torch.cuda.memory_allocated(), len(scratch._scratch)
    for M in (32, 40, 48, 56, 64):
        for c in configs:
            assert bench.run(fam.with_m(M), c).ok
    torch.cuda.synchronize()
    assert len(scratch._scratch) == streams
    # two problems' states are kept (KEEP_STATES): inputs of M = 64 rows weigh 0.5 MB each
    assert torch.cuda.memory_allocated() - before < 64 << 20


def test_out_of_resources_is_a_status(target) -> None:
    bench = Benchmarker(GEMM, target)
    problem = Problem.of("gemm", 256, 256, 1024)
    huge = Config(
        backend="triton",
        BLOCK_M=256,
        BLOCK_N=256,
        BLOCK_K=256,
        GROUP_M=1,
        SPLIT_K=1,
        num_warps=8,
        num_stages=5,
    )
    r = bench.run(problem, huge)
    assert r.status in (TrialStatus.OUT_OF_RESOURCES, TrialStatus.COMPILE_ERROR), r
    assert r.error


def _cached_kernels(cache_dir) -> set[str]:
    return {p.parent.name for p in cache_dir.rglob("gemm_kernel.json")}


def test_compile_pool_features_and_warm_cache_on_local_gpu(target, tmp_path, monkeypatch) -> None:
    """Features of the local GPU's binary, compiled in worker processes; the launch that follows in this
    process loads that binary from Triton's cache instead of compiling another one."""
    from autotune.engine.compile import CompilePool

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    problem = Problem.of("gemm", 64, 2048, 1024)
    config = next(c for c in GEMM.space(problem, target, ("triton",)).configs() if c["SPLIT_K"] == 1)
    with CompilePool(target, workers=2) as pool:
        features = dict(pool.map(GEMM, problem, [config]))[config]
    assert features.compiled, features.error
    assert features.vgprs > 0 and features.occupancy >= 1 and features.lds_bytes > 0
    assert features.mma, "the GEMM must use matrix instructions"
    before = _cached_kernels(tmp_path)
    assert len(before) == 1
    inputs = GEMM.make_inputs(problem, "cuda", seed=0)
    out = GEMM.make_output(problem, "cuda")
    GEMM.prepare(problem, config, target, inputs, out)()
    torch.cuda.synchronize()
    assert _cached_kernels(tmp_path) == before, "the launch compiled a different binary"


def test_worker_process_on_the_gpu_survives_a_gpu_fault_and_a_segfault(tmp_path) -> None:
    """An illegal memory access makes the device unusable to its process: the worker answers `crashed`,
    exits, and a new worker on the same GPU measures the next config."""
    from autotune.engine.workers import ProcessWorker, device_env, visible_devices
    from autotune.kernels.faults import FaultyOp

    op = FaultyOp(("none", "illegal_address", "segv"))
    problem = Problem.of("gemm", 64, 256, 256)
    with ProcessWorker(name="gpu0", env=device_env(visible_devices()[0]), timeout_s=120,
                       log_path=tmp_path / "w.log") as worker:  # fmt: skip
        assert not worker.target.interpreter
        results = {f: worker.run(op, problem, Config(backend="faulty", fault=f, rep=0)) for f in op.faults}
        assert results["none"].ok and results["none"].time_us > 0
        assert results["illegal_address"].status is TrialStatus.CRASHED
        assert results["segv"].status is TrialStatus.CRASHED and "SIGSEGV" in results["segv"].error
        after = worker.run(op, problem, Config(backend="faulty", fault="none", rep=0))
        assert after.ok and worker.starts == 3
