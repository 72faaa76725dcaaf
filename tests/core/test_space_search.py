"""The search of a subspace (prefixes pruned as the product is built, counts from subtree sizes) against
a brute force that checks every point of the product against every constraint in order."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

import pytest

from autotune import Config, Problem, Target
from autotune.core import space as space_module
from autotune.core.config import Value
from autotune.core.registry import get_op
from autotune.core.space import Constraint, SearchSpace, SubSpace


@pytest.fixture(autouse=True)
def _count_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test counts its spaces itself, not from those counted earlier in the process."""
    monkeypatch.setattr(space_module, "_COUNTED", {})


def _brute(sub: SubSpace) -> tuple[list[Config], dict[str, int], list[tuple[dict[str, Value], str | None]]]:
    """(valid configs in order, pruned points by the first constraint they break, every point with it)."""
    seen: list[Config] = []
    for config in sub.first:
        if sub.check(config) is None and config not in seen:
            seen.append(config)
    valid, counts = list(seen), {}
    points: list[tuple[dict[str, Value], str | None]] = [(c.to_dict(), None) for c in seen]
    names = list(sub.params)
    for values in itertools.product(*(sub.params[n] for n in names)):
        d: dict[str, Value] = dict(zip(names, values, strict=True))
        d["backend"] = sub.backend
        broken = next((c for c in sub.constraints if not c.allows(d)), None)
        if broken is not None:
            counts[broken.name] = counts.get(broken.name, 0) + 1
            points.append((d, broken.name))
        elif Config(d) not in seen:
            valid.append(Config(d))
            points.append((d, None))
    return valid, counts, points


def _agrees(space: SearchSpace, walk: bool = True) -> None:
    """`space` (built afresh) gives the brute force's configs, order, length and prune counts."""
    expected_counts: dict[str, int] = {}
    expected: list[Config] = []
    for sub in space.subspaces:
        valid, counts, points = _brute(sub)
        fresh = SearchSpace([SubSpace(sub.backend, sub.params, sub.constraints, sub.first)])
        assert len(fresh) == len(valid), sub.backend  # counted before anything is listed
        assert fresh.prune_summary() == counts, sub.backend
        listed = fresh.configs()
        assert list(listed) == valid, sub.backend
        assert [(list(c.items()), c.canonical(), hash(c)) for c in listed] == [
            (list(c.items()), c.canonical(), hash(c)) for c in valid
        ]
        if walk:
            assert [(dict(v), b and b.name) for v, b in sub.walk()] == points, sub.backend
        expected += valid
        for name, n in counts.items():
            expected_counts[name] = expected_counts.get(name, 0) + n
    assert len(space) == len(expected) and list(space.configs()) == expected
    assert space.prune_summary() == expected_counts
    assert sum(expected_counts.values()) + len(space) == space.raw_size()


def _random_subspace(rng: random.Random) -> SubSpace:
    """A small product of knobs and constraints on random subsets of them, some of whose knobs the
    subspace lacks, some constant, some naming no knobs (decided on whole configs)."""
    names = [f"k{i}" for i in range(rng.randint(0, 6))]
    params = {n: tuple(rng.sample(range(1, 9), rng.randint(1, 4))) for n in names}
    constraints = []
    for j in range(rng.randint(0, 7)):
        read = rng.sample(names, min(len(names), rng.randint(0, 3)))
        absent = ["gone"] if rng.random() < 0.2 else []
        salt = rng.randint(0, 10**6)

        def allows(c: Mapping[str, Value], read: list[str] = read, salt: int = salt) -> bool:
            total = salt + sum(int(c[n]) * (7**i) for i, n in enumerate(read)) + int(c.get("gone", 3))
            return total % 3 != 0

        knobs = None if rng.random() < 0.15 else (*read, *absent)
        constraints.append(Constraint(f"c{j % 5}", f"rule {j}", allows, knobs=knobs))
    product = list(itertools.product(*params.values()))
    first = [Config(dict(zip(names, rng.choice(product), strict=True)), backend="b") for _ in range(2)]
    return SubSpace("b", params, constraints, first=first)


@pytest.mark.parametrize("seed", range(300))
def test_random_spaces_agree_with_the_brute_force(seed: int) -> None:
    _agrees(SearchSpace([_random_subspace(random.Random(seed))]))


GFX942, GFX950, SM90 = (Target.for_arch(a) for a in ("gfx942", "gfx950", "sm_90"))
INTERPRETER = Target.for_arch("interpreter")


