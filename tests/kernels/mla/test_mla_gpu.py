"""GPU tests of the MLA decode. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from autotune import Problem

pytestmark = pytest.mark.gpu


def _problem(B: int, heads: int, context: int, kv: str, page: int = 64) -> Problem:
    return Problem.of("mla_decode", B, 512, 576, heads=heads, context=context, kv_dtype=kv, page_size=page)


def _replays_match(
    call: Callable[[], Any], live: tuple[Any, ...], cases: Sequence[tuple[Any, ...]], tolerance: float = 2e-2
) -> None:
    """`call()`, an entry-point call on the tensors `live` (queries, cache, page table, context lengths),
    captured in a CUDA graph; then for each case of `paged_inputs`, its inputs copied into `live` in place,
    the graph replayed and its output (poisoned with NaN first) checked against the case's reference."""
    import torch

    from autotune.engine.bench import rel_error
    from autotune.kernels.mla.ref import mla_reference

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for q, cache, table, lens, kv_scale in cases:
        for dst, src in zip(live, (q, cache, table, lens), strict=True):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(out, mla_reference(q, cache, table, lens, 0.1, 512, kv_scale)) <= tolerance


@pytest.mark.parametrize("kv", ["bf16", "fp8e4m3"])
@pytest.mark.parametrize(
    "B, heads, context, splits", [(1, 16, 8192, 32), (8, 128, 2048, 4), (32, 16, 1024, 1)]
)
def test_the_kernel_on_gpu_is_right_and_repeatable(
    right_and_repeatable, target, kv: str, B: int, heads: int, context: int, splits: int
) -> None:
    """Split parts meet in the reduce kernel; the result matches the reference, bit-identical on repeats;
    the default config too."""
    from autotune.kernels import MLA_DECODE

    problem = _problem(B, heads, context, kv)
    space = MLA_DECODE.space(problem, target)
    config = MLA_DECODE.default_config(problem, target).replace(num_kv_splits=splits)
    assert space.check(config) is None, space.check(config)
    right_and_repeatable(MLA_DECODE, problem, config, target, f"MLA decode, {splits} splits")
    right_and_repeatable(MLA_DECODE, problem, MLA_DECODE.default_config(problem, target), target, "default")
    if kv != "bf16":
        right_and_repeatable(MLA_DECODE, problem, config.replace(Q_FP8=1), target, "FP8 queries")
        if "F16_TILES" in space.subspace("triton").params:
            for q_fp8 in (0, 1):
                tiles = config.replace(F16_TILES=1, Q_FP8=q_fp8)
                if space.check(tiles) is None:
                    right_and_repeatable(MLA_DECODE, problem, tiles, target, f"fp16 tiles, Q_FP8 {q_fp8}")
        if "SWAP" in space.subspace("triton").params:
            for f16 in (0, 1):
                swapped = config.replace(SWAP=1, Q_FP8=1, F16_TILES=f16, BLOCK_H=16, BLOCK_N=64, num_warps=4,
                                         num_stages=2)  # fmt: skip
                if space.check(swapped) is None:
                    right_and_repeatable(MLA_DECODE, problem, swapped, target, f"swapped, F16_TILES {f16}")
        if "QUARTERS" in space.subspace("triton").params:
            quartered = (
                config.replace(QUARTERS=1, Q_FP8=1, F16_TILES=0, SWAP=0)
                if "SWAP" in config
                else (config.replace(QUARTERS=1, Q_FP8=1, F16_TILES=0))
            )
            if space.check(quartered, search_only=False) is None:
                right_and_repeatable(MLA_DECODE, problem, quartered, target, "quartered latent dims")


