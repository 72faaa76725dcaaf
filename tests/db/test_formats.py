"""The ops' parts of other projects' file formats (`autotune.db.formats`): found through the modules the
registered ops name, in registration order, a new op's as much as a built-in one's; the exporters by the
format they write; a deployment's fallback (`deployment_configs`) from the ops' `Fallback`s."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from pathlib import Path

import pytest

from autotune.core import registry
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.db.aiter_gemm import AITER_GEMM_KINDS, AiterRows, kind_for_op, op_of
from autotune.db.baselines import deployment_configs
from autotune.db.formats import CsvReader, Export, Exporter, Fallback, JsonReader, exporter, parts
from autotune.db.tunableop import TunableOpRows

H100 = Target.for_arch("sm_90")
TOY_CONFIG = Config(backend="toy", BLOCK=16)


def _toy_fallback(problem: Problem, target: Target, ms: Iterable[int]) -> dict[int, Config]:
    return {m: TOY_CONFIG for m in ms} if problem.op == "gemm" else {}


def _toy_write(
    store: object, out_dir: str | Path, fingerprint: str | None, format: str, **options: object
) -> Export:
    return Export(((Path(out_dir) / f"{format}.txt", "nothing"),), ("a note",))


class ToyOp:
    """Registered for its format parts alone."""

    name = "toy_formats_op"
    format_modules = ("toy_format_parts",)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToyOp:
    """An op whose format module holds a fallback and an exporter, registered for one test."""
    module = types.ModuleType("toy_format_parts")
    module.FORMATS = (Fallback("toy fallback", _toy_fallback), Exporter(("toy",), _toy_write))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toy_format_parts", module)
    monkeypatch.setattr(registry, "_ops", dict(registry.ops()))
    op = ToyOp()
    registry.register(op)  # type: ignore[arg-type]
    return op


def test_the_built_in_ops_bring_their_parts_in_registration_order() -> None:
    assert [r.format for r in parts(JsonReader)] == ["vllm"]
    assert [r.format for r in parts(CsvReader)] == ["aiter"]
    assert [f.source for f in parts(Fallback)] == ["vLLM fallback"]
    assert [e.formats for e in parts(Exporter)] == [("vllm", "sglang")]
    assert [r.op for r in parts(AiterRows)] == ["gemm", "gemm_fp8_rowwise", "gemm_fp8_blockwise"]
    assert [r.op for r in parts(TunableOpRows)] == ["gemm", "gemm_fp8_rowwise"]


def test_aiter_tables_map_to_the_ops_that_claim_their_rows() -> None:
    bf16 = AITER_GEMM_KINDS["bf16"]
    assert (op_of(bf16), op_of(bf16, fp8=True)) == ("gemm", "gemm_fp8_rowwise")
    assert {name: kind.op for name, kind in AITER_GEMM_KINDS.items()} == {
        "bf16": "gemm",
        "a8w8": "gemm_fp8_rowwise",
        "a8w8_blockscale": "gemm_fp8_blockwise",
        "a8w8_bpreshuffle": "gemm_fp8_rowwise",
        "a8w8_blockscale_bpreshuffle": "gemm_fp8_blockwise",
    }
    assert kind_for_op("gemm_fp8_rowwise") is AITER_GEMM_KINDS["a8w8"]  # the unflagged table of its own rows


def test_a_new_ops_parts_are_found_after_the_built_in_ones(toy: ToyOp, tmp_path: Path) -> None:
    assert [f.source for f in parts(Fallback)] == ["vLLM fallback", "toy fallback"]
    assert exporter("vllm").formats == ("vllm", "sglang")
    done = exporter("toy").write(None, tmp_path, None, "toy")
    assert done.paths == [tmp_path / "toy.txt"] and done.notes == ("a note",)
    with pytest.raises(ValueError, match="no exporter writes 'csv'; known: vllm, sglang, toy"):
        exporter("csv")


def test_a_deployment_runs_its_files_else_the_first_fallback_that_covers_the_shape(toy: ToyOp) -> None:
    gemm = Problem.of("gemm", 16, 4096, 4096)
    moe = Problem.of("moe", 16, 1536, 4096, E=128, topk=8)
    imported = {16: Config(backend="triton", BLOCK_SIZE_M=16)}
    assert deployment_configs(imported, gemm, H100, [16]) == (imported, "file")
    assert deployment_configs({}, gemm, H100, [1, 16]) == ({1: TOY_CONFIG, 16: TOY_CONFIG}, "toy fallback")
    found, source = deployment_configs({}, moe, H100, [16])
    assert source == "vLLM fallback" and 16 in found
    assert deployment_configs({}, Problem.of("gemm_fp8_rowwise", 16, 256, 512), H100, [16]) == ({}, "")
