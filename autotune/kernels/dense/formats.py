"""The dense GEMM's parts of other projects' files (`autotune.db.formats`): the rows of aiter's bf16 table
of floating-point inputs (bf16, fp16 and fp32), and PyTorch TunableOp's GEMM results (GemmTunableOp, with
its bias and batched variants). Named by the op (`GemmOp.format_modules`) and imported by the database,
never by the op: it imports the database."""

from __future__ import annotations

from autotune.db.aiter_gemm import AiterRows
from autotune.db.tunableop import TunableOpRows
from autotune.kernels.dense.op import GEMM

__all__ = ["FORMATS"]

FORMATS = (
    AiterRows(GEMM.name, ("bf16",), fp8=False),
    TunableOpRows(GEMM.name, ("GemmTunableOp", "GemmAndBiasTunableOp", "GemmStridedBatchedTunableOp")),
)