@pytest.mark.parametrize("splits", [1, 8])
def test_the_entry_point_is_captured_in_a_cuda_graph_and_replays_new_contexts(
    target, splits: int, monkeypatch
) -> None:
    """`autotune.kernels.mla_decode` reads nothing back while captured: a graph of one call, replayed after
    the context lengths and the page table were overwritten in place, gives the reference of the new
    ones; outside a capture, a page-table entry out of range is one ValueError before any launch."""
    import torch

    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import MLA_DECODE, mla_decode
    from autotune.kernels.mla.api import mla_problem
    from autotune.kernels.mla.ref import paged_inputs

    contexts = [[700, 1, 2048, 33], [2048, 1500, 64, 0]]  # both 32 pages wide, 60 pages in all
    cases = [paged_inputs(16, 512, 64, 64, c, kv_dtype=torch.bfloat16, device="cuda", seed=i,
                          spare_pages=60 - sum(-(-n // 64) for n in c))
             for i, c in enumerate(contexts)]  # fmt: skip
    q, cache, table, lens, _ = cases[0]
    problem = mla_problem(q, cache, table, 512, table.shape[1] * 64, target)
    config = MLA_DECODE.default_config(problem, target).replace(num_kv_splits=splits)
    tables = [Table.from_winners(target, [(problem, config, 1.0)])]
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher(tables, device_key=target.device_key())
    )
    q_t, cache_t, table_t, lens_t = (t.clone() for t in (q, cache, table, lens))
    mla_decode(q_t, cache_t, table_t, lens_t, sm_scale=0.1, target=target)  # compiles, outside the capture
    torch.cuda.synchronize()
    live = (q_t, cache_t, table_t, lens_t)
    _replays_match(lambda: mla_decode(*live, sm_scale=0.1, target=target), live, (cases[1], cases[0]))
    bad = table_t.clone()
    bad[0, 0] = cache_t.shape[0]
    with pytest.raises(ValueError, match="out of range"):
        mla_decode(q_t, cache_t, bad, lens_t, sm_scale=0.1, target=target)


#: (SCHEDULE, BLOCK_N, num_stages) of the Gluon kernel's rings: the lockstep schedule at 64 tokens (1 and 2
#: stages) and 32 (2 and 4), the seesaw's at 64 tokens (2 stages) and 32 (2 and 4).
GLUON_RINGS = [(0, 64, 2), (0, 64, 1), (0, 32, 4), (0, 32, 2), (1, 64, 2), (1, 32, 4), (1, 32, 2)]


def _gluon_target(target) -> None:
    from autotune.kernels.mla.gluon_space import gluon_runs

    if not gluon_runs(target):
        pytest.skip(f"the gluon backend runs on Hopper (sm_90), not {target.arch}")


def _gluon_matches(params: dict[str, int], inputs: tuple, contexts: list[int], tolerance: float) -> tuple:
    """The Gluon launch of `params` on `inputs` (`paged_inputs`' q, cache, table, lens, scale), its output
    poisoned with NaN first: no NaN, each sequence within `tolerance` of the reference on its own (a short
    one is not drowned by the rest), zeros for context 0, bit-identical on a repeat (poisoned again).
    Returns (out, ref)."""
    import torch

    from autotune import Config
    from autotune.engine.bench import rel_error
    from autotune.kernels.mla.backends import split_workspace
    from autotune.kernels.mla.gluon_launch import gluon_launcher
    from autotune.kernels.mla.ref import mla_reference

    q, kv, table, lens, kv_scale = inputs
    scale = 1.0 if kv_scale is None else kv_scale
    heads = q.shape[1]
    part, lse = split_workspace(Config(backend="gluon", **params), len(contexts), heads, 512, q.device)
    run = gluon_launcher(params)
    ref = mla_reference(q, kv, table, lens, 0.07, 512, kv_scale)
    out = torch.full((len(contexts), heads, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    run(q, kv, table, lens, out, part, lse, 0.07, scale)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    for b, n in enumerate(contexts):
        if n:
            assert rel_error(out[b], ref[b]) <= tolerance, (n, rel_error(out[b], ref[b]))
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    first = out.clone()
    out.fill_(float("nan"))
    run(q, kv, table, lens, out, part, lse, 0.07, scale)
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    return out, ref


@pytest.mark.parametrize("heads", [128, 16])
@pytest.mark.parametrize("page", [64, 128])
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("schedule, block_n, stages", GLUON_RINGS)
def test_the_gluon_kernel_matches_the_reference_on_ragged_contexts(
    target, heads: int, page: int, splits: int, schedule: int, block_n: int, stages: int
) -> None:
    """The Gluon kernel (both schedules) at 128 heads and at 16 (one program's 64 rows, 48 of them padding)
    on random inputs with ragged contexts (0 tokens, 1, a page's edges, a tail inside a tile, several
    pages), pages of 64 and 128 tokens, one split and several: within the bf16 tolerance of the reference,
    no NaN (the output is poisoned first; past a context's end the tile holds another sequence's tokens or
    random data), zeros for context 0, bit-identical on a repeat."""
    import torch

    from autotune.engine.bench import rel_error
    from autotune.kernels.mla.ref import paged_inputs

    _gluon_target(target)
    contexts = [0, 1, 63, 64, 65, 777, 2048, 4095]
    inputs = paged_inputs(heads, 512, 64, page, contexts, kv_dtype=torch.bfloat16, device="cuda",
                          seed=page + splits)  # fmt: skip
    params = dict(num_kv_splits=splits, BLOCK_N=block_n, num_stages=stages, SCHEDULE=schedule)
    out, ref = _gluon_matches(params, inputs, contexts, 2e-2)
    assert rel_error(out, ref) <= 2e-2, rel_error(out, ref)


@pytest.mark.parametrize("q_fp8", [0, 1])
@pytest.mark.parametrize("heads", [128, 16])
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("block_n, stages", [(64, 2), (64, 1), (32, 4), (32, 2)])
def test_the_gluon_kernel_reads_an_fp8_cache(
    target, q_fp8: int, heads: int, splits: int, block_n: int, stages: int
) -> None:
    """An e4m3 cache with its per-tensor scale (the lockstep schedule; tiles upcast to fp16 for both
    dots, or with Q_FP8 scored by FP8 queries as loaded): the reference of the dequantized cache on
    ragged contexts in pages of 64 (within bf16's tolerance, or FP8's with FP8 queries), no NaN, zeros for
    context 0, bit-identical on a repeat; the seesaw refuses it."""
    import torch

    from autotune import Config
    from autotune.kernels.mla.backends import split_workspace
    from autotune.kernels.mla.gluon_launch import gluon_launcher
    from autotune.kernels.mla.ref import paged_inputs

    _gluon_target(target)
    contexts = [0, 1, 63, 64, 65, 777, 2048, 4095]
    q, kv, table, lens, kv_scale = paged_inputs(heads, 512, 64, 64, contexts, kv_dtype=torch.float8_e4m3fn,
                                                device="cuda", seed=splits + block_n)  # fmt: skip
    assert kv_scale is not None and kv_scale != 1.0
    params = dict(num_kv_splits=splits, BLOCK_N=block_n, num_stages=stages, SCHEDULE=0, Q_FP8=q_fp8)
    tolerance = 5e-2 if q_fp8 else 2e-2  # the op's FP8 and bf16 tolerances
    out, _ = _gluon_matches(params, (q, kv, table, lens, kv_scale), contexts, tolerance)
    part, lse = split_workspace(Config(backend="gluon", **params), len(contexts), heads, 512, q.device)
    with pytest.raises(ValueError, match="reads a bf16 cache"):
        gluon_launcher(params | dict(SCHEDULE=1))(q, kv, table, lens, out, part, lse, 0.07, kv_scale)


@pytest.mark.parametrize("heads", [16, 8, 32])
@pytest.mark.parametrize("page", [64, 128])
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("stages", [1, 3])
def test_the_swapped_kernel_reads_an_fp8_cache(
    right_and_repeatable, target, heads: int, page: int, splits: int, stages: int
) -> None:
    """SCHEDULE 2 (`mla.gluon_swapped`: tokens on the MMA's M, the heads as 16 or 32 columns, FP8 scores,
    V upcast to fp16): the reference of the dequantized cache on ragged contexts in pages of 64 and 128,
    within FP8's tolerance, no NaN (the output poisoned first), zeros for context 0, bit-identical on a
    repeat; then through the op (its reference and repeats). Its passing is what `SWAPPED_MEASURED`
    waits for."""
    import torch

    from autotune import Config
    from autotune.kernels import MLA_DECODE
    from autotune.kernels.mla.ref import paged_inputs

    _gluon_target(target)
    contexts = [0, 1, 63, 64, 65, 777, 2048, 4095]
    q, kv, table, lens, kv_scale = paged_inputs(heads, 512, 64, page, contexts, kv_dtype=torch.float8_e4m3fn,
                                                device="cuda", seed=heads + splits + stages)  # fmt: skip
    assert kv_scale is not None
    params = dict(num_kv_splits=splits, BLOCK_N=64, num_stages=stages, SCHEDULE=2, Q_FP8=1)
    _gluon_matches(params, (q, kv, table, lens, kv_scale), contexts, 5e-2)
    if page == 64 and stages == 3:
        problem = _problem(8, heads, 4096, "fp8e4m3")
        config = Config(backend="gluon", **params)
        right_and_repeatable(MLA_DECODE, problem, config, target, f"swapped, {heads} heads, {splits} splits")


@pytest.mark.parametrize("schedule, block_n, stages", [GLUON_RINGS[0], GLUON_RINGS[1], GLUON_RINGS[4]])
def test_the_gluon_backend_is_right_and_repeatable(
    right_and_repeatable, target, schedule: int, block_n: int, stages: int
) -> None:
    """The op's "gluon" configs (its space's first, and others) compute the reference through `prepare`,
    bit-identical on repeats."""
    from autotune import Config
    from autotune.kernels import MLA_DECODE

    _gluon_target(target)
    problem = _problem(8, 128, 4096, "bf16")
    space = MLA_DECODE.space(problem, target)
    first = space.subspace("gluon").first[0]
    right_and_repeatable(MLA_DECODE, problem, first, target, "the gluon space's first config")
    for splits in (1, 8):
        config = Config(
            backend="gluon", num_kv_splits=splits, BLOCK_N=block_n, num_stages=stages, SCHEDULE=schedule
        )
        assert space.check(config) is None, space.check(config)
        right_and_repeatable(MLA_DECODE, problem, config, target, f"gluon, {splits} splits")


@pytest.mark.parametrize("heads", [128, 16])
def test_the_gluon_backend_reads_an_fp8_cache_through_the_op(
    right_and_repeatable, target, heads: int
) -> None:
    """The op's e4m3 problems (its inputs carry the cache's scale as a tensor): the gluon space's first
    config, FP8 scores (Q_FP8 1) and the fp16 upcast (Q_FP8 0), one split and several, right against the
    op's reference within its FP8 tolerance and bit-identical on repeats."""
    from autotune import Config
    from autotune.kernels import MLA_DECODE

    _gluon_target(target)
    problem = _problem(8, heads, 4096, "fp8e4m3")
    space = MLA_DECODE.space(problem, target)
    first = space.subspace("gluon").first[0]
    right_and_repeatable(MLA_DECODE, problem, first, target, "the FP8 gluon space's first config")
    for splits, q_fp8 in ((1, 1), (8, 1), (8, 0)):
        config = Config(
            backend="gluon", num_kv_splits=splits, BLOCK_N=64, num_stages=2, SCHEDULE=0, Q_FP8=q_fp8
        )
        assert space.check(config) is None, space.check(config)
        right_and_repeatable(MLA_DECODE, problem, config, target, f"gluon, Q_FP8 {q_fp8}, {splits} splits")


@pytest.mark.parametrize("schedule, block_n, stages", [GLUON_RINGS[0], GLUON_RINGS[4]])
@pytest.mark.parametrize("splits", [1, 4])
def test_the_entry_point_serves_a_gluon_config_in_a_cuda_graph(
    target, splits: int, schedule: int, block_n: int, stages: int, monkeypatch
) -> None:
    """A table that picks a gluon config: `autotune.kernels.mla_decode` runs it, captured in a CUDA graph
    whose replays, after the queries, cache, page table and context lengths were overwritten in place,
    give the reference of the new ones."""
    import torch

    from autotune import Config
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import mla_decode
    from autotune.kernels.mla.api import mla_problem
    from autotune.kernels.mla.ref import paged_inputs

    _gluon_target(target)
    contexts = [[700, 1, 2048, 33], [2048, 1500, 64, 0]]  # both 32 pages wide, 60 pages in all
    cases = [paged_inputs(128, 512, 64, 64, c, kv_dtype=torch.bfloat16, device="cuda", seed=i,
                          spare_pages=60 - sum(-(-n // 64) for n in c))
             for i, c in enumerate(contexts)]  # fmt: skip
    q, cache, table, lens, _ = cases[0]
    problem = mla_problem(q, cache, table, 512, table.shape[1] * 64, target)
    config = Config(
        backend="gluon", num_kv_splits=splits, BLOCK_N=block_n, num_stages=stages, SCHEDULE=schedule
    )
    tables = [Table.from_winners(target, [(problem, config, 1.0)])]
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher(tables, device_key=target.device_key())
    )
    q_t, cache_t, table_t, lens_t = (t.clone() for t in (q, cache, table, lens))
    mla_decode(q_t, cache_t, table_t, lens_t, sm_scale=0.1, target=target)  # compiles, outside the capture
    torch.cuda.synchronize()
    live = (q_t, cache_t, table_t, lens_t)
    _replays_match(lambda: mla_decode(*live, sm_scale=0.1, target=target), live, (cases[1], cases[0]))


@pytest.mark.parametrize("kv", ["bf16", "fp8e4m3"])
def test_an_untuned_call_runs_the_gluon_default_in_a_cuda_graph(target, kv: str, monkeypatch) -> None:
    """No table: at 32 sequences, 128 heads and a 4K context bucket the op's default on Hopper is the Gluon
    kernel's (`gluon_default`); the entry point runs it right, ragged contexts included, captured in a CUDA
    graph and replayed on new contexts."""
    import torch

    from autotune.dispatch import Dispatcher
    from autotune.engine.bench import rel_error
    from autotune.kernels import MLA_DECODE, mla_decode
    from autotune.kernels.mla.api import mla_problem
    from autotune.kernels.mla.ref import mla_reference, paged_inputs

    _gluon_target(target)
    no_tables = Dispatcher([], device_key=target.device_key())
    monkeypatch.setattr("autotune.dispatch.dispatcher._default", no_tables)
    dtype = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
    gen = torch.Generator().manual_seed(5)
    contexts = [[4096, 0, 1, 63, 65, *torch.randint(1, 4097, (27,), generator=gen).tolist()] for _ in "ab"]
    contexts[1].reverse()
    pages = max(sum(-(-n // 64) for n in c) for c in contexts)
    cases = [paged_inputs(128, 512, 64, 64, c, kv_dtype=dtype, device="cuda", seed=i,
                          spare_pages=pages + 1 - sum(-(-n // 64) for n in c))
             for i, c in enumerate(contexts)]  # fmt: skip
    q, cache, table, lens, kv_scale = cases[0]
    problem = mla_problem(q, cache, table, 512, table.shape[1] * 64, target)
    assert MLA_DECODE.default_config(problem, target).backend == "gluon"
    tolerance = 2e-2 if kv == "bf16" else 5e-2
    q_t, cache_t, table_t, lens_t = (t.clone() for t in (q, cache, table, lens))
    out = mla_decode(q_t, cache_t, table_t, lens_t, sm_scale=0.1, kv_scale=kv_scale, target=target)
    assert rel_error(out, mla_reference(q, cache, table, lens, 0.1, 512, kv_scale)) <= tolerance
    live = (q_t, cache_t, table_t, lens_t)

    def call() -> torch.Tensor:
        return mla_decode(*live, sm_scale=0.1, kv_scale=kv_scale, target=target)

    _replays_match(call, live, (cases[1], cases[0]), tolerance)
