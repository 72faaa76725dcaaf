"""Emitting a pinned table from the database: one GPU, the vendor margin, predicted tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.db import Store
from autotune.dispatch.emit import emit_table

H100 = Target.for_arch("sm_90")
TRITON = Config(
    backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, SPLIT_K=2, num_warps=4, num_stages=4
)
VENDOR = Config(backend="torch")


def _ok(config: Config, t: float) -> TrialResult:
    return TrialResult(
        config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 10, "events"), rel_error=1e-3
    )


def _store(tmp_path: Path, triton_us: float, target: Target = H100) -> Store:
    store = Store(str(tmp_path / "e.db"))
    p = Problem.of("gemm", 16, 4096, 4096)
    store.record(target=target, kernel="gemm.torch", source_hash="v", problem=p, result=_ok(VENDOR, 10.0))
    store.record(
        target=target, kernel="gemm.triton", source_hash="t", problem=p, result=_ok(TRITON, triton_us)
    )
    return store


@pytest.mark.parametrize("triton_us, expect", [(9.95, VENDOR), (9.0, TRITON), (12.0, VENDOR)])
def test_vendor_kept_unless_beaten_by_the_margin(tmp_path: Path, triton_us: float, expect: Config) -> None:
    with _store(tmp_path, triton_us) as store:
        table = emit_table(store)
    assert table.lookup("gemm", 16, 4096, 4096) == expect
    assert table.fingerprint == H100.fingerprint() and not table.predicted


def test_zero_margin_takes_the_fastest(tmp_path: Path) -> None:
    with _store(tmp_path, 9.95) as store:
        assert emit_table(store, vendor_margin=0.0).lookup("gemm", 16, 4096, 4096) == TRITON
        with pytest.raises(ValueError, match="vendor_margin"):
            emit_table(store, vendor_margin=-1)


def test_several_gpus_need_a_choice(tmp_path: Path) -> None:
    other = dataclasses.replace(H100, name="NVIDIA H200")
    with _store(tmp_path, 9.0) as store:
        p = Problem.of("gemm", 16, 4096, 4096)
        store.record(target=other, kernel="gemm.torch", source_hash="v", problem=p, result=_ok(VENDOR, 8.0))
        with pytest.raises(ValueError, match="holds 2 GPUs; pick one with --gpu"):
            emit_table(store)
        table = emit_table(store, fingerprint=other.fingerprint())
    assert table.target.name == "NVIDIA H200"


def test_empty_database_says_what_to_do(tmp_path: Path) -> None:
    with Store(str(tmp_path / "empty.db")) as store, pytest.raises(ValueError, match="autotune sweep"):
        emit_table(store)
