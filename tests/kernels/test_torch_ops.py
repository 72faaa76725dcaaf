"""The run-time entry points as torch ops (`autotune.kernels.torch_ops`), on the CPU: registered with their
schemas, `torch.library.opcheck` on each (the Triton kernels in the interpreter, tiny shapes), the fakes'
shapes and dtypes, `torch.compile` with a dynamic token dimension (one node a call, no graph break, no
recompile per M, the lookup at run time), and bad input refused before any launch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

import autotune.dispatch.dispatcher as dispatcher_mod
import autotune.kernels.dense.api as dense_api
from autotune import Config, Problem, Target
from autotune.core.target import interpreting
from autotune.dispatch import Dispatcher, Table
from autotune.engine.bench import rel_error
from autotune.kernels import (
    MOE,
    QUANT_GEMMS,
    fused_moe,
    fused_topk,
    gemm,
    gemm_quant,
    linear,
    mla_decode,
    served_config,
)
from autotune.kernels.mla.ref import mla_reference, paged_inputs
from autotune.kernels.moe.ref import moe_reference, routing_logits
from autotune.kernels.torch_ops import TorchOp, graph_pool_warmup, register, registered

pytestmark = [
    pytest.mark.filterwarnings("ignore::autotune.dispatch.UntunedShapeWarning"),
    pytest.mark.skipif(
        not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
    ),
]

INTERP = Target.interpreter_target()
OPS = torch.ops.autotune
ROWWISE = "gemm_fp8_rowwise"
SCHEMAS = {
    "gemm": 'gemm(Tensor a, Tensor b, str b_layout="nk") -> Tensor',
    "gemm_out": "gemm_out(Tensor a, Tensor b, str b_layout, Tensor(a!) out) -> ()",
    "linear": "linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
    "gemm_quant": (
        "gemm_quant(str op, Tensor a, Tensor b, Tensor? a_scale, Tensor b_scale, ScalarType out_dtype) "
        "-> Tensor"
    ),
    "gemm_quant_out": (
        "gemm_quant_out(str op, Tensor a, Tensor b, Tensor? a_scale, Tensor b_scale, ScalarType out_dtype, "
        "Tensor(a!) out) -> ()"
    ),
    "fused_moe": (
        "fused_moe(Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
        "Tensor? w1_scale=None, Tensor? w2_scale=None, int[]? block_shape=None) -> Tensor"
    ),
    "fused_moe_out": (
        "fused_moe_out(Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
        "Tensor? w1_scale, Tensor? w2_scale, int[]? block_shape, Tensor(a!) out) -> ()"
    ),
    "fused_topk": (
        "fused_topk(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize=True) "
        "-> (Tensor, Tensor)"
    ),
    "mla_decode": (
        "mla_decode(Tensor q, Tensor kv_cache, Tensor page_table, Tensor context_lens, float sm_scale, "
        "float? kv_scale=None, int? latent=None, int? max_context=None) -> Tensor"
    ),
    "mla_decode_out": (
        "mla_decode_out(Tensor q, Tensor kv_cache, Tensor page_table, Tensor context_lens, float sm_scale, "
        "float? kv_scale, int? latent, int? max_context, Tensor(a!) out) -> ()"
    ),
}
# MLA: 4 heads, 32 latent and 16 RoPE dims, pages of 16 tokens.
LATENT, ROPE, HEADS, PAGE = 32, 16, 4, 16


def tcfg(**extra: int) -> Config:
    """A Triton GEMM config the interpreter runs quickly."""
    knobs = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, SPLIT_K=1, num_warps=4, num_stages=1)
    return Config(backend="triton", **{**knobs, **extra})


def moe_config() -> Config:
    return Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
                  num_warps=4, num_stages=1, GATE_UP_FUSED=0)  # fmt: skip


def mla_config() -> Config:
    return Config(backend="triton", num_kv_splits=2, BLOCK_H=16, BLOCK_N=16, num_warps=4, num_stages=1)


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`serve(*winners)`: the process's only table holds these (problem, config) (none: no table); the dense
    GEMM's launch plans are built afresh."""
    monkeypatch.setattr(dense_api, "_plans", {})

    def install(*winners: tuple[Problem, Config]) -> None:
        tables = [Table.from_winners(INTERP, [(p, c, 1.0) for p, c in winners])] if winners else []
        monkeypatch.setattr(dispatcher_mod, "_default", Dispatcher(tables, device_key=INTERP.device_key()))

    install()
    return install


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The M of every dense GEMM lookup."""
    seen: list[int] = []
    real = dense_api._lookup

    def spy(op: str, M: int, *args: Any, **kwargs: Any) -> Config | None:
        seen.append(M)
        return real(op, M, *args, **kwargs)

    monkeypatch.setattr(dense_api, "_lookup", spy)
    return seen


@pytest.fixture
def compiled() -> Iterator[None]:
    """A fresh Dynamo: no cached frames, no counters."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def moe_inputs(M: int, E: int = 4, N: int = 32, K: int = 32, topk: int = 2, weights: str | None = None):  # type: ignore[no-untyped-def]
    """(x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale) of a tiny MoE, routed by `fused_topk`."""
    problem = Problem.of("moe", M, N, K, variant=weights, E=E, topk=topk)
    x, w1, w2, _, _, w1s, w2s = MOE.make_inputs(problem, "cpu", seed=M)
    gen = torch.Generator().manual_seed(M + 1)
    topk_weights, topk_ids = fused_topk(x, routing_logits(M, E, generator=gen), topk)
    return problem, (x, w1, w2, topk_weights, topk_ids, w1s, w2s)


