"""Problem: one shape of one op, the unit that gets tuned."""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from typing import Protocol

    from autotune.core.target import Target

    class LayerShape(Protocol):
        """A catalog layer's sizes: N and K (and what else the layer's kind has, which its op reads)."""

        @property
        def N(self) -> int: ...
        @property
        def K(self) -> int: ...


__all__ = [
    "DTYPE_BYTES",
    "GEMM_SHAPED",
    "LAYOUTS",
    "ParamValue",
    "Problem",
    "ProblemRules",
    "check_sizes",
    "normalize_dtype",
    "rules_of",
]

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


#: B operand layouts: "nk" is B given as (N, K) (the nn.Linear weight, C = A·Bᵀ); "kn" is B as (K, N).
LAYOUTS: tuple[str, ...] = ("nk", "kn")

#: How a table key's params name B's dtype (`Problem.table_params`).
B_DTYPE_KEY = "b="

#: The types an op's own problem parameter may have (`ProblemRules.params`, `Problem.extra`).
ParamValue = int | float | str


class ProblemRules:
    """What an op says about its problems: its own parameters, validation, FLOPs, bytes and display.

    These defaults describe a GEMM-shaped op, C (M, N) = A (M, K) · B, with no parameters of its own. An
    op class inherits this and overrides what differs (the registry answers these defaults for an op that
    does not). An op's problems are validated by its rules when they are built; they need no GPU and no
    tensors.
    """

    #: The op's own problem parameters beyond M, N, K, the dtypes and the layout, by name and type: a
    #: problem holds them in `Problem.extra`, the database stores them with the rest, and a table keys its
    #: entries by them (the fused MoE's expert counts, the MLA decode's heads and context).
    params: ClassVar[dict[str, type]] = {}

    #: Own parameters that are layout choices of the caller (the MLA decode's page size), not facts of
    #: the shape: a sweep that tunes several values of one reports which was fastest per shape.
    layout_params: ClassVar[tuple[str, ...]] = ()

    #: Whether a table keys the op's entries by B's dtype too where it is not A's (`Problem.table_params`:
    #: `b=DTYPE`): the fused MoE's bf16, FP8 and MXFP4 weights of one shape are three families, whose
    #: configs do not carry over (an FP8 tile can overflow shared memory with bf16 weights).
    key_b_dtype: ClassVar[bool] = False

    def element_bytes(self, problem: Problem, target: Target) -> float:
        """The element size (bytes) the op's matrix instructions run at on `target`, which sets the cost
        model's peak rate (fp8 twice bf16's): by default the wider of A's and B's dtypes."""
        return float(max(DTYPE_BYTES[problem.dtype_a], DTYPE_BYTES[problem.dtype_b]))

    #: The layer of a model the op serves in the model catalog (`autotune.sweeps.catalog`): "linear",
    #: "experts", "mla_attention"; "" for none. The catalog asks for the op of a layer, never by name.
    layer: ClassVar[str] = ""

    def layer_problem(self, op: str, M: int, shape: LayerShape, dtype: str, weights: str | None) -> Problem:
        """The problem of one catalog layer of the op called `op` at M tokens: by default GEMM-shaped, C
        (M, `shape.N`) of `dtype` (`weights` is the MoE's)."""
        return Problem.of(op, M, shape.N, shape.K, dtype)

    def example_problem(self, op: str) -> Problem:
        """A small problem of the op called `op`, as its tests build them: what `autotune doctor` checks its
        default on. GEMM-shaped by default (16 x 512 x 512, bf16)."""
        return Problem.of(op, 16, 512, 512)

    def validate_problem(self, problem: Problem) -> None:
        """ValueError for a problem of this op that cannot exist (beyond the generic checks, its own
        parameters' names and types included)."""

    def problem_dtypes(self, dtype: str, variant: str | None = None) -> tuple[str, str, str]:
        """The dtypes of A, B and C of a problem whose activations are `dtype`; `variant` names another
        operand dtype where the op has one (a weight dtype, an FP8 flavour)."""
        return dtype, variant or dtype, dtype

    def problem_flops(self, problem: Problem) -> float:
        """Floating-point operations (multiply and add counted separately)."""
        return 2.0 * problem.M * problem.N * problem.K

    def kernel_rows(self, problem: Problem) -> int:
        """The rows of A the op's kernels run over (what a program grid's M dimension covers): M by
        default (the fused MoE's: a row per token and expert it is routed to)."""
        return problem.M

    def problem_bytes(self, problem: Problem) -> float:
        """Fewest bytes any kernel must move: each input read once, the output written once."""
        a = problem.M * problem.K * DTYPE_BYTES[problem.dtype_a]
        b = problem.N * problem.K * DTYPE_BYTES[problem.dtype_b]
        c = problem.M * problem.N * DTYPE_BYTES[problem.dtype_out]
        return float(a + b + c)

    def describe_problem(self, problem: Problem) -> str:
        """The problem in words, for logs and tables."""
        p, own = problem, "".join(f" {k}={v}" for k, v in problem.extra)
        return f"{p.op} M={p.M} N={p.N} K={p.K} {p.dtype_a} B:{p.layout}{own}"

    def predict_us(self, problem: Problem, config: Any, target: Any, features: Any = None) -> float | None:
        """The op's own cost model: the predicted µs of `config` on `problem` and `target`
        (`autotune.engine.model.predict_us` asks it first); None: the dense GEMM's model, which knows
        the built-in GEMM backends."""
        return None

    def label(self, problem: Problem) -> str:
        """The problem in one table cell: M x N x K, dtype and layout (and the op's own parameters)."""
        p, own = problem, "".join(f" {k}={v}" for k, v in problem.extra)
        return f"{p.M}x{p.N}x{p.K} {p.dtype} {p.layout}{own}"

    def key_problem(self, key: tuple[str, str, str, int, int, str]) -> Problem:
        """The problem at M = 1 of a table key (op, dtype, layout, N, K, params), whose dtype is A's
        (`autotune.dispatch.table.Key`)."""
        op, dtype, layout, n, k, params = key
        items = params.split(",") if params else []
        b_dtype = next((item[len(B_DTYPE_KEY) :] for item in items if item.startswith(B_DTYPE_KEY)), None)
        own = self.parse_params(item for item in items if not item.startswith(B_DTYPE_KEY))
        return Problem.of(op, 1, n, k, dtype, b_dtype, layout=layout, **own)

    def unknown_twin(self, problem: Problem) -> Problem | None:
        """The problem under which an import stores a config of `problem`'s shape family where its file does
        not say the whole shape (the fused MoE's vLLM files name its experts and N, not K and top-k), whose
        configs count for `problem` too; None (the default) where every import knows the whole shape."""
        return None

    def parse_params(self, items: Iterable[str]) -> dict[str, ParamValue]:
        """The op's own parameters from "NAME=VALUE" texts (a table key's `params`, `best --param`), each
        value of the type the op declares for it (text for a name it does not declare, which the problem
        then refuses); ValueError for a text that is not NAME=VALUE or a value not of its type."""
        out: dict[str, ParamValue] = {}
        for text in items:
            name, sep, value = text.partition("=")
            if not sep or not name:
                raise ValueError(f"a parameter is NAME=VALUE, got {text!r}")
            kind = self.params.get(name, str)
            try:
                out[name] = kind(value)
            except ValueError:
                raise ValueError(f"parameter {name} must be {kind.__name__}, got {value!r}") from None
        return out

    # -- the op's own fields of a sweep spec's [[sweep]] table -------------------------------------------

    @property
    def spec_keys(self) -> frozenset[str]:
        """The fields a [[sweep]] table of this op may have beyond the generic ones (op, m, nk, dtype,
        layout and the tuning fields): by default its own parameters."""
        return frozenset(self.params)

    def spec_options(self, table: Mapping[str, Any], dtype: str) -> dict[str, Any]:
        """The op's own fields of a [[sweep]] table (`spec_keys`), parsed; ValueError naming the field for
        a missing or bad one. By default each parameter is one value of its type or a non-empty list of
        them (one problem each)."""
        out: dict[str, Any] = {}
        for name, kind in self.params.items():
            if name not in table:
                raise ValueError(f"op needs `{name}` ({kind.__name__}, or a list)")
            values = table[name] if isinstance(table[name], list) else [table[name]]
            if not values:
                raise ValueError(f"`{name}` must be a {kind.__name__} or a non-empty list of them")
            out[name] = tuple(values)
        return out

    def spec_problems(
        self,
        op: str,
        ms: Sequence[int],
        nks: Sequence[tuple[int, int]],
        layouts: Sequence[str],
        dtype: str,
        options: Mapping[str, Any],
    ) -> list[Problem]:
        """The problems of a [[sweep]] table of this op: every layout, (N, K) pair, value of each own
        parameter and M (`options`: `spec_options`' answer)."""
        names = list(self.params)
        combos = itertools.product(*(options[n] for n in names))
        return [
            Problem.of(op, m, n, k, dtype, layout=layout, **dict(zip(names, values, strict=True)))
            for values in combos
            for layout in layouts
            for n, k in nks
            for m in ms
        ]

    def tuning_op(self, options: Mapping[str, Any]) -> Any:
        """The op that tunes this op's problems of a [[sweep]] table with these options (itself, unless
        an option changes what it measures, e.g. a routing skew)."""
        return self


