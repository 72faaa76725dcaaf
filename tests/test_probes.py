"""The logic of the decode probe scripts that runs without a GPU: the minimal kernel of
`benchmarks/tile_layout.py` (interpreter) and its tile-by-tile weight layout, the stall table of
`benchmarks/profile_stalls.py` and the configs of `benchmarks/config_grid.py --base`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from autotune import Config
from autotune.core.target import interpreting

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

needs_interpreter = pytest.mark.skipif(
    not interpreting(), reason="runs the Triton kernels in the CPU interpreter (TRITON_INTERPRET=1)"
)


def _script(name: str) -> ModuleType:
    """A benchmark script as a module (the scripts import each other by name, from their folder)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_shuffle_stores_each_tile_as_one_contiguous_run() -> None:
    tile_layout = _script("tile_layout")
    w = torch.randint(0, 100, (8, 12), dtype=torch.int32)
    s = tile_layout.shuffle(w, 4, 3)
    assert s.shape == (2, 4, 4, 3) and s.is_contiguous()
    flat = s.reshape(-1)
    for tn in range(2):
        for tk in range(4):
            run = flat[(tn * 4 + tk) * 12 : (tn * 4 + tk + 1) * 12]
            assert torch.equal(run.view(4, 3), w[tn * 4 : tn * 4 + 4, tk * 3 : tk * 3 + 3])


@needs_interpreter
@pytest.mark.parametrize("shuffled", [0, 1])
@pytest.mark.parametrize("split", [1, 2])
def test_minimal_kernel_matches_torch_in_either_layout(shuffled: int, split: int) -> None:
    tile_layout = _script("tile_layout")
    m, n, k, bn, bk = 5, 128, 512, 64, 128
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(m, k, generator=gen) * 0.5).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=gen) * 0.5).to(torch.float8_e4m3fn)
    sa, sw = torch.rand(m, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5
    ref = (a.float() @ w.float().T) * sa[:, None] * sw[None, :]
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    part = torch.full((split, m, n), float("nan"))
    weight = tile_layout.shuffle(w, bn, bk) if shuffled else w
    tile_layout.probe_kernel[(n // bn, split)](
        a,
        weight,
        sa,
        sw,
        c,
        part,
        m,
        n,
        k,
        SHUFFLED=shuffled,
        BLOCK_M=16,
        BLOCK_N=bn,
        BLOCK_K=bk,
        SPLIT_K=split,
    )
    got = c.float() if split == 1 else part.sum(0) * sa[:, None] * sw[None, :]
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err < 2e-2  # NaN fails too


NCU_CSV = """"Kernel Name","gemm_fp8_kernel",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","# Samples"
"0x10","LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]","10","0","10"
"0x20","DEPBAR.LE SB0, 0x6","1,000","800","1,000"
"0x30","WARPGROUP.DEPBAR.LE gsb0, 0x0","600","200","600"
"0x40","EXIT","0","0","0"
"""


def test_stall_table_ranks_lines_by_samples(tmp_path: Path) -> None:
    profile_stalls = _script("profile_stalls")
    path = tmp_path / "k.csv"
    path.write_text(NCU_CSV)
    lines = profile_stalls.top_lines(path, 2)
    assert [sass for _, _, sass in lines] == ["DEPBAR.LE SB0, 0x6", "WARPGROUP.DEPBAR.LE gsb0, 0x0"]
    assert lines[0][0] == pytest.approx(1000 / 1610) and lines[0][1] == pytest.approx(0.8)
    assert profile_stalls.main([str(path), "--top", "1"]) == 0


def test_stall_table_names_a_missing_column(tmp_path: Path) -> None:
    profile_stalls = _script("profile_stalls")
    path = tmp_path / "k.csv"
    path.write_text('"Address","Source","# Samples"\n"0x10","EXIT","1"\n')
    with pytest.raises(ValueError, match="warp stall sampling"):
        profile_stalls.top_lines(path, 3)


def test_grid_configs_start_from_the_base_and_keep_the_default() -> None:
    config_grid = _script("config_grid")
    default = Config(backend="triton", BLOCK_N=64, num_stages=3)
    base = Config(backend="gluon", BLOCK_N=64, num_stages=6)
    got = config_grid.grid_configs(default, base, [{"BLOCK_N": 32}, {"BLOCK_N": 32}, {}])
    assert got["default"] == default
    assert sorted(c.to_dict()["BLOCK_N"] for c in got.values() if c.backend == "gluon") == [32, 64]
    assert len(got) == 3  # the repeated change is timed once
    plain = config_grid.grid_configs(default, None, [{"num_stages": 4}])
    assert [c.backend for c in plain.values()] == ["triton", "triton"]
