"""The pinned launch: which calls reuse a compiled kernel, and what its launcher receives.

Triton's JIT function, compiled kernel, knobs and driver are stand-ins here (no GPU); the GPU test in
tests/kernels/dense/test_gemm_gpu.py checks the real thing against Triton's own launch.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from autotune.kernels import launch as launch_mod
from autotune.kernels.launch import Pinned, pinned


def kernel_fn(a, b, out, M, N, stride, BLOCK: int, EVEN: bool, SCALE=2.0, FLAG: int = 7):
    """The stand-in kernel's signature: BLOCK, EVEN and FLAG are constexprs, SCALE is not."""


class FakeCompiled:
    def __init__(self, serial: int) -> None:
        self.serial, self.function, self.packed_metadata = serial, f"fn{serial}", ("meta", serial)
        self.runs: list[tuple[Any, ...]] = []

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, g0, g1, g2, stream, function, packed, launch_metadata, enter, exit_, *args):
        assert function == self.function and packed == self.packed_metadata
        self.runs.append(((g0, g1, g2), stream, args))


class FakeJit:
    """Compiles (a new FakeCompiled) on every ordinary launch, as if each were a cache miss."""

    def __init__(self) -> None:
        self.fn = kernel_fn
        constexpr = {"BLOCK", "EVEN", "FLAG"}
        self.params = [
            SimpleNamespace(name=n, is_constexpr=n in constexpr) for n in kernel_fn.__code__.co_varnames[:10]
        ]
        self.jit_calls: list[tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []
        self.compiled: list[FakeCompiled] = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.jit_calls.append((tuple(grid), args, kwargs))
            self.compiled.append(FakeCompiled(len(self.compiled)))
            return self.compiled[-1]

        return run


def fake_api(device: int = 0) -> tuple[Any, Any]:
    knobs = SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None))
    active = SimpleNamespace(get_current_device=lambda: device, get_current_stream=lambda dev: 1000 + dev)
    return knobs, SimpleNamespace(active=active)


def tensors(n: int = 3, dtype=torch.float32) -> list[torch.Tensor]:
    return [torch.randn(64, dtype=dtype) for _ in range(n)]


def test_second_launch_skips_the_binder_and_passes_every_parameter_in_order() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "num_warps": 4}, api=fake_api())
    a, b, out = tensors()
    first = k[(5, 2)](a, b, out, 100, 64, 8, EVEN=True)
    assert len(jit.jit_calls) == 1 and jit.jit_calls[0][2] == {"BLOCK": 32, "num_warps": 4, "EVEN": True}
    assert first.runs == []  # the first launch was Triton's own
    second = k[(6,)](a, b, out, 100, 64, 8, EVEN=True)
    assert second is first and len(jit.jit_calls) == 1
    grid, stream, args = first.runs[0]
    assert grid == (6, 1, 1) and stream == 1000
    # positional args, then BLOCK (options), EVEN (by name), SCALE and FLAG (defaults); num_warps is no param
    assert args[:6] == (a, b, out, 100, 64, 8) and args[6:] == (32, True, 2.0, 7)


@pytest.mark.parametrize(
    "change",
    ["int value", "constexpr by name", "dtype", "alignment", "device"],
)
def test_anything_triton_specializes_on_makes_a_new_key(change: str) -> None:
    jit = FakeJit()
    device = [0]
    knobs, driver = fake_api()
    driver.active.get_current_device = lambda: device[0]
    k = Pinned(jit, {"BLOCK": 32}, api=(knobs, driver))
    a, b, out = tensors()
    k[(1,)](a, b, out, 16, 64, 8, EVEN=True)
    k[(1,)](a, b, out, 16, 64, 8, EVEN=True)
    assert len(jit.jit_calls) == 1
    args: list[Any] = [a, b, out, 16, 64, 8]
    more = {"EVEN": True}
    if change == "int value":
        args[3] = 1  # Triton turns an int 1 into a constant
    elif change == "constexpr by name":
        more = {"EVEN": False}
    elif change == "dtype":
        args[0] = a.to(torch.float16)
    elif change == "alignment":
        args[0] = torch.randn(65)[1:]  # 4 bytes past a 16-byte boundary
        assert args[0].data_ptr() % 16
    else:
        device[0] = 1
    k[(1,)](*args, **more)
    assert len(jit.jit_calls) == 2, change


