"""Launching compiled Triton kernels without Triton's per-call argument binding.

`kernel[grid](*args, **kwargs)` binds every argument, computes its specialization (dtype, 16-byte
alignment, value 1, ...) and hashes the lot on every call: for our kernels' 20-odd parameters that is
most of a launch's host time. `pinned(kernel, **options)` does it once per *launch key* and then calls
the compiled kernel's launcher directly, as Triton's own `run` does after its cache lookup.

The launch key is stricter than Triton's specialization, so that two calls with one key always run the
same binary: integers by value, tensors by dtype, 16-byte alignment of the data pointer and (on ROCm,
where buffer loads specialize on it) whether the storage fits in 2 GiB; tensor descriptors by all their
fields, with their base tensor keyed like a tensor; and the current device. The shortcut is taken only
where the installed Triton's `JITFunction.run` launches the way it does (`RUN_CALL`), so that a Triton
that changes its launcher falls back to its own launch instead of a wrong one. Launch hooks (profilers)
still see every launch. Anything else (an argument of a type not listed, the interpreter, a Recorder)
takes Triton's ordinary launch every time. Triton's own settings (`TRITON_DEBUG` and the like) are read
at a key's first launch. `AUTOTUNE_PINNED_LAUNCH=0` turns the shortcut off.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import Any

import torch

__all__ = ["PINNED_LAUNCH_ENV", "Pinned", "descriptor", "pinned", "pinning", "tensor_key"]

#: The environment variable that turns the shortcut off ("0"); read at every `pinned` call.
PINNED_LAUNCH_ENV = "AUTOTUNE_PINNED_LAUNCH"
#: Launch keys kept per pinned kernel before its cache starts again (every distinct M is a key).
MAX_KEYS = 4096
_HIP = torch.version.hip is not None
_MAX_I32 = 2**31 - 1
_DESC_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
_memo: dict[tuple[Any, ...], Pinned] = {}
#: Marks the keys that `Pinned.launch_keyed` callers give (no `_launch_key` entry is this object).
_KEYED = object()


def pinning() -> str:
    """The current value of $AUTOTUNE_PINNED_LAUNCH ("1" when unset): part of every cache of launchers."""
    return os.environ.get(PINNED_LAUNCH_ENV, "1")


def pinned(fn: Any, **options: Any) -> Pinned:
    """`fn` with `options` (constexprs and compile options such as num_warps) bound, launched as
    `pinned(fn, **options)[grid](*args, **more)`; the result of every launch is that of
    `fn[grid](*args, **options, **more)`. One Pinned per (fn, options), so that launchers built per call
    share their compiled kernels."""
    flag = pinning()
    try:
        # in the order given (a call site gives them in one order); typed, so that True, 1 and 1.0 differ
        key = (fn, flag, *[(k, v, type(v)) for k, v in options.items()])
        found = _memo.get(key)
    except TypeError:  # an unhashable option
        return Pinned(fn, options)
    if found is None:
        found = Pinned(fn, options)
        if found._api is None:
            return found  # launched the plain way: nothing to share
        if len(_memo) >= MAX_KEYS:
            _memo.clear()
        _memo[key] = found
    return found


#: (class, fields) of a host tensor descriptor built and checked, by (dtype, shape, strides, block).
_desc_fields: dict[tuple[Any, ...], tuple[type, dict[str, Any]]] = {}


def descriptor(base: torch.Tensor, shape: list[int], strides: list[int], block: list[int]) -> Any:
    """Triton's host `TensorDescriptor(base, shape, strides, block)`, without re-running its checks.

    The constructor checks ranks, block shape, alignment and strides on every call: µs of host time per
    descriptor, per launch. Those checks depend only on (dtype, shape, strides, block) and on the base's
    16-byte alignment, so after one checked build per key, later descriptors copy that build's fields
    and take their own base, whose alignment is checked here. The copies share `shape`, `strides` and
    `block`: nobody may change them afterwards. The cache keeps no base: a tensor a descriptor was made
    of is freed with its last user (a new M is a new key, and a serving process sees every M)."""
    key = (base.dtype, tuple(shape), tuple(strides), tuple(block))
    found = _desc_fields.get(key)
    if found is None or base.data_ptr() % 16:
        from triton.tools.tensor_descriptor import TensorDescriptor

        made = TensorDescriptor(base, shape, strides, block)  # checks, and raises on bad input
        cls = type(made)
        if is_dataclass(made) and hasattr(made, "__dict__") and cls.__setattr__ is object.__setattr__:
            if len(_desc_fields) >= MAX_KEYS:
                _desc_fields.clear()
            _desc_fields[key] = (cls, {k: v for k, v in vars(made).items() if k != "base"})
        return made
    cls, values = found
    made = object.__new__(cls)
    made.__dict__.update(values)
    made.base = base
    return made


class _Uncacheable(Exception):
    """An argument whose specialization the launch key cannot pin down."""


def tensor_key(x: torch.Tensor) -> tuple[Any, ...]:
    """What Triton specializes a tensor argument on, and more: dtype, 16-byte alignment (and on ROCm
    whether its storage fits in 2 GiB)."""
    ptr = x.data_ptr()
    if _HIP:
        return (x.dtype, ptr % 16 == 0, x.untyped_storage().size() <= _MAX_I32)
    return (x.dtype, ptr % 16 == 0)


def _launch_key(device: int, args: tuple[Any, ...], more: dict[str, Any]) -> tuple[Any, ...]:
    """The launch key: flat, one entry per int, (dtype, aligned[, within 2 GiB]) per tensor. Flat is
    unambiguous because each kind of argument gives entries of its own types (a bool or float is tagged
    with its type, so that True and 1 and 1.0 stay apart)."""
    key: list[Any] = [device]
    add = key.append
    for x in args:
        t = type(x)
        if t is int:
            add(x)
        elif t is torch.Tensor:
            key.extend(tensor_key(x))
        else:
            add(_arg_key(x))
    for name, x in more.items():
        add(name)
        add(_arg_key(x))
    return tuple(key)


def _arg_key(x: Any) -> Any:
    t = type(x)
    if t is int or t is bool or t is float or x is None:
        return (t, x)
    if t is torch.Tensor:
        return tensor_key(x)
    fields_of = _DESC_FIELDS.get(t)
    if fields_of is None and t.__name__ == "TensorDescriptor" and is_dataclass(x):  # Triton's host descriptor
        names = [f.name for f in fields(x)]
        get = attrgetter(*names)
        fields_of = _DESC_FIELDS[t] = get if len(names) > 1 else (lambda d: (get(d),))
    if fields_of is not None:
        parts: list[Any] = [t]
        for v in fields_of(x):  # one C call for all the fields
            tv = type(v)
            if tv is torch.Tensor:
                parts.append(tensor_key(v))
            elif tv is list:
                parts.append(tuple(v))
            else:  # torch.Size, tuples, strings, bools: hashable as they are
                parts.append(v)
        return tuple(parts)
    raise _Uncacheable(t.__name__)


def _is_jit(fn: Any) -> bool:
    """A compiled (not interpreted) Triton JIT function."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    return isinstance(fn, JITFunction)


