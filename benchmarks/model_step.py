"""A model's step, end to end (GPU): a decoder stack with the real layer shapes of Llama-3.1-8B (dense)
and Qwen3-30B-A3B (MoE), random weights, built from plain torch modules, timed patched against not
patched, both compiled (`torch.compile`, the token dimension dynamic) and replayed from CUDA graphs.

Phases (`--phase`, default both):
- sweep: the layers' GEMM shapes (and the MoE's) at every token count timed below, swept as the README
  says (`autotune sweep` of a spec written to OUT/model_step.toml, then `autotune emit` to
  OUT/table.json), into `--db`;
- bench: with the table loaded ($AUTOTUNE_TABLES), per model and token count, one step of the stack
  (decode: a batch of B sequences, one new token each, attending to `--context` cached tokens; prefill:
  one sequence of T tokens, causal) is captured in a CUDA graph per variant and the graphs are replayed
  in interleaved rounds; outputs are compared first (relative error against the unpatched model).
  With `--confirm`, the table is first checked against each patched variant's own step at every token
  count (`autotune.nn.confirm`), and the bench loads the confirmed table (OUT/table.confirmed.json).

Variants, each compiled once (`dynamic=True`, `fullgraph=True`):
- dense bf16: `torch.nn.Linear` (cuBLAS) against `autotune.patch(model)` (the tuned `linear`);
- dense FP8 row-wise: weights quantized once, activations per row, `torch._scaled_mm` against
  `autotune.patch(model, linear_weights="fp8_rowwise")` (`gemm_quant`);
- MoE bf16: the experts through the vendor's grouped GEMM (`torch._grouped_mm`: pairs sorted by expert,
  SiLU·up, unsorted) against `autotune.nn.FusedMoE` (the tuned `fused_moe`), the attention's linear layers
  patched too.
Printed last: per model, variant and token count, µs unpatched, µs patched and the ratio (> 1: patched
faster); then the geomean and lowest ratio of each. Details (and the dynamo counters of each compile:
graph breaks, recompiles) go to OUT/model_step.json.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import torch
import torch.nn.functional as F
from torch import nn

SIDES = ("base", "ours")
DECODE = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PREFILL = (512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class Shape:
    """A decoder layer's sizes (TP 1)."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int = 0  # dense MLP
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0

    @property
    def qkv(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


LLAMA = Shape("llama-3.1-8b", hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336)
QWEN3_MOE = Shape("qwen3-30b-a3b", hidden=2048, heads=32, kv_heads=4, head_dim=128, experts=128, topk=8,
                  moe_intermediate=768)  # fmt: skip


# -- the model, plain torch --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.float()
        return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class Attention(nn.Module):
    """Fused QKV and output projections around SDPA: decode attends to a cache of `context` tokens (one
    new token a sequence), prefill is causal over the tokens given (one sequence)."""

    def __init__(self, s: Shape, context: int, max_batch: int) -> None:
        super().__init__()
        self.s = s
        self.qkv_proj = nn.Linear(s.hidden, s.qkv, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)
        cache = (max_batch, s.kv_heads, context, s.head_dim)
        self.register_buffer("k_cache", torch.randn(cache) * 0.5, persistent=False)
        self.register_buffer("v_cache", torch.randn(cache) * 0.5, persistent=False)

    def forward(self, x: torch.Tensor, decode: bool) -> torch.Tensor:
        s, T = self.s, x.shape[0]
        sizes = [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim]
        q, k, v = self.qkv_proj(x).split(sizes, -1)
        if decode:  # T sequences, one token each, over their caches
            qh = q.view(T, s.heads, 1, s.head_dim)
            kc, vc = self.k_cache[:T], self.v_cache[:T]
            o = F.scaled_dot_product_attention(qh, kc, vc, enable_gqa=True)
        else:  # one sequence of T tokens
            qh = q.view(1, T, s.heads, s.head_dim).transpose(1, 2)
            kh = k.view(1, T, s.kv_heads, s.head_dim).transpose(1, 2)
            vh = v.view(1, T, s.kv_heads, s.head_dim).transpose(1, 2)
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
            o = o.transpose(1, 2)
        return self.o_proj(o.reshape(T, s.heads * s.head_dim))


class MLP(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(s.hidden, 2 * s.intermediate, bias=False)
        self.down_proj = nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, -1)
        return self.down_proj(F.silu(gate) * up)


class GroupedMoE(nn.Module):
    """The unpatched MoE: router, softmax top-k renormalized, experts through `torch._grouped_mm`. Weights
    in vLLM's layout: w1 (E, 2N, K) gate rows then up rows, w2 (E, K, N)."""

    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.topk = s.topk
        self.gate = nn.Linear(s.hidden, s.experts, bias=False)
        k, n, e = s.hidden, s.moe_intermediate, s.experts
        self.w1 = nn.Parameter(torch.randn(e, 2 * n, k) / k**0.5)
        self.w2 = nn.Parameter(torch.randn(e, k, n) / n**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T, K = x.shape
        E = self.w1.shape[0]
        probs = torch.softmax(self.gate(x).float(), -1)
        weights, ids = probs.topk(self.topk, -1)
        weights = weights / weights.sum(-1, keepdim=True)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(E, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))  # no sync
        offs = counts.cumsum(0).to(torch.int32)
        xs = x.index_select(0, order // self.topk)
        h = torch._grouped_mm(xs, self.w1.transpose(1, 2), offs=offs)
        n = h.shape[1] // 2
        a = F.silu(h[:, :n]) * h[:, n:]
        y = torch._grouped_mm(a, self.w2.transpose(1, 2), offs=offs)
        y = y * weights.reshape(-1)[order].unsqueeze(1).to(y.dtype)
        out = torch.empty_like(y)
        out[order] = y
        return out.view(T, self.topk, K).sum(1)


class Block(nn.Module):
    def __init__(self, s: Shape, context: int, max_batch: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(s.hidden), RMSNorm(s.hidden)
        self.attn = Attention(s, context, max_batch)
        self.mlp: nn.Module = GroupedMoE(s) if s.experts else MLP(s)

    def forward(self, x: torch.Tensor, decode: bool) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), decode)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """`layers` blocks of `s` and a final norm: tokens (T, hidden) in and out."""

    def __init__(self, s: Shape, layers: int, context: int, max_batch: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(s, context, max_batch) for _ in range(layers))
        self.norm = RMSNorm(s.hidden)

    def forward(self, x: torch.Tensor, decode: bool) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, decode)
        return self.norm(x)