def test_new_tensors_of_the_same_kind_reuse_the_kernel_and_are_passed_through() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    k[(1,)](*tensors(), 16, 64, 8)
    fresh = tensors()
    k[(1,)](*fresh, 16, 64, 8)
    assert len(jit.jit_calls) == 1
    assert all(x is y for x, y in zip(jit.compiled[0].runs[0][2][:3], fresh, strict=True))


def test_runtime_arguments_given_by_name_take_each_call_s_value() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    k[(1,)](*tensors(), 16, 64, 8, SCALE=0.5)
    k[(1,)](*tensors(), 16, 64, 8, SCALE=0.5)
    k[(1,)](*tensors(), 16, 64, 8, SCALE=0.25)  # a float: keyed by value too, so Triton compiles again
    assert len(jit.jit_calls) == 2
    assert jit.compiled[0].runs[0][2][6:] == (32, False, 0.5, 7)


def test_descriptors_are_keyed_by_every_field() -> None:
    from dataclasses import dataclass

    @dataclass
    class TensorDescriptor:  # the fields of triton.tools.tensor_descriptor.TensorDescriptor
        base: Any
        shape: list[int]
        strides: list[int]
        block_shape: list[int]
        padding: str = "zero"

    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    a, b, out = tensors()

    def desc(t: torch.Tensor, block: int) -> TensorDescriptor:
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [block])

    k[(1,)](desc(a, 16), b, out, 16, 64, 8)
    k[(1,)](desc(torch.randn(64), 16), b, out, 16, 64, 8)
    assert len(jit.jit_calls) == 1
    k[(1,)](desc(a, 32), b, out, 16, 64, 8)  # another block shape
    k[(1,)](desc(torch.randn(128), 16), b, out, 16, 64, 8)  # another shape
    assert len(jit.jit_calls) == 3


def test_the_launch_cache_keeps_no_runtime_argument_given_by_name() -> None:
    """A runtime argument given by name (a sliced C's descriptor, a tensor) is each call's own: the
    launch cache keeps a placeholder, not the first call's value (that kept one C tensor per M alive)."""
    import gc
    import weakref

    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    a, b, out = tensors()
    first = torch.randn(64)
    ref = weakref.ref(first)
    k[(1,)](a, b, out, 16, 64, 8, SCALE=first)
    del first
    jit.jit_calls.clear()  # the stand-in's record of Triton's own launch
    gc.collect()
    assert ref() is None
    second = torch.randn(64)
    compiled = k[(1,)](a, b, out, 16, 64, 8, SCALE=second)
    assert not jit.jit_calls and compiled.runs[-1][2][8] is second


def test_arguments_of_unknown_types_always_take_triton_s_launch() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    odd = object()
    for _ in range(3):
        k[(1,)](odd, *tensors(2), 16, 64, 8)
    assert len(jit.jit_calls) == 3 and all(not c.runs for c in jit.compiled)


def test_a_parameter_given_no_value_is_left_to_triton_every_time() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32}, api=fake_api())  # EVEN missing: Triton's binder would complain
    for _ in range(2):
        k[(1,)](*tensors(), 16, 64, 8)
    assert len(jit.jit_calls) == 2


def test_the_cache_starts_again_when_full(monkeypatch) -> None:
    monkeypatch.setattr(launch_mod, "MAX_KEYS", 3)
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    for m in range(5):
        k[(1,)](*tensors(), m + 2, 64, 8)
    assert len(k._cache) <= 3
    k[(1,)](*tensors(), 6, 64, 8)  # the last key is still there
    assert len(jit.jit_calls) == 5


