"""The "tunableop" backend on a GPU, through PyTorch's own TunableOp: a tuned pin, a table that carries it,
the served call at the pinned shape (and plain torch.mm elsewhere), TunableOp off after every call, and a
CUDA graph that replays it."""

from __future__ import annotations

import pytest
import torch

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.dense.api as dense_api
from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.dispatch import Dispatcher, Table
from autotune.kernels import gemm
from autotune.kernels.dense import tunableop
from autotune.kernels.dense.backends import GEMM_BACKENDS

pytestmark = pytest.mark.gpu


def test_a_pinned_shape_is_served_through_tunableop(monkeypatch: pytest.MonkeyPatch) -> None:
    target = local_target()
    problem = Problem.of("gemm", 64, 1024, 512)
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(64, 512, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(1024, 512, device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.empty(64, 1024, device="cuda", dtype=torch.bfloat16)
    launch = GEMM_BACKENDS["tunableop"].launch(problem, Config(backend="tunableop"), target, (a, b), out)
    pin = launch.extra["tunableop"]  # type: ignore[attr-defined]
    assert pin["solution"] and pin["validators"]["PT_VERSION"] and not torch.cuda.tunable.is_enabled()
    row = [pin["op_signature"], pin["param_signature"], pin["solution"], pin["ms"], *pin["shape"]]
    table = Table.from_winners(
        target,
        [(problem, Config(backend="tunableop"), 1.0)],
        pins={"tunableop": [{"validators": pin["validators"], "results": [row]}]},
    )
    monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher([table], device_key=target.device_key()))
    monkeypatch.setattr(dense_api, "_plans", {})
    tunableop._reset_for_tests()
    ref = torch.mm(a, b.t())
    torch.testing.assert_close(gemm(a, b), ref)
    assert tunableop.installed_shapes() == {(64, 1024, 512, "bf16", "nk")}
    assert not torch.cuda.tunable.is_enabled()
    graph, c = torch.cuda.CUDAGraph(), torch.empty_like(ref)
    with torch.cuda.graph(graph):
        gemm(a, b, out=c)
    c.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(c, ref)
    tunableop._reset_for_tests()