def mla_inputs(contexts: list[int], kv: torch.dtype = torch.bfloat16):  # type: ignore[no-untyped-def]
    return paged_inputs(HEADS, LATENT, ROPE, PAGE, contexts, kv_dtype=kv, device="cpu", seed=len(contexts))


# -- registration -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_each_entry_point_is_an_op_with_its_schema(name: str) -> None:
    schema = getattr(OPS, name).default._schema
    assert str(schema) == f"autotune::{SCHEMAS[name]}"
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == (["out"] if name.endswith("_out") else [])  # the out forms declare their mutation
    if name.endswith("_out"):
        assert not schema.returns
    assert registered()[name].schema == SCHEMAS[name]


def test_every_op_is_registered_and_once() -> None:
    assert set(registered()) == set(SCHEMAS)
    op = registered()["gemm"]
    assert register(op) == (OPS.gemm.default,)  # the same op again: left as it is
    with pytest.raises(ValueError, match="autotune::gemm is registered already"):
        register(TorchOp(op.schema, lambda *a: None, op.fake))


def test_graph_pool_warmup_reads_the_cuda_graph_trees_of_this_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """While inductor's CUDA graph trees warm a graph up, the current stream is their manager's: workspaces
    are then not kept (they would live in the graph's private pool). A state that cannot be read: keep
    nothing."""
    import sys
    import types

    cuda = torch.device("cuda", 0)
    monkeypatch.delitem(sys.modules, "torch._inductor.cudagraph_trees", raising=False)
    assert not graph_pool_warmup(cuda)  # no graph trees loaded
    theirs, other = object(), object()
    trees = types.ModuleType("torch._inductor.cudagraph_trees")
    manager = types.SimpleNamespace(stream=theirs)
    trees.local = types.SimpleNamespace(
        tree_manager_containers={0: types.SimpleNamespace(tree_manager=manager)}
    )  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees", trees)
    current = [theirs]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda index=None: current[0])
    assert graph_pool_warmup(cuda) and not graph_pool_warmup(torch.device("cpu"))
    current[0] = other
    assert not graph_pool_warmup(cuda)
    trees.local = types.SimpleNamespace(tree_manager_containers={0: object()})  # type: ignore[attr-defined]
    assert graph_pool_warmup(cuda)  # another torch's state: nothing kept


# -- opcheck ------------------------------------------------------------------------------------------------


