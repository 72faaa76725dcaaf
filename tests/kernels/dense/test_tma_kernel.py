"""The tensor-descriptor (TMA) GEMM backend under the interpreter, and its space on each arch."""

from __future__ import annotations

import os

import pytest
import torch

from autotune import Config, Problem, Target
from autotune.kernels import GEMM
from autotune.kernels.common.geometry import tile_parts

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests")

INTERP = Target.interpreter_target()


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    assert torch.isfinite(o).all(), "output has NaN/inf (unwritten?)"
    return float((o - ref.double()).norm() / ref.double().norm())


def _tma(**knobs: int) -> Config:
    """A triton_tma config of small interpreter tiles; `knobs` override the defaults."""
    base = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, PERSISTENT=0, TAIL_SPLIT=0,
                EPILOGUE_N=0, num_warps=4, num_stages=1)  # fmt: skip
    return Config(backend="triton_tma", **{**base, **knobs})


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("persistent", [0, 1])
@pytest.mark.parametrize("split_k", [1, 2, 3])
def test_tma_kernel_matches_reference(layout: str, dtype: str, persistent: int, split_k: int) -> None:
    # 40 x 48 with 16 x 16 tiles: 9 tiles over 4 "CUs" so the persistent loop takes several turns
    problem = Problem.of("gemm", 40, 48, 72, dtype, layout=layout)
    config = _tma(GROUP_M=4, SPLIT_K=split_k, PERSISTENT=persistent)
    if split_k == 1:  # (split-K on 9 tiles is pruned from the 4-CU interpreter space; it must still be right)
        space = GEMM.space(problem, INTERP)
        assert space.check(config) is None, space.check(config)
    inputs = GEMM.make_inputs(problem, "cpu", seed=11)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, GEMM.reference(problem, inputs)) < GEMM.tolerance(problem)


def test_tma_ragged_edges_are_clipped() -> None:
    problem = Problem.of("gemm", 17, 24, 40, "bf16")  # no dimension a multiple of the 16/32 tiles
    inputs = GEMM.make_inputs(problem, "cpu", seed=2)
    config = _tma(BLOCK_M=32, SPLIT_K=2)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, GEMM.reference(problem, inputs)) < GEMM.tolerance(problem)


def test_tma_unaligned_rows_are_pruned_with_a_reason() -> None:
    problem = Problem.of("gemm", 16, 64, 70, "bf16")  # 70 x 2 bytes is not a multiple of 16
    space = GEMM.space(problem, INTERP)
    assert not [c for c in space.configs() if c.backend == "triton_tma"]
    reasons = [r for c, r in space.pruned() if c.backend == "triton_tma"]
    assert reasons and all(r.startswith("tma_alignment") for r in reasons)


def test_tma_backend_only_where_it_exists() -> None:
    assert "triton_tma" in GEMM.backends(Target.for_arch("sm_90"))
    assert "triton_tma" not in GEMM.backends(Target.for_arch("gfx942"))
    assert "triton_tma" not in GEMM.backends(Target.for_arch("gfx950"))
    with pytest.raises(ValueError, match="unknown gemm backend 'triton_tma' on gfx942"):
        GEMM.space(Problem.of("gemm", 64, 64, 64), Target.for_arch("gfx942"), ("triton_tma",))


def test_dispatched_tma_config_runs_through_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.dispatch import Dispatcher, Table
    from autotune.kernels import gemm

    problem = Problem.of("gemm", 32, 48, 64, "fp16", layout="kn")
    config = _tma(BLOCK_K=16, SPLIT_K=2, PERSISTENT=1)
    table = Table.from_winners(INTERP, [(problem, config, 1.0)])
    monkeypatch.setattr(
        "autotune.dispatch.dispatcher._default", Dispatcher([table], device_key=INTERP.device_key())
    )
    a, b = GEMM.make_inputs(problem, "cpu", seed=5)
    b_view = b.t().contiguous().t()  # same values, column-major storage: must be handled, not misread
    out = gemm(a, b_view, b_layout="kn")
    assert _err(out, GEMM.reference(problem, (a, b))) < GEMM.tolerance(problem)


def _tail_config(bm: int = 16, bn: int = 16, bk: int = 32, group_m: int = 1) -> Config:
    return _tma(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, PERSISTENT=1, TAIL_SPLIT=1)


