"""Problem: one shape of one op, the unit that gets tuned."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["DTYPE_BYTES", "LAYOUTS", "OPS", "QUANT_OPS", "Problem", "QuantFormat", "normalize_dtype"]

#: Bytes per element of every dtype name we accept (canonical short names).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8e4m3": 1,
    "fp8e4m3fnuz": 1,
    "fp8e5m2": 1,
    "fp4e2m1": 0.5,
}

_DTYPE_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
}


@dataclass(frozen=True)
class QuantFormat:
    """How a quantized GEMM stores its operands: the allowed dtypes of A and B, and the scales.

    `block_a` and `block_b` are the (rows, K) extent one scale covers: (1, 0) is one scale per row over
    the whole of K (0: all of K), (128, 128) a 128x128 block. `scale_bytes` is the size of one scale
    (fp32 4, e8m0 1). K must be a multiple of `k_multiple`.
    """

    a_dtypes: tuple[str, ...]
    b_dtypes: tuple[str, ...]
    block_a: tuple[int, int]
    block_b: tuple[int, int]
    scale_bytes: int
    k_multiple: int

    def scale_count(self, rows: int, K: int, block: tuple[int, int]) -> int:
        """How many scales an operand of `rows` x K has."""
        br, bk = block
        per_k = 1 if bk == 0 else -(-K // bk)
        return -(-rows // br) * per_k


_FP8 = ("fp8e4m3", "fp8e4m3fnuz")

#: The quantized GEMM ops: C (M, N) = dequant(A) · dequant(B)ᵀ with B as (N, K), C in bf16 or fp16.
#: "fp8e4m3" is the target's e4m3 (e4m3fnuz on gfx942, e4m3fn elsewhere); MX formats are OCP (e4m3fn,
#: e2m1 packed two per byte, e8m0 scales). `gemm_fp8_rowwise` takes one scale per row of A and B or one
#: per tensor (its special case); `gemm_mxfp4_bf16a` reads bf16 activations and quantizes them to MXFP4
#: inside the kernel.
QUANT_OPS: dict[str, QuantFormat] = {
    "gemm_fp8_rowwise": QuantFormat(_FP8, _FP8, (1, 0), (1, 0), 4, 1),
    "gemm_fp8_blockwise": QuantFormat(_FP8, _FP8, (1, 128), (128, 128), 4, 128),
    "gemm_mxfp8": QuantFormat(("fp8e4m3",), ("fp8e4m3",), (1, 32), (1, 32), 1, 32),
    "gemm_mxfp4": QuantFormat(("fp4e2m1",), ("fp4e2m1",), (1, 32), (1, 32), 1, 32),
    "gemm_mxfp4_bf16a": QuantFormat(("bf16",), ("fp4e2m1",), (0, 0), (1, 32), 1, 32),
}

#: The built-in ops (a plug-in may register more: `autotune.core.registry`). "moe": the fused
#: mixture-of-experts MLP, M tokens routed to `topk` of `E`
#: experts, each an up projection of 2·N rows (gate and up, K = hidden size) and a down projection.
#: The quantized GEMMs of QUANT_OPS.
OPS: tuple[str, ...] = ("gemm", "moe", *QUANT_OPS)

#: B operand layouts: "nk" is B given as (N, K) (the nn.Linear weight, C = A·Bᵀ); "kn" is B as (K, N).
LAYOUTS: tuple[str, ...] = ("nk", "kn")


#: Whether an op of another name is known: `autotune.core.registry` installs its `is_known` here when it
#: is imported (which importing `autotune` does), so that problems of a plug-in's ops validate; this
#: module does not import the registry (which depends on it).
def _no_other_ops(name: str) -> bool:
    return False


op_is_known: Callable[[str], bool] = _no_other_ops


def _registered(name: str) -> bool:
    """An op a plug-in registered: its problems use these same fields."""
    try:
        return op_is_known(name)
    except ImportError:  # a plug-in that cannot be imported here: not known
        return False


def normalize_dtype(name: str) -> str:
    """Returns the canonical short dtype name ("bf16", "fp16", ...) or raises ValueError."""
    key = str(name).lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}")
    return key


@dataclass(frozen=True, order=True)
class Problem:
    """One problem shape: C (M, N) = A (M, K) · B, for op `op`.

    Immutable and hashable. `E` is the expert count (0 for dense ops) and `topk` the experts per token.
    `key()` is its canonical string, used as the identity in the database.
    """

    op: str
    M: int
    N: int
    K: int
    E: int = 0
    topk: int = 0
    dtype_a: str = "bf16"
    dtype_b: str = "bf16"
    dtype_out: str = "bf16"
    layout: str = "nk"

    def __post_init__(self) -> None:
        if self.op not in OPS and not _registered(self.op):
            raise ValueError(f"unknown op {self.op!r}; known ops: {', '.join(OPS)}")
        for name in ("M", "N", "K"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("E", "topk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("dtype_a", "dtype_b", "dtype_out"):
            object.__setattr__(self, name, normalize_dtype(getattr(self, name)))
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; known: {', '.join(LAYOUTS)}")
        if self.op == "moe":
            if self.topk < 1:
                raise ValueError(f"a moe problem needs topk >= 1, got {self.topk}")
            if self.topk > self.E:
                raise ValueError(
                    f"a moe problem needs E >= topk (experts per token), got E={self.E}, topk={self.topk}"
                )
        elif self.E or self.topk:
            raise ValueError(f"E and topk belong to moe problems, not {self.op}")
        if self.op in QUANT_OPS:
            self._check_quant(QUANT_OPS[self.op])

    def _check_quant(self, fmt: QuantFormat) -> None:
        if self.dtype_a not in fmt.a_dtypes or self.dtype_b not in fmt.b_dtypes:
            raise ValueError(
                f"{self.op} takes A in {' or '.join(fmt.a_dtypes)} and B in {' or '.join(fmt.b_dtypes)}, "
                f"got A {self.dtype_a} and B {self.dtype_b}"
            )
        if self.dtype_a in _FP8 and self.dtype_b != self.dtype_a:
            raise ValueError(
                f"{self.op} needs one FP8 flavour for A and B, got {self.dtype_a}, {self.dtype_b}"
            )
        if self.dtype_out not in ("bf16", "fp16"):
            raise ValueError(f"{self.op} writes bf16 or fp16, not {self.dtype_out}")
        if self.layout != "nk":
            raise ValueError(f"{self.op} takes B as (N, K) (layout nk): its scales run along K")
        if self.K % fmt.k_multiple:
            raise ValueError(
                f"{self.op} needs K a multiple of its scale block {fmt.k_multiple}, got K={self.K}"
            )

    @classmethod
    def gemm(
        cls, M: int, N: int, K: int, dtype: str = "bf16", layout: str = "nk", op: str = "gemm"
    ) -> Problem:
        """A dense GEMM with the same dtype for A, B and C (`op`: another GEMM-shaped op's problem)."""
        return cls(op, M, N, K, dtype_a=dtype, dtype_b=dtype, dtype_out=dtype, layout=layout)

    @classmethod
    def moe(
        cls, M: int, N: int, K: int, E: int, topk: int, dtype: str = "bf16", weights: str | None = None
    ) -> Problem:
        """A fused MoE: M tokens, E experts of intermediate size N (per shard) and hidden size K, top-k
        routing; `weights` "fp8e4m3" for FP8 weights with 128x128 block scales (default: `dtype`)."""
        return cls("moe", M, N, K, E, topk, dtype_a=dtype, dtype_b=weights or dtype, dtype_out=dtype)

    @classmethod
    def quant(cls, op: str, M: int, N: int, K: int, dtype: str = "bf16", fp8: str = "fp8e4m3") -> Problem:
        """A quantized GEMM of QUANT_OPS writing `dtype`; `fp8` names the FP8 flavour of the FP8 ops
        ("fp8e4m3": the target's own; "fp8e4m3fnuz": MI300X's, explicitly)."""
        if op not in QUANT_OPS:
            raise ValueError(f"unknown quantized op {op!r}; known: {', '.join(QUANT_OPS)}")
        a, b = {
            "gemm_mxfp8": ("fp8e4m3", "fp8e4m3"),
            "gemm_mxfp4": ("fp4e2m1", "fp4e2m1"),
            "gemm_mxfp4_bf16a": ("bf16", "fp4e2m1"),
        }.get(op, (fp8, fp8))
        return cls(op, M, N, K, dtype_a=a, dtype_b=b, dtype_out=dtype)

    @property
    def dtype(self) -> str:
        """The input dtype (A's), the name tables and specs use."""
        return self.dtype_a

    def flops(self) -> float:
        """Floating-point operations (multiply and add counted separately); for moe both projections of
        every (token, expert) pair: 2·N·K for gate and up, N·K for down, times 2."""
        if self.op == "moe":
            return 6.0 * self.M * self.topk * self.N * self.K
        return 2.0 * self.M * self.N * self.K

    def experts_touched(self) -> float:
        """Expected number of experts that receive a token under uniform routing (moe; 0 otherwise)."""
        if self.op != "moe":
            return 0.0
        return self.E * (1.0 - (1.0 - self.topk / self.E) ** self.M)

    def min_bytes(self) -> float:
        """Fewest bytes any kernel must move: each input read once, the output written once (moe: the
        weights of the experts uniform routing touches, tokens in, the result out)."""
        if self.op == "moe":
            w = self.experts_touched() * 3 * self.N * self.K * DTYPE_BYTES[self.dtype_b]
            return float(w + self.M * self.K * (DTYPE_BYTES[self.dtype_a] + DTYPE_BYTES[self.dtype_out]))
        a = self.M * self.K * DTYPE_BYTES[self.dtype_a]
        b = self.N * self.K * DTYPE_BYTES[self.dtype_b]
        c = self.M * self.N * DTYPE_BYTES[self.dtype_out]
        fmt = QUANT_OPS.get(self.op)
        if fmt is not None:  # quantized GEMMs: packed data above, plus every scale read once
            scales = fmt.scale_count(self.N, self.K, fmt.block_b)
            if fmt.block_a != (0, 0):  # (0, 0): A is quantized inside the kernel, no scales read
                scales += fmt.scale_count(self.M, self.K, fmt.block_a)
            c += scales * fmt.scale_bytes
        return float(a + b + c)

    def key(self) -> str:
        """Canonical string identity, e.g. ``gemm:M=16,N=64,K=64,E=0,topk=0:bf16,bf16,bf16:nk``."""
        return (
            f"{self.op}:M={self.M},N={self.N},K={self.K},E={self.E},topk={self.topk}:"
            f"{self.dtype_a},{self.dtype_b},{self.dtype_out}:{self.layout}"
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def params(self) -> dict[str, object]:
        """Every field but op, M, N and K: what the database stores of a problem as JSON
        (`params_json`), beside its indexed op, M, N and K."""
        return {k: v for k, v in asdict(self).items() if k not in ("op", "M", "N", "K")}

    def params_json(self) -> str:
        """`params()` as canonical JSON (sorted keys, no spaces): equal problems give equal text."""
        return json.dumps(self.params(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_params(cls, op: str, M: int, N: int, K: int, params: str | dict[str, object]) -> Problem:
        """The problem of `op`, M, N, K and the fields of `params` (a dict or `params_json` text)."""
        fields = json.loads(params) if isinstance(params, str) else dict(params)
        return cls(op, M, N, K, **fields)

    def with_m(self, M: int) -> Problem:
        """The same problem with another M."""
        d = self.to_dict()
        d["M"] = M
        return Problem(**d)  # type: ignore[arg-type]

    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of minimum traffic."""
        return self.flops() / self.min_bytes()

    def __str__(self) -> str:
        if self.op == "moe":
            weights = "" if self.dtype_b == self.dtype_a else f" weights {self.dtype_b}"
            return f"moe M={self.M} N={self.N} K={self.K} E={self.E} topk={self.topk} {self.dtype_a}{weights}"
        if self.op in QUANT_OPS:
            b = "" if self.dtype_b == self.dtype_a else f" B {self.dtype_b}"
            return f"{self.op} M={self.M} N={self.N} K={self.K} A {self.dtype_a}{b} -> {self.dtype_out}"
        return f"{self.op} M={self.M} N={self.N} K={self.K} {self.dtype_a} B:{self.layout}"


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of two ints (host code; `triton.cdiv` costs microseconds a call in newer Tritons)."""
    return -(-a // b)


def next_pow2(x: int) -> int:
    """Smallest power of two ≥ x (1 for x ≤ 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))