def opcheck(op: Any, args: tuple[Any, ...], schema: bool = True) -> None:
    """`torch.library.opcheck`; without its `schema` test where torch cannot compare the inputs (FP8 on the
    CPU): then the inputs are compared bit for bit here."""
    tests = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    before = [t.clone() for t in args if isinstance(t, torch.Tensor)]
    result = torch.library.opcheck(op, args, test_utils=tests if schema else tests[1:])
    assert set(result.values()) == {"SUCCESS"} and len(result) == len(tests) - (not schema), result
    if not schema:
        after = [t for t in args if isinstance(t, torch.Tensor)]
        written = {a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        kept = [
            (x, y)
            for x, y, a in zip(before, after, op._schema.arguments, strict=False)
            if a.name not in written
        ]
        assert all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in kept)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_opcheck_gemm_through_the_vendor_fallback(
    serve: Callable[..., None], launched: list[Config], layout: str, dtype: torch.dtype
) -> None:
    a = rand(5, 32, dtype=dtype, seed=1)
    b = rand(24, 32, dtype=dtype, seed=2) if layout == "nk" else rand(32, 24, dtype=dtype, seed=2)
    opcheck(OPS.gemm.default, (a, b, layout))
    opcheck(OPS.gemm_out.default, (a, b, layout, torch.empty(5, 24, dtype=dtype)))
    if layout == "nk":
        x = rand(2, 3, 32, dtype=dtype, seed=3)
        opcheck(OPS.linear.default, (x, b, rand(24, dtype=dtype, seed=4)))
        opcheck(OPS.linear.default, (x[0, 0], b, None))
    assert launched == []  # torch.mm, no Triton launcher
    want = a.float() @ (b.float().t() if layout == "nk" else b.float())
    assert rel_error(OPS.gemm.default(a, b, layout), want) < 1e-2


def test_opcheck_gemm_and_linear_through_a_triton_config(
    serve: Callable[..., None], launched: list[Config]
) -> None:
    config = tcfg(SPLIT_K=2)
    serve((Problem.of("gemm", 6, 24, 32), config))
    a, b = rand(6, 32, seed=3), rand(24, 32, seed=4)
    opcheck(OPS.gemm.default, (a, b, "nk"))
    opcheck(OPS.gemm_out.default, (a, b, "nk", torch.empty(6, 24, dtype=torch.bfloat16)))
    x, bias = rand(2, 3, 32, seed=5), rand(24, seed=6)
    opcheck(OPS.linear.default, (x, b, bias))  # M = 6 too
    assert launched == [config]  # the table's Triton config served M = 6 (its launcher built once)
    assert rel_error(linear(x, b, bias), x.float() @ b.float().t() + bias.float()) < 1e-2


def test_opcheck_gemm_quant(serve: Callable[..., None]) -> None:
    quant = QUANT_GEMMS[ROWWISE]
    problem = Problem.quant(ROWWISE, 3, 32, 64)
    config = quant.default_config(problem, INTERP)
    assert config.backend == "triton"
    serve((problem, config))
    assert served_config(quant, problem, INTERP) == config
    a, b, sa, sb = quant.make_inputs(problem, "cpu", seed=7)
    opcheck(OPS.gemm_quant.default, (ROWWISE, a, b, sa, sb, torch.bfloat16), schema=False)
    out = torch.empty(3, 32, dtype=torch.float16)
    opcheck(OPS.gemm_quant_out.default, (ROWWISE, a, b, sa, sb, torch.float16, out), schema=False)
    out = gemm_quant(ROWWISE, a, b, sa, sb)
    assert rel_error(out, quant.reference(problem, (a, b, sa, sb))) < quant.tolerance(problem)


def test_opcheck_fused_topk_and_fused_moe(serve: Callable[..., None]) -> None:
    problem, (x, w1, w2, weights, ids, _, _) = moe_inputs(5)
    serve((problem, moe_config()))
    logits = routing_logits(5, 4, generator=torch.Generator().manual_seed(0))
    opcheck(OPS.fused_topk.default, (x, logits, 2, True))
    opcheck(OPS.fused_topk.default, (x, logits, 3, False))
    opcheck(OPS.fused_moe.default, (x, w1, w2, weights, ids))
    opcheck(OPS.fused_moe_out.default, (x, w1, w2, weights, ids, None, None, None, torch.empty_like(x)))
    assert rel_error(fused_moe(x, w1, w2, weights, ids), moe_reference(x, w1, w2, weights, ids)) < 2e-2


