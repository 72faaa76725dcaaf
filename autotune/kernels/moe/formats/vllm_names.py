"""The names of vLLM's and SGLang's fused-MoE config files, and what a name says about the weights.

``E={E},N={N},device_name={device}[,dtype={dtype}][,block_shape=[{bn}, {bk}]][,per_channel_quant=True]
[_down].json``: vLLM writes the block shape without a space and calls every H200 ``NVIDIA_H200``; SGLang
writes Python's ``str`` of the list and the device name as it is, and adds ``per_channel_quant=True`` and
``_down`` (the configs of the second GEMM, the down projection). Every spelling is read.

A name is *runnable* when our moe op can run its configs as they are meant: the first GEMM's configs of
unquantized weights (no dtype) or of FP8 weights with [128, 128] block scales. Every other name is a
*variant*: its configs are kept as reference records under the kernel ``moe.triton:{variant}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.db.foreign import InteropError, device_name_of

from .shape import experts
from .vllm_rules import FP8_BLOCK_SHAPE

__all__ = ["FLAVORS", "FP8_BLOCK_SHAPE", "VLLM_KERNEL", "VllmFileName"]

#: File-name flavours that are written.
FLAVORS: tuple[str, ...] = ("vllm", "sglang")
#: The kernel name runnable configs are stored under (our Triton fused MoE takes vLLM's names).
VLLM_KERNEL = "moe.triton"

_FP8_DTYPE = "fp8_w8a8"
_UNQUANTIZED = ("bf16", "fp16")
#: Our weight dtype of each quantized file dtype our Problem can name ("" where it can name none).
_WEIGHTS: dict[str, str] = {"fp8_w8a8": "fp8e4m3", "int8_w8a8": "", "int8_w8a16": "", "int4_w4a16": ""}
_NAME_RE = re.compile(
    r"E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<device>[^,]+?)"
    r"(?:,dtype=(?P<dtype>[^,]+?))?(?:,block_shape=\[(?P<bn>\d+), ?(?P<bk>\d+)\])?"
    r"(?P<pcq>,per_channel_quant=True)?(?P<down>_down)?\.json"
)


@dataclass(frozen=True)
class VllmFileName:
    """The parts of a vLLM/SGLang fused-MoE config file name."""

    E: int
    N: int
    device_name: str
    dtype: str | None = None
    block_shape: tuple[int, int] | None = None
    per_channel_quant: bool = False
    down: bool = False

    @classmethod
    def parse(cls, name: str) -> VllmFileName:
        """The parts of file name `name`; InteropError if it is not such a name."""
        found = _NAME_RE.fullmatch(name)
        if found is None:
            raise InteropError(
                f"{name}: not a fused-MoE config file name: expected E={{E}},N={{N}},device_name={{device}}"
                "[,dtype={dtype}][,block_shape=[{n}, {k}]][,per_channel_quant=True][_down].json"
            )
        block = (int(found["bn"]), int(found["bk"])) if found["bn"] is not None else None
        return cls(
            int(found["E"]),
            int(found["N"]),
            found["device"],
            found["dtype"],
            block,
            found["pcq"] is not None,
            found["down"] is not None,
        )

    @classmethod
    def of(cls, problem: Problem, target: Target, flavor: str = "vllm") -> VllmFileName:
        """The name of the file that holds `problem`'s config on `target`; InteropError for weights no
        such file can hold (anything but unquantized and FP8 with [128, 128] block scales: MXFP4 among
        them, which vLLM's files do not name)."""
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
        device, (E, _) = device_name_of(target), experts(problem)
        if problem.dtype_b == problem.dtype_a and problem.dtype_a in _UNQUANTIZED:
            return cls(E, problem.N, device).spelled(flavor)
        if problem.dtype_b in ("fp8e4m3", "fp8e4m3fnuz"):
            return cls(E, problem.N, device, _FP8_DTYPE, FP8_BLOCK_SHAPE).spelled(flavor)
        if problem.dtype_b == "fp4e2m1":
            raise InteropError(
                f"{problem}: vLLM names no config file for MXFP4 weights with {problem.dtype_a} activations "
                "(its Triton fused MoE looks OCP MX schemes up under no dtype, i.e. in the unquantized "
                "files, and runs MXFP4 w4a16 through other kernels): not exported"
            )
        raise InteropError(
            f"{problem}: a vLLM config file holds unquantized or FP8 block-scaled weights, "
            f"not {problem.dtype_b} weights with {problem.dtype_a} activations"
        )

    def spelled(self, flavor: str) -> VllmFileName:
        """This name with the device as `flavor` looks it up (vLLM: every H200 is ``NVIDIA_H200``)."""
        if flavor == "vllm" and "H200" in self.device_name.split("_"):
            return replace(self, device_name="NVIDIA_H200")
        return self

    def filename(self, flavor: str = "vllm") -> str:
        """The file name, with the block shape spelled as `flavor` ("vllm" or "sglang") does."""
        name = f"E={self.E},N={self.N},device_name={self.device_name}{self.suffix(flavor)}"
        return name + ".json"

    def suffix(self, flavor: str = "vllm") -> str:
        """What follows the device name (without ".json"): dtype, block shape, per-channel, _down."""
        out = f",dtype={self.dtype}" if self.dtype else ""
        if self.block_shape:
            shape = str(list(self.block_shape))
            out += f",block_shape={shape.replace(' ', '') if flavor == 'vllm' else shape}"
        if self.per_channel_quant:
            out += ",per_channel_quant=True"
        return out + ("_down" if self.down else "")

    @property
    def variant(self) -> str:
        """ "" for a runnable name, else the name's quantization and GEMM as text, e.g.
        "dtype=int8_w8a8,per_channel_quant=True" or "dtype=fp8_w8a8,block_shape=[128,128],down"."""
        if self.why_not_runnable() is None:
            return ""
        parts = [part for part in self.suffix("vllm").removesuffix("_down").split(",") if part]
        return ",".join([*parts, "down"] if self.down else parts)

    @property
    def kernel(self) -> str:
        """The kernel name its configs are stored under: `VLLM_KERNEL`, or ``moe.triton:{variant}``."""
        return f"{VLLM_KERNEL}:{self.variant}" if self.variant else VLLM_KERNEL

    def weights(self) -> str:
        """Our weight dtype, as faithfully as a Problem names it: "bf16" for unquantized weights (and
        for integer weights, which a Problem cannot name), "fp8e4m3" for fp8_w8a8 (block or per tensor);
        InteropError for a dtype no vLLM or SGLang writer names."""
        if self.dtype is None:
            return "bf16"
        if self.dtype not in _WEIGHTS:
            raise InteropError(
                f"{self.filename()}: dtype={self.dtype} is not supported: known dtypes are "
                f"{', '.join(_WEIGHTS)}"
            )
        return _WEIGHTS[self.dtype] or "bf16"

    def why_not_runnable(self) -> str | None:
        """Why our moe op cannot run this file's configs as meant; None when it can."""
        if self.down:
            return "the second GEMM's configs (_down): our moe kernel runs one config for both GEMMs"
        if self.per_channel_quant:
            return "per-channel quantized weights: our moe op runs unquantized or 128x128 block-scaled FP8"
        if self.dtype is None and self.block_shape is None:
            return None
        if self.dtype == _FP8_DTYPE and self.block_shape == FP8_BLOCK_SHAPE:
            return None
        what = f"dtype={self.dtype}" + (f", block_shape={list(self.block_shape)}" if self.block_shape else "")
        if self.dtype == _FP8_DTYPE and self.block_shape is None:
            what += " (per-tensor scales)"
        return f"{what}: our moe op runs unquantized weights or fp8_w8a8 with block_shape=[128, 128]"
