"""The quantized GEMMs' problems: each op's operand formats, and the rules their problems follow."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.problem import Problem, ProblemRules
from autotune.core.target import Target
from autotune.kernels.common.target import mx_native

__all__ = ["FP8_FLAVOURS", "LINEAR_WEIGHTS", "QUANT_OPS", "QuantFormat", "QuantRules"]


@dataclass(frozen=True)
class QuantFormat:
    """How a quantized GEMM stores its operands: the allowed dtypes of A and B, and the scales.

    `block_a` and `block_b` are the (rows, K) extent one scale covers: (1, 0) is one scale per row over
    the whole of K (0: all of K), (128, 128) a 128x128 block. `scale_bytes` is the size of one scale
    (fp32 4, e8m0 1). K must be a multiple of `k_multiple`. `fixed` is (A, B) where the op's operand
    dtypes do not depend on an FP8 flavour.
    """

    a_dtypes: tuple[str, ...]
    b_dtypes: tuple[str, ...]
    block_a: tuple[int, int]
    block_b: tuple[int, int]
    scale_bytes: int
    k_multiple: int
    fixed: tuple[str, str] | None = None
    #: An MX format (OCP microscaling: e8m0 scales per 32 values): on MX matrix instructions where the
    #: target has them (`autotune.kernels.common.target.mx_native`), dequantized to bf16 elsewhere.
    mx: bool = False

    def scale_count(self, rows: int, K: int, block: tuple[int, int]) -> int:
        """How many scales an operand of `rows` x K has."""
        br, bk = block
        per_k = 1 if bk == 0 else -(-K // bk)
        return -(-rows // br) * per_k


#: The FP8 flavours an FP8 op takes: "fp8e4m3" is the target's e4m3 (e4m3fnuz on gfx942, e4m3fn
#: elsewhere), "fp8e4m3fnuz" MI300X's, explicitly.
FP8_FLAVOURS = ("fp8e4m3", "fp8e4m3fnuz")

#: The quantized GEMM ops: C (M, N) = dequant(A) · dequant(B)ᵀ with B as (N, K), C in bf16 or fp16.
#: MX formats are OCP (e4m3fn, e2m1 packed two per byte, e8m0 scales). `gemm_fp8_rowwise` takes one scale
#: per row of A and B or one per tensor (its special case); `gemm_mxfp4_bf16a` reads bf16 activations and
#: quantizes them to MXFP4 inside the kernel.
QUANT_OPS: dict[str, QuantFormat] = {
    "gemm_fp8_rowwise": QuantFormat(FP8_FLAVOURS, FP8_FLAVOURS, (1, 0), (1, 0), 4, 1),
    "gemm_fp8_blockwise": QuantFormat(FP8_FLAVOURS, FP8_FLAVOURS, (1, 128), (128, 128), 4, 128),
    "gemm_mxfp8": QuantFormat(("fp8e4m3",), ("fp8e4m3",), (1, 32), (1, 32), 1, 32, ("fp8e4m3",) * 2, mx=True),
    "gemm_mxfp4": QuantFormat(("fp4e2m1",), ("fp4e2m1",), (1, 32), (1, 32), 1, 32, ("fp4e2m1",) * 2, mx=True),
    "gemm_mxfp4_bf16a": QuantFormat(
        ("bf16",), ("fp4e2m1",), (0, 0), (1, 32), 1, 32, ("bf16", "fp4e2m1"), mx=True
    ),
}

#: The FP8 weights a linear layer may keep (`autotune.nn.Linear`'s `weights`), each with the quantized GEMM
#: that serves it and the (rows, K) extent of one weight scale (that op's `QuantFormat.block_b`).
LINEAR_WEIGHTS: dict[str, tuple[str, tuple[int, int]]] = {
    kind: (op, QUANT_OPS[op].block_b)
    for kind, op in (("fp8_rowwise", "gemm_fp8_rowwise"), ("fp8_blockwise", "gemm_fp8_blockwise"))
}


class QuantRules(ProblemRules):
    """The problem rules of the quantized GEMM called `name`: B is (N, K), C bf16 or fp16, K a multiple
    of the scale block, and the scales counted in the bytes a kernel moves."""

    name: str

    @property
    def format(self) -> QuantFormat:
        return QUANT_OPS[self.name]

    def problem_dtypes(self, dtype: str, variant: str | None = None) -> tuple[str, str, str]:
        """A and B in the op's formats (the FP8 ops: the flavour `variant`, default "fp8e4m3"), C in
        `dtype`."""
        fixed = self.format.fixed
        if fixed is not None:
            return fixed[0], fixed[1], dtype
        fp8 = variant or "fp8e4m3"
        return fp8, fp8, dtype

    def element_bytes(self, problem: Problem, target: Target) -> float:
        """An MX format runs at its element's rate on MX matrix instructions (FP4 feeds them in
        gemm_mxfp4_bf16a too) and at bf16's where the kernel dequantizes; the others as stored."""
        if not self.format.mx:
            return super().element_bytes(problem, target)
        if mx_native(target):
            return 0.5 if problem.dtype_b == "fp4e2m1" else 1.0
        return 2.0

    def example_problem(self, op: str) -> Problem:
        """16 x 256 x 512 in the op's formats, bf16 out."""
        return Problem.quant(op, 16, 256, 512)

    def validate_problem(self, problem: Problem) -> None:
        super().validate_problem(problem)
        fmt, op, p = self.format, problem.op, problem
        if problem.dtype_a not in fmt.a_dtypes or problem.dtype_b not in fmt.b_dtypes:
            raise ValueError(
                f"{op} takes A in {' or '.join(fmt.a_dtypes)} and B in {' or '.join(fmt.b_dtypes)}, "
                f"got A {problem.dtype_a} and B {problem.dtype_b}"
            )
        if problem.dtype_a in FP8_FLAVOURS and problem.dtype_b != problem.dtype_a:
            raise ValueError(f"{op} needs one FP8 flavour for A and B, got {p.dtype_a}, {p.dtype_b}")
        if problem.dtype_out not in ("bf16", "fp16"):
            raise ValueError(f"{op} writes bf16 or fp16, not {problem.dtype_out}")
        if problem.layout != "nk":
            raise ValueError(f"{op} takes B as (N, K) (layout nk): its scales run along K")
        if problem.K % fmt.k_multiple:
            raise ValueError(f"{op} needs K a multiple of its scale block {fmt.k_multiple}, got K={p.K}")

    @property
    def spec_keys(self) -> frozenset[str]:
        """The FP8 ops' [[sweep]] tables may name their FP8 flavour: `fp8`."""
        return frozenset({"fp8"} if self.format.fixed is None else ())

    def spec_options(self, table: Mapping[str, Any], dtype: str) -> dict[str, Any]:
        fp8 = table.get("fp8", "fp8e4m3")
        if fp8 not in FP8_FLAVOURS:
            raise ValueError(f'`fp8` is "fp8e4m3" or "fp8e4m3fnuz", not {fp8!r}')
        return {"fp8": fp8} if self.format.fixed is None else {}

    def spec_problems(
        self,
        op: str,
        ms: Sequence[int],
        nks: Sequence[tuple[int, int]],
        layouts: Sequence[str],
        dtype: str,
        options: Mapping[str, Any],
    ) -> list[Problem]:
        fp8 = options.get("fp8")
        return [Problem.of(op, m, n, k, dtype, fp8, layout=x) for x in layouts for n, k in nks for m in ms]

    def key_problem(self, key: tuple[str, str, str, int, int, str]) -> Problem:
        """A table keys a quantized GEMM by A's dtype: its output is taken as bf16."""
        op, dtype, _layout, n, k = key[:5]
        return Problem.of(op, 1, n, k, "bf16", dtype)

    def problem_bytes(self, problem: Problem) -> float:
        """The packed operands and the output once, plus every scale read once."""
        fmt = self.format
        scales = fmt.scale_count(problem.N, problem.K, fmt.block_b)
        if fmt.block_a != (0, 0):  # (0, 0): A is quantized inside the kernel, no scales read
            scales += fmt.scale_count(problem.M, problem.K, fmt.block_a)
        return super().problem_bytes(problem) + scales * fmt.scale_bytes

    def label(self, problem: Problem) -> str:
        """The op tells the scaling apart: it leads."""
        p = problem
        b = "" if p.dtype_b == p.dtype_a else f"/{p.dtype_b}"
        return f"{p.op} {p.M}x{p.N}x{p.K} {p.dtype_a}{b}"

    def describe_problem(self, problem: Problem) -> str:
        p = problem
        b = "" if p.dtype_b == p.dtype_a else f" B {p.dtype_b}"
        return f"{p.op} M={p.M} N={p.N} K={p.K} A {p.dtype_a}{b} -> {p.dtype_out}"