def test_opcheck_mla_decode(serve: Callable[..., None]) -> None:
    q, cache, table, lens, _ = mla_inputs([40, 3])
    from autotune.kernels.mla.api import mla_problem

    serve((mla_problem(q, cache, table, LATENT, table.shape[1] * PAGE, INTERP), mla_config()))
    opcheck(OPS.mla_decode.default, (q, cache, table, lens, 0.2, None, LATENT, None))
    out = torch.empty(2, HEADS, LATENT, dtype=torch.bfloat16)
    opcheck(OPS.mla_decode_out.default, (q, cache, table, lens, 0.2, None, LATENT, 64, out))
    got = mla_decode(q, cache, table, lens, sm_scale=0.2, latent=LATENT)
    assert rel_error(got, mla_reference(q, cache, table, lens, 0.2, LATENT)) < 1e-2


# -- fakes --------------------------------------------------------------------------------------------------


def meta(*tensors: Any) -> list[Any]:
    return [t.to("meta") if isinstance(t, torch.Tensor) else t for t in tensors]


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fake_gemm(layout: str, dtype: torch.dtype) -> None:
    a = torch.empty(7, 40, dtype=dtype, device="meta")
    b = torch.empty((24, 40) if layout == "nk" else (40, 24), dtype=dtype, device="meta")
    c = OPS.gemm.default(a, b, layout)
    assert (c.shape, c.dtype, c.device.type) == ((7, 24), dtype, "meta")
    assert gemm(a, b, b_layout=layout).shape == (7, 24)
    out = torch.empty(7, 24, dtype=dtype, device="meta")
    assert OPS.gemm_out.default(a, b, layout, out) is None and gemm(a, b, b_layout=layout, out=out) is out


@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
@pytest.mark.parametrize("bias", [False, True])
def test_fake_linear(lead: tuple[int, ...], bias: bool) -> None:
    x = torch.empty(*lead, 40, dtype=torch.float16, device="meta")
    w = torch.empty(24, 40, dtype=torch.float16, device="meta")
    y = linear(x, w, torch.empty(24, dtype=torch.float16, device="meta") if bias else None)
    assert (y.shape, y.dtype) == ((*lead, 24), torch.float16)


@pytest.mark.parametrize(
    "op, fp8",
    [(ROWWISE, torch.float8_e4m3fn), (ROWWISE, torch.float8_e4m3fnuz), ("gemm_fp8_blockwise", None),
     ("gemm_mxfp8", None), ("gemm_mxfp4", None), ("gemm_mxfp4_bf16a", None)],
)  # fmt: skip
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_fake_gemm_quant(op: str, fp8: torch.dtype | None, out_dtype: torch.dtype) -> None:
    quant = QUANT_GEMMS[op]
    flavour = "fp8e4m3fnuz" if fp8 == torch.float8_e4m3fnuz else None
    a, b, sa, sb = meta(*quant.make_inputs(Problem.quant(op, 3, 32, 128, "bf16", flavour), "cpu", seed=1))
    if fp8 is not None:
        assert a.dtype == b.dtype == fp8
    c = OPS.gemm_quant.default(op, a, b, sa, sb, out_dtype)
    assert (c.shape, c.dtype, c.device.type) == ((3, 32), out_dtype, "meta")
    out = torch.empty(3, 32, dtype=out_dtype, device="meta")
    assert gemm_quant(op, a, b, sa, sb, out_dtype=out_dtype, out=out) is out


@pytest.mark.parametrize(
    "dtype, weights",
    [("bf16", None), ("fp16", None), ("bf16", "fp8e4m3"), ("fp16", "fp8e4m3"), ("bf16", "mxfp4")],
)
def test_fake_fused_moe(dtype: str, weights: str | None) -> None:
    problem = Problem.of("moe", 6, 128, 128, dtype, weights, E=4, topk=2)
    x, w1, w2, tw, ids, w1s, w2s = meta(*MOE.make_inputs(problem, "cpu", seed=1))
    block = [128, 128] if weights == "fp8e4m3" else None
    y = OPS.fused_moe.default(x, w1, w2, tw, ids, w1s, w2s, block)
    assert (y.shape, y.dtype, y.device.type) == ((6, 128), x.dtype, "meta") and y.is_contiguous()
    assert fused_moe(x, w1, w2, tw, ids, w1_scale=w1s, w2_scale=w2s, block_shape=block, inplace=True) is x
    weights_, ids_ = fused_topk(x, torch.empty(6, 4, device="meta"), 3)
    assert (weights_.shape, weights_.dtype, ids_.shape, ids_.dtype) == (
        (6, 3),
        torch.float32,
        (6, 3),
        torch.int32,
    )


