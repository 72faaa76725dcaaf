"""tests/fast_interpreter.py: the interpreter the session runs kernels in patches what Triton's own patches,
undoes it after each launch, and computes what Triton's own computes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
interpreter = pytest.importorskip("triton.runtime.interpreter")
fast = pytest.importorskip("fast_interpreter")

pytestmark = pytest.mark.skipif(
    not getattr(interpreter, "_fast", False), reason="the session runs no interpreter, or Triton's own"
)


class Recorder:
    """A `_LangPatchScope` that records the attributes set and sets none."""

    def __init__(self) -> None:
        self.names: list[tuple[int, str]] = []

    def set_attr(self, obj: object, name: str, value: object) -> None:
        self.names.append((id(obj), name))


@pytest.mark.parametrize("pkg", ["language", "core", "tensor", "math", "tensor_descriptor_base"])
def test_the_builtins_found_are_triton_s(pkg: str) -> None:
    obj = {"language": tl, "core": tl.core, "tensor": tl.tensor, "math": tl.math,
           "tensor_descriptor_base": tl.core.tensor_descriptor_base}[pkg]  # fmt: skip
    ours, theirs = Recorder(), Recorder()
    interpreter._patch_builtin(obj, interpreter.interpreter_builder, ours)
    fast.ORIGINAL["_patch_builtin"](obj, interpreter.interpreter_builder, theirs)
    assert ours.names and sorted(ours.names) == sorted(theirs.names)


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _sum_rows(x):
    return tl.sum(x, axis=1)


@triton.jit
def _kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + rows[:, None] * BLOCK + cols[None, :])
    tl.store(out_ptr + rows, _sum_rows(_twice(x)))


def _launch() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(4 * 8 * 8, dtype=torch.float32).reshape(32, 8)
    out = torch.empty(32, dtype=torch.float32)
    _kernel[(4,)](x, out, BLOCK=8)
    return out, (x * 2).sum(1)


def test_a_kernel_with_nested_helpers_computes_what_triton_s_interpreter_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, ref = _launch()
    assert torch.equal(out, ref)
    # the kernel's language module is Triton's own again after the launch: its builtins unpatched (a
    # nested function's patches are never undone, by Triton's interpreter either: tl.sum's of core)
    assert all(tl.core.is_builtin(f) for f in (tl.load, tl.store, tl.arange, tl.program_id))
    # Triton's own interpreter: the same result
    monkeypatch.setattr(interpreter, "_patch_builtin", fast.ORIGINAL["_patch_builtin"])
    monkeypatch.setattr(interpreter, "_patch_lang", fast.ORIGINAL["_patch_lang"])
    monkeypatch.setattr(interpreter.GridExecutor, "__call__", fast.ORIGINAL["grid_call"])
    theirs, _ = _launch()
    assert torch.equal(theirs, out)


def test_nested_calls_patch_once_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fast.ORIGINAL["_patch_lang"]
    calls: list[Any] = []

    def spy(fn: Any) -> Any:
        calls.append(fn.__name__)
        return real(fn)

    monkeypatch.setitem(fast.ORIGINAL, "_patch_lang", spy)
    out, ref = _launch()
    assert torch.equal(out, ref)
    # the launch's own, then tl.sum's once (it sees triton.language.core, the kernel triton.language):
    # none again for the 4 programs' 8 nested calls
    assert calls == ["_kernel", "sum"]
    assert fast._state.depth == 0 and not fast._state.patched
