"""The op registry: every tunable op by name.

Ops live in plug-in packages that call `register` when imported: `autotune.kernels` holds the built-in
ops (the dense GEMM, the quantized GEMMs, MoE), and another package can add its own through the
`autotune.ops` entry-point group (each entry point names a module to import). The layers below the
kernels (the engine, the database) find an op here by name and never import a kernel module themselves;
the first lookup imports the plug-ins.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING

from autotune.core import problem
from autotune.core.result import VENDOR_BACKEND

if TYPE_CHECKING:
    from autotune.core.backend import Backend
    from autotune.core.op import TunableOp

__all__ = [
    "PLUGINS",
    "backend_of",
    "format_modules",
    "get_op",
    "is_known",
    "is_served",
    "is_vendor",
    "layer_op",
    "load_plugins",
    "ops",
    "register",
    "rules_of",
]

#: Modules imported on the first lookup, before the entry points of the `autotune.ops` group.
PLUGINS: tuple[str, ...] = ("autotune.kernels",)
ENTRY_POINT_GROUP = "autotune.ops"

_ops: dict[str, TunableOp] = {}
_loaded = False
_lock = threading.Lock()


def register(op: TunableOp) -> TunableOp:
    """Makes `op` known by its name (to specs, the CLI, the database, tables and compile-only checks);
    returns it. ValueError if another op has that name."""
    known = _ops.get(op.name)
    if known is not None and known is not op:
        raise ValueError(f"an op called {op.name!r} is registered already ({type(known).__name__})")
    _ops[op.name] = op
    return op


def load_plugins() -> None:
    """Imports the plug-ins (once): `PLUGINS`, then the modules of the `autotune.ops` entry points."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for name in PLUGINS:
            importlib.import_module(name)
        from importlib.metadata import entry_points

        for entry in entry_points(group=ENTRY_POINT_GROUP):
            importlib.import_module(entry.value.split(":", 1)[0])
        _loaded = True


def ops() -> dict[str, TunableOp]:
    """Every registered op by name, in registration order."""
    load_plugins()
    return dict(_ops)


def rules_of(name: str) -> problem.ProblemRules:
    """The problem rules of the op called `name` (`ProblemRules`' defaults for an op that has none of its
    own); ValueError naming the known ops if there is no such op."""
    op = _ops.get(name)
    if op is None:
        op = get_op(name)
    return op if isinstance(op, problem.ProblemRules) else problem.GEMM_SHAPED


def is_known(name: str) -> bool:
    """Whether an op called `name` is registered (the plug-ins are imported first if it is not yet)."""
    if name in _ops:
        return True
    load_plugins()
    return name in _ops


problem.rules_of = rules_of  # a Problem is validated, counted and shown by its op's rules


def layer_op(layer: str) -> str:
    """The name of the op that serves model layer `layer` (`ProblemRules.layer`: "linear", "experts",
    "mla_attention"; the first registered); ValueError naming the layers some op serves otherwise."""
    load_plugins()
    for name, op in _ops.items():
        if getattr(op, "layer", "") == layer:
            return name
    known = sorted({getattr(op, "layer", "") for op in _ops.values()} - {""})
    raise ValueError(f"no op serves {layer!r} layers; served: {', '.join(known)}")


def format_modules() -> tuple[str, ...]:
    """The modules of the registered ops' parts of other projects' file formats (an op's optional
    `format_modules`: the readers of the files that hold its problems, its rows of a table several ops
    share, its exporters), in registration order, each once. Names only: the database imports them
    (`autotune.db.formats`), which the ops' own modules never do."""
    load_plugins()
    return tuple(dict.fromkeys(name for op in _ops.values() for name in getattr(op, "format_modules", ())))


def get_op(name: str) -> TunableOp:
    """The op called `name`; ValueError naming the known ops otherwise."""
    load_plugins()
    try:
        return _ops[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r}; known: {', '.join(_ops)}") from None


def backend_of(op: str, backend: str) -> Backend:
    """The record of backend `backend` of the op called `op` (`TunableOp.backend`); ValueError naming the
    known ops, or the op's known backends, otherwise."""
    found = _ops.get(op)
    return (found if found is not None else get_op(op)).backend(backend)


def is_served(op: str, backend: str) -> bool:
    """Whether the run-time entry point of the op called `op` runs `backend`'s configs (`Backend.served`).
    True for an op not registered here (nothing says otherwise), False for a backend the op does not
    know."""
    found = _ops.get(op)
    if found is None:
        try:
            found = get_op(op)
        except ValueError:
            return True
    try:
        return bool(found.backend(backend).served)
    except ValueError:
        return False


def is_vendor(op: str, backend: str) -> bool:
    """Whether `backend` is the vendor baseline of the op called `op`: its library backend named
    VENDOR_BACKEND, which every winner is compared with and which has nothing to compile."""
    return backend == VENDOR_BACKEND and backend_of(op, backend).library
