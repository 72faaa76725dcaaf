"""Kernels: one module per op, each a TunableOp with a Triton backend and a vendor-library backend.

`gemm`, `linear`, `gemm_quant`, `fused_moe` (with `fused_topk`, its routing) and `mla_decode` are the
run-time entry points a serving process calls; they dispatch through the pinned tables of
`autotune.dispatch`, and a shape no table covers runs the op's `fallback_config` (`served_config` says
which config a call runs). Each is a registered torch op, `torch.ops.autotune.<name>` (`torch_ops`; each
entry point's module registers its ops, so they are defined once this package is imported):
`torch.compile` sees one node a call and looks the table up at run time.
Importing this package pulls in torch but not triton (imported on first launch), sqlalchemy, optuna or
pandas.
"""

from __future__ import annotations

from autotune.core.op import Inputs, Launch, TunableOp
from autotune.core.registry import get_op, register
from autotune.kernels import torch_ops
from autotune.kernels.dense.api import gemm, launch_config, linear
from autotune.kernels.dense.op import GEMM, GemmOp
from autotune.kernels.mla.api import mla_decode
from autotune.kernels.mla.op import MLA_DECODE, MlaDecodeOp
from autotune.kernels.moe.api import fused_moe
from autotune.kernels.moe.op import MOE, MoeOp
from autotune.kernels.moe.routing import fused_topk
from autotune.kernels.quant.api import gemm_quant
from autotune.kernels.quant.op import QUANT_GEMMS, QuantGemmOp
from autotune.kernels.serve import served_config
from autotune.kernels.served import served_launch

__all__ = [
    "GEMM",
    "MLA_DECODE",
    "MOE",
    "OPS",
    "QUANT_GEMMS",
    "GemmOp",
    "Inputs",
    "Launch",
    "MlaDecodeOp",
    "MoeOp",
    "QuantGemmOp",
    "TunableOp",
    "fused_moe",
    "fused_topk",
    "gemm",
    "gemm_quant",
    "get_op",
    "launch_config",
    "linear",
    "mla_decode",
    "served_config",
    "served_launch",
    "torch_ops",
]

#: The built-in tunable ops by name: the dense GEMM, the fused MoE, the quantized GEMMs (gemm_fp8_rowwise,
#: gemm_fp8_blockwise, gemm_mxfp8, gemm_mxfp4, gemm_mxfp4_bf16a) and the MLA decode, each registered
#: (`autotune.core.registry`): what makes an op known to specs, the CLI, the database and tables.
_BUILT_IN: tuple[TunableOp, ...] = (GEMM, MOE, *QUANT_GEMMS.values(), MLA_DECODE)
OPS: dict[str, TunableOp] = {op.name: register(op) for op in _BUILT_IN}