@pytest.mark.parametrize(
    ("problem", "target"),
    [
        (Problem.of("gemm", 64, 8192, 8192), GFX942),
        (Problem.of("gemm", 1, 1280, 8192), GFX950),
        (Problem.of("gemm", 4096, 1280, 8192), SM90),
        (Problem.of("gemm", 33, 17, 100), INTERPRETER),
        (Problem.of("moe", 16, 2048, 7168, variant="fp8e4m3", E=32, topk=8), GFX942),
        (Problem.of("moe", 4096, 1024, 4096, E=8, topk=2), SM90),
        (Problem.quant("gemm_fp8_rowwise", 16, 4096, 4096), SM90),
        (Problem.quant("gemm_fp8_blockwise", 2048, 4096, 7168), SM90),
        (Problem.quant("gemm_mxfp4_bf16a", 256, 4096, 4096), GFX950),
    ],
    ids=lambda x: x.key() if isinstance(x, Problem) else x.arch,
)
def test_real_spaces_agree_with_the_brute_force(problem: Problem, target: Target) -> None:
    space = get_op(problem.op).space(problem, target)
    if space.raw_size() > 300_000:  # gfx942's 576,000 triton configs: a sixth of them, for time
        space = SearchSpace([_narrowed(s, waves_per_eu=1, kpack=1, NUM_XCDS=1) for s in space.subspaces])
    _agrees(space, walk=space.raw_size() < 100_000)


def _narrowed(sub: SubSpace, **keep: int) -> SubSpace:
    """`sub` with the knobs of `keep` cut to their first that many values (`first` kept where it stays
    in the product)."""
    params = {k: tuple(v)[: keep.get(k, len(v))] for k, v in sub.params.items()}
    first = [c for c in sub.first if all(c[k] in params[k] for k in params)]
    return SubSpace(sub.backend, params, sub.constraints, first)


def test_a_constraint_reading_a_knob_it_does_not_name_is_an_error() -> None:
    sloppy = Constraint("sloppy", "", lambda c: int(c["A"]) + int(c.get("B", 0)) < 5, knobs=("A",))
    sub = SubSpace("b", {"A": (1, 2), "B": (1, 4)}, [sloppy])
    with pytest.raises(ValueError, match=r"constraint 'sloppy' of backend 'b' reads 'B', which its knobs"):
        len(SearchSpace([sub]))
    # a knob the subspace lacks is absent from the config, as in a real one
    assert len(SearchSpace([SubSpace("b", {"A": (1, 2)}, [sloppy])])) == 2


def test_a_constraint_raising_where_no_config_reaches_it_costs_nothing() -> None:
    first = Constraint("small", "", lambda c: int(c["A"]) < 2, knobs=("A",))
    divides = Constraint("divides", "", lambda c: 6 % (int(c["A"]) - 2) == 0, knobs=("A",))
    sub = SubSpace("b", {"A": (1, 2)}, [first, divides])
    assert SearchSpace([sub]).configs() == (Config(backend="b", A=1),)  # A = 2 breaks `small` first
    raising = SubSpace("b", {"A": (2, 1)}, [divides])
    with pytest.raises(ZeroDivisionError):
        SearchSpace([raising]).configs()


def test_counting_lists_nothing() -> None:
    space = get_op("gemm").space(Problem.of("gemm", 128, 8192, 28672), GFX942)
    fresh = SearchSpace([SubSpace(s.backend, s.params, s.constraints, s.first) for s in space.subspaces])
    assert len(fresh) == len(space.configs()) and fresh.prune_summary() == space.prune_summary()
    assert fresh._valid is None and all(s._search().configs is None for s in fresh.subspaces)


def test_subspaces_with_equal_tables_are_counted_once() -> None:
    def fresh(m: int) -> SubSpace:
        s = get_op("gemm").space(Problem.of("gemm", m, 4096, 4096), SM90).subspace("triton")
        return SubSpace(s.backend, s.params, s.constraints, s.first)

    twelve, sixteen = fresh(12), fresh(16)  # one row of tiles of at least 16 rows either way
    assert twelve.size() == sixteen.size()
    assert sixteen._search().counts() is twelve._search().counts()  # counted once
    valid, counts, _ = _brute(sixteen)
    assert sixteen.size() == len(valid) and sixteen.prune_counts() == counts
