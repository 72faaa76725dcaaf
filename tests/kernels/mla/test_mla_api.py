"""The run-time MLA decode (`autotune.kernels.mla_decode`): the table's config by (batch, context bucket,
heads, cache dtype, page size), the default where no table covers a shape, workspaces kept per shape, and
one clear error before any launch for bad input."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.engine.bench import rel_error
from autotune.kernels import mla_decode
from autotune.kernels.mla import api
from autotune.kernels.mla.api import context_bucket, mla_problem
from autotune.kernels.mla.ref import mla_reference, paged_inputs

INTERP = Target.interpreter_target()
needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)
LATENT, ROPE, HEADS, PAGE = 32, 16, 4, 16


def _inputs(contexts: list[int], kv: torch.dtype = torch.bfloat16, seed: int = 0) -> tuple[Any, ...]:
    return paged_inputs(HEADS, LATENT, ROPE, PAGE, contexts, kv_dtype=kv, device="cpu", seed=seed)


def _serve(monkeypatch: pytest.MonkeyPatch, problem: Problem | None, config: Config | None) -> None:
    """Installs a dispatcher whose only table holds `config` for `problem` (none: no table)."""
    from autotune.dispatch import Dispatcher, Table

    tables = (
        [] if config is None or problem is None else [Table.from_winners(INTERP, [(problem, config, 1.0)])]
    )
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher(tables, device_key=INTERP.device_key())
    )


def _config(splits: int) -> Config:
    return Config(backend="triton", num_kv_splits=splits, BLOCK_H=16, BLOCK_N=16, num_warps=4, num_stages=1)


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records the knobs of every launcher the entry point builds."""
    import autotune.kernels.mla.kernel as kernel

    seen: list[dict[str, Any]] = []
    real = kernel.launcher

    def spy(params: dict[str, Any], **kwargs: Any) -> Any:
        seen.append(params)
        return real(params, **kwargs)

    monkeypatch.setattr(kernel, "launcher", spy)
    return seen


def test_the_problem_keys_batch_context_bucket_heads_cache_dtype_and_page_size() -> None:
    q, cache, table, _, _ = _inputs([40, 3])
    p = mla_problem(q, cache, table, LATENT, 48, INTERP)
    assert (p.M, p.N, p.K) == (2, LATENT, LATENT + ROPE)
    assert dict(p.extra) == {"heads": HEADS, "context": 1024, "kv_dtype": "bf16", "page_size": PAGE}
    assert [context_bucket(n) for n in (1, 1024, 1025, 5000, 32768)] == [1024, 1024, 2048, 8192, 32768]


@needs_interpreter
@pytest.mark.parametrize("splits", [1, 2])
def test_a_table_entry_is_served(monkeypatch: pytest.MonkeyPatch, splits: int) -> None:
    q, cache, table, lens, _ = _inputs([40, 3, 17])
    problem = mla_problem(q, cache, table, LATENT, table.shape[1] * PAGE, INTERP)
    _serve(monkeypatch, problem, _config(splits))
    seen = _launches(monkeypatch)
    out = mla_decode(q, cache, table, lens, sm_scale=0.2, latent=LATENT, target=INTERP)
    assert seen and seen[-1]["num_kv_splits"] == splits
    assert rel_error(out, mla_reference(q, cache, table, lens, 0.2, LATENT)) <= 1e-2


def test_a_table_entry_of_the_baseline_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    q, cache, table, lens, _ = _inputs([40, 3, 17], seed=2)
    problem = mla_problem(q, cache, table, LATENT, table.shape[1] * PAGE, INTERP)
    _serve(monkeypatch, problem, Config(backend="torch"))
    seen = _launches(monkeypatch)
    out = mla_decode(q, cache, table, lens, sm_scale=0.2, latent=LATENT, target=INTERP)
    assert not seen and rel_error(out, mla_reference(q, cache, table, lens, 0.2, LATENT)) <= 1e-2


