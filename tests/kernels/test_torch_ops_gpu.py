"""GPU tests of the entry points as torch ops: a two-layer MLP of `linear` compiled with a dynamic token
dimension and CUDA graphs (mode="reduce-overhead") at batch sizes 1 to 256 (no graph break, no recompile,
eager's outputs), and CUDA graphs captured by hand at two batch sizes, each replaying the config the table
gives its batch. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.dense.api as dense_api
from autotune import Config, Problem
from autotune.dispatch import Dispatcher, Table
from autotune.kernels import GEMM, launch_config, linear, served_config

pytestmark = pytest.mark.gpu

BATCHES = [1 << i for i in range(9)]  # 1, 2, 4, ..., 256
K, H = 256, 512  # the MLP: K -> H -> K


def tcfg(bm: int, bn: int, split_k: int = 1) -> Config:
    return Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=1, SPLIT_K=split_k,
                  num_warps=4, num_stages=3)  # fmt: skip


def moe_config() -> Config:
    return Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1,
                  SPLIT_K=1, GATE_UP_FUSED=0, num_warps=4, num_stages=3)  # fmt: skip


def install(monkeypatch: pytest.MonkeyPatch, target: Any, winners: list[tuple[Problem, Config]]) -> None:
    """The process's only table holds these winners (round-up: a bucket serves the M up to its own); the
    dense GEMM's launch plans are built afresh."""
    table = Table.from_winners(target, [(p, c, 1.0) for p, c in winners])
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    monkeypatch.setattr(dense_api, "_plans", {})


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(H, K, device="cuda", generator=gen) * K**-0.5)
        self.b1 = torch.nn.Parameter(torch.randn(H, device="cuda", generator=gen))
        self.w2 = torch.nn.Parameter(torch.randn(K, H, device="cuda", generator=gen) * H**-0.5)
        self.to(torch.bfloat16).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(torch.relu(linear(x, self.w1, self.b1)), self.w2)


def test_a_compiled_mlp_serves_every_batch_from_cuda_graphs_without_a_recompile(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._dynamo.decorators import mark_unbacked
    from torch._dynamo.utils import counters

    # Triton configs and the vendor library at different batches, in both layers
    install(monkeypatch, target, [
        (Problem.of("gemm", 16, H, K), tcfg(16, 64)), (Problem.of("gemm", 64, H, K), Config(backend="torch")),
        (Problem.of("gemm", 256, H, K), tcfg(64, 128, split_k=2)),
        (Problem.of("gemm", 16, K, H), Config(backend="torch")),
        (Problem.of("gemm", 256, K, H), tcfg(32, 64)),
    ])  # fmt: skip
    model = MLP()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, mode="reduce-overhead")
    gen = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for M in BATCHES:
            x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
            mark_unbacked(x, 0)  # one graph for every M, 1 included (dynamic=True alone specializes M = 1)
            want = model(x)
            for _ in range(3):  # warm-up, recording, replay
                torch.compiler.cudagraph_mark_step_begin()
                got = compiled(x).clone()
                assert torch.equal(got, want), f"M={M}"
    torch.cuda.synchronize()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert counters["inductor"]["cudagraph_skips"] == 0  # CUDA graphs did run
    torch._dynamo.reset()


