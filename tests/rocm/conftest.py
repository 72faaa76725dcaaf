"""tests/rocm: this process as a ROCm torch on an MI300X or an MI355X (`fake_rocm`), for every test here
that asks for `rocm` (both GPUs) or `mi300x` / `mi355x` (one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_rocm import GPUS, MI300X, MI355X, FakeGpu, FakeRocm, uninstall_all

from autotune.core.target import interpreting


def _install(gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRocm]:
    if not interpreting():
        pytest.skip("the fake ROCm GPU runs its kernels in Triton's CPU interpreter (TRITON_INTERPRET=1)")
    try:
        yield FakeRocm(gpu).installed(monkeypatch)
    finally:
        uninstall_all()


@pytest.fixture(params=GPUS, ids=[g.key for g in GPUS])
def rocm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRocm]:
    """This process as a ROCm torch on one MI300X, then on one MI355X."""
    yield from _install(request.param, monkeypatch)


@pytest.fixture
def mi300x(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRocm]:
    yield from _install(MI300X, monkeypatch)


@pytest.fixture
def mi355x(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRocm]:
    yield from _install(MI355X, monkeypatch)
