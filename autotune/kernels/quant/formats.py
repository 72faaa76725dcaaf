"""The quantized GEMMs' parts of other projects' files (`autotune.db.formats`): aiter's FP8 GEMM tables, a8w8
(FP8 per-token and per-channel scales) → gemm_fp8_rowwise and blockscale (1x128 scales of A, 128x128 of
B) → gemm_fp8_blockwise, their bpreshuffle tables the same (flagged), and the FP8 rows of aiter's bf16
table (hipBLASLt with scalar scales) → gemm_fp8_rowwise, whose per-tensor case they are; PyTorch
TunableOp's ScaledGemmTunableOp results → gemm_fp8_rowwise. Named by the ops
(`QuantGemmOp.format_modules`) and imported by the database, never by the ops: it imports the database."""

from __future__ import annotations

from autotune.db.aiter_gemm import AiterRows
from autotune.db.tunableop import TunableOpRows

__all__ = ["FORMATS"]

_ROWWISE, _BLOCKWISE = "gemm_fp8_rowwise", "gemm_fp8_blockwise"

FORMATS = (
    AiterRows(_ROWWISE, ("a8w8", "a8w8_bpreshuffle", "bf16"), fp8=True),
    AiterRows(_BLOCKWISE, ("a8w8_blockscale", "a8w8_blockscale_bpreshuffle"), fp8=True),
    TunableOpRows(_ROWWISE, ("ScaledGemmTunableOp",)),
)