#: The launch that Triton's `JITFunction.run` makes after its cache lookup, without whitespace: the
#: shortcut makes the same call, so it is taken only where the installed Triton's `run` makes this one.
RUN_CALL = (
    "kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,launch_metadata,"
    "knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,*bound_args.values())"
)
_api: list[tuple[Any, Any] | None] = []


def _launch_api() -> tuple[Any, Any] | None:
    """(triton's runtime knobs, its active driver), or None where this Triton launches otherwise."""
    if not _api:
        _api.append(_find_launch_api())
    return _api[0]


def _find_launch_api() -> tuple[Any, Any] | None:
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction

        knobs.runtime.launch_enter_hook  # noqa: B018 (present from Triton 3.4 on)
        source = inspect.getsource(JITFunction.run)
    except (ImportError, AttributeError, OSError, TypeError):
        return None
    if RUN_CALL not in "".join(source.split()):
        return None
    return knobs, driver


class Pinned:
    """A Triton JIT function with fixed options and a cache of compiled kernels by launch key.

    `api` is (Triton's runtime knobs, its driver) and is found by itself; tests pass stand-ins."""

    def __init__(self, fn: Any, options: dict[str, Any], api: tuple[Any, Any] | None = None) -> None:
        self.fn, self.options = fn, options
        self._cache: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...], tuple[tuple[int, str], ...]]] = {}
        if api is None and _is_jit(fn) and pinning() != "0":
            api = _launch_api()
        self._api = api
        if api is not None:
            sig = inspect.signature(fn.fn)
            self._params = [(name, p.default) for name, p in sig.parameters.items()]
            self._constexpr = {p.name for p in fn.params if p.is_constexpr}

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
        return lambda *args, **more: self.launch(grid, args, more)

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...], more: dict[str, Any]) -> Any:
        """Launches on the current stream; the first call of a launch key goes through Triton's `run`."""
        api = self._api
        if api is None:
            return self.fn[grid](*args, **self.options, **more)
        device = api[1].active.get_current_device()
        try:
            key = _launch_key(device, args, more)
        except _Uncacheable:
            return self.fn[grid](*args, **self.options, **more)
        return self._launch(api, device, key, grid, args, more)

    def launch_keyed(
        self, grid: tuple[int, ...], key: Hashable, args: tuple[Any, ...], more: dict[str, Any]
    ) -> Any:
        """`launch` with a launch key the caller vouches for: with the current device, `key` must tell
        apart every two calls that `_launch_key` tells apart (a launcher that builds its own tensor
        descriptors knows them from a few integers and dtypes, where keying the descriptors costs µs)."""
        api = self._api
        if api is None:
            return self.fn[grid](*args, **self.options, **more)
        device = api[1].active.get_current_device()
        return self._launch(api, device, (device, _KEYED, key), grid, args, more)

    def _launch(
        self, api: tuple[Any, Any], device: int, key: tuple[Any, ...], grid: tuple[int, ...],
        args: tuple[Any, ...], more: dict[str, Any],
    ) -> Any:  # fmt: skip
        entry = self._cache.get(key)
        if entry is None:
            kernel = self.fn[grid](*args, **self.options, **more)
            if kernel is not None:
                self._remember(key, kernel, len(args), more)
            return kernel
        knobs, driver = api
        kernel, tail, runtime_more = entry
        if runtime_more:  # runtime (not constexpr) arguments given by name: their values change per call
            values = list(tail)
            for i, name in runtime_more:
                values[i] = more[name]
            tail = tuple(values)
        full = (*args, *tail)
        stream = driver.active.get_current_stream(device)
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        kernel.run(
            grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata,
            kernel.launch_metadata(grid, stream, *full),
            knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *full,
        )  # fmt: skip
        return kernel

    def _remember(self, key: tuple[Any, ...], kernel: Any, n_args: int, more: dict[str, Any]) -> None:
        if not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata", "launch_metadata")):
            self._api = None  # a Triton whose compiled kernels launch otherwise: always the plain path
            return
        tail: list[Any] = []
        runtime_more: list[tuple[int, str]] = []
        for i, (name, default) in enumerate(self._params[n_args:]):
            if name in more:
                if name in self._constexpr:
                    tail.append(more[name])
                else:  # replaced by each call's value: the cache keeps no argument (no tensor) alive
                    tail.append(None)
                    runtime_more.append((i, name))
            elif name in self.options:
                tail.append(self.options[name])
            elif default is not inspect.Parameter.empty:
                tail.append(default)
            else:
                return  # a parameter given no value: let Triton's binder report it, every time
        if len(self._cache) >= MAX_KEYS:
            self._cache.clear()
        self._cache[key] = (kernel, tuple(tail), tuple(runtime_more))
