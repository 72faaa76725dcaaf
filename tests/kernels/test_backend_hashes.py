"""Every stored result is keyed by its backend's source hash: the records must give the very hashes the
ops computed before backends were records (the formulas below are those of that code), or users'
databases would be orphaned silently. A hash that changes on purpose changes here too."""

from __future__ import annotations

import hashlib
from importlib import metadata

import pytest
import torch

from autotune.core.codehash import module_files, modules_hash
from autotune.kernels import GEMM, MLA_DECODE, MOE, QUANT_GEMMS
from autotune.kernels.moe.op import MoeOp
from autotune.kernels.quant.op import QuantGemmOp


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kernels(*modules: str) -> str:
    return modules_hash(*modules, within="autotune.kernels")


def _quant(*names: str) -> str:
    """The quantization formats (`common.formats`, once `quant.formats`) with these modules of the op."""
    return _kernels("autotune.kernels.common.formats", *(f"autotune.kernels.quant.{n}" for n in names))


def test_the_dense_gemm_s_hashes_are_unchanged() -> None:
    assert GEMM.source_hash("triton") == _kernels("autotune.kernels.dense.kernel")
    assert GEMM.source_hash("triton_tma") == _kernels("autotune.kernels.dense.tma")
    assert GEMM.source_hash("triton_gemv") == _kernels("autotune.kernels.dense.gemv")
    assert GEMM.source_hash("torch") == _sha(f"torch.mm {torch.__version__}")


@pytest.mark.parametrize("name", sorted(QUANT_GEMMS))
def test_the_quantized_gemms_hashes_are_unchanged(name: str) -> None:
    op = QUANT_GEMMS[name]
    mx = ["mx"] if name in ("gemm_mxfp8", "gemm_mxfp4", "gemm_mxfp4_bf16a") else []
    triton = _quant("kernel", *mx)
    assert op.source_hash("triton") == triton
    for native in (True, False):
        assert QuantGemmOp(name, native_mx=native).source_hash("triton") == _sha(f"{triton} native={native}")
    vendor = _quant("vendor")
    assert op.source_hash("torch") == _sha(f"torch {name} {torch.__version__} {vendor}")
    try:
        aiter = metadata.version("aiter")
    except metadata.PackageNotFoundError:
        aiter = "absent"
    assert op.source_hash("aiter") == _sha(f"aiter {name} {aiter} {vendor}")
    fp8 = name.startswith("gemm_fp8")
    kernels = {"triton_tma": (fp8, ("tma",)), "triton_gemv": (fp8, ("gemv",)),
               "gluon": (name == "gemm_fp8_blockwise", ("gluon",))}  # fmt: skip
    for backend, (has, modules) in kernels.items():
        if has:
            assert op.source_hash(backend) == _quant(*modules), backend
        else:
            with pytest.raises(ValueError, match=f"unknown {name} backend '{backend}'"):
                op.source_hash(backend)


def test_the_moe_s_hashes_are_unchanged() -> None:
    triton = _kernels("autotune.kernels.moe.kernel", "autotune.kernels.moe.mx", "autotune.kernels.moe.ref")
    assert MOE.source_hash("triton") == triton
    assert MoeOp(zipf=1.2).source_hash("triton") == _sha(f"{triton} zipf=1.2")
    # the baseline loop's own module (and the reference helpers it imports), with torch's version
    torch_loop = _sha(f"torch {torch.__version__} {_kernels('autotune.kernels.moe.baseline')}")
    assert MOE.source_hash("torch") == torch_loop
    assert MoeOp(zipf=1.2).source_hash("torch") == _sha(f"{torch_loop} zipf=1.2")


def test_the_mla_decode_s_hashes_are_its_kernels_modules() -> None:
    """The Triton kernel's hash is its module's, as before the Gluon kernel came; the Gluon kernel's
    covers its two schedules' modules, the shared Gluon helpers and `mla.kernel` (whose reduce kernel it
    launches)."""
    assert MLA_DECODE.source_hash("triton") == _kernels("autotune.kernels.mla.kernel")
    gluon = _kernels("autotune.kernels.mla.gluon_launch")
    assert MLA_DECODE.source_hash("gluon") == gluon
    files = {f.name for f in module_files("autotune.kernels.mla.gluon_launch", within="autotune.kernels")}
    assert {"gluon_launch.py", "gluon_kernel.py", "gluon_seesaw.py", "kernel.py", "gluon_hopper.py"} <= files
