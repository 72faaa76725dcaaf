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


def _registered(monkeypatch: pytest.MonkeyPatch, op: ToyGemm) -> ToyGemm:
    """`op` registered for one test (the registry as it was comes back after it)."""
    monkeypatch.setattr(registry, "_ops", dict(registry.ops()))
    registry.register(op)
    return op


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyGemm:
    return _registered(monkeypatch, ToyGemm())


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


class GroupedToy(ToyGemm):
    """A GEMM-shaped op with a parameter of its own, `groups`: its problems, spec field, FLOPs and table
    keys come from its rules alone."""

    name = "toy_grouped"
    params = {"groups": int}  # noqa: RUF012  # the op's own problem parameters

    def problem_flops(self, problem: Problem) -> float:
        return super().problem_flops(problem) * dict(problem.extra)["groups"]


@pytest.fixture
def grouped(monkeypatch: pytest.MonkeyPatch) -> GroupedToy:
    op = GroupedToy()
    _registered(monkeypatch, op)
    return op


def test_an_op_s_own_parameters_reach_specs_the_database_best_and_tables(
    grouped: GroupedToy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.cli import main
    from autotune.core.target import Target
    from autotune.db import Store
    from autotune.dispatch.emit import emit_table
    from autotune.dispatch.table import Table
    from autotune.sweeps import run_sweep
    from autotune.sweeps.spec import SpecError, parse_spec
    from autotune.sweeps.verify import family_of_entry

    p = Problem.of("toy_grouped", 16, 64, 64, groups=3)
    assert p.extra == (("groups", 3),) and p.flops() == 3 * 2 * 16 * 64 * 64
    assert p.key().endswith(":nk:groups=3") and "groups=3" in str(p)
    assert Problem.from_params("toy_grouped", 16, 64, 64, p.params_json()) == p
    bad_params = [({}, "need the parameter"), ({"groups": "3"}, "must be int"), ({"g": 1}, "no param")]
    for bad, message in bad_params:
        with pytest.raises(ValueError, match=message):
            Problem("toy_grouped", 16, 64, 64, extra=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no parameter 'groups'"):
        Problem("gemm", 16, 64, 64, extra={"groups": 3})  # type: ignore[arg-type]

    base = 'name = "g"\n[[sweep]]\nop = "toy_grouped"\nm = [16]\nnk = [[64, 64]]\n'
    with pytest.raises(SpecError, match="needs `groups`"):
        parse_spec(base)
    with pytest.raises(SpecError, match="`groups` belongs to op toy_grouped"):
        parse_spec(base.replace("toy_grouped", "gemm") + "groups = 2\n")
    spec = parse_spec(base + 'groups = [1, 2]\ntrials = 2\nbackends = ["triton"]\nprofile_m = false\n')
    assert [dict(q.extra)["groups"] for _, q in spec.problems()] == [1, 2]
    target = Target.interpreter_target()
    db = str(tmp_path / "g.db")
    with Store(db) as store:
        report = run_sweep(spec, store, target)
        assert len(report.problems) == 2 and all(d.best is not None for d in report.problems)
        (best,) = store.best(spec.problems()[1][1], fingerprint=target.fingerprint(), limit=1)
        assert best.problem == spec.problems()[1][1]
        table = emit_table(store, fingerprint=target.fingerprint())
    argv = ["best", "--op", "toy_grouped", "--m", "16", "--n", "64", "--k", "64", "--db", db]
    assert main([*argv, "--param", "groups=2"]) == 0
    assert "groups=2" in capsys.readouterr().out
    assert main(argv) == 2  # the parameter is missing: one line, exit 2
    assert "need the parameter(s) groups" in capsys.readouterr().err

    path = tmp_path / "t.json"
    table.save(path)
    loaded = Table.load(path)
    ours = sorted((e for e in loaded.entries if e.op == "toy_grouped"), key=lambda e: e.params)
    assert [e.params for e in ours] == ["groups=1", "groups=2"]
    assert family_of_entry(ours[1]) == Problem.of("toy_grouped", 1, 64, 64, groups=2)
    by_groups = {d.problem.params_key: d.best.config for d in report.problems if d.best is not None}
    assert loaded.lookup("toy_grouped", 16, 64, 64, params="groups=2") == by_groups["groups=2"]
    assert loaded.lookup("toy_grouped", 16, 64, 64) is None  # no family without the parameter


def test_an_op_s_own_cost_model_and_label_are_used(
    grouped: GroupedToy, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.cli.tables import problem_label
    from autotune.core.config import Config
    from autotune.core.target import Target
    from autotune.engine.model import predict_us

    p = Problem.of("toy_grouped", 16, 64, 64, groups=2)
    target = Target.for_arch("sm_90")
    with pytest.raises(ValueError, match="unknown gemm backend 'toy_backend'"):
        predict_us(p, Config(backend="toy_backend"), target)  # the dense GEMM's model: records it knows
    monkeypatch.setattr(GroupedToy, "predict_us", lambda self, problem, config, target, features=None: 42.0)
    assert predict_us(p, Config(backend="toy_backend"), target) == 42.0
    assert problem_label(p) == "16x64x64 bf16 nk groups=2"
    assert problem_label(Problem.of("moe", 4, 64, 64, E=8, topk=2)) == "4x64x64 E8 top2 bf16"


def test_an_op_without_rules_of_its_own_tunes_its_spec_entries_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An op that implements the protocol without inheriting `ProblemRules` gets GEMM-shaped rules, and
    its [[sweep]] entries are tuned by the op itself."""
    from autotune.core.problem import GEMM_SHAPED
    from autotune.kernels import GEMM
    from autotune.sweeps.spec import parse_spec

    class Bare:
        name = "toy_bare"

        def __getattr__(self, attr: str) -> object:
            return getattr(GEMM, attr)

    op = Bare()
    monkeypatch.setattr(registry, "_ops", dict(registry.ops()))
    registry.register(op)  # type: ignore[arg-type]
    assert registry.rules_of("toy_bare") is GEMM_SHAPED
    spec = parse_spec('name = "b"\n[[sweep]]\nop = "toy_bare"\nm = [4]\nnk = [[64, 64]]\n')
    ((entry, problem),) = spec.problems()
    assert problem == Problem("toy_bare", 4, 64, 64) and entry.op_for(problem) is op
