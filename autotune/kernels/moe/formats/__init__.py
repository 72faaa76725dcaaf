"""The fused MoE's parts of other projects' files (`autotune.db.formats`): the config files of vLLM and
SGLang (`vllm_names`, read by `vllm` and `vllm_import`, written by `vllm_export`), aiter's tuned
fused-MoE CSV (`aiter`), vLLM's fallback rule where no file covers a shape (`vllm_rules`), and the MoE's
shape as those files name it (`shape`). Named by the op (`MoeOp.format_modules`) and imported by the
database, never by the op: these modules import the database."""

from __future__ import annotations

from autotune.db.formats import CsvReader, Exporter, Fallback

from .aiter import aiter_trials
from .vllm_export import export_vllm_files
from .vllm_import import VLLM_FILES
from .vllm_rules import fallback_configs

__all__ = ["FORMATS"]

#: What the database takes of these formats: the readers, vLLM's fallback, the exporter.
FORMATS = (
    VLLM_FILES,
    CsvReader("aiter", aiter_trials),
    Fallback("vLLM fallback", fallback_configs),
    Exporter(("vllm", "sglang"), export_vllm_files),
)