@pytest.mark.parametrize(
    ("shape", "group_m"),
    [
        ((40, 48, 256), 4),  # 9 tiles on 4 CUs: 2 whole waves, the 9th tile split into 4 slices of 2
        ((16, 32, 288), 1),  # 2 tiles, fewer than the CUs: each split in 2, ragged slices (9 steps)
        ((17, 40, 264), 4),  # ragged M, N and K: 2 x 3 tiles, 1 wave + 2 tiles split in 2
        ((16, 16, 400), 1),  # 1 tile, 13 K steps (the last ragged): 3 slices of 5, 5 and 3
    ],
)
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_tail_split_matches_reference_and_repeats_exactly(
    shape: tuple[int, int, int], group_m: int, layout: str
) -> None:
    from autotune.kernels import scratch

    problem = Problem.of("gemm", *shape, "bf16", layout=layout)
    config = _tail_config(group_m=group_m)
    assert GEMM.space(problem, INTERP).check(config) is None
    inputs = GEMM.make_inputs(problem, "cpu", seed=23)
    ref = GEMM.reference(problem, inputs)
    runs = []
    for _ in range(2):  # the second launch relies on the first having reset the per-tile counters
        out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
        GEMM.prepare(problem, config, INTERP, inputs, out)()
        assert _err(out, ref) < GEMM.tolerance(problem)
        runs.append(out)
    assert torch.equal(runs[0], runs[1]), "the slices of a tile must be summed in a fixed order"
    for _ws, counts in scratch._scratch.values():
        if counts.device.type != "meta":  # the compile-only checks record launches on meta tensors
            assert not counts.any(), "a tile counter was left non-zero"


def test_tail_slices_are_summed_not_overwritten() -> None:
    # One tile, K = 512 in 16 steps on 4 programs: 4 slices of 4 steps. A kernel that stored one slice's
    # partial instead of the sum would miss about three quarters of every dot product.
    problem = Problem.of("gemm", 16, 16, 512, "fp16")
    inputs = GEMM.make_inputs(problem, "cpu", seed=3)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, _tail_config(), INTERP, inputs, out)()
    ref = GEMM.reference(problem, inputs)
    assert _err(out, ref) < GEMM.tolerance(problem)
    a, b = inputs
    for part in range(4):
        ks = slice(128 * part, 128 * (part + 1))
        quarter = a[:, ks].float() @ b[:, ks].float().t()
        assert float((out.double() - quarter.double()).norm() / ref.double().norm()) > 0.3


def test_tail_split_schedule() -> None:
    from autotune.kernels.common.geometry import tail_split_schedule

    assert tail_split_schedule(320, 128, 132) == (132, 264, 2)  # 2 whole waves, 56 tiles split in 2
    assert tail_split_schedule(160, 128, 132) == (132, 132, 4)  # 1 whole wave, 28 tiles split in 4
    assert tail_split_schedule(10, 128, 132) == (130, 0, 13)  # no whole wave: 10 tiles in 13 slices
    assert tail_split_schedule(10, 8, 132) == (20, 0, 2)  # slices of at least 4 K steps
    assert tail_split_schedule(96, 64, 132) == (96, 0, 1)  # 96 tiles: no room to split
    assert tail_split_schedule(264, 64, 132) == (132, 264, 1)  # whole waves only


def test_tail_split_space_constraints() -> None:
    h100 = Target.for_arch("sm_90")
    # 4096 x 1280: 320 tiles of 128 x 128 (tail 56: split in 2), 160 of 128 x 256 (tail 28: in 4)
    space = GEMM.space(Problem.of("gemm", 4096, 1280, 8192), h100, ("triton_tma",))
    picked = [c for c in space.configs() if int(c["TAIL_SPLIT"])]
    assert picked and all(int(c["PERSISTENT"]) == 1 and int(c["SPLIT_K"]) == 1 for c in picked)
    assert {(int(c["BLOCK_M"]), int(c["BLOCK_N"])) for c in picked} >= {(128, 128), (128, 256)}
    reasons = {r.split(":")[0] for c, r in space.pruned() if int(c["TAIL_SPLIT"])}
    assert "tail_split_alone" in reasons
    # 4224 x 512 in 128 x 128 tiles: 33 x 4 = 132 tiles, one whole wave: no tail to split
    even = GEMM.space(Problem.of("gemm", 128 * 33, 128 * 4, 4096), h100, ("triton_tma",))
    whole = [
        c
        for c in even.configs()
        if int(c["TAIL_SPLIT"]) and (int(c["BLOCK_M"]), int(c["BLOCK_N"])) == (128, 128)
    ]
    assert not whole
    assert any(r.startswith("tail_split_needless") for c, r in even.pruned())


def test_tma_launcher_copies_inputs_and_c_that_descriptors_cannot_take() -> None:
    """A transposed A, a B 2 bytes past a 16-byte boundary and a transposed C: the launcher runs on dense
    copies (and a dense C it copies back), giving the bits of the dense call."""
    from autotune.kernels.dense.tma import tma_launcher

    config = _tma(BLOCK_K=16)
    run = tma_launcher(config, num_sms=4, interpret=True)
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(32, 20, generator=gen).to(torch.bfloat16)  # K x M: A is its transpose
    b = torch.randn(24 * 32 + 1, generator=gen).to(torch.bfloat16)[1:].view(24, 32)
    assert not a.t().is_contiguous() and b.data_ptr() % 16
    want = torch.empty(20, 24, dtype=torch.bfloat16)
    run(a.t().contiguous(), b.clone(), want, False, 20, 24, 32)
    out = torch.full((24, 20), float("nan"), dtype=torch.bfloat16).t()
    run(a.t(), b, out, False, 20, 24, 32)
    assert torch.equal(out, want) and not torch.isnan(want).any()


