"""GPU tests of the fused MoE kernel. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import pytest

from autotune import Config, Problem

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tma", [0, 1])
@pytest.mark.parametrize(
    "mnk, e, topk, weights, split",
    [
        ((1, 128, 7168), 256, 8, "fp8e4m3", 8),  # DeepSeek-V3 TP16 decode: 16 gate/up tiles in 8 slices
        ((1, 768, 2048), 128, 8, "bf16", 2),  # Qwen3-30B-A3B: the down GEMM (K = 768) is split too
    ],
)
def test_moe_split_k_on_gpu_is_right_and_repeatable(
    right_and_repeatable, target, mnk, e, topk, weights, split, tma
) -> None:
    """The fused MoE's K slices meet through a counter and a workspace across SMs (gate and up parts):
    the result must match the reference and be bit-identical on every repeat, with the weight tiles
    loaded by pointer and (where the target has TMA) through tensor descriptors."""
    from autotune.kernels import get_op

    if tma and not target.tma:
        pytest.skip(f"{target.arch} has no TMA")
    op = get_op("moe")
    problem = Problem.of("moe", *mnk, variant=weights, E=e, topk=topk)
    config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                    SPLIT_K=split, GATE_UP_FUSED=1, PERSISTENT=0, num_warps=4, num_stages=3,
                    **({"B_TMA": tma} if target.tma else {}))  # fmt: skip
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, "the MoE split-K sum")


@pytest.mark.parametrize("persistent", [1, 2])
def test_moe_programs_an_sm_on_gpu_are_right_and_repeatable(right_and_repeatable, target, persistent) -> None:
    """PERSISTENT: programs an SM walk the routed tiles of a worst-case grid (its padding blocks left out):
    the default's wide prefill tile (128 x 256, vLLM's structure, TMA weights where the target has them)
    and a 64 x 128 tile two an SM match the reference and repeat bit for bit."""
    from autotune.kernels import get_op

    op = get_op("moe")
    problem = Problem.of("moe", 512, 1024, 2048, E=8, topk=2)  # 128 tokens an expert
    config = op.default_config(problem, target)
    if persistent == 2 or not int(config.get("PERSISTENT", 0)):  # off TMA targets the default is not wide
        config = config.replace(
            BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, num_warps=4, SPLIT_K=1, GATE_UP_FUSED=0, PERSISTENT=persistent
        )
    assert op.space(problem, target).check(config) is None, op.space(problem, target).check(config)
    right_and_repeatable(op, problem, config, target, f"PERSISTENT {persistent}")


@pytest.mark.parametrize(
    "weights, fused, tma, persistent",
    [("bf16", 0, 0, 0), ("bf16", 1, 0, 0), ("fp8e4m3", 0, 0, 0), ("mxfp4", 0, 0, 0), ("mxfp4", 1, 0, 0),
     ("bf16", 0, 1, 0), ("fp8e4m3", 1, 1, 0), ("bf16", 0, 1, 1), ("fp8e4m3", 1, 0, 2)],
)  # fmt: skip
def test_the_served_fused_moe_is_captured_in_a_cuda_graph_and_replays_new_routing(
    target, weights: str, fused: int, tma: int, persistent: int, monkeypatch
) -> None:
    """`autotune.kernels.fused_moe` reads nothing back while captured: a graph of one call, replayed after
    the routing tensors were overwritten in place, gives the reference of the new routing; outside a
    capture, ids out of range are one ValueError before any launch."""
    import torch

    from autotune.dispatch import Dispatcher, Table
    from autotune.engine.bench import rel_error
    from autotune.kernels import MOE, fused_moe, fused_topk
    from autotune.kernels.moe.ref import moe_reference, routing_logits

    if tma and not target.tma:
        pytest.skip(f"{target.arch} has no TMA")
    problem = Problem.of("moe", 24, 256, 512, variant=weights, E=16, topk=4)
    config = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                    SPLIT_K=1, GATE_UP_FUSED=fused, num_warps=4, num_stages=3,
                    **({"B_TMA": tma} if target.tma and weights != "mxfp4" else {}),
                    **({} if weights == "mxfp4" else {"PERSISTENT": persistent}))  # fmt: skip
    table = Table.from_winners(target, [(problem, config, 1.0)])
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=target.device_key())
    )
    x, w1, w2, _, _, w1s, w2s = MOE.make_inputs(problem, "cuda", seed=2)
    kw: dict = {}
    if w1s is not None:  # FP8: 128x128 block scales; MXFP4: e8m0 scales per 32, no block shape
        kw = dict(w1_scale=w1s, w2_scale=w2s) | ({} if weights == "mxfp4" else dict(block_shape=[128, 128]))
    gen = torch.Generator().manual_seed(1)
    routes = [fused_topk(x, routing_logits(24, 16, zipf=z, generator=gen).cuda(), 4) for z in (0.0, 1.5)]
    weights_t, ids_t = (t.clone() for t in routes[0])
    fused_moe(x, w1, w2, weights_t, ids_t, target=target, **kw)  # compiles, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(x, w1, w2, weights_t, ids_t, target=target, **kw)
    for w, ids in (routes[1], routes[0]):
        weights_t.copy_(w)
        ids_t.copy_(ids)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = moe_reference(x, w1, w2, w, ids, fused_gate_up=bool(fused), **kw)
        assert rel_error(out, ref) <= (5e-2 if weights == "fp8e4m3" else 2e-2)
    bad = ids_t.clone()
    bad[0, 0] = 16
    with pytest.raises(ValueError, match="topk_ids out of range"):
        fused_moe(x, w1, w2, weights_t, bad, target=target, **kw)
