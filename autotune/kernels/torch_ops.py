"""The run-time entry points as registered torch ops, namespace "autotune" (`torch.ops.autotune.<name>`).

Each op's folder declares its ops next to its entry point (`TorchOp`: a schema, the implementation, the
fake) and `register`s them when it is imported (with the entry point, or by
`autotune.kernels.register_torch_ops()`), in one
`torch.library.Library` fragment. `torch.compile` then sees one opaque node per call (no graph break, no
config frozen at trace time, no recompile per M: the table is looked up at run time on the real M), and
CUDA/HIP graphs capture the call as it runs.

Rules:
- Schemas are written by hand (torch 2.4 and later take them); a mutated argument is `Tensor(a!)` and an
  op that writes into `out` returns ().
- The implementation is registered for the CPU and CUDA keys (ROCm builds of torch use CUDA's): it holds
  every input check, so bad input is one clear error before any launch, eager or compiled.
- The fake (`torch.library.register_fake`) gives the output's shape and dtype from sizes that may be
  symbolic: it never reads data nor looks a table up, and runs the cheap shape and dtype checks of the
  implementation, so a compiled model fails while it is traced, with the same message.
- A call through `torch.ops.autotune.<name>.default` costs one pass through torch's dispatcher: about
  1.5 µs of host time over a direct call on a 2-core development machine, 3.4 µs on an H100 test
  machine's host (`torch.library.custom_op` costs several times that). So an entry point called eagerly
  on plain tensors runs the implementation directly (`eager`); the dispatcher is for what traces
  (`torch.compile`, fake tensors, dispatch modes).
- The ops have no autograd formula: they serve inference (torch warns where a backward pass goes through
  one).
- An implementation keeps no tensor past a call (a workspace cache) while a CUDA/HIP graph is captured or
  while `torch.compile(mode="reduce-overhead")` warms one up (`graph_pool_warmup`): both allocate from
  the graph's private pool, which must hold nothing it does not track.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "NAMESPACE",
    "TorchOp",
    "eager",
    "explained",
    "graph_pool_warmup",
    "known_zero",
    "register",
    "registered",
]

#: The ops' namespace: `torch.ops.autotune`, "autotune::gemm".
NAMESPACE = "autotune"
# Inductor passes the inputs with the strides they had when traced (what the checks were run on).
_TAGS = (torch.Tag.needs_fixed_stride_order,)
_DISPATCH_KEYS = ("CPU", "CUDA")


@dataclass(frozen=True)
class TorchOp:
    """One op: its `schema` ("name(args) -> returns", without the namespace), the implementation run on
    real tensors and the fake run on fake or meta ones, both with the schema's arguments in its order and
    its defaults (the dispatcher leaves out trailing arguments that equal their default)."""

    schema: str
    impl: Callable[..., Any]
    fake: Callable[..., Any]

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0].strip()

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.name}"


_library: list[torch.library.Library] = []
_registered: dict[str, TorchOp] = {}


def register(*ops: TorchOp) -> tuple[torch._ops.OpOverload, ...]:
    """Defines each op, its implementation for CPU and CUDA and its fake (an op already registered is left
    as it is), and returns their overloads, `torch.ops.autotune.<name>.default`, in order: what an entry
    point calls (held, so that a call does not walk `torch.ops` again).

    Raises:
        ValueError: another op of that name was registered before.
    """
    if not _library:
        _library.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    lib = _library[0]
    for op in ops:
        known = _registered.get(op.name)
        if known is not None:
            if known != op:
                raise ValueError(f"{op.qualname} is registered already, as {known.schema}")
            continue
        lib.define(op.schema, tags=_TAGS)
        for key in _DISPATCH_KEYS:
            lib.impl(op.name, op.impl, key)
        torch.library.register_fake(op.qualname, op.fake, lib=lib)
        _registered[op.name] = op
    namespace = getattr(torch.ops, NAMESPACE)
    return tuple(getattr(namespace, op.name).default for op in ops)


_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))


def eager(a: object, b: object = None) -> bool:
    """Whether an entry point may call its implementation directly, skipping the dispatcher (about 3 µs of
    host time a call on an H100's host): plain tensors `a` (and `b`), not on the meta device, outside
    `torch.compile`'s tracing and with no torch function or dispatch mode active (fake tensors, `make_fx`,
    a proxy mode). What runs
    is the same implementation the op runs; anything else goes through the op."""
    return (
        not torch.compiler.is_compiling()  # first: Dynamo folds it and reads nothing after it
        and type(a) in _PLAIN
        and (b is None or type(b) in _PLAIN)
        and not a.is_meta  # type: ignore[attr-defined]
        and (b is None or not b.is_meta)  # type: ignore[attr-defined]
        and not torch._C._len_torch_dispatch_stack()
        and not torch._C._is_torch_function_mode_enabled()
    )


def registered() -> dict[str, TorchOp]:
    """The ops registered in this process, by name."""
    return dict(_registered)


def known_zero(n: int | torch.SymInt) -> bool:
    """Whether a size is 0: for a symbolic size only where that is known without a guard (an unbacked
    size may still be 0 at run time, where the implementation's check refuses it)."""
    if isinstance(n, int):
        return n == 0
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(n == 0))


def explained(error: Exception, check: Callable[..., object], *args: Any) -> Exception:
    """The error that `check(*args)` raises, else `error`: what an entry point raises where the op refused
    its arguments before any check ran (a list where the schema takes a Tensor), so that the caller gets
    the implementation's clear TypeError or ValueError instead of the schema's RuntimeError."""
    try:
        check(*args)
    except (TypeError, ValueError) as exc:
        return exc
    return error


def graph_pool_warmup(device: torch.device) -> bool:
    """Whether inductor's CUDA graph trees (`torch.compile(mode="reduce-overhead")`) are warming up or
    recording a graph on this thread's current stream of `device`: its allocations then come from the
    graph's private pool, where a tensor kept past the call would be neither tracked nor safe. False where
    torch has not loaded the graph trees; True where their state cannot be read (this torch's internals
    differ: keep nothing)."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None or device.type != "cuda":
        return False
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        container = getattr(trees.local, "tree_manager_containers", {}).get(index)
        manager = None if container is None else container.tree_manager
        return manager is not None and torch.cuda.current_stream(index) == manager.stream
    except Exception:  # this torch's graph trees keep other state
        return True