def test_captured_graphs_replay_the_config_the_table_gives_each_batch(
    target: Any, monkeypatch: pytest.MonkeyPatch, launched: list[Config]
) -> None:
    N = 1024
    small, large = tcfg(16, 64), tcfg(64, 128)
    install(
        monkeypatch, target, [(Problem.of("gemm", 8, N, K), small), (Problem.of("gemm", 64, N, K), large)]
    )
    gen = torch.Generator(device="cuda").manual_seed(2)
    w = (torch.randn(N, K, device="cuda", generator=gen) * K**-0.5).to(torch.bfloat16)
    graphs = {}
    for M, config in ((8, small), (64, large)):
        assert served_config(GEMM, Problem.of("gemm", M, N, K), target) == config
        x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up before capture: builds and compiles the launch
            linear(x, w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = linear(x, w)
        graphs[M] = (graph, x, y, config)
    assert launched == [small, large]  # each batch built its table's config, and only that
    for M, (graph, x, y, config) in graphs.items():
        x.copy_(torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, launch_config(config, x, w)), f"M={M}"
        ref = x.double() @ w.double().t()
        assert float((y.double() - ref).norm() / ref.norm()) < 1e-2
    assert launched == [small, large]  # launch_config reused the plans the captures built


def test_the_moe_and_mla_ops_are_captured_and_replay_new_routing_and_contexts(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through their ops (no `target`: no direct call), fused_topk + fused_moe and mla_decode read
    nothing back while captured: graphs replayed after their inputs were overwritten in place give the
    references of the new routing and contexts."""
    from autotune.engine.bench import rel_error
    from autotune.kernels import MLA_DECODE, MOE, fused_moe, fused_topk, mla_decode
    from autotune.kernels.mla.api import mla_problem
    from autotune.kernels.mla.ref import mla_reference, paged_inputs
    from autotune.kernels.moe.ref import moe_reference, routing_logits

    moe = Problem.of("moe", 24, 256, 512, E=16, topk=4)
    contexts = [[700, 1, 2048, 33], [2048, 1500, 64, 0]]  # both 32 pages wide, 60 pages in all
    cases = [paged_inputs(16, 512, 64, 64, c, kv_dtype=torch.bfloat16, device="cuda", seed=i,
                          spare_pages=60 - sum(-(-n // 64) for n in c))
             for i, c in enumerate(contexts)]  # fmt: skip
    mla = mla_problem(*cases[0][:3], 512, cases[0][2].shape[1] * 64, target)
    install(monkeypatch, target, [(moe, moe_config()), (mla, MLA_DECODE.default_config(mla, target))])
    x, w1, w2, *_ = MOE.make_inputs(moe, "cuda", seed=2)
    gen = torch.Generator().manual_seed(1)
    logits = [routing_logits(24, 16, zipf=z, generator=gen).cuda() for z in (0.0, 1.5)]
    logits_t = logits[0].clone()
    q_t, cache_t, table_t, lens_t = (t.clone() for t in cases[0][:4])

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        weights, ids = fused_topk(x, logits_t, 4)
        return fused_moe(x, w1, w2, weights, ids), mla_decode(q_t, cache_t, table_t, lens_t, sm_scale=0.1)

    step()  # compiles, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe_out, mla_out = step()
    for logit, (q2, cache2, table2, lens2, _) in zip(reversed(logits), reversed(cases), strict=True):
        logits_t.copy_(logit)
        for dst, src in zip((q_t, cache_t, table_t, lens_t), (q2, cache2, table2, lens2), strict=True):
            dst.copy_(src)
        moe_out.fill_(float("nan"))
        mla_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        weights, ids = fused_topk(x, logit, 4)
        assert rel_error(moe_out, moe_reference(x, w1, w2, weights, ids)) <= 2e-2
        assert rel_error(mla_out, mla_reference(q2, cache2, table2, lens2, 0.1, 512)) <= 2e-2


def test_a_compiled_moe_serves_every_batch_from_cuda_graphs_without_a_recompile(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._dynamo.decorators import mark_unbacked
    from torch._dynamo.utils import counters

    from autotune.kernels import MOE, fused_moe, fused_topk

    install(
        monkeypatch, target, [(Problem.of("moe", 16, 256, 512, E=16, topk=4), moe_config())]
    )  # larger M: the default
    x0, w1, w2, *_ = MOE.make_inputs(Problem.of("moe", 64, 256, 512, E=16, topk=4), "cuda", seed=3)
    router = (torch.randn(16, 512, device="cuda") * 512**-0.5).to(torch.bfloat16)

    def moe(x: torch.Tensor) -> torch.Tensor:
        weights, ids = fused_topk(x, x @ router.t(), 4)
        return fused_moe(x, w1, w2, weights, ids)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(moe, fullgraph=True, dynamic=True, mode="reduce-overhead")
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for M in (1, 4, 16, 64):
            x = x0[:M].clone()
            mark_unbacked(x, 0)
            want = moe(x)
            for _ in range(3):  # warm-up, recording, replay
                torch.compiler.cudagraph_mark_step_begin()
                assert torch.equal(compiled(x).clone(), want), f"M={M}"
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    torch._dynamo.reset()


def test_a_compiled_mla_decode_serves_new_batches_from_cuda_graphs_without_a_recompile(
    target: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._dynamo.utils import counters

    from autotune.kernels import mla_decode
    from autotune.kernels.mla.ref import paged_inputs

    install(monkeypatch, target, [])  # no table: the default, whose split workspace is kept per shape

    def decode(q: torch.Tensor, cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        return mla_decode(q, cache, table, lens, sm_scale=0.1) * 2

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(decode, fullgraph=True, dynamic=True, mode="reduce-overhead")
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        for i, contexts in enumerate([[700, 33], [2048, 1, 90], [64, 1500, 300, 5, 4000]]):
            q, cache, table, lens, _ = paged_inputs(16, 512, 64, 64, contexts, kv_dtype=torch.bfloat16,
                                                    device="cuda", seed=i)  # fmt: skip
            want = decode(q, cache, table, lens)
            for _ in range(3):  # warm-up, recording, replay
                torch.compiler.cudagraph_mark_step_begin()
                assert torch.equal(compiled(q, cache, table, lens).clone(), want), contexts
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    torch._dynamo.reset()
