"""The instruction mix on StaticFeatures (its JSON, features stored before it, the ratio and the line shown)
and the `valu_per_mma` warning over the configs of one problem. Synthetic features: no compiler."""

from __future__ import annotations

import json

import pytest

from autotune import Config
from autotune.core.static import (
    VALU_PER_MMA_FACTOR,
    VALU_PER_MMA_PEERS,
    WARNINGS,
    StaticFeatures,
    valu_outliers,
)

MFMA16 = ("v_mfma_f32_16x16x32_bf16",)
MFMA32 = ("v_mfma_f32_32x32x16_bf16",)


def feats(valu: int, mma: int, names: tuple[str, ...] = MFMA16, **kw: object) -> StaticFeatures:
    counts = {"valu": valu, "salu": 100, "mma": mma, "vmem": 16, "lds": 32, "spill": 0}
    return StaticFeatures(arch="gfx950", mma=names if mma else (), mix=StaticFeatures.mix_of(counts), **kw)  # type: ignore[arg-type]


def cfg(bm: int, backend: str = "triton") -> Config:
    return Config(backend=backend, BLOCK_M=bm, BLOCK_N=64, BLOCK_K=64, num_warps=4)


def test_mix_round_trips_through_json_and_is_hashable() -> None:
    f = feats(133, 32)
    assert f.mix == (("valu", 133), ("salu", 100), ("mma", 32), ("vmem", 16), ("lds", 32))
    back = StaticFeatures.from_json(f.to_json())
    assert back == f and back.mix == f.mix and hash(back) == hash(f)


def test_features_stored_before_the_mix_load_with_an_empty_one() -> None:
    data = json.loads(feats(133, 32).to_json())
    del data["mix"]
    old = StaticFeatures.from_json(json.dumps(data))
    assert old.mix == () and old.valu_per_mma is None and old.mix_summary() == ""
    assert old.count("valu") == 0 and old.mma == MFMA16


def test_ratio_and_the_line_shown() -> None:
    f = feats(133, 32)
    assert f.valu_per_mma == pytest.approx(133 / 32)
    assert f.mix_summary() == "valu 133  salu 100  mma 32  vmem 16  lds 32  (valu/mma 4.2)"
    gemv = feats(400, 0)
    assert gemv.valu_per_mma is None and "valu/mma" not in gemv.mix_summary()


def test_a_config_far_above_its_peers_is_warned() -> None:
    features = {cfg(16): feats(130, 32), cfg(32): feats(200, 64), cfg(64): feats(260, 128),
                cfg(128): feats(4000, 128)}  # fmt: skip
    found = valu_outliers(features)
    assert list(found) == [cfg(128)]
    warning = found[cfg(128)]
    assert warning.check == "valu_per_mma" and warning.check in WARNINGS
    assert "31.2 vector ALU instructions per matrix instruction" in warning.reason
    assert "of 4 configs with v_mfma_f32_16x16x32_bf16" in warning.reason


def test_just_under_the_factor_is_not_warned() -> None:
    norm = 4.0
    just_under = int(VALU_PER_MMA_FACTOR * norm * 32) - 1
    features = {cfg(16): feats(128, 32), cfg(32): feats(128, 32), cfg(64): feats(just_under, 32)}
    assert valu_outliers(features) == {}
    features[cfg(64)] = feats(just_under + 2, 32)
    assert list(valu_outliers(features)) == [cfg(64)]


def test_peers_share_backend_and_matrix_instruction() -> None:
    # A 32x32 MFMA does twice the work of a 16x16 one: half as many, twice the ratio, never an outlier.
    few = {cfg(16): feats(130, 32), cfg(32): feats(130, 32), cfg(64): feats(130, 4, MFMA32)}
    assert valu_outliers(few) == {}
    other_backend = {cfg(16): feats(130, 32), cfg(32): feats(130, 32), cfg(64, "triton_tma"): feats(4000, 32)}
    assert valu_outliers(other_backend) == {}


def test_no_norm_without_enough_peers_a_mix_or_matrix_instructions() -> None:
    assert VALU_PER_MMA_PEERS == 3
    assert valu_outliers({cfg(16): feats(130, 32), cfg(32): feats(4000, 32)}) == {}
    unknown = StaticFeatures(arch="gfx950", mma=MFMA16)  # stored before the mix
    failed = StaticFeatures.failed("gfx950", "boom")
    gemv = feats(9000, 0)
    assert valu_outliers({cfg(16): unknown, cfg(32): failed, cfg(64): gemv, cfg(128): feats(130, 32)}) == {}
