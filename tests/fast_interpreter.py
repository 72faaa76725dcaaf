"""Triton's CPU interpreter without its redundant work, for the test session (tests/conftest.py installs it).

Triton's interpreter (triton/runtime/interpreter.py) swaps `triton.language`'s builtins for interpreter
versions at every launch (`GridExecutor.__call__`: `_patch_lang`, undone when the launch ends), and again
at every call of a nested `@triton.jit` function from inside a kernel (`InterpretedFunction.__call__`):
once a program, so a kernel that calls a few helpers repeats it thousands of times a launch. Each time it
lists every member of `triton.language`, `triton.language.core`, `tensor` and `math` with
`inspect.getmembers` (which sorts them) to find the builtins. Nothing is found the second time (the
builtins are already swapped for lambdas, which are no builtins) and the rest is set again to functions
that do the same, so the repeats change nothing: on the suite's interpreted kernels they are about a
quarter of the interpreter's time (test_moe_kernel.py: 45 CPU-s without them, 32 with).

`install()` keeps the interpreter's behaviour and drops the repeats:

- `_patch_builtin` scans with `dir()` and `getattr` (what `inspect.getmembers` does, without building
  and sorting its list): the same builtins, swapped the same way;
- a nested call's `_patch_lang` is skipped where the launch running on this thread has already patched
  every language module that the nested function sees (`triton.language`, `triton.language.core`) and
  they are patched still; elsewhere (a helper that sees another of them, a call outside a launch, a
  language another thread's launch has restored meanwhile) it runs as before.

`tests/core/test_fast_interpreter.py` checks both against Triton's own functions. Where the installed
Triton lacks what is replaced, `install()` changes nothing.
"""

from __future__ import annotations

import threading
from typing import Any

_state = threading.local()  # per thread: the launches running (depth) and the modules they patched
#: What `install()` replaced: name -> Triton's own.
ORIGINAL: dict[str, Any] = {}


def _lang_modules(fn: Any, tl: Any) -> frozenset[int]:
    """The language modules that `fn` sees (what `_patch_lang` patches for it), by id."""
    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def install() -> bool:
    """Installs the two changes (module docstring); False where this Triton has not what they replace."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    needed = ("_patch_builtin", "_patch_attr", "_patch_lang", "_LangPatchScope", "GridExecutor")
    if not all(hasattr(interpreter, name) for name in needed) or getattr(interpreter, "_fast", False):
        return False
    is_builtin = tl.core.is_builtin
    patch_attr = interpreter._patch_attr
    ORIGINAL.update(
        _patch_builtin=interpreter._patch_builtin,
        _patch_lang=interpreter._patch_lang,
        grid_call=interpreter.GridExecutor.__call__,
    )

    def _patch_builtin(pkg: Any, builder: Any, scope: Any) -> None:
        for name in dir(pkg):
            try:
                member = getattr(pkg, name)
            except AttributeError:
                continue
            if is_builtin(member):
                patch_attr(pkg, name, member, builder, scope)

    by_id = {id(tl): tl, id(tl.core): tl.core}

    def _patch_lang(fn: Any) -> Any:
        langs = _lang_modules(fn, tl)
        nested = getattr(_state, "depth", 0) and langs <= _state.patched
        # patched still: no other thread's launch has undone it meanwhile
        if nested and not any(is_builtin(by_id[lang].load) for lang in langs):
            return interpreter._LangPatchScope()  # a nested call: already patched, nothing to undo
        scope = ORIGINAL["_patch_lang"](fn)
        if getattr(_state, "depth", 0):
            _state.patched = _state.patched | langs
        return scope

    def grid_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_state, "depth", 0)
        if depth == 0:
            _state.patched = frozenset()
        _state.depth = depth + 1
        try:
            return ORIGINAL["grid_call"](self, *args, **kwargs)
        finally:
            _state.depth = depth
            if depth == 0:
                _state.patched = frozenset()

    interpreter._patch_builtin = _patch_builtin
    interpreter._patch_lang = _patch_lang
    interpreter.GridExecutor.__call__ = grid_call
    interpreter._fast = True
    return True
