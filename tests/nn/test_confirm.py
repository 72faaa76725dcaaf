"""`autotune.nn.confirm`: a table checked against a model's step. The model runs for real (the patched
layers in the interpreter); the timer is the test's, so that which side loses is set, and what is checked
is what confirm does with it: which families it records, what each side serves, and the table it writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from nn_checks import TOLERANCE, rel_err
from torch import nn

import autotune.kernels.dense.api as dense_api
from autotune import Config, Problem
from autotune.core.registry import get_op
from autotune.core.target import Target
from autotune.dispatch import Dispatcher, Table
from autotune.dispatch.narrow import served_config
from autotune.nn import patch
from autotune.nn.confirm import confirm, graph_medians

BF16 = torch.bfloat16
TARGET = Target.interpreter_target()
VENDOR = Config(backend="torch")
SHAPES = ((32, 64), (48, 32), (80, 64))  # (N, K): the model's two layers, and one it never looks up


def _triton(N: int, K: int) -> Config:
    return get_op("gemm").default_config(Problem.of("gemm", 16, N, K), TARGET)


def _table() -> Table:
    winners = [(Problem.of("gemm", m, n, k), _triton(n, k), 1.0) for n, k in SHAPES for m in (2, 8, 32)]
    winners = [w for w in winners if not (w[0].N == 48 and w[0].M == 32)]
    winners += [(Problem.of("gemm", 32, 48, 32), VENDOR, 1.0)]  # at 32, one layer is served by the vendor
    winners += [(Problem.of("gemm", 64, n, k), VENDOR, 1.0) for n, k in SHAPES]  # at 64, both are
    return Table.from_winners(TARGET, winners)


def _here(tables: Any) -> Dispatcher:
    return Dispatcher(tables, device_key=TARGET.device_key())


@pytest.fixture
def model() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(64, 32, bias=False), nn.ReLU(), nn.Linear(32, 48, bias=False)).to(BF16)
    patched = nn.Sequential(nn.Linear(64, 32, bias=False), nn.ReLU(), nn.Linear(32, 48, bias=False)).to(BF16)
    patched.load_state_dict(plain.state_dict())
    assert len(patch(patched).swapped) == 2
    return plain, patched


class _Timer:
    """Runs each side once (its output checked against the plain model, what it served recorded) and
    returns the µs the test sets for that token count."""

    def __init__(self, times: dict[int, tuple[float, float]], monkeypatch: pytest.MonkeyPatch) -> None:
        self.times, self.calls, self.served = times, [], []  # type: ignore[var-annotated]
        self.now: list[Config | None] = []
        self.T = 0  # the token count of the step being confirmed
        real = dense_api._lookup

        def spy(*args: Any, **kwargs: Any) -> Config | None:
            config = real(*args, **kwargs)
            self.now.append(config)
            return config

        monkeypatch.setattr(dense_api, "_lookup", spy)
        self.check: Callable[[Any], None] = lambda out: None

    def __call__(self, runs: Sequence[Callable[[], Any]]) -> list[float]:
        sides = []
        for run in runs:
            self.now = []
            self.check(run())
            sides.append([None if c is None else c["backend"] for c in self.now])
        self.served.append(sides)
        self.calls.append(len(runs))
        return list(self.times[self.T])


def test_confirm_keeps_what_wins_and_serves_the_fallbacks_where_the_table_loses(
    model: tuple[nn.Module, nn.Module], monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, patched = model
    table = _table()
    timer = _Timer({2: (10.0, 12.0), 8: (15.0, 12.0), 32: (20.0, 25.0)}, monkeypatch)

    def step(T: int) -> Callable[[], Any]:
        x = torch.randn(T, 64, dtype=BF16)
        timer.T = T
        with torch.no_grad():
            ref = plain(x.float().to(BF16))
        timer.check = lambda out: (
            None if rel_err(out, ref) <= 2 * TOLERANCE[BF16] else pytest.fail(f"wrong output at {T}")
        )
        return lambda: patched(x)

    result = confirm(step, [32, 2, 8, 64], table, timer=timer, dispatcher=_here)
    assert [p.tokens for p in result.points] == [2, 8, 32, 64]
    assert result.reverted == (8,)
    assert [p.kept for p in result.points] == [True, False, True, True]
    assert [len(p.served) for p in result.points] == [2, 2, 1, 0]
    assert result.points[3].ratio is None and result.points[1].ratio == pytest.approx(0.8)
    assert timer.calls == [2, 2, 2]  # 64 (fallbacks only) was never timed
    # what each side served: the table's Triton configs, and the fallbacks at that token count
    assert timer.served[0] == [["triton", "triton"], ["torch", "torch"]]
    assert timer.served[2] == [["triton", "torch"], ["torch", "torch"]]
    # the confirmed table: the fallback over 5..16 (geometric midpoints to 2 and 32) for the two families
    # looked up at 8, the table everywhere else; the family the model never looked up is as it was
    new = result.table
    families = new.keys()
    for key in families:
        for M in range(1, 100):
            inside = 5 <= M <= 16 and key[3] != 80
            expected = VENDOR if inside else served_config(table, key, M)
            assert served_config(new, key, M) == expected, (key, M)
    assert "(0.800x): served by the fallbacks" in str(result)


def test_confirm_refuses_bad_token_counts_and_a_table_of_another_gpu() -> None:
    table = _table()
    bad: tuple[list[Any], ...] = ([], [0, 4], [2.5], [True])
    for tokens in bad:
        with pytest.raises(ValueError, match="positive integers"):
            confirm(lambda T: lambda: None, tokens, table, dispatcher=_here)
    h100 = Table.from_winners(Target.for_arch("sm_90"), [(Problem.of("gemm", 2, 32, 64), VENDOR, 1.0)])
    with (
        pytest.raises(RuntimeError, match="refuses the table"),
        pytest.warns(RuntimeWarning, match="another GPU"),
    ):
        confirm(lambda T: lambda: None, [2], h100, dispatcher=_here)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error of a machine without a GPU")
def test_graph_timing_needs_a_gpu() -> None:
    with pytest.raises(RuntimeError, match="needs a GPU"):
        graph_medians([lambda: None])