@needs_interpreter
def test_an_untuned_shape_runs_the_default_and_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import UntunedShapeWarning

    q, cache, table, lens, scale = _inputs([21, 9], kv=torch.float8_e4m3fn)
    _serve(monkeypatch, None, None)
    out = torch.full((2, HEADS, LATENT), float("nan"), dtype=torch.bfloat16)
    with pytest.warns(UntunedShapeWarning, match="mla_decode"):
        got = mla_decode(q, cache, table, lens, sm_scale=0.2, kv_scale=scale, out=out, latent=LATENT,
                         target=INTERP)  # fmt: skip
    assert got is out
    assert rel_error(out, mla_reference(q, cache, table, lens, 0.2, LATENT, scale)) <= 3e-2


@needs_interpreter
def test_the_split_workspace_is_allocated_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    q, cache, table, lens, _ = _inputs([40, 3])
    problem = mla_problem(q, cache, table, LATENT, table.shape[1] * PAGE, INTERP)
    _serve(monkeypatch, problem, _config(2))
    api._workspaces.clear()
    first = mla_decode(q, cache, table, lens, sm_scale=0.2, latent=LATENT, target=INTERP)
    held = [t.data_ptr() for t in next(iter(api._workspaces.values())) if t is not None]
    second = mla_decode(q, cache, table, lens, sm_scale=0.2, latent=LATENT, target=INTERP)
    assert len(api._workspaces) == 1 and len(held) == 2
    assert [t.data_ptr() for t in next(iter(api._workspaces.values())) if t is not None] == held
    assert torch.equal(first, second)


def test_an_empty_batch_launches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _launches(monkeypatch)
    q, cache, _, _, _ = _inputs([5])
    empty = mla_decode(q[:0], cache, torch.zeros(0, 1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                       sm_scale=0.2, latent=LATENT, target=INTERP)  # fmt: skip
    assert empty.shape == (0, HEADS, LATENT) and not seen


def _bad(**change: Any) -> dict[str, Any]:
    q, cache, table, lens, _ = _inputs([40, 3])
    args: dict[str, Any] = dict(q=q, kv_cache=cache, page_table=table, context_lens=lens, sm_scale=0.2,
                                latent=LATENT, target=INTERP)  # fmt: skip
    args.update(change)
    return args


def _table_with(entry: int) -> torch.Tensor:
    table = _bad()["page_table"].clone()
    table[1, 0] = entry
    return table


@pytest.mark.parametrize("change, message", [
    (dict(page_table=_table_with(10_000)), r"1 page-table entry in use out of range \[0, 5\)"),
    (dict(page_table=_table_with(-1)), "out of range"),
    (dict(context_lens=torch.tensor([40, 49], dtype=torch.int32)), "a context of 49 tokens is longer than"),
    (dict(context_lens=torch.tensor([40, -1], dtype=torch.int32)), "context_lens must be >= 0"),
    (dict(context_lens=torch.tensor([40, 3])), r"context_lens must be \(2,\) int32"),
    (dict(page_table=_table_with(0).long()), r"page_table must be \(2, max_pages\) int32"),
    (dict(q=torch.randn(2, HEADS, LATENT + ROPE)), r"q must be \(B, H, K\) bf16"),
    (dict(kv_cache=torch.randn(5, PAGE, LATENT + ROPE)), "kv_cache must be bf16, float8_e4m3fn"),
    (dict(kv_cache=torch.randn(5, PAGE, 40).bfloat16()), r"kv_cache must be \(pages, page_size, 48\)"),
    (dict(kv_scale=0.5), "an FP8 kv_cache needs its kv_scale, and a bf16 one takes none"),
    (dict(latent=24), "must be powers of two"),
    (dict(kv_cache=_inputs([40, 3], kv=torch.float8_e4m3fnuz)[1], kv_scale=0.1,
          target=Target.for_arch("sm_90")), "sm_90 has no e4m3fnuz FP8"),
    (dict(out=torch.empty(2, HEADS, LATENT)), r"out must be a \(2, 4, 32\) bf16 tensor"),
])  # fmt: skip
def test_bad_input_is_one_error_before_any_launch(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], message: str
) -> None:
    seen = _launches(monkeypatch)
    with pytest.raises(ValueError, match=message):
        mla_decode(**_bad(**change))
    assert not seen
