"""Specs named by their shipped name (dots and all) in every verb, and the progress `plan` and a sweep's
start-up show on a terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune import Config, Problem, Target
from autotune.cli import main
from autotune.sweeps import load_spec, parse_spec
from autotune.sweeps import spec as spec_module
from autotune.sweeps.estimate import plan, plan_sweep

SPEC = """\
name = "p"

[[sweep]]
op = "gemm"
m = [16, 4096]
nk = [[4096, 4096]]
"""


def test_every_shipped_spec_loads_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    names = spec_module.embedded_specs()
    assert "llama-3.1-70b-mi300x" in names  # a dot: no "suffix" to replace with .toml
    for name in names:
        path = spec_module.EMBEDDED / f"{name}.toml"
        assert load_spec(name).path == str(path)
        assert load_spec(f"{name}.toml").path == str(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "tiny-0.5b", "--no-progress"],
        ["check", "tiny-0.5b", "--target", "gfx942"],
        ["sweep", "tiny-0.5b", "--interpret", "--no-progress"],
        ["verify", "--problems", "tiny-0.5b", "--interpret", "--no-progress"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_verb_finds_a_shipped_spec_whose_name_has_a_dot(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "tiny-0.5b.toml").write_text("colour = 1\n" + SPEC)  # found, then refused for its field
    monkeypatch.setattr(spec_module, "EMBEDDED", shipped)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--db", str(tmp_path / "a.db")] if argv[0] == "sweep" else argv) == 2
    err = capsys.readouterr().err
    assert f"{shipped / 'tiny-0.5b.toml'}: unknown top-level field(s) colour" in err, err
    assert "no such spec file" not in err


def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr passes for a terminal (the progress bars draw only there)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)


def test_plan_shows_its_phases_on_a_terminal_and_says_how_long_it_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text(SPEC)
    _terminal(monkeypatch)
    assert main(["plan", "p.toml", "--target", "gfx942"]) == 0
    out, err = capsys.readouterr()
    assert "loading p.toml [00:00]" in err and "target [" in err and "planning:" in err and "/2 [" in err
    assert out.splitlines()[-1].startswith("planned in ") and out.rstrip().endswith(" s")
    assert main(["plan", "p.toml", "--target", "gfx942", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_plan_off_a_terminal_draws_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text(SPEC)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert main(["plan", "p.toml", "--target", "gfx942"]) == 0
    assert capsys.readouterr().err == ""


def test_a_sweep_start_up_shows_the_spaces_being_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.cli.common import planned_spaces

    _terminal(monkeypatch)
    spec = parse_spec(SPEC)
    planned = planned_spaces(spec, Target.for_arch("gfx942"), disabled=False)
    assert [p for p, _, _ in planned] == [
        Problem.of("gemm", 16, 4096, 4096),
        Problem.of("gemm", 4096, 4096, 4096),
    ]
    assert "search spaces" in capsys.readouterr().err
    planned_spaces(spec, Target.for_arch("gfx942"), disabled=True)
    assert capsys.readouterr().err == ""


def test_planning_tells_each_problem_as_it_is_done() -> None:
    spec = parse_spec(SPEC)
    seen: list[Problem] = []
    rows = plan_sweep(spec, Target.for_arch("gfx942"), compile_only=True, on_problem=seen.append)
    assert seen == [r.problem for r in rows] and len(seen) == 2
    seen.clear()
    assert [p for p, _, _ in plan(spec, Target.for_arch("sm_90"), on_problem=seen.append)] == seen


def test_a_compile_only_problem_tells_its_steps() -> None:
    from autotune.core.static import StaticPolicy
    from autotune.engine.predict import check_problem
    from autotune.kernels import GEMM

    class Checker:  # compiles nothing: every config comes back without features or findings
        target, policy = Target.for_arch("gfx942"), StaticPolicy()

        def prefetch(self, op: object, problem: Problem, configs: list[object]) -> None:
            pass

        def features(self, op: object, problem: Problem, configs: list[object]) -> dict[object, object]:
            return {c: (None, []) for c in configs}

    steps: list[str] = []
    problem = Problem.of("gemm", 64, 4096, 4096)
    check_problem(GEMM, problem, Checker(), candidates=3, keep=2, on_step=steps.append)  # type: ignore[arg-type]
    n = len(GEMM.space(problem, Target.for_arch("gfx942")))
    assert steps == [
        f"ranking {n} configs",
        "compiling 3 configs",
        "compiled 1/3",
        "compiled 2/3",
        "compiled 3/3",
    ]


def test_a_sweep_checks_every_problems_default_at_once_on_its_compile_processes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import random
    from concurrent.futures import Future

    from autotune.cli.common import planned_spaces
    from autotune.core.static import StaticFeatures
    from autotune.engine import verdicts as verdicts_module
    from autotune.engine.verdicts import Verdicts

    gfx942 = Target.for_arch("gfx942")

    class Pool:  # the compile processes: every binary passes, as the rule's pick would be taken unchecked
        target, submitted = gfx942, []

        def submit(self, op: object, problem: Problem, config: Config) -> Future[StaticFeatures]:
            self.submitted.append(problem)
            n = int(config.get("matrix_instr_nonkdim", 16))
            done: Future[StaticFeatures] = Future()
            done.set_result(StaticFeatures(arch="gfx942", occupancy=2, mma=(f"v_mfma_f32_{n}x{n}x16_bf16",)))
            return done

    def never(*_: object) -> StaticFeatures:
        raise AssertionError("every default was checked on the compile processes")

    def per_problem(op: object, problem: Problem, config: Config, target: Target) -> str:
        return f"{problem.key()}/{config.canonical()}"

    fake = Verdicts(None, features_of=never, key_of=per_problem, checkable=lambda t: True)
    monkeypatch.setattr(verdicts_module, "_verdicts", fake)
    monkeypatch.setattr(verdicts_module, "can_check", lambda target: True)
    rng = random.Random(37)
    n, k = 16 * rng.randint(300, 500), 16 * rng.randint(300, 500)  # shapes of this test alone
    spec = parse_spec(SPEC.replace("[[4096, 4096]]", f"[[{n}, {k}]]"))
    pool = Pool()
    planned = planned_spaces(spec, gfx942, disabled=True, compiler=pool)
    assert [p for p, _, _ in planned] == [Problem.of("gemm", 16, n, k), Problem.of("gemm", 4096, n, k)]
    assert sorted(pool.submitted, key=lambda p: p.M) == [p for p, _, _ in planned] and fake.compiled == 2
