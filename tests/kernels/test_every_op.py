"""Properties every registered op keeps, parametrized over the registry (a new op is checked as soon as it
is registered): its example problem builds, its heuristic default and its fallback are configs of its own
space on each target it runs on, and the doctor checks it on that problem."""

from __future__ import annotations

import pytest

from autotune import Target
from autotune.cli.doctor_ops import small_problem
from autotune.core.registry import ops, rules_of

TARGETS = [Target.for_arch(arch) for arch in ("gfx942", "gfx950", "sm_90")]
OPS = sorted(ops())


@pytest.mark.parametrize("name", OPS)
def test_its_example_problem_is_its_own(name: str) -> None:
    problem = rules_of(name).example_problem(name)
    assert problem.op == name and problem.M > 0 and problem.flops() > 0
    assert small_problem(name) == problem  # what `autotune doctor` checks


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.arch)
@pytest.mark.parametrize("name", OPS)
def test_its_default_and_fallback_are_in_its_space(name: str, target: Target) -> None:
    op = ops()[name]
    problem = rules_of(name).example_problem(name)
    for config in (op.default_config(problem, target), op.fallback_config(problem, target)):
        record = op.backend(config.backend)
        assert record.runs_on(target), (config, target)
        assert record.check(problem, target, config, search_only=False) is None, config


def test_each_catalog_layer_has_one_op_and_builds_its_problems() -> None:
    from autotune.core.registry import layer_op
    from autotune.sweeps.catalog import EXPERTS, LINEAR, MLA_ATTENTION, Shape

    served = {layer_op(kind): kind for kind in (LINEAR, EXPERTS, MLA_ATTENTION)}
    assert len(served) == 3 and all(rules_of(op).layer == kind for op, kind in served.items())
    experts = Shape("moe.experts", EXPERTS, 768, 2048, 128, 8).problem(16, "bf16", None)
    assert experts.op == layer_op(EXPERTS)
    assert (experts.extra, experts.N, experts.K) == ((("E", 128), ("topk", 8)), 768, 2048)
    linear = Shape("attn.o", LINEAR, 4096, 2048).problem(64, "fp16", None)
    assert (linear.op, linear.M, linear.dtype) == (layer_op(LINEAR), 64, "fp16")
    with pytest.raises(ValueError, match="no op serves 'conv' layers"):
        layer_op("conv")
