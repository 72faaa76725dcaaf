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
        (Problem.gemm(16, H, K), tcfg(16, 64)), (Problem.gemm(64, H, K), Config(backend="torch")),
        (Problem.gemm(256, H, K), tcfg(64, 128, split_k=2)),
        (Problem.gemm(16, K, H), Config(backend="torch")), (Problem.gemm(256, K, H), tcfg(32, 64)),
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
    install(monkeypatch, target, [(Problem.gemm(8, N, K), small), (Problem.gemm(64, N, K), large)])
    gen = torch.Generator(device="cuda").manual_seed(2)
    w = (torch.randn(N, K, device="cuda", generator=gen) * K**-0.5).to(torch.bfloat16)
    graphs = {}
    for M, config in ((8, small), (64, large)):
        assert served_config(GEMM, Problem.gemm(M, N, K), target) == config
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