def test_without_triton_s_launch_api_every_launch_is_triton_s(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PINNED_LAUNCH", "0")
    jit = FakeJit()
    k = pinned(jit, BLOCK=32, EVEN=False)  # not a real JIT function either: plain launches
    for _ in range(2):
        k[(1,)](*tensors(), 16, 64, 8)
    assert len(jit.jit_calls) == 2 and k._api is None


class BareJit(FakeJit):
    """A Triton whose compiled kernels have no launcher of the kind the shortcut calls."""

    def __getitem__(self, grid):
        run = super().__getitem__(grid)

        def call(*args, **kwargs):
            run(*args, **kwargs)
            return SimpleNamespace()

        return call


def test_compiled_kernels_without_a_launcher_switch_the_shortcut_off() -> None:
    jit = BareJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    for _ in range(2):
        k[(1,)](*tensors(), 16, 64, 8)
    assert k._api is None and len(jit.jit_calls) == 2


def test_launchers_built_per_call_share_one_pinned_kernel(monkeypatch) -> None:
    monkeypatch.setattr(launch_mod, "_is_jit", lambda fn: True)
    monkeypatch.setattr(launch_mod, "_launch_api", fake_api)
    monkeypatch.setattr(launch_mod, "_memo", {})
    jit = FakeJit()
    first, again = pinned(jit, BLOCK=32, EVEN=False), pinned(jit, BLOCK=32, EVEN=False)
    assert first is again and pinned(jit, BLOCK=64, EVEN=False) is not first
    assert pinned(jit, BLOCK=32, EVEN=0) is not first  # typed: False and 0 are two keys
    first[(1,)](*tensors(), 16, 64, 8)
    again[(1,)](*tensors(), 16, 64, 8)
    assert len(jit.jit_calls) == 1
    monkeypatch.setenv("AUTOTUNE_PINNED_LAUNCH", "0")
    plain = pinned(jit, BLOCK=32, EVEN=False)
    assert plain is not first and plain._api is None


def test_one_true_and_one_point_zero_are_three_keys() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    for value in (1, True, 1.0, 1):
        k[(1,)](*tensors(), value, 64, 8)
    assert len(jit.jit_calls) == 3


def test_the_installed_triton_launches_the_way_the_shortcut_does() -> None:
    """The shortcut repeats the call Triton's JITFunction.run makes after its cache lookup; where a Triton
    release changes that call, this fails (and the shortcut switches itself off there)."""
    pytest.importorskip("triton")
    launch_mod._api.clear()
    assert launch_mod._launch_api() is not None


def test_a_triton_that_launches_otherwise_gets_no_shortcut(monkeypatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setattr(launch_mod, "RUN_CALL", "kernel.launch(grid)")
    monkeypatch.setattr(launch_mod, "_api", [])
    assert launch_mod._launch_api() is None
    monkeypatch.setattr(launch_mod, "_api", [])


def test_keyed_launches_reuse_a_kernel_per_key_and_never_meet_argument_keys() -> None:
    jit = FakeJit()
    k = Pinned(jit, {"BLOCK": 32, "EVEN": False}, api=fake_api())
    a, b, out = tensors()
    k.launch_keyed((1,), ("m", 16), (a, b, out, 16, 64, 8), {})
    fresh = tensors()
    k.launch_keyed((2,), ("m", 16), (*fresh, 16, 64, 8), {})
    assert len(jit.jit_calls) == 1
    grid, _, args = jit.compiled[0].runs[0]
    assert grid == (2, 1, 1) and all(x is y for x, y in zip(args[:3], fresh, strict=True))
    k.launch_keyed((1,), ("m", 17), (a, b, out, 17, 64, 8), {})  # the caller's key tells M apart
    k[(1,)](a, b, out, 16, 64, 8)  # the same call keyed from its arguments: a key of its own
    assert len(jit.jit_calls) == 3


def test_keyed_launches_without_the_shortcut_are_triton_s_every_time(monkeypatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PINNED_LAUNCH", "0")
    jit = FakeJit()
    k = pinned(jit, BLOCK=32, EVEN=False)
    for _ in range(2):
        k.launch_keyed((1,), "same", (*tensors(), 16, 64, 8), {})
    assert len(jit.jit_calls) == 2


def test_descriptors_copied_after_a_checked_build_equal_triton_s_own() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    launch_mod._desc_fields.clear()
    first = torch.randn(64, 32, dtype=torch.bfloat16)
    made = launch_mod.descriptor(first, [64, 32], [32, 1], [16, 32])  # checked by Triton's constructor
    second = torch.randn(64, 32, dtype=torch.bfloat16)
    copied = launch_mod.descriptor(second, [64, 32], [32, 1], [16, 32])
    own = TensorDescriptor(second, [64, 32], [32, 1], [16, 32])
    assert type(copied) is TensorDescriptor and copied == own and copied.base is second
    assert made.base is first and made is not copied


def test_the_descriptor_cache_keeps_no_tensor_alive() -> None:
    """A descriptor per new shape (every M a server sees) must not keep its tensor: the cache once held
    each key's first base, and an M profile ran a worker out of GPU memory."""
    import gc
    import weakref

    pytest.importorskip("triton")
    launch_mod._desc_fields.clear()
    refs = []
    for m in (16, 24, 32):
        x = torch.randn(m, 32, dtype=torch.bfloat16)
        made = launch_mod.descriptor(x, [m, 32], [32, 1], [16, 32])
        again = launch_mod.descriptor(torch.randn(m, 32, dtype=torch.bfloat16), [m, 32], [32, 1], [16, 32])
        assert again.base is not x and again.shape == made.shape
        refs.append(weakref.ref(x))
        del x, made, again
    gc.collect()
    assert len(launch_mod._desc_fields) == 3
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("bad", ["misaligned base", "misaligned stride", "rank", "block"])
def test_descriptors_fail_as_triton_s_own_do_even_after_a_checked_build(bad: str) -> None:
    pytest.importorskip("triton")
    launch_mod._desc_fields.clear()
    launch_mod.descriptor(torch.randn(64, 32), [64, 32], [32, 1], [16, 32])
    base, shape, strides, block = torch.randn(64, 32), [64, 32], [32, 1], [16, 32]
    if bad == "misaligned base":  # the same key as the build above, on a base 4 bytes off
        base = torch.randn(64 * 32 + 1)[1:].view(64, 32)
    elif bad == "misaligned stride":
        base, shape, strides = torch.randn(64, 33), [64, 33], [33, 1]
    elif bad == "rank":
        strides = [32, 1, 1]
    else:
        block = [16, 24]  # not a power of two
    from triton.tools.tensor_descriptor import TensorDescriptor

    with pytest.raises(Exception) as own:
        TensorDescriptor(base, shape, strides, block)
    with pytest.raises(type(own.value)):
        launch_mod.descriptor(base, shape, strides, block)


def test_tma_launches_rekey_on_every_size_and_pass_each_call_s_tensors(monkeypatch) -> None:
    """The TMA launcher keys its launches itself: a new M, N or K or B layout compiles (Triton's launch),
    new tensors of the same sizes reuse the kernel and reach it in new descriptors."""
    pytest.importorskip("triton")
    from autotune import Config
    from autotune.kernels.common import splitk
    from autotune.kernels.dense import tma as gemm_tma

    monkeypatch.setattr(launch_mod, "_is_jit", lambda fn: True)
    monkeypatch.setattr(launch_mod, "_launch_api", fake_api)
    monkeypatch.setattr(launch_mod, "_memo", {})

    class TmaJit(FakeJit):
        def __init__(self, real: Any) -> None:
            super().__init__()
            self.fn = real.fn
            params = inspect.signature(real.fn).parameters.values()  # constexprs by their annotation
            self.params = [SimpleNamespace(name=p.name, is_constexpr="constexpr" in str(p.annotation))
                           for p in params]  # fmt: skip

    jits = [TmaJit(k) for k in (gemm_tma.gemm_tma_kernel, splitk.splitk_reduce_kernel,
                                gemm_tma.gemm_tma_tail_kernel)]  # fmt: skip
    config = Config(backend="triton_tma", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                    PERSISTENT=0, TAIL_SPLIT=0, num_warps=4, num_stages=3)  # fmt: skip
    run = gemm_tma.tma_launcher(config, num_sms=132, kernels=tuple(jits))

    def call(M: int, N: int, K: int, b_kn: bool = False) -> tuple[torch.Tensor, ...]:
        a = torch.randn(M, K, dtype=torch.bfloat16)
        b = torch.randn((K, N) if b_kn else (N, K), dtype=torch.bfloat16)
        out = torch.empty(M, N, dtype=torch.bfloat16)
        run(a, b, out, b_kn, M, N, K)
        return a, b, out

    main = jits[0]
    call(64, 128, 64)
    tensors_now = call(64, 128, 64)
    assert len(main.jit_calls) == 1
    _, _, args = main.compiled[0].runs[0]
    assert [d.base for d in args[:3]] == list(tensors_now)
    assert [d.shape for d in args[:3]] == [[64, 64], [128, 64], [64, 128]]
    for sizes in [(80, 128, 64), (64, 192, 64), (64, 128, 128), (64, 128, 64, True)]:
        call(*sizes)
    assert len(main.jit_calls) == 5
