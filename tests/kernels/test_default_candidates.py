"""Each op's candidate defaults: its rule's pick first, then safer cores, every one a config of its space;
where no candidate is compiled, the default is the first."""

from __future__ import annotations

import itertools
import random

import pytest

from autotune.core.ladder import serving_ladder
from autotune.core.problem import Problem
from autotune.core.registry import get_op
from autotune.core.target import Target
from autotune.engine.verdicts import ENV_CHECK
from autotune.kernels.candidates import Core, safer_cores

AMD = dict(rows=(16, 32, 64, 128, 256), cols=(16, 32, 64, 128, 256), k_tiles=(32, 64, 128, 256),
           warps=(4, 8), stages=(1, 2))  # fmt: skip


def test_safer_cores_shed_registers_before_the_tile() -> None:
    cores = safer_cores(Core(256, 256, 64, 8, 2), **AMD)
    assert cores[:6] == (
        Core(256, 256, 64, 8, 2),  # the pick
        Core(256, 256, 32, 8, 2),  # a shorter K step
        Core(256, 256, 32, 8, 1),  # and a stage fewer
        Core(256, 128, 64, 8, 2),  # then half the tile (the columns on a tie), from the pick's K and stages
        Core(256, 128, 32, 8, 2),
        Core(256, 128, 32, 8, 1),
    )
    assert cores[-1] == Core(16, 16, 32, 8, 1)  # down to the smallest tile
    assert len(set(cores)) == len(cores)
    # at one tile, each core needs no more than the one before: more warps, shorter K, fewer stages
    for a, b in itertools.pairwise(cores):
        if (a.bm, a.bn) == (b.bm, b.bn):
            assert b.warps >= a.warps and b.bk <= a.bk and b.stages <= a.stages
        else:
            assert b.bm * b.bn < a.bm * a.bn
    # a 4-warp pick takes 8 warps before anything else
    hopper = safer_cores(Core(128, 128, 128, 4, 3), rows=(16, 64, 128), cols=(32, 64, 128),
                         k_tiles=(64, 128), warps=(4, 8), stages=(2, 3))  # fmt: skip
    assert hopper[:4] == (Core(128, 128, 128, 4, 3), Core(128, 128, 128, 8, 3), Core(128, 128, 64, 8, 3),
                          Core(128, 128, 64, 8, 2))  # fmt: skip
    # a decode tile whose rows are at their smallest narrows its columns
    decode = safer_cores(Core(16, 64, 256, 4, 2), **AMD)
    assert [(c.bm, c.bn) for c in decode if c[2:] == (256, 4, 2)] == [(16, 64), (16, 32), (16, 16)]


LAYERS = [(4096, 4096), (7168, 2048), (1280, 8192), (576, 7168), (128256, 8192), (128, 256)]
MOE = [(2048, 7168, 32, 8, "fp8e4m3"), (7168, 4096, 8, 2, None), (768, 2048, 128, 8, None)]
OPS = ("gemm", "gemm_fp8_rowwise", "gemm_fp8_blockwise", "gemm_mxfp8", "gemm_mxfp4", "gemm_mxfp4_bf16a")


def _problems(op: str, rng: random.Random) -> list[Problem]:
    ms = [*rng.sample(serving_ladder(8192), 6), 1, 16, 4096]
    if op == "moe":
        return [
            Problem.of("moe", m, n, k, "bf16", w, E=e, topk=topk)
            for m in ms
            for n, k, e, topk, w in rng.sample(MOE, 2)
        ]
    make = Problem.of if op == "gemm" else Problem.quant
    return [make(op, m, n, k) for m in ms for n, k in rng.sample(LAYERS, 2)]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "sm_90", "interpreter"])
@pytest.mark.parametrize("op_name", [*OPS, "moe"])
def test_every_candidate_is_a_config_of_the_space_and_the_first_is_the_default_unchecked(
    arch: str, op_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CHECK, "0")  # as where nothing can compile for the target (the interpreter here)
    target = Target.for_arch(arch)
    op = get_op(op_name)
    rng = random.Random(f"{arch}-{op_name}")
    for problem in _problems(op_name, rng):
        candidates = op.default_candidates(problem, target)
        assert candidates and len(set(candidates)) == len(candidates)
        space = op.space(problem, target)
        for c in candidates:
            assert space.check(c) is None, (problem, c.short(), space.check(c))
        assert op.default_config(problem, target) == candidates[0]  # unchecked: the rule's pick
        if arch != "interpreter" and candidates[0].backend == "triton" and problem.M >= 256:
            assert len(candidates) > 1  # a large tile has safer ones behind it
