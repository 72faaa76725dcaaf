"""Each backend's version covers exactly the modules it runs: an op's own kernels, the shared library
(`autotune.kernels.common`) it uses, and no other op's modules. So an edit to the dense GEMM's kernel keeps
every stored timing of the other ops, and an edit to a shared module retires those of every backend that
runs it. The edits are simulated: the real `code_hash` over a copy of the files, one of them changed."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

import autotune.kernels
from autotune.core.backend import KERNELS, Backend
from autotune.core.codehash import code_hash, module_files
from autotune.core.target import ARCH_LIMITS, Target
from autotune.kernels import OPS

ROOT = Path(autotune.kernels.__file__).parent
COMMON = ROOT / "common"
OP_PACKAGES = ("dense", "moe", "quant", "mla")
#: The op package of each built-in op.
PACKAGE = {"gemm": "dense", "moe": "moe", "mla_decode": "mla"} | {
    name: "quant" for name in OPS if name.startswith("gemm_") and name != "gemm"
}
#: Shared modules that a backend's kernels run, at the least (a subset: `launch`, `scratch` and others
#: may come too).
USES = {
    ("gemm", "triton"): {"grid", "knobs", "splitk", "tile"},
    ("gemm", "triton_tma"): {"geometry", "grid", "splitk", "tile", "tma"},
    ("gemm", "triton_gemv"): {"gemv", "geometry", "tile"},
    ("moe", "triton"): {"formats", "knobs", "splitk", "tile"},
    ("moe", "torch"): {"formats"},
    ("gemm_fp8_rowwise", "triton"): {"formats", "grid", "knobs", "splitk", "tile"},
    ("gemm_fp8_rowwise", "triton_tma"): {"formats", "grid", "splitk", "tile", "tma"},
    ("gemm_fp8_rowwise", "triton_gemv"): {"formats", "gemv", "geometry", "tile"},
    ("gemm_fp8_blockwise", "gluon"): {"formats", "gluon_hopper"},
    ("gemm_mxfp4", "triton"): {"formats", "grid", "knobs", "splitk", "tile"},
    ("gemm_mxfp8", "torch"): {"formats"},
    ("mla_decode", "triton"): {"tile"},
    ("mla_decode", "gluon"): {"gluon_hopper", "tile"},
}


def _records() -> list[tuple[str, Backend]]:
    """(op name, record) of every backend of the built-in ops that hashes kernel modules, on any arch."""
    out: list[tuple[str, Backend]] = []
    for name, op in OPS.items():
        seen: list[str] = []
        for arch in ARCH_LIMITS:
            seen += [b for b in op.backends(Target.for_arch(arch)) if b not in seen]
        out += [(name, op.backend(b)) for b in seen if op.backend(b).modules]
    return out


RECORDS = _records()
IDS = [f"{name}:{record.name}" for name, record in RECORDS]


@cache
def _files(modules: tuple[str, ...]) -> tuple[Path, ...]:
    return tuple(module_files(*modules, within=KERNELS))


@cache
def _hash(files: tuple[Path, ...]) -> str:
    return code_hash(*files)


EditedHash = Callable[[tuple[Path, ...], Path], str]


@pytest.fixture(scope="module")
def edited_hash(tmp_path_factory: pytest.TempPathFactory) -> EditedHash:
    """`code_hash` of files with one of them (`edited`) replaced by a copy that has one more statement."""
    tmp = tmp_path_factory.mktemp("edited")

    @cache
    def edited_hash(files: tuple[Path, ...], edited: Path) -> str:
        copy = tmp / f"{edited.parent.name}_{edited.name}"
        if not copy.exists():
            shutil.copy(edited, copy)
            with copy.open("a", encoding="utf-8") as f:
                f.write("\n_EDITED = 1\n")
        return code_hash(*(copy if f == edited else f for f in files))

    return edited_hash


def test_every_backend_of_every_op_is_checked() -> None:
    """The records below cover each built-in op, and each op's Triton kernel."""
    assert {name for name, _ in RECORDS} == set(OPS)
    assert {name for name, record in RECORDS if record.name == "triton"} == set(OPS)
    assert set(USES) <= {(name, record.name) for name, record in RECORDS}


@pytest.mark.parametrize(("op", "record"), RECORDS, ids=IDS)
def test_a_backend_hashes_its_own_op_and_the_shared_library_only(op: str, record: Backend) -> None:
    files = _files(record.modules)
    if record.version is None and not record.variant:
        assert record.source_hash() == _hash(files)
    packages = {f.parent.name for f in files if f.parent != ROOT}
    others = packages - {PACKAGE[op], "common"}
    assert not others, f"{op}:{record.name} hashes {sorted(others)}' modules: their edits retire its times"
    shared = {f.stem for f in files if f.parent == COMMON}
    assert USES.get((op, record.name), set()) <= shared


@pytest.mark.parametrize(("op", "record"), RECORDS, ids=IDS)
def test_editing_the_dense_gemm_changes_no_other_op_s_hash(
    op: str, record: Backend, edited_hash: EditedHash
) -> None:
    files = _files(record.modules)
    for module in ("kernel", "tma", "gemv", "space", "api"):
        after = edited_hash(files, ROOT / "dense" / f"{module}.py")
        if PACKAGE[op] != "dense":
            assert after == _hash(files), (
                f"editing dense/{module}.py changes the version of {op}:{record.name}"
            )
    if (op, record.name) == ("gemm", "triton"):
        assert edited_hash(files, ROOT / "dense" / "kernel.py") != _hash(files)


@pytest.mark.parametrize("module", sorted(p.stem for p in COMMON.glob("*.py") if p.stem != "__init__"))
def test_editing_a_shared_module_changes_the_hash_of_every_backend_that_runs_it(
    module: str, edited_hash: EditedHash
) -> None:
    path = COMMON / f"{module}.py"
    users = set()
    for op, record in RECORDS:
        files = _files(record.modules)
        if path in files:  # else the edited copy is not hashed at all
            assert edited_hash(files, path) != _hash(files), (op, record.name)
            users.add((op, record.name))
    expected = {key for key, shared in USES.items() if module in shared}
    assert expected <= users, f"common/{module}.py: {sorted(expected - users)} do not hash it"


def test_kernel_modules_import_the_shared_library_by_module() -> None:
    """`from autotune.kernels.common import name` hides the module from the version (a package's
    re-exports are not followed), so that an edit to it would not retire the times of its users."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "autotune.kernels.common":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders


@pytest.mark.parametrize("package", OP_PACKAGES)
def test_no_op_imports_another(package: str) -> None:
    others = tuple(f"autotune.kernels.{p}" for p in OP_PACKAGES if p != package)
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.startswith(others)]
    assert not found
