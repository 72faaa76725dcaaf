"""The dense GEMM's "tunableop" backend on the CPU: tuning through a stand-in for `torch.cuda.tunable` that
behaves as PyTorch's does (results per BLAS signature, a results file written as it tunes, validators that
must match to read a file back), the pin a trial stores, the table's pins, the served call, and the
export/import round trip of the files PyTorch reads."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.core.result import Source
from autotune.db import Store, import_files
from autotune.db.tunableop_export import export_tunableop
from autotune.dispatch import Table
from autotune.dispatch.emit import emit_table
from autotune.dispatch.table import TableError
from autotune.kernels.dense import api, tunableop
from autotune.kernels.dense.backends import GEMM_BACKENDS, gemm_space

MI300X_VALIDATORS = {
    "PT_VERSION": "2.9.0",
    "ROCBLAS_VERSION": "4.4.0-1",
    "HIPBLASLT_VERSION": "0.15.0-2",
    "GCN_ARCH_NAME": "gfx942:sramecc+:xnack-",
    "ROCM_VERSION": "6.4.1.0-1",
}


class FakeTunable:
    """`torch.cuda.tunable` as PyTorch's TunableOp behaves where a GEMM goes through it: with tuning on, an
    untuned signature gets `pick` (its line appended to the results file as it is tuned); with tuning off,
    a held signature runs its solution and any other "Default"."""

    def __init__(self, validators: dict[str, str], pick: str = "Gemm_Hipblaslt_1_4242") -> None:
        self.validators = dict(validators)
        self.pick = pick
        self.enabled = False
        self.tuning = True  # PyTorch's default
        self.filename = "tunableop_results.csv"
        self.results: dict[tuple[str, str], tuple[str, float]] = {}
        self.ran: list[tuple[str, bool]] = []  # (solution, through TunableOp) per mm
        self.read: list[str] = []

    # the API the backend calls
    def is_enabled(self) -> bool:
        return self.enabled

    def enable(self, val: bool = True) -> None:
        self.enabled = val

    def tuning_is_enabled(self) -> bool:
        return self.tuning

    def tuning_enable(self, val: bool = True) -> None:
        self.tuning = val

    def get_filename(self) -> str:
        return self.filename

    def set_filename(self, filename: str, insert_device_ordinal: bool = False) -> None:
        self.filename = filename

    def get_results(self) -> list[tuple[str, str, str, float]]:
        return [(op, params, sol, ms) for (op, params), (sol, ms) in self.results.items()]

    def get_validators(self) -> list[tuple[str, str]]:
        return list(self.validators.items())

    def read_file(self, filename: str) -> bool:
        text = Path(filename).read_text()
        self.read.append(text)
        lines = [line.split(",") for line in text.splitlines() if line]
        if {f[1]: f[2] for f in lines if f[0] == "Validator"} != self.validators:
            return False
        for f in lines:
            if f[0] != "Validator":
                self.results[(f[0], f[1])] = (f[2], float(f[3]))
        return True

    # what torch.mm does with TunableOp on
    def mm(self, a: torch.Tensor, bt: torch.Tensor) -> None:
        if not self.enabled:
            self.ran.append(("plain", False))
            return
        names = {torch.bfloat16: "BFloat16", torch.float16: "Half", torch.float32: "float"}
        layout = "T" if bt.stride(0) == 1 else "N"
        op = f"GemmTunableOp_{names[a.dtype]}_{layout}N"
        m, n, k = bt.shape[1], a.shape[0], a.shape[1]
        params = f"{layout.lower()}n_{m}_{n}_{k}_ld_{k}_{k}_{m}"
        if (op, params) not in self.results and self.tuning:
            self.results[(op, params)] = (self.pick, 0.0123)
            with open(self.filename, "a") as f:  # TunableOp appends as it tunes
                f.write(f"{op},{params},{self.pick},0.0123\n")
        self.ran.append((self.results.get((op, params), ("Default", 0.0))[0], True))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTunable]:
    stand_in = FakeTunable(MI300X_VALIDATORS)
    real_mm = torch.mm

    def mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        stand_in.mm(a, b)
        return real_mm(a, b) if out is None else real_mm(a, b, out=out)

    monkeypatch.setattr(torch.cuda, "tunable", stand_in, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "mm", mm)
    tunableop._reset_for_tests()
    yield stand_in
    tunableop._reset_for_tests()


def _inputs(M: int = 16, N: int = 64, K: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(M * N + K)
    return torch.randn(M, K, generator=gen), torch.randn(N, K, generator=gen)


def test_tune_returns_the_pin_and_leaves_tunableop_as_it_was(fake: FakeTunable, tmp_path: Path) -> None:
    a, b = _inputs()
    out = torch.empty(16, 64)
    pin = tunableop.tune(a, b.t(), out)
    assert pin["solution"] == "Gemm_Hipblaslt_1_4242" and pin["op_signature"] == "GemmTunableOp_float_TN"
    assert pin["param_signature"] == "tn_64_16_32_ld_32_32_64" and pin["validators"] == MI300X_VALIDATORS
    torch.testing.assert_close(out, a @ b.t())
    assert not fake.enabled and fake.tuning and fake.filename == "tunableop_results.csv"
    assert fake.ran == [("Gemm_Hipblaslt_1_4242", True)]
    # tuned again (a second input set of the same shape): the same pin, no new result
    assert tunableop.tune(a, b.t(), out) == pin and len(fake.results) == 1


def test_tune_leaves_no_results_file(fake: FakeTunable) -> None:
    a, b = _inputs()
    folders: list[str] = []
    real_set = fake.set_filename

    def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
        folders.append(os.path.dirname(filename))
        real_set(filename, insert_device_ordinal)

    fake.set_filename = set_filename  # type: ignore[method-assign]
    tunableop.tune(a, b.t(), torch.empty(16, 64))
    assert folders[0] and not os.path.exists(folders[0])  # the file it wrote while tuning is gone


def test_tune_without_a_gemm_result_is_an_error(fake: FakeTunable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake, "mm", lambda a, bt: None)  # TunableOp never saw the call
    a, b = _inputs()
    with pytest.raises(tunableop.PinError, match="recorded no GEMM"):
        tunableop.tune(a, b.t(), torch.empty(16, 64))
    assert not fake.enabled


def test_backend_launch_carries_its_pin_and_replays_it(fake: FakeTunable) -> None:
    problem = Problem.of("gemm", 16, 64, 32, "fp32")
    a, b = _inputs()
    out = torch.empty(16, 64)
    target = Target.for_arch("gfx942")
    launch = GEMM_BACKENDS["tunableop"].launch(problem, Config(backend="tunableop"), target, (a, b), out)
    pin = launch.extra["tunableop"]  # type: ignore[attr-defined]
    assert pin["solution"] == "Gemm_Hipblaslt_1_4242" and pin["shape"] == [16, 64, 32, "fp32", "nk"]
    out.fill_(float("nan"))
    launch()
    torch.testing.assert_close(out, a @ b.t())
    assert fake.ran[-1] == ("Gemm_Hipblaslt_1_4242", True) and not fake.enabled


def test_opt_in_backend_of_gpus_only() -> None:
    problem = Problem.of("gemm", 16, 4096, 4096)
    for arch in ("gfx942", "gfx950", "sm_90"):
        target = Target.for_arch(arch)
        assert "tunableop" in GEMM_BACKENDS.names(target)
        assert "tunableop" not in gemm_space(problem, target).backends  # only where a sweep names it
        named = gemm_space(problem, target, ("torch", "tunableop"))
        assert [c.backend for c in named.configs()] == ["torch", "tunableop"]
    assert "tunableop" not in GEMM_BACKENDS.names(Target.interpreter_target())


ROW = [
    "GemmTunableOp_float_TN",
    "tn_64_16_32_ld_32_32_64",
    "Gemm_Hipblaslt_1_7",
    0.01,
    16,
    64,
    32,
    "fp32",
    "nk",
]


def test_install_accepts_pins_of_this_build_only(fake: FakeTunable) -> None:
    other = {**MI300X_VALIDATORS, "HIPBLASLT_VERSION": "0.16.0-9"}
    accepted = tunableop.install(
        [{"validators": other, "results": [ROW]}, {"validators": MI300X_VALIDATORS, "results": [ROW]}], "cpu"
    )
    assert accepted == {(16, 64, 32, "fp32", "nk")}
    assert len(fake.read) == 1 and "Gemm_Hipblaslt_1_7" in fake.read[0] and not fake.tuning
    assert tunableop.install([], "cpu") is accepted  # once per process


def test_served_call_goes_through_tunableop_for_pinned_shapes_only(fake: FakeTunable) -> None:
    tunableop.install([{"validators": MI300X_VALIDATORS, "results": [ROW]}], "cpu")
    a, b = _inputs()
    got = tunableop.mm(a, b.t(), (16, 64, 32, "fp32", "nk"), None)
    torch.testing.assert_close(got, a @ b.t())
    assert fake.ran[-1] == ("Gemm_Hipblaslt_1_7", True) and not fake.enabled
    a2, b2 = _inputs(M=8)
    tunableop.mm(a2, b2.t(), (8, 64, 32, "fp32", "nk"), None)  # no pin: plain torch.mm, TunableOp off
    assert fake.ran[-1] == ("plain", False)


def test_refused_pins_serve_plain_torch_mm(fake: FakeTunable) -> None:
    fake.validators["PT_VERSION"] = "2.10.0"
    assert tunableop.install([{"validators": MI300X_VALIDATORS, "results": [ROW]}], "cpu") == set()
    a, b = _inputs()
    tunableop.mm(a, b.t(), (16, 64, 32, "fp32", "nk"), None)
    assert fake.ran[-1] == ("plain", False)


def test_entry_point_plan_serves_the_tables_pins(fake: FakeTunable, monkeypatch: pytest.MonkeyPatch) -> None:
    row = ["GemmTunableOp_BFloat16_TN", "tn_64_16_32_ld_32_32_64", "Gemm_Hipblaslt_1_7", 0.01, 16, 64, 32]
    table = Table.from_winners(
        Target.for_arch("gfx942"),
        [(Problem.of("gemm", 16, 64, 32), Config(backend="tunableop"), 5.0)],
        pins={"tunableop": [{"validators": MI300X_VALIDATORS, "results": [[*row, "bf16", "nk"]]}]},
    )

    class Installed:
        tables = (table,)

    monkeypatch.setattr(sys.modules["autotune.dispatch"], "default_dispatcher", lambda: Installed())
    plan = api._plan(Config(backend="tunableop"), Target.for_arch("gfx942"))
    assert plan[0] == 3
    a, b = (x.to(torch.bfloat16) for x in _inputs())
    torch.testing.assert_close(api._run(plan, a, b, 16, 64, 32, "nk", None), a @ b.t())
    assert fake.ran[-1] == ("Gemm_Hipblaslt_1_7", True)


def test_table_pins_round_trip_and_bad_pins_are_refused(tmp_path: Path) -> None:
    pins = {"tunableop": [{"validators": MI300X_VALIDATORS, "results": [ROW]}]}
    table = Table.from_winners(
        Target.for_arch("gfx942"),
        [(Problem.of("gemm", 16, 64, 32, "fp32"), Config(backend="tunableop"), 5.0)],
        pins=pins,
    )
    again = Table.from_json(table.to_json())
    assert again.pins == table.pins and again.pins["tunableop"][0]["results"] == [ROW]
    plain = Table.from_winners(
        Target.for_arch("gfx942"), [(Problem.of("gemm", 16, 64, 32), Config(backend="torch"), 5.0)]
    )
    assert "pins" not in plain.to_dict() and Table.from_json(plain.to_json()).pins == {}
    data = json.loads(table.to_json())
    data["pins"] = {"tunableop": [{"validators": {"PT_VERSION": 2}, "results": [ROW]}]}
    with pytest.raises(TableError, match="'validators' must be an object of strings"):
        Table.from_json(json.dumps(data))


def _ok(config: Config, us: float, extra: dict[str, Any] | None = None) -> TrialResult:
    timing = Timing(us, us, us, us, us, 0.0, 10, "events")
    return TrialResult(config, TrialStatus.OK, timing=timing, rel_error=1e-3, extra=extra or {})


def _pin(M: int, N: int, K: int, validators: dict[str, str], solution: str) -> dict[str, Any]:
    return {
        "op_signature": "GemmTunableOp_BFloat16_TN",
        "param_signature": f"tn_{N}_{M}_{K}_ld_{K}_{K}_{N}",
        "solution": solution,
        "ms": 0.02,
        "validators": validators,
        "shape": [M, N, K, "bf16", "nk"],
        "row": [
            "GemmTunableOp_BFloat16_TN",
            f"tn_{N}_{M}_{K}_ld_{K}_{K}_{N}",
            solution,
            0.02,
            M,
            N,
            K,
            "bf16",
            "nk",
        ],
    }


def _swept(store: Store, target: Target, M: int, pinned_us: float, validators: dict[str, str]) -> None:
    p = Problem.of("gemm", M, 4096, 4096)
    store.record(
        target=target,
        kernel="gemm.torch",
        source_hash="v",
        problem=p,
        result=_ok(Config(backend="torch"), 20.0),
    )
    pin = {"tunableop": _pin(M, 4096, 4096, validators, f"Gemm_Hipblaslt_1_{M}")}
    result = _ok(Config(backend="tunableop"), pinned_us, pin)
    store.record(target=target, kernel="gemm.tunableop", source_hash="p", problem=p, result=result)


def test_emit_carries_the_pins_of_the_shapes_it_serves(tmp_path: Path) -> None:
    target = Target.for_arch("gfx942")
    with Store(str(tmp_path / "a.db")) as store:
        _swept(store, target, 16, 15.0, MI300X_VALIDATORS)  # wins by 25%
        _swept(store, target, 64, 19.9, MI300X_VALIDATORS)  # inside the vendor margin: torch.mm serves
        table = emit_table(store)
    assert table.lookup("gemm", 16, 4096, 4096) == Config(backend="tunableop")
    assert table.lookup("gemm", 64, 4096, 4096) == Config(backend="torch")
    (group,) = table.pins["tunableop"]
    assert group["validators"] == MI300X_VALIDATORS
    (row,) = group["results"]  # M = 64 is served by torch.mm: its pin is not carried
    assert [row[2], row[4]] == ["Gemm_Hipblaslt_1_16", 16]


def test_no_pins_where_tunableop_serves_nothing(tmp_path: Path) -> None:
    with Store(str(tmp_path / "a.db")) as store:
        _swept(store, Target.for_arch("gfx942"), 16, 19.95, MI300X_VALIDATORS)
        assert emit_table(store).pins == {}


@pytest.mark.parametrize(
    "arch, validators",
    [("gfx942", MI300X_VALIDATORS), ("sm_90", {"PT_VERSION": "2.11.0"})],  # CUDA builds: no GCN_ARCH_NAME
)
def test_export_then_import_loses_nothing(tmp_path: Path, arch: str, validators: dict[str, str]) -> None:
    target = Target.for_arch(arch)
    with Store(str(tmp_path / "a.db")) as store:
        for M in (1, 16, 256):
            _swept(store, target, M, 10.0 + M / 100, validators)
        (path,) = export_tunableop(store, tmp_path / "out")
    assert path.name == f"tunableop_results_device_name={'_'.join(target.name.split())}.csv"
    text = path.read_text().splitlines()
    assert dict(line.split(",")[1:] for line in text[: len(validators)]) == validators
    with Store(str(tmp_path / "b.db")) as again:
        (file,) = import_files(again, [path])
        assert file.error == "" and file.written == 3
        back = {t.problem.M: t for t in again.trials()}
    assert sorted(back) == [1, 16, 256]
    for M, t in back.items():
        assert t.problem == Problem.of("gemm", M, 4096, 4096) and t.ok and t.source is Source.IMPORTED
        assert t.config == Config(backend="tunableop", solution=f"Gemm_Hipblaslt_1_{M}")
        assert t.time_us == pytest.approx(10.0 + M / 100)
        assert t.extra["validators"] == validators and t.gpu.target.arch == arch
    # and an imported file exports again, line for line
    with Store(str(tmp_path / "b.db")) as again:
        (twice,) = export_tunableop(again, tmp_path / "out2")
    assert twice.read_text() == path.read_text()


def test_export_without_solutions_says_what_to_do(tmp_path: Path) -> None:
    with Store(str(tmp_path / "a.db")) as store:
        store.record(
            target=Target.for_arch("gfx942"), kernel="gemm.torch", source_hash="v",
            problem=Problem.of("gemm", 16, 64, 32), result=_ok(Config(backend="torch"), 5.0),
        )  # fmt: skip
        with pytest.raises(ValueError, match='backends = \\["tunableop"\\]'):
            export_tunableop(store, tmp_path / "out")


def test_a_file_whose_name_and_arch_disagree_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tunableop_results_device_name=NVIDIA_H100_80GB_HBM3.csv"
    path.write_text(
        "\n".join(f"Validator,{k},{v}" for k, v in MI300X_VALIDATORS.items())
        + "\nGemmTunableOp_BFloat16_TN,tn_64_16_32_ld_32_32_64,Default,0.01\n"
    )
    with Store(str(tmp_path / "a.db")) as store:
        (file,) = import_files(store, [path])
    assert "is no gfx942" in file.error and file.written in (0, None)
