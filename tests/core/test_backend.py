"""The backend record (`autotune.core.backend`): its version, its space, the lookup of an op's backends,
and the registry's `backend_of` and `is_vendor`."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from autotune.core.backend import GEMV, LIBRARY, TILED, Backend, Backends, Cost
from autotune.core.codehash import modules_hash
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import backend_of, is_vendor
from autotune.core.space import SubSpace
from autotune.core.target import Target

MODULE = "autotune.core.codehash"  # any module with a source file: hashed like a kernel module
SM90, GFX942 = Target.for_arch("sm_90"), Target.for_arch("gfx942")


def _launch(*args: object) -> None:
    raise AssertionError("not launched here")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_a_version_is_the_modules_hash_or_the_library_s_text_then_the_variant() -> None:
    code = modules_hash(MODULE, within="autotune.kernels")
    kernel = Backend("k", _launch, modules=(MODULE,))
    assert kernel.source_hash() == code
    library = Backend("lib", _launch, library=True, version=lambda: "lib 1.2")
    assert library.source_hash() == _sha("lib 1.2")
    both = Backend("lib", _launch, library=True, modules=(MODULE,), version=lambda: "lib 1.2")
    assert both.source_hash() == _sha(f"lib 1.2 {code}")
    assert replace(kernel, variant="zipf=1.2").source_hash() == _sha(f"{code} zipf=1.2")
    with pytest.raises(ValueError, match="needs its kernel modules or a version"):
        Backend("nothing", _launch)


def test_cost_kinds_are_checked() -> None:
    assert (LIBRARY.kind, TILED.kind, GEMV.kind) == ("library", "tiled", "gemv")
    assert Cost("tiled", tma=True, block_k=128).block_k == 128
    with pytest.raises(ValueError, match="unknown cost kind 'roofline'"):
        Cost("roofline")


def test_a_space_is_the_backend_s_own_or_one_config_pruned_with_the_reason() -> None:
    problem = Problem.of("gemm", 16, 64, 64)
    seen: list[Config | None] = []

    def tiles(p: Problem, t: Target, default: Config | None) -> SubSpace:
        seen.append(default)
        return SubSpace("k", {"BLOCK_M": (16, 32)}, first=() if default is None else (default,))

    kernel = Backend("k", _launch, tiles, modules=(MODULE,))
    mine, other = Config(backend="k", BLOCK_M=32), Config(backend="x", BLOCK_M=16)
    assert kernel.space(problem, SM90, mine).first == (mine,)
    kernel.space(problem, SM90, other)
    assert seen == [mine, None]  # the op's default goes to the backend it belongs to only
    library = Backend("lib", _launch, library=True, version=lambda: "1")
    assert library.space(problem, SM90, mine) == SubSpace("lib")
    gone = replace(library, absent=lambda p, t: f"no lib on {t.arch}")
    sub = gone.space(problem, GFX942, mine)
    ((values, broken),) = list(sub.walk())
    assert values == {"backend": "lib"} and broken is not None
    assert broken.explain(values) == "lib_unsupported: no lib on gfx942"


def test_an_op_s_backends_are_looked_up_by_name_in_their_order() -> None:
    lib = Backend("lib", _launch, library=True, version=lambda: "1")
    amd = Backend("amd_only", _launch, modules=(MODULE,), runs_on=lambda t: t.is_amd)
    kernel = Backend("k", _launch, modules=(MODULE,))
    backends = Backends("toy", (lib, amd, kernel))
    assert backends["k"] is kernel and list(backends) == [lib, amd, kernel]
    assert backends.names(SM90) == ("lib", "k") and backends.names(GFX942) == ("lib", "amd_only", "k")
    with pytest.raises(ValueError, match=r"unknown toy backend 'cutlass'; known: lib, amd_only, k"):
        backends["cutlass"]
    assert backends.chosen(SM90, None) == [lib, kernel]
    assert backends.chosen(GFX942, ("k", "lib")) == [kernel, lib]  # the order given
    with pytest.raises(ValueError, match=r"unknown toy backend 'amd_only' on sm_90; known: lib, k"):
        backends.chosen(SM90, ("amd_only",))
    with pytest.raises(ValueError, match="duplicate backend names"):
        Backends("toy", (lib, lib))


def test_the_registry_answers_for_the_records_of_the_built_in_ops() -> None:
    assert backend_of("gemm", "triton_gemv").max_m == 4 and backend_of("gemm", "triton").cost == TILED
    assert backend_of("gemm_fp8_blockwise", "gluon").cost == Cost("tiled", tma=True, block_k=128)
    assert backend_of("moe", "triton").cost is None  # the MoE's own model costs it
    assert is_vendor("gemm", "torch") and is_vendor("moe", "torch") and is_vendor("gemm_mxfp4", "torch")
    assert not is_vendor("gemm", "triton") and not is_vendor("gemm_fp8_rowwise", "aiter")
    assert backend_of("gemm_fp8_rowwise", "aiter").library  # a library, but not the vendor baseline
    with pytest.raises(ValueError, match="unknown gemm backend 'cutlass'"):
        backend_of("gemm", "cutlass")
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        backend_of("nope", "torch")


@pytest.mark.parametrize("op_name", ["gemm", "gemm_fp8_rowwise", "moe"])
def test_a_backend_check_agrees_with_the_op_s_space(op_name: str) -> None:
    """`Backend.check` (no default, nothing compiled) holds a config where the op's space does, for configs
    of the op's space at one M asked at others."""
    import random

    from autotune.core.registry import get_op
    from autotune.kernels import GEMM  # noqa: F401  (registers the built-in ops)

    op = get_op(op_name)
    base = {
        "gemm": Problem.of("gemm", 1, 1280, 8192),
        "gemm_fp8_rowwise": Problem("gemm_fp8_rowwise", 1, 1280, 8192, dtype_a="fp8e4m3", dtype_b="fp8e4m3"),
        "moe": Problem.of("moe", 1, 256, 512, E=8, topk=2),
    }[op_name]
    rng = random.Random(0)
    ms = (1, 3, 16, 40, 256, 3000)
    pool = [c for m in ms for c in rng.sample(op.space(base.with_m(m), SM90).configs(), 12)]
    agreed = 0
    for m in ms:
        problem = base.with_m(m)
        space = op.space(problem, SM90)
        for config in pool:
            held = op.backend(config.backend).check(problem, SM90, config) is None
            assert held == (space.check(config) is None), (m, config.short())
            agreed += held
    assert 0 < agreed < len(ms) * len(pool)  # some held, some not: the check was asked both ways