@pytest.mark.parametrize(
    ("width", "split_k", "persistent", "layout"),
    [(48, 1, 0, "nk"), (48, 2, 1, "kn"), (112, 1, 1, "nk"), (112, 3, 0, "kn"), (80, 1, 0, "kn")],
)
def test_tile_of_column_parts_matches_reference(
    width: int, split_k: int, persistent: int, layout: str
) -> None:
    # N = 152: the last tile's second and third parts start past N (clipped loads and stores)
    problem = Problem.of("gemm", 33, 152, 96, "bf16", layout=layout)
    config = _tma(BLOCK_N=width, GROUP_M=4, SPLIT_K=split_k, PERSISTENT=persistent)
    inputs = GEMM.make_inputs(problem, "cpu", seed=5)
    ref = GEMM.reference(problem, inputs)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, ref) < GEMM.tolerance(problem)
    # every column written by the part it belongs to: no column left NaN, none of another tile's values
    assert torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2 * float(ref.abs().max()))


def test_tile_parts_of_a_width() -> None:
    assert tile_parts(128) == (128, 0, 0)
    assert tile_parts(96) == (64, 32, 0)
    assert tile_parts(112) == (64, 32, 16)
    assert tile_parts(320) == (256, 64, 0)
    for bad in (0, -64, 8, 24, 120):  # empty, negative, a part under 16, four parts
        with pytest.raises(ValueError, match="powers of two"):
            tile_parts(bad)


def test_tail_split_refuses_a_tile_of_parts() -> None:
    from autotune.kernels.dense.tma import tma_launcher

    config = _tma(BLOCK_N=48, PERSISTENT=1, TAIL_SPLIT=1)
    with pytest.raises(ValueError, match="power-of-two BLOCK_N"):
        tma_launcher(config, num_sms=4, interpret=True)


def test_tma_space_has_tiles_of_parts_and_no_split_tail_for_them() -> None:
    h100 = Target.for_arch("sm_90")
    space = GEMM.space(Problem.of("gemm", 1024, 1280, 8192), h100, ("triton_tma",))
    widths = {int(c["BLOCK_N"]) for c in space.configs()}
    assert {96, 160, 192} <= widths and {64, 128, 256} <= widths
    tails = [c for c in space.configs() if int(c["TAIL_SPLIT"])]
    assert tails and all(tile_parts(int(c["BLOCK_N"]))[1] == 0 for c in tails)
    pruned = space.pruned()
    reasons = {r.split(":")[0] for c, r in pruned if int(c["TAIL_SPLIT"]) and int(c["BLOCK_N"]) == 160}
    assert "tail_split_pow2" in reasons


@pytest.mark.parametrize(
    ("width", "epilogue", "split_k", "persistent", "tail", "layout"),
    [
        (32, 16, 1, 0, 0, "nk"),  # two C stores per tile
        (64, 16, 1, 1, 0, "kn"),  # four
        (48, 16, 1, 0, 0, "nk"),  # parts 32 + 16: the wide part in two stores, the narrow one whole
        (112, 16, 1, 1, 0, "kn"),  # parts 64 + 32 + 16: four, two and one stores
        (32, 16, 2, 0, 0, "nk"),  # split along K: the workspace is written whole, the reduce stores C
        (32, 16, 1, 1, 1, "nk"),  # the split tail: whole waves and the summed tail tiles both sliced
    ],
)
def test_sliced_epilogue_matches_reference(
    width: int, epilogue: int, split_k: int, persistent: int, tail: int, layout: str
) -> None:
    # N = 152: the last tile's slices start past N (clipped stores); 3 x 5 tiles and more on 4 "CUs"
    problem = Problem.of("gemm", 40, 152, 288, "bf16", layout=layout)
    knobs = dict(BLOCK_N=width, GROUP_M=4, SPLIT_K=split_k, PERSISTENT=persistent, TAIL_SPLIT=tail)
    config = _tma(**knobs, EPILOGUE_N=epilogue)
    inputs = GEMM.make_inputs(problem, "cpu", seed=31)
    ref = GEMM.reference(problem, inputs)
    out = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, config, INTERP, inputs, out)()
    assert _err(out, ref) < GEMM.tolerance(problem)
    # each slice lands on its own columns: a swapped or repeated slice would leave whole columns wrong
    col_err = (out.double() - ref.double()).abs().amax(dim=0) / ref.double().abs().amax()
    assert float(col_err.max()) < 2e-2
    whole = GEMM.make_output(problem, "cpu").fill_(float("nan"))
    GEMM.prepare(problem, _tma(**knobs, EPILOGUE_N=0), INTERP, inputs, whole)()
    assert torch.equal(out, whole), "slicing the C store must not change a bit"