class ScaledMMLinear(nn.Module):
    """The unpatched FP8 row-wise layer: weight quantized once per row, activations per row at each call,
    `torch._scaled_mm` (cuBLASLt)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        from autotune.kernels.common.formats import device_arch, fp8_dtype, quantize_fp8

        w = linear.weight.detach()
        self.fp8 = fp8_dtype("fp8e4m3", device_arch(w.device))
        q, scale = quantize_fp8(w, self.fp8)  # (N, K), (N, 1)
        self.register_buffer("w", q)
        self.register_buffer("w_scale", scale.float().reshape(1, -1))
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        amax = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12)
        scale = amax / torch.finfo(self.fp8).max
        q = (x.float() / scale).clamp(torch.finfo(self.fp8).min, torch.finfo(self.fp8).max).to(self.fp8)
        return torch._scaled_mm(q, self.w.t(), scale_a=scale, scale_b=self.w_scale, out_dtype=x.dtype)


def scaled_mm_model(model: nn.Module) -> nn.Module:
    """`model` with every nn.Linear of its blocks but the MoE router as a ScaledMMLinear."""
    out = copy.deepcopy(model)
    for module in list(out.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name != "gate":
                setattr(module, child_name, ScaledMMLinear(child))
    return out


def patched_model(model: nn.Module, fp8: bool) -> tuple[nn.Module, Any]:
    """`model` with its linear layers patched (`autotune.patch`) and its MoE blocks as FusedMoE."""
    import autotune
    from autotune.nn import FusedMoE

    out = copy.deepcopy(model)
    for module in out.modules():
        if isinstance(module, Block) and isinstance(module.mlp, GroupedMoE):
            g = module.mlp
            module.mlp = FusedMoE(g.gate.weight.detach(), g.w1.detach(), g.w2.detach(), topk=g.topk,
                                  renormalize=True)  # fmt: skip
    report = autotune.patch(out, linear_weights="fp8_rowwise" if fp8 else None, exclude=["*.gate"])
    return out, report


# -- timing -------------------------------------------------------------------------------------------


def graph_of(fn: Callable[[], torch.Tensor]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """`fn` captured in a CUDA graph after warm-up runs on a side stream; (graph, its output)."""
    from autotune.nn.confirm import capture

    out: list[torch.Tensor] = []
    g = capture(lambda: out.append(fn()))
    return g, out[-1]


def compiled(model: nn.Module, decode: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    fn = torch.compile(lambda x: model(x, decode), dynamic=True, fullgraph=True)
    return fn  # type: ignore[return-value]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    d = (out.double() - ref.double()).norm() / ref.double().norm()
    return float(d) if torch.isfinite(d) else float("inf")


def time_pairs(
    pairs: dict[str, tuple[nn.Module, nn.Module]], tokens: tuple[int, ...], decode: bool, hidden: int,
    rounds: int, reps: int, tol: float, tables: dict[str, Any], captures: int = 1,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per token count and variant: both sides compiled, captured `captures` times each (where a graph's
    buffers land moves its time by a percent or two at some sizes: each side's time is the median over
    its captures and rounds) and replayed in interleaved rounds. The patched side of variant v is captured
    with `tables[v]` installed (the lookups run while capturing)."""
    from torch._dynamo.utils import counters

    from autotune.dispatch import install_dispatcher
    from autotune.nn.confirm import replay_us

    rows = []
    fns = {}
    by_model: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}  # a model shared by variants: once
    for v, pair in pairs.items():
        for side, model in zip(SIDES, pair, strict=True):
            fns[(v, side)] = by_model.setdefault(id(model), compiled(model, decode))
    for T in tokens:
        x = torch.randn(T, hidden, device="cuda", dtype=torch.bfloat16)
        graphs: dict[tuple[str, str], list[tuple[torch.cuda.CUDAGraph, torch.Tensor]]] = {}
        base_graphs: dict[int, list[tuple[torch.cuda.CUDAGraph, torch.Tensor]]] = {}  # a base model's
        for key, fn in fns.items():
            t0 = time.perf_counter()
            install_dispatcher(tables[key[0]])
            if key[1] == "base" and id(fn) in base_graphs:
                graphs[key] = base_graphs[id(fn)]
                continue
            graphs[key] = [graph_of(lambda fn=fn, x=x: fn(x)) for _ in range(captures)]
            if key[1] == "base":
                base_graphs[id(fn)] = graphs[key]
            print(f"  {key[0]} {key[1]} {'decode' if decode else 'prefill'} {T}: captured in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
        torch.cuda.synchronize()
        for v in pairs:
            for (gb, base_out), (go, ours_out) in zip(graphs[(v, "base")], graphs[(v, "ours")], strict=True):
                gb.replay()
                go.replay()
                torch.cuda.synchronize()
                err = rel_err(ours_out, base_out)
                if not err <= tol:
                    raise SystemExit(f"{v} at {T} tokens: the patched output differs by {err:.3g} > {tol}")
        unique = {id(g): g for gs in graphs.values() for g, _ in gs}  # each graph timed once a round
        order = list(unique)
        timed: dict[int, list[float]] = {i: [] for i in order}
        for r in range(rounds):
            for i in order[r % len(order) :] + order[: r % len(order)]:
                timed[i].append(replay_us(unique[i], reps))
        times = {key: [t for g, _ in gs for t in timed[id(g)]] for key, gs in graphs.items()}
        for v in pairs:
            base, ours = statistics.median(times[(v, "base")]), statistics.median(times[(v, "ours")])
            rows.append(dict(variant=v, phase="decode" if decode else "prefill", tokens=T, base_us=base,
                             ours_us=ours, ratio=base / ours))  # fmt: skip
        del graphs, base_graphs, unique
        torch.cuda.empty_cache()
    rows.append(dict(counters={k: dict(v) for k, v in counters.items() if k in ("graph_break", "stats")}))
    return rows


# -- phases -------------------------------------------------------------------------------------------


def spec_text(trials: int = 24, models: tuple[str, ...] = ("dense", "moe"), fp8: bool = True) -> str:
    """The sweep spec of every shape the bench times for `models`: the layers' GEMMs (bf16, and FP8
    row-wise for the dense model where `fp8`) and the MoE's experts, at every token count."""
    ms = sorted(set(DECODE) | set(PREFILL))
    dense = [[LLAMA.qkv, LLAMA.hidden], [LLAMA.hidden, LLAMA.heads * LLAMA.head_dim],
             [2 * LLAMA.intermediate, LLAMA.hidden], [LLAMA.hidden, LLAMA.intermediate]]  # fmt: skip
    attn = [[QWEN3_MOE.qkv, QWEN3_MOE.hidden], [QWEN3_MOE.hidden, QWEN3_MOE.heads * QWEN3_MOE.head_dim]]
    lines = ['name = "model-step"', 'description = "The layers of benchmarks/model_step.py"', ""]
    bf16 = (dense if "dense" in models else []) + (attn if "moe" in models else [])
    for op, shapes in (("gemm", bf16), ("gemm_fp8_rowwise", dense if "dense" in models and fp8 else [])):
        if shapes:
            lines += ["[[sweep]]", f'op = "{op}"', f"m = {ms}", f"nk = {shapes}", f"trials = {trials}", ""]
    if "moe" in models:
        moe = f"nk = [[{QWEN3_MOE.moe_intermediate}, {QWEN3_MOE.hidden}]]"
        lines += ["[[sweep]]", 'op = "moe"', f"e = {QWEN3_MOE.experts}", f"topk = {QWEN3_MOE.topk}", moe,
                  f"m = {ms}", f"trials = {trials}", ""]  # fmt: skip
    return "\n".join(lines)


def sweep(out: Path, db: Path, budget: str | None, trials: int, models: tuple[str, ...], fp8: bool) -> Path:
    spec = out / "model_step.toml"
    spec.write_text(spec_text(trials, models, fp8))
    t0 = time.perf_counter()
    cmd = [*harness.CLI, "sweep", str(spec), "--db", str(db), "--no-progress", "--profile-m", "none"]
    code, text = harness.run_logged(cmd + (["--budget", budget] if budget else []), out / "sweep.log")
    print(text.strip()[-3000:], flush=True)
    if code != 0:
        raise SystemExit(f"sweep failed with exit code {code}")
    print(f"sweep: {time.perf_counter() - t0:.0f} s", flush=True)
    return harness.emit_table(db, out)


Pairs = dict[str, tuple[nn.Module, nn.Module]]


def variants(name: str, layers: int, context: int, fp8: bool) -> tuple[Shape, Pairs, dict[str, Any]]:
    """Model `name`'s shape, its variants (name → (unpatched, patched)) and what each patch swapped."""
    s = LLAMA if name == "dense" else QWEN3_MOE
    model = Decoder(s, layers, context, max(DECODE)).eval()
    ours, report = patched_model(model, fp8=False)
    pairs = {"dense bf16" if name == "dense" else "moe bf16": (model, ours)}
    reports = {next(iter(pairs)): report}
    if name == "dense" and fp8:
        ours8, report8 = patched_model(model, fp8=True)
        pairs["dense fp8"] = (scaled_mm_model(model), ours8)
        reports["dense fp8"] = report8
    return s, pairs, reports


def confirm_table(args: Any, table: Any, out: Path) -> tuple[Any, list[dict[str, Any]]]:
    """`autotune.nn.confirm` of `table` against each patched variant's step at every token count timed
    (decode batches and prefills, compiled as the bench compiles them), one variant after the other; the
    confirmed table (saved to OUT/table.confirmed.json) and a row per point."""
    from autotune.nn import confirm

    torch.manual_seed(1)
    torch.set_default_device("cuda")
    torch.set_default_dtype(torch.bfloat16)
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        for name in args.models:
            s, pairs, _ = variants(name, args.layers, args.context, args.fp8)
            for v, (_, ours) in pairs.items():
                fns = {True: compiled(ours, True), False: compiled(ours, False)}

                def step(T: int, fns: Any = fns, hidden: int = s.hidden) -> Callable[[], Any]:
                    x = torch.randn(T, hidden)
                    fn = fns[T in args.decode]
                    return lambda: fn(x)

                t0 = time.perf_counter()
                found = confirm(step, (*args.decode, *args.prefill), table,
                                progress=lambda p, v=v: print(f"  confirm {v}: {p}", flush=True))  # fmt: skip
                table = found.table
                print(f"confirm {v}: {time.perf_counter() - t0:.0f} s, served by the fallbacks at "
                      f"{list(found.reverted) or 'no token count'}", flush=True)  # fmt: skip
                rows += [dict(variant=v, tokens=p.tokens, served=list(p.served), table_us=p.table_us,
                              fallback_us=p.fallback_us, kept=p.kept) for p in found.points]  # fmt: skip
            del pairs
            torch.cuda.empty_cache()
    torch.set_default_device(None)
    path = out / "table.confirmed.json"
    table.save(path)
    return path, rows


def bench(args: Any, save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    from autotune.core.target import local_target
    from autotune.dispatch import Dispatcher, Table

    torch.manual_seed(0)
    tuned = Dispatcher([Table.load(args.table)]) if args.table else None
    other = Dispatcher([Table.load(args.unconfirmed)]) if args.unconfirmed else None  # its own dispatcher
    untuned = Dispatcher([], device_key=local_target().device_key())
    torch.set_default_device("cuda")
    torch.set_default_dtype(torch.bfloat16)
    rows: list[dict[str, Any]] = []
    reports: dict[str, Any] = {}
    for name in args.models:
        s, pairs, found = variants(name, args.layers, args.context, args.fp8)
        reports |= found
        if name == "dense" and args.untuned:  # the patched model with no table: each layer's fallback
            pairs["dense bf16 untuned"] = pairs["dense bf16"]
        if name == "dense" and other is not None:  # the patched model with the table before confirming
            pairs["dense bf16 unconfirmed"] = pairs["dense bf16"]
        with torch.no_grad():
            for decode, tokens in ((True, args.decode), (False, args.prefill)):
                torch._dynamo.reset()
                torch._dynamo.utils.counters.clear()
                tables = {v: untuned if v.endswith("untuned") else tuned for v in pairs}
                if other is not None:
                    tables["dense bf16 unconfirmed"] = other
                found = time_pairs(
                    pairs, tokens, decode, s.hidden, args.rounds, args.reps, args.tol, tables, args.captures
                )
                counters = found.pop()
                rows += found
                reports[f"{name} {'decode' if decode else 'prefill'} dynamo"] = counters
        del pairs
        torch.cuda.empty_cache()
        save({"rows": rows, "patched": {k: repr(v) for k, v in reports.items()}})  # what is done so far
    torch.set_default_device(None)
    return {"rows": rows, "patched": {k: repr(v) for k, v in reports.items()}}


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap)
    ap.add_argument("--phase", choices=("sweep", "bench", "both"), default="both")
    ap.add_argument("--db", type=Path, help="the sweep's database (default OUT/model_step.db)")
    ap.add_argument("--budget", help="sweep: a time budget for the whole sweep (autotune sweep --budget)")
    ap.add_argument("--trials", type=int, default=24, help="sweep: trials a problem (default 24)")
    ap.add_argument("--table", type=Path, help="bench: the table to load (default: the sweep's, else none)")
    ap.add_argument("--models", default="dense,moe", help="dense, moe or both (default)")
    ap.add_argument("--confirm", action="store_true",
                    help="bench: first confirm the table against each patched step (autotune.nn.confirm), "
                         "then time with the confirmed table (OUT/table.confirmed.json)")  # fmt: skip
    ap.add_argument("--unconfirmed", type=Path,
                    help="bench: also the patched dense bf16 model with this table (--confirm: the table it "
                         "confirmed)")  # fmt: skip
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    ap.add_argument("--context", type=int, default=1024, help="cached tokens a decode attends to")
    ap.add_argument("--decode", default=",".join(map(str, DECODE)), help="decode batch sizes")
    ap.add_argument("--prefill", default=",".join(map(str, PREFILL)), help="prefill token counts")
    ap.add_argument("--no-fp8", dest="fp8", action="store_false", help="skip the dense FP8 variant")
    ap.add_argument("--untuned", action="store_true", help="also the patched dense bf16 model with no table")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--reps", type=int, default=20, help="replays a round (default 20)")
    ap.add_argument("--captures", type=int, default=3, help="graphs captured a side (default 3)")
    ap.add_argument("--tol", type=float, default=0.05, help="largest relative error of the patched output")
    args = ap.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.decode = tuple(int(x) for x in args.decode.split(",") if x)
    args.prefill = tuple(int(x) for x in args.prefill.split(",") if x)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db = args.db or out / "model_step.db"
    if args.phase in ("sweep", "both"):
        table = sweep(out, db, args.budget, args.trials, tuple(args.models), args.fp8)
        args.table = args.table or table
    if args.phase == "sweep":
        return 0
    from autotune.core.target import local_target

    confirmed: list[dict[str, Any]] = []
    if args.confirm and args.table:
        from autotune.dispatch import Table

        args.unconfirmed = args.table
        args.table, confirmed = confirm_table(args, Table.load(args.table), out)
    info = harness.run_info(local_target(), layers=args.layers, context=args.context, table=str(args.table))
    result = bench(args, lambda done: harness.write_json(out, "model_step", {"info": info, **done}))
    harness.write_json(out, "model_step", {"info": info, **result, "confirm": confirmed})
    rows = result["rows"]
    print(harness.describe(info))
    harness.print_table(
        ("variant", "phase", "tokens", "unpatched µs", "patched µs", "ratio"),
        [(r["variant"], r["phase"], r["tokens"], r["base_us"], r["ours_us"], r["ratio"]) for r in rows],
        digits=(0, 0, 0, 1, 1, 3),
    )
    summary = []
    for v in dict.fromkeys(r["variant"] for r in rows):
        for phase in ("decode", "prefill"):
            rs = [r["ratio"] for r in rows if r["variant"] == v and r["phase"] == phase]
            if rs:
                summary.append((v, phase, len(rs), harness.geomean(rs), min(rs)))
    harness.print_table(("variant", "phase", "rows", "geomean", "lowest"), summary, digits=(0, 0, 0, 3, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