@pytest.mark.parametrize("kv", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("latent", [None, LATENT])
def test_fake_mla_decode(kv: torch.dtype, latent: int | None) -> None:
    rope = ROPE if latent else 64
    q, cache, table, lens, scale = paged_inputs(
        HEADS, LATENT, rope, PAGE, [5, 9, 1], kv_dtype=kv, device="cpu", seed=0
    )
    q, cache, table, lens = meta(q, cache, table, lens)
    y = OPS.mla_decode.default(q, cache, table, lens, 0.1, scale, latent, None)
    assert (y.shape, y.dtype, y.device.type) == ((3, HEADS, LATENT), torch.bfloat16, "meta")
    out = torch.empty(3, HEADS, LATENT, dtype=torch.bfloat16, device="meta")
    assert mla_decode(q, cache, table, lens, sm_scale=0.1, kv_scale=scale, latent=latent, out=out) is out


def test_fakes_keep_sizes_symbolic() -> None:
    """Traced with symbolic sizes, every output's rows are x's symbol: no size is made concrete."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor, w: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return linear(x, w), gemm(x, w.t(), b_layout="kn"), *fused_topk(x, logits, 2)

    graph = make_fx(f, tracing_mode="symbolic")(rand(5, 40), rand(24, 40), torch.randn(5, 4))
    x, w, _ = (n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder")
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    shapes = [tuple(str(d) for d in n.meta["val"].shape) for n in outputs]
    M, N = str(x.shape[0]), str(w.shape[0])
    assert shapes == [(M, N), (M, N), (M, "2"), (M, "2")] and not M.isdigit() and not N.isdigit()


# -- torch.compile ------------------------------------------------------------------------------------------


def nodes(graph: torch.fx.GraphModule, op: Any) -> int:
    return sum(1 for n in graph.graph.nodes if n.op == "call_function" and n.target is op)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_linears_see_one_node_each_and_no_recompile_per_m(
    compiled: None, serve: Callable[..., None], launched: list[Config], lookups: list[int], backend: str
) -> None:
    config = tcfg()
    serve((Problem.of("gemm", 8, 48, 32), config))  # round-up: M up to 8 runs it, larger M the vendor
    w1, b1, w2 = rand(48, 32, seed=1), rand(48, seed=2), rand(16, 48, seed=3)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        return linear(torch.relu(linear(x, w1, b1)), w2)

    counter = CompileCounterWithBackend(backend)
    fn = torch.compile(mlp, backend=counter, fullgraph=True, dynamic=True)
    for M in (2, 3, 8, 17, 33):
        x = rand(M, 32, seed=M)
        lookups.clear()
        got = fn(x)
        assert lookups == [M, M]  # the table was looked up at run time, on this M
        assert torch.equal(got, mlp(x))
    assert counter.frame_count == 1 and not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == 1
    assert nodes(counter.graphs[0], OPS.gemm_out.default) == 2  # compiled, linear writes a planned buffer
    assert launched == [config]  # the Triton config served M <= 8, the vendor the others


def test_a_batch_of_one_compiles_once_with_an_unbacked_size(
    compiled: None, serve: Callable[..., None]
) -> None:
    """dynamic=True specializes M = 1; an unbacked M (`mark_unbacked`) serves 1 too, in the same graph."""
    from torch._dynamo.decorators import mark_unbacked

    w = rand(16, 32)
    counter = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(lambda x: linear(x, w) * 2, backend=counter, fullgraph=True, dynamic=True)
    for M in (1, 2, 5):
        x = rand(M, 32, seed=M)
        mark_unbacked(x, 0)
        assert torch.equal(fn(x), linear(x, w) * 2)
    assert counter.frame_count == 1 and not counters["graph_break"]


def test_compiled_out_forms_write_the_callers_buffer(compiled: None, serve: Callable[..., None]) -> None:
    w = rand(24, 32)

    def f(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        gemm(x, w, out=out)
        return out + 1

    counter = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(f, backend=counter, fullgraph=True, dynamic=True)
    for M in (3, 9):
        x, out = rand(M, 32, seed=M), torch.full((M, 24), float("nan"), dtype=torch.bfloat16)
        assert torch.equal(fn(x, out), gemm(x, w) + 1) and torch.equal(out, gemm(x, w))
    assert counter.frame_count == 1 and not counters["graph_break"]


def test_compiled_topk_and_moe(compiled: None, serve: Callable[..., None]) -> None:
    problem, (_, w1, w2, *_) = moe_inputs(6)
    serve((problem, moe_config()))  # M <= 6 runs this config, larger M the default

    def moe(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        weights, ids = fused_topk(x, logits, 2)
        return fused_moe(x, w1, w2, weights, ids)

    counter = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(moe, backend=counter, fullgraph=True, dynamic=True)
    for M in (3, 6, 9):
        xs = rand(M, 32, seed=M)
        logits = routing_logits(M, 4, generator=torch.Generator().manual_seed(M))
        got = fn(xs, logits)
        assert torch.equal(got, moe(xs, logits))
        weights, ids = fused_topk(xs, logits, 2)
        assert rel_error(got, moe_reference(xs, w1, w2, weights, ids)) < 2e-2
    assert counter.frame_count == 1 and not counters["graph_break"]
    graph = counter.graphs[0]
    assert nodes(graph, OPS.fused_topk.default) == 1 and nodes(graph, OPS.fused_moe.default) == 1


def test_a_compiled_inplace_moe_writes_its_hidden_states(compiled: None, serve: Callable[..., None]) -> None:
    problem, (x, w1, w2, weights, ids, _, _) = moe_inputs(4)
    serve((problem, moe_config()))
    want = fused_moe(x, w1, w2, weights, ids)

    def moe(x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return fused_moe(x, w1, w2, weights, ids, inplace=True) + 0

    counter = CompileCounterWithBackend("aot_eager")
    got = torch.compile(moe, backend=counter, fullgraph=True, dynamic=True)(x, weights, ids)
    assert torch.equal(got, want) and torch.equal(x, want)  # hidden_states hold the result
    assert nodes(counter.graphs[0], OPS.fused_moe_out.default) == 1


# -- bad input ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda a, b: OPS.gemm.default(a.float(), b.float(), "nk"), TypeError, "bf16 or fp16"),
        (lambda a, b: OPS.gemm.default(a, b, "nn"), ValueError, "b_layout must be 'nk'"),
        (lambda a, b: OPS.gemm.default(a, b[:, :-1], "nk"), ValueError, "inner dimensions differ"),
        (lambda a, b: OPS.gemm.default(a, b.to("meta"), "nk"), ValueError, "one device"),
        (lambda a, b: OPS.gemm_out.default(a, b, "nk", a), ValueError, r"out must be a \(4, 8\)"),
        (lambda a, b: OPS.linear.default(a, b, a[0]), ValueError, r"shape \(8,\), got \(16,\)"),
        (lambda a, b: linear(a, b, b[0, :8].to("meta")), ValueError, "bias is on meta, x on cpu"),
        (lambda a, b: gemm([[1.0]], b), TypeError, "two torch.Tensors"),  # type: ignore[arg-type]
        (lambda a, b: gemm(a, b, b_layout=3), ValueError, "b_layout must be"),  # type: ignore[arg-type]
        (lambda a, b: gemm(a, b, out=[[0.0]]), TypeError, "out must be a torch.Tensor"),  # type: ignore[arg-type]
        (lambda a, b: linear("x", b), ValueError, r"shape \(\.\.\., K\)"),  # type: ignore[arg-type]
        (lambda a, b: linear(a, "w"), TypeError, "two torch.Tensors"),  # type: ignore[arg-type]
    ],
    ids=[
        "dtype",
        "layout",
        "k",
        "devices",
        "out",
        "bias",
        "bias-device",
        "list",
        "layout-int",
        "out-list",
        "x-str",
        "w-str",
    ],
)
def test_bad_dense_input_is_one_clear_error_before_any_lookup(
    serve: Callable[..., None], lookups: list[int], call: Callable[..., Any], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        call(rand(4, 16), rand(8, 16))
    assert lookups == []


def test_bad_input_of_the_other_ops_is_one_clear_error(serve: Callable[..., None]) -> None:
    quant = QUANT_GEMMS[ROWWISE]
    a, b, sa, sb = quant.make_inputs(Problem.quant(ROWWISE, 3, 32, 64), "cpu", seed=7)
    with pytest.raises(ValueError, match="unknown quantized GEMM 'gemm_int8'"):
        OPS.gemm_quant.default("gemm_int8", a, b, sa, sb, torch.bfloat16)
    with pytest.raises(ValueError, match="writes bf16 or fp16"):
        gemm_quant(ROWWISE, a, b, sa, sb, out_dtype=torch.float32)
    with pytest.raises(ValueError, match="b_scale must have shape"):
        gemm_quant(ROWWISE, a, b, sa, sb[:-1])
    with pytest.raises(TypeError, match=r"b_scale must be a torch\.Tensor"):
        gemm_quant(ROWWISE, a, b, sa, [1.0])  # type: ignore[arg-type]
    _, (x, w1, w2, weights, ids, _, _) = moe_inputs(4)
    with pytest.raises(ValueError, match="w2 must be"):
        OPS.fused_moe.default(x, w1, w2[:, :, :-1], weights, ids)
    bad = ids.clone()
    bad[1, 0] = 4
    with pytest.raises(ValueError, match="topk_ids out of range"):
        fused_moe(x, w1, w2, weights, bad)
    with pytest.raises(TypeError, match="fused_moe takes tensors"):
        fused_moe(x, w1, w2, weights, [[0, 1]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gating_output must be"):
        OPS.fused_topk.default(x, torch.randn(3, 4), 2, True)
    with pytest.raises(ValueError, match="topk must be in"):
        fused_topk(x, torch.randn(4, 4), 5)
    q, cache, table, lens, _ = mla_inputs([40, 3])
    with pytest.raises(ValueError, match="q must be"):
        OPS.mla_decode.default(q.half(), cache, table, lens, 0.2, None, LATENT, None)
    with pytest.raises(ValueError, match="FP8 kv_cache needs its kv_scale"):
        mla_decode(q, cache, table, lens, sm_scale=0.2, kv_scale=1.0, latent=LATENT)
    with pytest.raises(TypeError, match="mla_decode takes tensors"):
        mla_decode(q, cache, table, [40, 3], sm_scale=0.2, latent=LATENT)  # type: ignore[arg-type]


def test_a_compiled_call_with_bad_shapes_fails_while_traced(
    compiled: None, serve: Callable[..., None], lookups: list[int]
) -> None:
    w = rand(24, 31)
    fn = torch.compile(lambda x: linear(x, w), backend="aot_eager", fullgraph=True, dynamic=True)
    with pytest.raises(Exception, match="inner dimensions differ") as caught:
        fn(rand(5, 32))
    assert lookups == []  # refused by the fake, before anything ran
    assert "inner dimensions differ" in str(caught.value)


def test_eager_calls_skip_the_dispatcher_and_traced_ones_take_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """An eager call on plain tensors runs the implementation without the op's dispatch (its host cost);
    under a dispatch mode (`make_fx`, fake tensors) and under `torch.compile` the op is what runs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    through_op: list[str] = []
    real = dense_api._LINEAR

    def spy(*args: Any) -> Any:
        through_op.append("linear")
        return real(*args)

    monkeypatch.setattr(dense_api, "_LINEAR", spy)
    x, w = rand(3, 40), rand(24, 40, seed=1)
    eager_out = linear(x, w)
    assert through_op == []
    assert torch.equal(eager_out, real(x, w))  # the same implementation either way
    graph = make_fx(lambda a, b: linear(a, b))(x, w)
    assert through_op == ["linear"]
    assert any("autotune.linear" in str(n.target) for n in graph.graph.nodes)
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(lambda a, b: linear(a, b), backend=counter, fullgraph=True)
    assert torch.equal(compiled(x, w), eager_out)
    assert nodes(counter.graphs[0], OPS.gemm_out.default) == 1  # compiled: the op, into a planned buffer