#: The rules of an op without its own (`ProblemRules`' defaults).
GEMM_SHAPED = ProblemRules()


def _no_registry(name: str) -> ProblemRules:
    raise ValueError(f"unknown op {name!r}: no op registry is loaded (import autotune)")


#: The rules of the op called `name` (ValueError naming the known ops if there is none):
#: `autotune.core.registry` installs its `rules_of` here when it is imported (which importing `autotune`
#: does); this module does not import the registry (which depends on it).
rules_of: Callable[[str], ProblemRules] = _no_registry


@functools.lru_cache(maxsize=1024)
def _table_params(op: str, dtype_b: str, own: str) -> str:
    """`Problem.table_params` where B's dtype is not A's (kept per op and dtypes: a served call asks)."""
    if not rules_of(op).key_b_dtype:
        return own
    return ",".join(filter(None, (own, f"{B_DTYPE_KEY}{dtype_b}")))


def normalize_dtype(name: str) -> str:
    """Returns the canonical short dtype name ("bf16", "fp16", ...) or raises ValueError."""
    key = str(name).lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}")
    return key


def check_sizes(M: object, N: object, K: object) -> None:
    """ValueError unless M, N and K are positive integers (what every problem's sizes are)."""
    for name, value in (("M", M), ("N", N), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, order=True)
