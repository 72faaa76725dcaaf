"""The split-KV MLA decode kernel against the reference in Triton's CPU interpreter: ragged contexts, pages
handed out out of order, one split and several, bf16 and FP8 caches (bf16 and FP8 queries)."""

from __future__ import annotations

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.engine.bench import rel_error
from autotune.kernels import MLA_DECODE
from autotune.kernels.mla.backends import split_workspace
from autotune.kernels.mla.kernel import launcher
from autotune.kernels.mla.ref import gathered_attention, mla_reference, paged_inputs

INTERP = Target.interpreter_target()
needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)
LATENT, ROPE, HEADS = 32, 16, 4
CONTEXTS = [37, 1, 80, 0, 16]


def _run(
    kv: torch.dtype,
    splits: int,
    q_fp8: int,
    page: int,
    block_n: int = 16,
    f16: bool = False,
    q_mult: float = 1.0,
    swap: bool = False,
    quarters: bool = False,
) -> float:
    """The kernel's relative error to the reference; `q_mult` scales the queries (and `sm_scale` back)."""
    q, cache, table, lens, scale = paged_inputs(
        HEADS, LATENT, ROPE, page, CONTEXTS, kv_dtype=kv, device="cpu", seed=splits + page
    )
    q = (q.float() * q_mult).to(q.dtype)
    sm_scale = 0.2 / q_mult
    B = len(CONTEXTS)
    out = torch.full((B, HEADS, LATENT), float("nan"), dtype=torch.bfloat16)
    config = Config(backend="triton", num_kv_splits=splits, BLOCK_H=16, BLOCK_N=block_n, num_warps=4,
                    num_stages=1, Q_FP8=q_fp8, F16_TILES=int(f16), SWAP=int(swap),
                    QUARTERS=int(quarters))  # fmt: skip
    part, lse = split_workspace(config, B, HEADS, LATENT, "cpu")
    params = {k: v for k, v in config.items() if k != "backend"}
    run = launcher(params, is_amd=False, interpret=True)
    run(q, cache, table, lens, out, part, lse, sm_scale, scale or 1.0)
    ref = mla_reference(q, cache, table, lens, sm_scale, LATENT, scale)
    assert not out.isnan().any()
    assert (out[3] == 0).all()  # context 0: a zero output
    return rel_error(out, ref)


def test_the_page_table_is_out_of_order_and_ragged() -> None:
    _, _, table, lens, _ = paged_inputs(HEADS, LATENT, ROPE, 16, CONTEXTS, kv_dtype=torch.bfloat16,
                                        device="cpu", seed=0)  # fmt: skip
    used = torch.cat([table[b, : -(-n // 16)] for b, n in enumerate(CONTEXTS)])
    assert len(set(used.tolist())) == len(used) and not torch.equal(used, used.sort().values)
    assert lens.tolist() == CONTEXTS


@needs_interpreter
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("page", [16, 8])
def test_bf16_cache_matches_the_reference(splits: int, page: int) -> None:
    assert _run(torch.bfloat16, splits, 0, page) <= 1e-2


@needs_interpreter
@pytest.mark.parametrize("kv", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
@pytest.mark.parametrize("splits, q_fp8", [(1, 0), (2, 1)])
def test_fp8_cache_matches_the_reference(kv: torch.dtype, splits: int, q_fp8: int) -> None:
    assert _run(kv, splits, q_fp8, 16, block_n=32) <= 3e-2


@needs_interpreter
@pytest.mark.parametrize("splits, q_fp8", [(1, 0), (4, 0), (1, 1), (4, 1)])
@pytest.mark.parametrize("q_mult", [1.0, 3e5, 1e-6])
def test_an_fp8_cache_on_fp16_tiles_matches_the_reference(splits: int, q_fp8: int, q_mult: float) -> None:
    """The NVIDIA launch on an FP8 cache (F16_TILES: fp16 dots), run by the interpreter: as close to the
    reference as the fp32 dots the interpreter runs otherwise, also for queries past fp16's range or
    under its normal numbers."""
    f16 = _run(torch.float8_e4m3fn, splits, q_fp8, 16, block_n=32, f16=True, q_mult=q_mult)
    f32 = _run(torch.float8_e4m3fn, splits, q_fp8, 16, block_n=32, q_mult=q_mult)
    assert f16 <= 3e-2 and f16 <= f32 * 1.05 + 1e-4


@needs_interpreter
@pytest.mark.parametrize("loop", ["swap", "quarters"])
@pytest.mark.parametrize(
    "kv, splits, q_fp8, f16",
    [(torch.bfloat16, 1, 0, False), (torch.bfloat16, 4, 0, False), (torch.float8_e4m3fn, 2, 1, False),
     (torch.float8_e4m3fn, 1, 0, False), (torch.float8_e4m3fn, 4, 1, True)],
)  # fmt: skip
def test_the_quartered_loops_match_the_reference_as_the_whole_tile_loop_does(
    kv: torch.dtype, splits: int, q_fp8: int, f16: bool, loop: str
) -> None:
    """SWAP (scores as Kᵀ's product with the queries, tokens on the MMAs' M side) and QUARTERS (unswapped)
    take the latent dims in four accumulators: each gives the whole-tile loop's error, over ragged
    contexts and out-of-order pages."""
    swap, quarters = loop == "swap", loop == "quarters"
    quartered = _run(kv, splits, q_fp8, 16, block_n=32, f16=f16, swap=swap, quarters=quarters)
    plain = _run(kv, splits, q_fp8, 16, block_n=32, f16=f16)
    assert quartered <= 3e-2 and quartered <= plain * 1.05 + 1e-4


def test_quarters_with_swapped_dots_is_refused() -> None:
    with pytest.raises(ValueError, match="quartered already"):
        launcher(dict(num_kv_splits=1, BLOCK_H=16, BLOCK_N=32, num_warps=4, num_stages=2, SWAP=1, QUARTERS=1),
                 is_amd=False)  # fmt: skip


def test_the_gathered_baseline_matches_the_reference() -> None:
    fp8 = torch.float8_e4m3fn
    q, cache, table, lens, scale = paged_inputs(HEADS, LATENT, ROPE, 8, CONTEXTS, kv_dtype=fp8, device="cpu",
                                                seed=3)  # fmt: skip
    out = torch.full((len(CONTEXTS), HEADS, LATENT), float("nan"))
    gathered_attention(q, cache, table, lens, out, 0.2, scale)
    assert rel_error(out, mla_reference(q, cache, table, lens, 0.2, LATENT, scale)) <= 1e-2


@needs_interpreter
@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8e4m3"])
def test_the_op_prepares_every_backend_within_tolerance(kv_dtype: str) -> None:
    problem = Problem.of("mla_decode", 3, LATENT, LATENT + ROPE, heads=HEADS, context=40, kv_dtype=kv_dtype,
                         page_size=16)  # fmt: skip
    inputs = MLA_DECODE.make_inputs(problem, "cpu", seed=1)
    ref = MLA_DECODE.reference(problem, inputs)
    configs = [MLA_DECODE.default_config(problem, INTERP), *MLA_DECODE.space(problem, INTERP).head(1)]
    for config in configs:
        out = MLA_DECODE.make_output(problem, "cpu").fill_(float("nan"))
        MLA_DECODE.prepare(problem, config, INTERP, inputs, out)()
        assert rel_error(out, ref) <= MLA_DECODE.tolerance(problem), config
