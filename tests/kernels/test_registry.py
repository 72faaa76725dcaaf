"""An op is a plug-in: one `register` call makes an op known to problems, specs, the sweep, the database
and the tables, with no other file touched (here a GEMM-shaped op under another name, run by the
interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core import registry
from autotune.core.problem import Problem
from autotune.kernels.dense.op import GemmOp


class ToyGemm(GemmOp):
    """The dense GEMM under the name "toy_gemm"."""

    name = "toy_gemm"

    def check_problem(self, problem: Problem) -> None:
        if problem.op != self.name:
            raise ValueError(f"toy_gemm got a {problem.op} problem")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyGemm:
    op = ToyGemm()
    monkeypatch.setattr(registry, "_ops", dict(registry.ops()))
    registry.register(op)
    return op


def test_an_unregistered_op_is_refused_everywhere() -> None:
    from autotune.sweeps.spec import SpecError, parse_spec

    with pytest.raises(ValueError, match="unknown op 'toy_gemm'"):
        Problem("toy_gemm", 1, 64, 64)
    with pytest.raises(ValueError, match="unknown op 'toy_gemm'"):
        registry.get_op("toy_gemm")
    with pytest.raises(SpecError, match="unknown op 'toy_gemm'"):
        parse_spec('name = "t"\n[[sweep]]\nop = "toy_gemm"\nm = [1]\nnk = [[64, 64]]\n')


def test_one_registration_makes_an_op_known_to_specs_sweeps_the_database_and_tables(
    toy: ToyGemm, tmp_path: Path
) -> None:
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.dispatch.emit import emit_table
    from autotune.sweeps import run_sweep
    from autotune.sweeps.spec import parse_spec

    assert registry.get_op("toy_gemm") is toy
    with pytest.raises(ValueError, match="registered already"):
        registry.register(ToyGemm())
    spec = parse_spec(
        'name = "toy"\n[[sweep]]\nop = "toy_gemm"\nm = [16]\nnk = [[64, 64]]\ntrials = 3\n'
        'backends = ["triton"]\nprofile_m = false\n'
    )
    ((entry, problem),) = spec.problems()
    assert problem == Problem("toy_gemm", 16, 64, 64) and entry.op_for(problem) is toy
    target = Target.interpreter_target()
    with Store(str(tmp_path / "toy.db")) as store:
        report = run_sweep(spec, store, target)
        (done,) = report.problems
        assert done.best is not None and done.best.config.backend == "triton"
        (best, *_) = store.best(problem, fingerprint=target.fingerprint())
        assert best.config == done.best.config
        table = emit_table(store, fingerprint=target.fingerprint())
    (entry_,) = [e for e in table.entries if e.op == "toy_gemm"]
    assert (entry_.n, entry_.k) == (64, 64)
    assert table.lookup("toy_gemm", 16, 64, 64) == done.best.config
