"""The quantized GEMMs' backends, one record each, declared per op (`quant_backends`): torch._scaled_mm
and aiter (vendor libraries), the Triton kernel, and where the op has them the Gluon, TMA and GEMV kernels."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from autotune.core.backend import GEMV, LIBRARY, TILED, TILED_TMA, Backend, Backends, Cost
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.kernels.common.geometry import GEMV_ROWS
from autotune.kernels.quant.space import (
    GEMV_OPS,
    GLUON_OPS,
    gemv_subspace,
    gluon_runs,
    gluon_subspace,
    tma_runs,
    tma_subspace,
    triton_subspace,
)

if TYPE_CHECKING:
    import torch

    from autotune.kernels.quant.op import QuantGemmOp

__all__ = ["quant_backends"]

#: The gluon kernel steps K one 128-wide scale group at a time.
GLUON_COST = Cost("tiled", tma=True, block_k=128)
#: The quantized GEMMs of the MX kernel (`quant.mx`).
MX_OPS = ("gemm_mxfp8", "gemm_mxfp4", "gemm_mxfp4_bf16a")


def _modules(*names: str) -> tuple[str, ...]:
    """The quantization formats (`common.formats`) and these modules of `autotune.kernels.quant`."""
    return ("autotune.kernels.common.formats", *(f"autotune.kernels.quant.{n}" for n in names))


def _torch_version(op: str) -> str:
    import torch

    return f"torch {op} {torch.__version__}"


def _aiter_version(op: str) -> str:
    from importlib import metadata

    try:
        version = metadata.version("aiter")
    except metadata.PackageNotFoundError:
        version = "absent"
    return f"aiter {op} {version}"


def _vendor_reason(backend: str, problem: Problem, target: Target) -> str:
    from autotune.kernels.quant.vendor import vendor_reason

    return vendor_reason(backend, problem, target)


def _gluon_reason(problem: Problem, target: Target) -> str:
    from autotune.kernels.quant import space

    return space.gluon_missing()


def _scaled_mm(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.quant.vendor import scaled_mm_launch

    a, b, sa, sb = inputs
    return scaled_mm_launch(problem, a, b, sa, sb, out)


def _aiter(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.quant.vendor import aiter_launch

    a, b, sa, sb = inputs
    return aiter_launch(problem, a, b, sa, sb, out)


def _gluon(
    op: QuantGemmOp, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    return op._gluon_launch(config, target, inputs, out, calls)


def _is_amd(target: Target) -> bool:
    return target.is_amd


def quant_backends(op: QuantGemmOp) -> Backends:
    """The backends of `op`, in the order `op.backends(target)` lists them: torch._scaled_mm (where the
    installed torch runs the op's scaling mode: probed), the Triton kernel (`quant.kernel`, or `quant.mx`
    for the MX formats; `op.native_mx`, where set, is part of its version), aiter on AMD, for
    gemm_fp8_blockwise the Gluon kernel on Hopper (pruned with the reason where Gluon does not import),
    and for the FP8 ops the TMA kernel where tensor descriptors exist and the GEMV kernel (A of at most
    GEMV_ROWS rows)."""
    name = op.name
    vendor = _modules("vendor")
    triton = _modules("kernel", *(["mx"] if name in MX_OPS else []))
    records = [
        Backend(
            "torch",
            _scaled_mm,
            library=True,
            modules=vendor,
            version=partial(_torch_version, name),
            cost=LIBRARY,
            absent=partial(_vendor_reason, "torch"),
        ),
        Backend(
            "triton",
            partial(op._kernel_launch, op._pointer_launcher),
            triton_subspace,
            modules=triton,
            variant="" if op.native_mx is None else f"native={op.native_mx}",
            cost=TILED,
        ),
        Backend(
            "aiter",
            _aiter,
            library=True,
            modules=vendor,
            version=partial(_aiter_version, name),
            cost=LIBRARY,
            runs_on=_is_amd,
            absent=partial(_vendor_reason, "aiter"),
        ),
    ]
    if name in GLUON_OPS:
        gluon = _modules("gluon")
        runs_on = partial(gluon_runs, name)
        records.append(
            Backend(
                "gluon",
                partial(_gluon, op),
                gluon_subspace,
                modules=gluon,
                cost=GLUON_COST,
                runs_on=runs_on,
                absent=_gluon_reason,
            )
        )
    if name.startswith("gemm_fp8"):
        tma = _modules("tma")
        launch = partial(op._kernel_launch, op._tma_launcher)
        runs_on = partial(tma_runs, name)
        records.append(
            Backend("triton_tma", launch, tma_subspace, modules=tma, cost=TILED_TMA, runs_on=runs_on)
        )
    if name in GEMV_OPS:
        launch = partial(op._kernel_launch, op._gemv_launcher)
        gemv = _modules("gemv")
        rows = GEMV_ROWS
        records.append(Backend("triton_gemv", launch, gemv_subspace, modules=gemv, cost=GEMV, max_m=rows))
    return Backends(name, records)
