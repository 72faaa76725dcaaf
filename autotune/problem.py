"""Problem: one shape of one op, the unit that gets tuned."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["DTYPE_BYTES", "LAYOUTS", "OPS", "Problem", "normalize_dtype"]

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

#: Ops the pipeline knows. Later issues add quantized GEMMs and MoE.
OPS: tuple[str, ...] = ("gemm",)

#: B operand layouts: "nk" is B given as (N, K) (the nn.Linear weight, C = A·Bᵀ); "kn" is B as (K, N).
LAYOUTS: tuple[str, ...] = ("nk", "kn")


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
        if self.op not in OPS:
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

    @classmethod
    def gemm(cls, M: int, N: int, K: int, dtype: str = "bf16", layout: str = "nk") -> Problem:
        """A dense GEMM with the same dtype for A, B and C."""
        return cls("gemm", M, N, K, dtype_a=dtype, dtype_b=dtype, dtype_out=dtype, layout=layout)

    @property
    def dtype(self) -> str:
        """The input dtype (A's), the name tables and specs use."""
        return self.dtype_a

    def flops(self) -> float:
        """Floating-point operations (multiply and add counted separately)."""
        return 2.0 * self.M * self.N * self.K

    def min_bytes(self) -> float:
        """Fewest bytes any kernel must move: each input read once, the output written once."""
        a = self.M * self.K * DTYPE_BYTES[self.dtype_a]
        b = self.N * self.K * DTYPE_BYTES[self.dtype_b]
        c = self.M * self.N * DTYPE_BYTES[self.dtype_out]
        return float(a + b + c)

    def key(self) -> str:
        """Canonical string identity, e.g. ``gemm:M=16,N=64,K=64,E=0,topk=0:bf16,bf16,bf16:nk``."""
        return (
            f"{self.op}:M={self.M},N={self.N},K={self.K},E={self.E},topk={self.topk}:"
            f"{self.dtype_a},{self.dtype_b},{self.dtype_out}:{self.layout}"
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def with_m(self, M: int) -> Problem:
        """The same problem with another M."""
        d = self.to_dict()
        d["M"] = M
        return Problem(**d)  # type: ignore[arg-type]

    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of minimum traffic."""
        return self.flops() / self.min_bytes()

    def __str__(self) -> str:
        e = f" E={self.E} topk={self.topk}" if self.E else ""
        return f"{self.op} M={self.M} N={self.N} K={self.K}{e} {self.dtype_a} B:{self.layout}"


def next_pow2(x: int) -> int:
    """Smallest power of two ≥ x (1 for x ≤ 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))
