"""GPU test of `autotune.nn.confirm` with its own timing: a patched two-layer model compiled with a dynamic
token dimension, a table of this GPU that serves Triton configs at two token counts, each side captured
in CUDA graphs and replayed. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.dispatch import Dispatcher, Table
from autotune.dispatch.narrow import served_config
from autotune.nn import confirm, patch
from autotune.nn.confirm import Point

pytestmark = pytest.mark.gpu

K, H = 256, 512
TRITON = Config(backend="triton", BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, num_warps=4,
                num_stages=3)  # fmt: skip


def test_confirm_times_the_step_in_graphs_and_writes_a_table_this_gpu_serves() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(K, H, bias=False), nn.ReLU(), nn.Linear(H, K, bias=False))
    model = model.to("cuda", torch.bfloat16).eval()
    assert len(patch(model).swapped) == 2
    target = local_target()
    winners = [(Problem.of("gemm", m, n, k), TRITON, 1.0) for m in (16, 64) for n, k in ((H, K), (K, H))]
    table = Table.from_winners(target, winners)
    fn = torch.compile(model, dynamic=True, fullgraph=True)

    def step(T: int) -> Callable[[], torch.Tensor]:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        return lambda: fn(x)

    families = table.keys()
    seen: list[Point] = []
    with torch.no_grad():
        found = confirm(step, [16, 64], table, progress=seen.append)
    assert [p.tokens for p in found.points] == [16, 64] and seen == list(found.points)
    for p in found.points:
        assert len(p.served) == 2 and p.table_us is not None and p.fallback_us is not None
        assert 0 < p.table_us < 1e5 and 0 < p.fallback_us < 1e5
        for key in families:  # kept: the table's config there; lost: cuBLAS
            expected = TRITON if p.kept else Config(backend="torch")
            assert served_config(found.table, key, p.tokens) == expected
    assert Dispatcher([found.table]).tables  # a table of this GPU
