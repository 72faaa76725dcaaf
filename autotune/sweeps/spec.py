"""The sweep-spec format (TOML): what to tune, parsed strictly with one clear error per mistake.

```toml
name = "smoke"                 # required
description = "..."            # optional

[[sweep]]                      # one or more
op = "OP"                      # required; a registered op (`autotune doctor` checks each)
dtype = "bf16"                 # bf16 (default) or fp16; of an op that fixes its inputs, C's
m = [1, 16]                    # required: M values (token counts)
nk = [[64, 64]]                # required: (N, K) pairs
layout = "nk"                  # B as (N, K) ("nk", default) or (K, N) ("kn"); or a list of both
strategy = "exhaustive"        # exhaustive | random | optuna (default)
trials = 6                     # budget per problem, in trials (optional)
seconds = 60                   # budget per problem, in seconds (optional)
seed = 0
backends = ["torch", "triton"] # default: every backend of the op
warm_start = true              # try known configs first (imported, winners at nearby M); default true
final_rounds = 3               # the 2 fastest configs and the vendor library's, timed again head to head
                               # in this many interleaved rounds: their medians pick the winner (0: off;
                               # default 3 on a GPU, 0 in the interpreter, whose timings pick nothing)
profile_m = "serving"          # after the buckets of a shape are tuned, time their finalists, the vendor
                               # and the default at these M ("serving": 1, 2, 3, 4, 6, 8, every 8 to 512,
                               # then log-spaced up to the largest M; a list of ints; false: none). The
                               # emitted table serves M ranges from it. Default "serving" on a GPU, none
                               # in the interpreter

[[sweep]]                      # an op with fields of its own (`ProblemRules.spec_keys`: each of its
op = "OP"                      # problem parameters, one value or a list, and its options; docs/spec.md
m = [1, 16, 256]               # lists each op's: the fused MoE's e, topk, weights and zipf, a quantized
nk = [[2048, 7168]]            # GEMM's fp8)
e = 32                         # e.g. the fused MoE's experts on this rank (a list for several)

[[sweep]]                      # a model from the catalog (sweeps/catalog.py) instead of op and nk:
model = "deepseek-v3"          # every GEMM and MoE problem of one layer, plus the LM head, per shard
tp = [1, 8]                    # tensor-parallel degrees (an int or a list; default 1)
ep = 8                         # expert-parallel degrees, MoE models only (an int or a list; default 1)
m = ["decode", 16384]          # M values: presets "decode" (1..256) and "prefill" (512..8192) and/or ints
weights = "bf16"               # MoE models: the routed experts' weights (default: the model's own)
zipf = 1.0                     # MoE models: routing skew of the routed experts

[static]                       # optional: compile-only checks before any GPU time
prune = ["compile", "mfma_shape", "spills", "lds", "occupancy"]   # default: all; [] or false: none
min_occupancy = 1              # waves per SIMD (AMD) or blocks per SM (NVIDIA)
candidates = 8                 # compile-only sweeps: the cost model's top configs compiled per problem
```
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.problem import LAYOUTS, Problem, ProblemRules, normalize_dtype
from autotune.core.registry import is_known, layer_op, ops, rules_of
from autotune.core.static import StaticPolicy
from autotune.core.target import Target
from autotune.engine.strategies import STRATEGIES, Budget
from autotune.sweeps.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Final rounds of a search on a GPU where the spec does not say (`SweepEntry.final_rounds`).
DEFAULT_FINAL_ROUNDS = 3

__all__ = [
    "DEFAULT_FINAL_ROUNDS",
    "SpecError",
    "SweepEntry",
    "SweepSpec",
    "load_spec",
    "parse_spec",
    "spec_from_untuned",
]

_TOP_KEYS = {"name", "description", "sweep", "static"}
_ENTRY_KEYS = {"op", "dtype", "m", "nk", "layout", "strategy", "trials", "seconds", "seed", "backends",
               "warm_start", "final_rounds", "profile_m"}  # fmt: skip
_MODEL_KEYS = {"model", "tp", "ep", "dtype", "m", "strategy", "trials", "seconds", "seed", "backends",
               "warm_start", "final_rounds", "profile_m", "weights", "zipf"}  # fmt: skip
_REQUIRED = ("op", "m", "nk")


@dataclass(frozen=True)
class SweepEntry:
    """One [[sweep]] table: a set of problems and how to tune them.

    Either an op entry (`op` with `nks`: the product of M values, (N, K) pairs and layouts) or a model
    entry (`model`, with `tps` and `eps`: the catalog's problems of that model, of each op its layers
    need; its `op` is ""). Each problem's TunableOp is `op_for(problem)`.
    """

    op: str
    dtype: str
    ms: tuple[int, ...]
    nks: tuple[tuple[int, int], ...]
    layouts: tuple[str, ...] = ("nk",)
    strategy: str = "optuna"
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
    backends: tuple[str, ...] | None = None
    warm_start: bool = True  # try known configs first (Store.known_configs)
    final_rounds: int | None = None  # the finalists timed again head to head (Runner); None: the default
    #: The M ladder its shape families are profiled at once tuned (autotune.sweeps.profile): None the default
    #: (the serving ladder on a GPU, none in the interpreter), "serving" that ladder everywhere, a tuple
    #: of M values, or () for none.
    profile_m: str | tuple[int, ...] | None = None
    #: An op entry's own fields (the op's `spec_keys`), as its rules parsed them (`spec_options`).
    options: tuple[tuple[str, Any], ...] = ()
    weights: str = ""  # model: the routed experts' weight dtype ("" = the model's own)
    zipf: float = 0.0  # model: routing skew of the routed experts
    model: str = ""  # a catalog model (sweeps/catalog.py) instead of op and nks
    tps: tuple[int, ...] = (1,)  # model: tensor-parallel degrees
    eps: tuple[int, ...] = (1,)  # model: expert-parallel degrees

    def final_rounds_on(self, target: Target) -> int:
        """The final rounds on `target`: as the spec says, else DEFAULT_FINAL_ROUNDS on a GPU and none in
        the interpreter (its wall-clock timings pick no GPU's winner; a final round there only costs)."""
        if self.final_rounds is not None:
            return self.final_rounds
        return 0 if target.interpreter else DEFAULT_FINAL_ROUNDS

    def ladder_on(self, target: Target, tuned: tuple[int, ...]) -> tuple[int, ...]:
        """The M ladder a shape family of this entry with tuned M values `tuned` is profiled at on
        `target` (empty: no profile). The default ladder runs up to the family's largest tuned M."""
        from autotune.core.ladder import serving_ladder

        if self.profile_m is None:
            return () if target.interpreter or not tuned else serving_ladder(max(tuned), tuned)
        if isinstance(self.profile_m, str):
            return serving_ladder(max(tuned), tuned) if tuned else ()
        return self.profile_m

    def labeled_problems(self) -> list[tuple[str, Problem]]:
        """(label, problem) pairs without duplicates; a model entry's labels name the layer and split
        ("attn.qkv tp8"), an op entry's are its op."""
        if not self.model:
            return [(self.op, p) for p in self.problems()]
        from autotune.sweeps.catalog import model_problems

        seen: dict[Problem, str] = {}
        for tp in self.tps:
            for ep in self.eps:
                split = f"tp{tp}" + (f" ep{ep}" if ep > 1 else "")
                for label, p in model_problems(
                    self.model, tp=tp, ep=ep, ms=self.ms, dtype=self.dtype, weights=self.weights or None
                ):
                    seen.setdefault(p, f"{label} {split}")
        return [(label, p) for p, label in seen.items()]

    def problems(self) -> list[Problem]:
        if self.model:
            return [p for _, p in self.labeled_problems()]
        return rules_of(self.op).spec_problems(
            self.op, self.ms, self.nks, self.layouts, self.dtype, dict(self.options)
        )

    def op_for(self, problem: Problem) -> Any:
        """The TunableOp that tunes `problem` of this entry (with the entry's options: the MoE's routing
        skew)."""
        return self._op(problem.op)

    def make_op(self) -> Any:
        """The TunableOp of an op entry; a model entry has problems of several ops: use `op_for`."""
        if self.model:
            raise ValueError(f"model entry {self.model!r} has problems of several ops: use op_for(problem)")
        return self._op(self.op)

    def _op(self, name: str) -> Any:
        from autotune.kernels import get_op

        op = get_op(name)
        if not isinstance(op, ProblemRules):  # an op without rules of its own has no options either
            return op
        return op.tuning_op(dict(self.options) if not self.model else {"zipf": self.zipf})


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec: a name and its entries. `text` is the source, stored with the sweep."""

    name: str
    entries: tuple[SweepEntry, ...]
    description: str = ""
    text: str = ""
    path: str = ""
    static: StaticPolicy = field(default_factory=StaticPolicy)

    def layers(self) -> dict[Problem, str]:
        """The layer and split of each problem of a model entry ("attn.qkv tp8"; the first entry's where
        several hold it); problems of op entries have none."""
        out: dict[Problem, str] = {}
        for entry in self.entries:
            if entry.model:
                for label, p in entry.labeled_problems():
                    out.setdefault(p, label)
        return out

    def problems(self) -> list[tuple[SweepEntry, Problem]]:
        """Every (entry, problem) pair, duplicates across entries removed (first wins)."""
        seen: set[Problem] = set()
        out = []
        for entry in self.entries:
            for p in entry.problems():
                if p not in seen:
                    seen.add(p)
                    out.append((entry, p))
        return out


#: The specs that ship with the package (this folder's *.toml), loadable by name: `autotune sweep smoke`.
EMBEDDED = Path(__file__).resolve().parent


def embedded_specs() -> list[str]:
    """The names of the specs that ship with the package."""
    return sorted(p.stem for p in EMBEDDED.glob("*.toml"))


def load_spec(path: str | Path) -> SweepSpec:
    """Reads and validates a spec file, or a spec that ships with the package named without its folder
    and ".toml" (`smoke`, `llama3-8b`) where no such file exists here; SpecError on any problem."""
    p = Path(path)
    if not p.exists() and p.parent == Path("."):
        # the name with ".toml" added, not put in place of a "suffix": a name may hold dots (llama-3.1-70b)
        named = EMBEDDED / (p.name if p.name.endswith(".toml") else f"{p.name}.toml")
        if named.is_file():
            p = named
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        shipped = ", ".join(embedded_specs())
        raise SpecError(f"{p}: no such spec file (the specs that ship by name: {shipped})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not UTF-8 text") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse_spec(text, source=str(p))


def parse_spec(text: str, source: str = "<spec>") -> SweepSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise SpecError(
            f"{source}: unknown top-level field(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(_TOP_KEYS))}"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{source}: missing or empty `name` (a string naming the sweep)")
    tables = data.get("sweep")
    if not isinstance(tables, list) or not tables:
        raise SpecError(f"{source}: no [[sweep]] tables; add at least one with op, m and nk")
    entries = tuple(_entry(t, f"{source}: [[sweep]] #{i + 1}") for i, t in enumerate(tables))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SpecError(f"{source}: `description` must be a string")
    static = data.get("static", {})
    if not isinstance(static, Mapping):
        raise SpecError(f"{source}: [static] must be a table")
    try:
        policy = StaticPolicy.from_mapping(static)
    except ValueError as exc:
        raise SpecError(f"{source}: {exc}") from None
    return SweepSpec(
        name=name.strip(), entries=entries, description=description, text=text, path=source, static=policy
    )


#: The dtypes a [[sweep]] table tunes an op in (`dtype`: the activations', or a quantized op's output).
SPEC_DTYPES = ("bf16", "fp16")


def _entry(table: Any, where: str) -> SweepEntry:
    if not isinstance(table, Mapping):
        raise SpecError(f"{where}: must be a table")
    if "model" in table:
        return _model_entry(table, where)
    if "op" not in table:
        raise SpecError(f"{where}: missing field `op`")
    op = table["op"]
    if not isinstance(op, str) or not is_known(op):
        raise SpecError(f"{where}: unknown op {op!r}; known: {', '.join(ops())}")
    rules = rules_of(op)
    allowed = _ENTRY_KEYS | rules.spec_keys
    unknown = set(table) - allowed
    if unknown:
        raise SpecError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
            f"allowed: {', '.join(sorted(allowed))}{_owners(unknown)}"
        )
    for key in _REQUIRED:
        if key not in table:
            raise SpecError(f"{where}: missing field `{key}`")
    dtype_name = _typed(table.get("dtype", "bf16"), str, "dtype", where)
    try:
        dtype = normalize_dtype(dtype_name)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if dtype not in SPEC_DTYPES:
        raise SpecError(f"{where}: op {op} supports dtype {' or '.join(SPEC_DTYPES)}, not {dtype}")
    ms_t = _ms(table["m"], where)
    nk = table["nk"]
    if not isinstance(nk, list) or not nk:
        raise SpecError(f"{where}: `nk` must be a non-empty list of [N, K] pairs")
    nks = []
    for pair in nk:
        if not isinstance(pair, list) or len(pair) != 2:
            raise SpecError(f"{where}: each `nk` item must be an [N, K] pair, got {pair!r}")
        nks.append((_positive(pair[0], "N", where), _positive(pair[1], "K", where)))
    layout = table.get("layout", "nk")
    layouts = tuple(layout) if isinstance(layout, list) else (layout,)
    if not layouts:
        raise SpecError(f"{where}: `layout` must be one of {', '.join(LAYOUTS)} or a non-empty list of them")
    for lay in layouts:
        if lay not in LAYOUTS:
            raise SpecError(f"{where}: unknown layout {lay!r}; known: {', '.join(LAYOUTS)}")
    tuning = _tuning(table, where)
    try:
        options = rules.spec_options(table, dtype)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    entry = SweepEntry(
        op=op,
        dtype=dtype,
        ms=ms_t,
        nks=tuple(nks),
        layouts=layouts,
        **tuning,
        options=tuple(sorted(options.items())),
    )
    try:
        entry.problems()
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return entry


def _owners(fields: set[str]) -> str:
    """A hint naming the ops whose own fields these are, if any."""
    hints = []
    for name in sorted(fields):
        owners = [op for op in ops() if name in rules_of(op).spec_keys]
        if owners:
            hints.append(f"`{name}` belongs to op {' and '.join(owners)}")
    return f" ({'; '.join(hints)})" if hints else ""


def _model_entry(table: Mapping[str, Any], where: str) -> SweepEntry:
    """A [[sweep]] table naming a catalog model: its problems come from `sweeps/catalog.py`."""
    from autotune.sweeps.catalog import MODELS

    shapes = {"op", "nk", "layout"}.union(*(rules_of(op).spec_keys for op in ops())) - _MODEL_KEYS
    clash = sorted(shapes & set(table))  # the fields of explicit shapes, any op's own among them
    if clash:
        fields = ", ".join(f"`{k}`" for k in clash)
        raise SpecError(
            f"{where}: `model` does not mix with {fields}: a model entry takes its shapes from the catalog; "
            "use a separate [[sweep]] table for explicit shapes"
        )
    unknown = set(table) - _MODEL_KEYS
    if unknown:
        raise SpecError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
            f"allowed with `model`: {', '.join(sorted(_MODEL_KEYS))}"
        )
    name = table["model"]
    if not isinstance(name, str) or name not in MODELS:
        raise SpecError(f"{where}: unknown model {name!r}; known: {', '.join(MODELS)}")
    model = MODELS[name]
    if "m" not in table:
        raise SpecError(f'{where}: missing field `m` (token counts: "decode", "prefill" or a list)')
    dtype_name = _typed(table.get("dtype", "bf16"), str, "dtype", where)
    try:
        dtype = normalize_dtype(dtype_name)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if dtype not in ("bf16", "fp16"):
        raise SpecError(f"{where}: model entries take activations in bf16 or fp16, not {dtype}")
    tps = _degrees(table.get("tp", 1), "tp", where)
    eps = _degrees(table.get("ep", 1), "ep", where)
    if not model.is_moe:
        extra = sorted(k for k in ("weights", "zipf") if k in table) + (["ep"] if eps != (1,) else [])
        if extra:
            fields = ", ".join(f"`{k}`" for k in extra)
            raise SpecError(f"{where}: model {name} is dense; drop {fields} (for MoE models only)")
    weights = _weights(table["weights"], dtype, where) if "weights" in table else ""
    zipf = _zipf(table, where)
    entry = SweepEntry(
        op="",
        dtype=dtype,
        ms=_ms(table["m"], where),
        nks=(),
        **_tuning(table, where),
        weights=weights,
        zipf=float(zipf),
        model=name,
        tps=tps,
        eps=eps,
    )
    try:
        entry.problems()  # every split checked here, before any work
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return entry


def _tuning(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """strategy, budget, seed, backends, warm_start, final_rounds and profile_m of an entry."""
    strategy = _typed(table.get("strategy", "optuna"), str, "strategy", where)
    if strategy not in STRATEGIES:
        raise SpecError(f"{where}: unknown strategy {strategy!r}; known: {', '.join(sorted(STRATEGIES))}")
    trials = table.get("trials")
    seconds = table.get("seconds")
    budget = Budget(
        trials=None if trials is None else _positive(trials, "trials", where),
        seconds=None if seconds is None else _positive_number(seconds, "seconds", where),
    )
    seed = _typed(table.get("seed", 0), int, "seed", where)
    backends = table.get("backends")
    if backends is not None:
        if not isinstance(backends, list) or not backends or not all(isinstance(b, str) for b in backends):
            raise SpecError(f"{where}: `backends` must be a non-empty list of names")
        backends = tuple(backends)
    warm_start = _typed(table.get("warm_start", True), bool, "warm_start", where)
    final_rounds = table.get("final_rounds")
    if final_rounds is not None and _typed(final_rounds, int, "final_rounds", where) < 0:
        raise SpecError(f"{where}: `final_rounds` must be 0 (off) or more, got {final_rounds}")
    return dict(
        strategy=strategy, budget=budget, seed=seed, backends=backends, warm_start=warm_start,
        final_rounds=final_rounds, profile_m=_profile_m(table.get("profile_m"), where),
    )  # fmt: skip


def _profile_m(value: Any, where: str) -> str | tuple[int, ...] | None:
    """`profile_m`: absent (None: the default), "serving", false or "none" (no profile), or a list of M."""
    from autotune.core.ladder import SERVING, parse_ladder

    if value is None:
        return None
    if value is False or value == "none":
        return ()
    if value == SERVING:
        return SERVING
    if isinstance(value, list) and value:
        try:
            return parse_ladder(value, max_m=1)
        except ValueError as exc:
            raise SpecError(f"{where}: `profile_m`: {exc}") from None
    raise SpecError(
        f'{where}: `profile_m` must be "serving", false or a non-empty list of positive integers, '
        f"got {value!r}"
    )


def _ms(value: Any, where: str) -> tuple[int, ...]:
    """M values: a list of positive integers and preset names ("decode", "prefill"), or one preset name;
    in order, duplicates dropped."""
    from autotune.sweeps.catalog import M_PRESETS

    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise SpecError(
            f"{where}: `m` must be a non-empty list of positive integers "
            f"(or preset names: {', '.join(M_PRESETS)})"
        )
    out: list[int] = []
    for v in items:
        if isinstance(v, str):
            if v not in M_PRESETS:
                presets = ", ".join(M_PRESETS)
                raise SpecError(f"{where}: `m` values must be integers, got {v!r} (or a preset: {presets})")
            out.extend(M_PRESETS[v])
        else:
            out.append(_positive(v, "m", where))
    return tuple(dict.fromkeys(out))


def _degrees(value: Any, name: str, where: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise SpecError(f"{where}: `{name}` must be a positive integer or a non-empty list of them")
    return tuple(dict.fromkeys(_positive(v, name, where) for v in items))


def _weights(value: Any, dtype: str, where: str) -> str:
    """The expert weights' dtype: the activations' or fp8e4m3 (128x128 block scales)."""
    try:
        weights = normalize_dtype(_typed(value, str, "weights", where))
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if weights not in (dtype, "fp8e4m3"):
        raise SpecError(f"{where}: {layer_op('experts')} `weights` are {dtype} or fp8e4m3, not {weights}")
    return weights


def _zipf(table: Mapping[str, Any], where: str) -> float:
    zipf = table.get("zipf", 0.0)
    if isinstance(zipf, bool) or not isinstance(zipf, (int, float)) or zipf < 0:
        raise SpecError(f"{where}: `zipf` must be a number >= 0, got {zipf!r}")
    return float(zipf)


def _typed(value: Any, kind: type, name: str, where: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"{where}: `{name}` must be a {kind.__name__}, got {value!r}")
    return value


def _positive(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: `{name}` values must be integers, got {value!r}")
    if value <= 0:
        raise SpecError(f"{where}: `{name}` must be positive, got {value}")
    return value


def _positive_number(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SpecError(f"{where}: `{name}` must be a positive number, got {value!r}")
    return float(value)


def spec_from_untuned(
    records: list[dict[str, Any]],
    *,
    device_key: str | None = None,
    strategy: str = "optuna",
    trials: int | None = 60,
    seconds: float | None = None,
    source: str = "untuned-shapes log",
) -> SweepSpec:
    """A spec that tunes the shapes a serving process logged as untuned (`autotune.dispatch` writes them).

    With `device_key`, only that GPU's records count: records of another GPU, and records without a
    device key (logged by a process that ran on no GPU), are skipped; so are records of ops this version
    cannot tune. SpecError when nothing is left.
    """
    groups: dict[tuple[str, str, str, int, int], set[int]] = {}
    for r in records:
        if device_key is not None and r.get("device_key") != device_key:
            continue
        op = r.get("op")
        if not isinstance(op, str) or not is_known(op) or rules_of(op).spec_keys:
            continue  # an op with fields of its own (experts, FP8 flavour): tune it from a spec instead
        try:
            dtype = normalize_dtype(str(r.get("dtype", "bf16")))
            key = (str(r["op"]), dtype, str(r.get("layout", "nk")), int(r["n"]), int(r["k"]))
            m = int(r["m"])
        except (KeyError, TypeError, ValueError):
            continue
        if m > 0 and key[3] > 0 and key[4] > 0:
            groups.setdefault(key, set()).add(m)
    if not groups:
        raise SpecError(f"{source}: no untuned shapes of this GPU to tune")
    lines = ['name = "untuned"', f'description = "shapes from the {source}"']
    for (op, dtype, layout, n, k), ms in sorted(groups.items()):
        lines += [
            "",
            "[[sweep]]",
            f'op = "{op}"',
            f'dtype = "{dtype}"',
            f'layout = "{layout}"',
            f"m = {sorted(ms)}",
            f"nk = [[{n}, {k}]]",
            f'strategy = "{strategy}"',
        ]
        if trials is not None:
            lines.append(f"trials = {trials}")
        if seconds is not None:
            lines.append(f"seconds = {seconds}")
    return parse_spec("\n".join(lines) + "\n", source=source)
