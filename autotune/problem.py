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

#: Ops the pipeline knows. "moe": the fused mixture-of-experts MLP, M tokens routed to `topk` of `E`
#: experts, each an up projection of 2·N rows (gate and up, K = hidden size) and a down projection.
OPS: tuple[str, ...] = ("gemm", "moe")

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
        if self.op == "moe":
            if self.topk < 1:
                raise ValueError(f"a moe problem needs topk >= 1, got {self.topk}")
            if self.topk > self.E:
                raise ValueError(
                    f"a moe problem needs E >= topk (experts per token), got E={self.E}, topk={self.topk}"
                )
        elif self.E or self.topk:
            raise ValueError(f"E and topk belong to moe problems, not {self.op}")

    @classmethod
    def gemm(cls, M: int, N: int, K: int, dtype: str = "bf16", layout: str = "nk") -> Problem:
        """A dense GEMM with the same dtype for A, B and C."""
        return cls("gemm", M, N, K, dtype_a=dtype, dtype_b=dtype, dtype_out=dtype, layout=layout)

    @classmethod
    def moe(
        cls, M: int, N: int, K: int, E: int, topk: int, dtype: str = "bf16", weights: str | None = None
    ) -> Problem:
        """A fused MoE: M tokens, E experts of intermediate size N (per shard) and hidden size K, top-k
        routing; `weights` "fp8e4m3" for FP8 weights with 128x128 block scales (default: `dtype`)."""
        return cls("moe", M, N, K, E, topk, dtype_a=dtype, dtype_b=weights or dtype, dtype_out=dtype)

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
        if self.op == "moe":
            weights = "" if self.dtype_b == self.dtype_a else f" weights {self.dtype_b}"
            return f"moe M={self.M} N={self.N} K={self.K} E={self.E} topk={self.topk} {self.dtype_a}{weights}"
        return f"{self.op} M={self.M} N={self.N} K={self.K} {self.dtype_a} B:{self.layout}"


def next_pow2(x: int) -> int:
    """Smallest power of two ≥ x (1 for x ≤ 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))
