"""Drop-in modules that run the tuned kernels inside an existing model, and `patch`, which puts them in.

`Linear` serves an `nn.Linear` (bf16/fp16, or FP8 row-wise or blockwise weights quantized once) through
`autotune.kernels.linear` and `gemm_quant`; `FusedMoE` serves a sparse MoE block (router top-k and fused
experts, optional FP8 blockwise weights) through `fused_topk` and `fused_moe`, built from the Mixtral and
Qwen3-MoE blocks of transformers (`autotune.nn.hf`, no transformers import); `patch(model)` swaps them in
place and returns a `PatchReport`; `confirm(step, tokens, table)` checks a table against the model's own
step and serves the ops' fallbacks where the step is slower with it. Importing this package imports
torch (and `autotune.kernels`).
"""

from __future__ import annotations

from autotune.nn.confirm import Confirmation, confirm
from autotune.nn.hf import MOE_BLOCKS, MoeBlockWeights, moe_block_family, read_moe_block
from autotune.nn.linear import LINEAR_WEIGHTS, Linear, LinearWeights
from autotune.nn.moe import FusedMoE, MoeWeights
from autotune.nn.patch import Left, NameFilter, PatchReport, patch
from autotune.nn.quantize import FP8_GROUP, quantize_groups, quantize_rows

__all__ = [
    "FP8_GROUP",
    "LINEAR_WEIGHTS",
    "MOE_BLOCKS",
    "Confirmation",
    "FusedMoE",
    "Left",
    "Linear",
    "LinearWeights",
    "MoeBlockWeights",
    "MoeWeights",
    "NameFilter",
    "PatchReport",
    "confirm",
    "moe_block_family",
    "patch",
    "quantize_groups",
    "quantize_rows",
    "read_moe_block",
]