class Problem:
    """One problem shape of op `op`: M rows (tokens) of a product C (M, N) = A (M, K) · B, as the op
    defines it.

    Immutable and hashable. `extra` holds the op's own parameters (`ProblemRules.params`: the fused MoE's
    expert count and experts per token, the MLA decode's heads and context, ...), sorted by name (a
    mapping is accepted). The op's rules (`ProblemRules`, found by its name in the registry) validate it
    and give its FLOPs, bytes and display. `key()` is its canonical string, used as the identity in the
    database.
    """

    op: str
    M: int
    N: int
    K: int
    dtype_a: str = "bf16"
    dtype_b: str = "bf16"
    dtype_out: str = "bf16"
    layout: str = "nk"
    extra: tuple[tuple[str, ParamValue], ...] = ()

    def __post_init__(self) -> None:
        rules = rules_of(self.op)  # ValueError for an unknown op
        self._check_sizes()
        for name in ("dtype_a", "dtype_b", "dtype_out"):
            object.__setattr__(self, name, normalize_dtype(getattr(self, name)))
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; known: {', '.join(LAYOUTS)}")
        object.__setattr__(self, "extra", _own_params(self.op, rules.params, self.extra))
        rules.validate_problem(self)

    def _check_sizes(self) -> None:
        check_sizes(self.M, self.N, self.K)

    @classmethod
    def of(
        cls,
        op: str,
        M: int,
        N: int,
        K: int,
        dtype: str = "bf16",
        variant: str | None = None,
        *,
        layout: str = "nk",
        **extra: ParamValue,
    ) -> Problem:
        """A problem of `op` whose activations are `dtype`: the op's rules give the dtypes of A, B and C
        (`variant`: its other operand dtype, e.g. a weight dtype or an FP8 flavour); `extra`: the op's own
        parameters (`Problem.of(op, 16, 1536, 4096, E=128, topk=8)` for an op whose own parameters are E
        and topk)."""
        a, b, out = rules_of(op).problem_dtypes(normalize_dtype(dtype), variant)
        return cls(op, M, N, K, a, b, out, layout, tuple(extra.items()))

    @classmethod
    def quant(cls, op: str, M: int, N: int, K: int, dtype: str = "bf16", fp8: str = "fp8e4m3") -> Problem:
        """A quantized GEMM writing `dtype`; `fp8` names the FP8 flavour of the FP8 ops ("fp8e4m3": the
        target's own; "fp8e4m3fnuz": MI300X's, explicitly)."""
        return cls.of(op, M, N, K, dtype, fp8)

    @property
    def dtype(self) -> str:
        """The input dtype (A's), the name tables and specs use."""
        return self.dtype_a

    @functools.cached_property
    def params_key(self) -> str:
        """The op's own parameters as text, "NAME=VALUE" by name, comma-separated ("" where it has none):
        part of its key and of a table entry's key (a served call asks: built once a problem)."""
        return ",".join(f"{k}={v}" for k, v in self.extra) if self.extra else ""

    @property
    def table_params(self) -> str:
        """The `params` of this problem's table key: `params_key`, then `b=DTYPE` where the op keys B's
        dtype (`ProblemRules.key_b_dtype`) and it is not A's."""
        if self.dtype_b == self.dtype_a:
            return self.params_key
        return _table_params(self.op, self.dtype_b, self.params_key)

    def flops(self) -> float:
        """Floating-point operations (multiply and add counted separately), as the op counts them."""
        return rules_of(self.op).problem_flops(self)

    def min_bytes(self) -> float:
        """Fewest bytes any kernel must move, as the op counts them (each input read once, the output
        written once)."""
        return rules_of(self.op).problem_bytes(self)

    def key(self) -> str:
        """Canonical string identity, e.g. ``OP:M=16,N=64,K=64:bf16,bf16,bf16:nk``; the op's own
        parameters follow after another colon where it has any (`params_key`), e.g.
        ``OP:M=16,N=1536,K=4096:bf16,bf16,bf16:nk:E=128,topk=8``."""
        own = f":{self.params_key}" if self.extra else ""
        return (
            f"{self.op}:M={self.M},N={self.N},K={self.K}:"
            f"{self.dtype_a},{self.dtype_b},{self.dtype_out}:{self.layout}{own}"
        )

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        return d

    def params(self) -> dict[str, object]:
        """Every field but op, M, N and K (and `extra` where it is empty): what the database stores of a
        problem as JSON (`params_json`), beside its indexed op, M, N and K."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _INDEXED}
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    def params_json(self) -> str:
        """`params()` as canonical JSON (sorted keys, no spaces): equal problems give equal text. Problems
        that differ only in M, N and K share it: it is encoded once for them (`_PARAMS_JSON`)."""
        key = _params_key(self)
        text = _PARAMS_JSON.get(key)
        if text is None:
            if len(_PARAMS_JSON) >= _PARAMS_KEPT:
                _PARAMS_JSON.clear()
            text = _PARAMS_JSON[key] = json.dumps(self.params(), sort_keys=True, separators=(",", ":"))
        return text

    @classmethod
    def from_params(cls, op: str, M: int, N: int, K: int, params: str | dict[str, object]) -> Problem:
        """The problem of `op`, M, N, K and the fields of `params` (a dict or `params_json` text)."""
        fields = json.loads(params) if isinstance(params, str) else dict(params)
        return cls(op, M, N, K, **fields)

    def with_m(self, M: int) -> Problem:
        """The same problem with another M."""
        return replace(self, M=M)

    def with_shape(self, M: int, N: int, K: int) -> Problem:
        """The same problem with sizes M, N and K, checked as a new one is: its sizes, then its op's rules
        (its other fields were checked when it was built). For many problems of one kind, e.g. the rows
        of an imported table."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, M=M, N=N, K=K)
        if not (type(M) is type(N) is type(K) is int and M > 0 and N > 0 and K > 0):  # else: all is well
            new._check_sizes()
        rules_of(self.op).validate_problem(new)
        return new

    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of minimum traffic."""
        return self.flops() / self.min_bytes()

    def __str__(self) -> str:
        return rules_of(self.op).describe_problem(self)


def _own_params(op: str, allowed: dict[str, type], given: object) -> tuple[tuple[str, ParamValue], ...]:
    """`given` (pairs or a mapping) as sorted (name, value) pairs, each a parameter `op` declares, of its
    type; ValueError otherwise."""
    pairs = list(given.items()) if isinstance(given, dict) else list(given)  # type: ignore[call-overload]
    out: dict[str, ParamValue] = {}
    for item in pairs:
        name, value = item
        kind = allowed.get(name)
        if kind is None:
            known = ", ".join(allowed) or "none"
            raise ValueError(f"{op} has no parameter {name!r} (its own parameters: {known})")
        if isinstance(value, bool) or not isinstance(value, kind):
            if not (kind is float and isinstance(value, int) and not isinstance(value, bool)):
                raise ValueError(f"{op} parameter {name} must be {kind.__name__}, got {value!r}")
            value = float(value)
        out[name] = value
    missing = sorted(set(allowed) - set(out))
    if missing:
        raise ValueError(f"{op} problems need the parameter(s) {', '.join(missing)}")
    return tuple(sorted(out.items()))


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of two ints (host code; `triton.cdiv` costs microseconds a call in newer Tritons)."""
    return -(-a // b)


def next_pow2(x: int) -> int:
    """Smallest power of two ≥ x (1 for x ≤ 1)."""
    return 1 if x <= 1 else 1 << math.ceil(math.log2(x))


#: The fields of a problem stored in columns of their own, not in its params.
_INDEXED = frozenset(("op", "M", "N", "K", "extra"))
#: The fields `params_json` depends on: all but M, N and K (the op too: it fixes the types of its own
#: parameters, so that equal keys have equal JSON).
_params_key = operator.attrgetter(*(f.name for f in fields(Problem) if f.name not in ("M", "N", "K")))
#: `params_json` of the problems seen, by `_params_key`; at most `_PARAMS_KEPT` (then it starts over).
_PARAMS_JSON: dict[tuple[object, ...], str] = {}
_PARAMS_KEPT = 1024
