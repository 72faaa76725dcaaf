"""Kernels: one module per op, each a TunableOp with a Triton backend and a vendor-library backend.

`gemm`, `linear`, `gemm_quant`, `fused_moe` (with `fused_topk`, its routing) and `mla_decode` are the
run-time entry points a serving process calls; they dispatch through the pinned tables of
`autotune.dispatch`, and a shape no table covers runs the op's `fallback_config` (`served_config` says
which config a call runs). Each is a registered torch op, `torch.ops.autotune.<name>` (`torch_ops`),
defined when its entry point's module is first imported (an entry point named here imports it;
`register_torch_ops()` imports them all, for a process that calls `torch.ops.autotune` first):
`torch.compile` sees one node a call and looks the table up at run time. `LINEAR_WEIGHTS`, `FP8_BLOCK` and
`quantize_fp8_weight_blockwise` are what the drop-in modules (`autotune.nn`) need of the ops besides.

Importing this package registers the ops with `autotune.core.registry` and imports nothing heavy: torch
comes with the first entry point (or anything else that launches), triton with the first launch, and
never sqlalchemy, optuna or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.core.op import Inputs, Launch, TunableOp
from autotune.core.registry import get_op, register
from autotune.kernels.dense.op import GEMM, GemmOp
from autotune.kernels.mla.op import MLA_DECODE, MlaDecodeOp
from autotune.kernels.moe.op import MOE, MoeOp
from autotune.kernels.quant.op import QUANT_GEMMS, QuantGemmOp
from autotune.kernels.quant.problem import LINEAR_WEIGHTS

if TYPE_CHECKING:
    from autotune.kernels import torch_ops
    from autotune.kernels.dense.api import gemm, launch_config, linear
    from autotune.kernels.mla.api import mla_decode
    from autotune.kernels.moe.api import fused_moe
    from autotune.kernels.moe.ref import FP8_BLOCK, quantize_fp8_weight_blockwise
    from autotune.kernels.moe.routing import fused_topk
    from autotune.kernels.quant.api import gemm_quant
    from autotune.kernels.serve import served_config
    from autotune.kernels.served import served_launch

__all__ = [
    "FP8_BLOCK",
    "GEMM",
    "LINEAR_WEIGHTS",
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
    "quantize_fp8_weight_blockwise",
    "register_torch_ops",
    "served_config",
    "served_launch",
    "torch_ops",
]

#: The built-in tunable ops by name: the dense GEMM, the fused MoE, the quantized GEMMs (`QUANT_GEMMS`) and
#: the MLA decode, each registered (`autotune.core.registry`): what makes an op known to specs, the CLI,
#: the database and tables. A new op adds itself here (one entry).
_BUILT_IN: tuple[TunableOp, ...] = (GEMM, MOE, *QUANT_GEMMS.values(), MLA_DECODE)
OPS: dict[str, TunableOp] = {op.name: register(op) for op in _BUILT_IN}


#: The entry points and run-time helpers, by name: imported on first use (they bring torch).
_LAZY = {
    "gemm": "autotune.kernels.dense.api",
    "launch_config": "autotune.kernels.dense.api",
    "linear": "autotune.kernels.dense.api",
    "gemm_quant": "autotune.kernels.quant.api",
    "fused_moe": "autotune.kernels.moe.api",
    "fused_topk": "autotune.kernels.moe.routing",
    "FP8_BLOCK": "autotune.kernels.moe.ref",
    "quantize_fp8_weight_blockwise": "autotune.kernels.moe.ref",
    "mla_decode": "autotune.kernels.mla.api",
    "served_config": "autotune.kernels.serve",
    "served_launch": "autotune.kernels.served",
}
#: The modules that register the ops' torch ops (`torch.ops.autotune.<name>`).
_ENTRY_MODULES = ("autotune.kernels.dense.api", "autotune.kernels.quant.api", "autotune.kernels.moe.api",
                  "autotune.kernels.mla.api")  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "torch_ops":
        return importlib.import_module("autotune.kernels.torch_ops")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register_torch_ops() -> None:
    """Defines every op's torch ops (`torch.ops.autotune.<name>`) now: what a process needs that calls
    them through `torch.ops` (a loaded `torch.export` program, say) before any entry point."""
    for module in _ENTRY_MODULES:
        importlib.import_module(module)
