"""Static features of a compiled config, and the checks that flag real mistakes before any GPU time."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.core.config import Config
from autotune.core.target import Target

__all__ = [
    "CHECKS",
    "DEFAULT_CHECKS",
    "MIX_CLASSES",
    "VALU_PER_MMA_FACTOR",
    "VALU_PER_MMA_PEERS",
    "WARNINGS",
    "StaticFeatures",
    "StaticFinding",
    "StaticPolicy",
    "check_features",
    "valu_outliers",
]


#: The classes of an instruction mix (`StaticFeatures.mix`), in the order they are shown, each with what it
#: counts (`autotune.engine.isa` classifies the instructions).
MIX_CLASSES: dict[str, str] = {
    "valu": "vector ALU: every other vector instruction (AMD `v_*`; PTX arithmetic, moves, conversions)",
    "salu": "scalar ALU: AMD `s_*` that are neither scalar memory nor control (none in PTX)",
    "smem": "scalar and constant memory: kernel arguments and uniform loads (`s_load*`, `s_buffer_*`; "
    "PTX `ld.param`, `ld.const`)",
    "ctrl": "control and synchronization: branches, waits, barriers, nops, priorities, the end",
    "mma": "matrix instructions (`v_mfma*` with the scaled `v_mfma_scale*`, `v_smfmac*`, `v_wmma*`; "
    "PTX `mma`, `wgmma.mma_async`)",
    "agpr": "moves between VGPRs and AGPRs (`v_accvgpr_*`): accumulator copies, and how LLVM spills "
    "VGPRs to AGPRs on gfx90a and newer (none in PTX)",
    "vmem": "global memory (`global_*`, `buffer_*`, `flat_*`; PTX `ld/st.global`, generic `ld/st`, "
    "atomics, `cp.async`, `cp.async.bulk`)",
    "lds": "LDS, shared memory (`ds_*`; PTX `ld/st.shared`, `ldmatrix`, `stmatrix`)",
    "spill": "spill traffic: scratch (`scratch_*`, an instruction LLVM marks as a spill or reload) and "
    "the lane writes and reads of SGPR spills (`v_writelane`, `v_readlane`, in a kernel that reports "
    "spilled SGPRs); PTX `ld/st.local`",
    "other": "anything else",
}


@dataclass(frozen=True)
class StaticFeatures:
    """What the compiler says about one config on one target, without launching it.

    AMD: `vgprs`, `agprs` and `sgprs` per lane/wave, `occupancy` in waves per SIMD. NVIDIA: `vgprs` holds
    the registers per thread (`agprs`, `sgprs` are 0), `occupancy` is resident blocks per SM.
    `spills` is the number of spilled registers (AMD) or the 4-byte words of local memory per thread
    (NVIDIA, which reports only bytes); `scratch_bytes` is private (AMD) or local (NVIDIA) memory per
    thread. `lds_bytes` is the shared memory of one workgroup. `mma` lists the distinct matrix
    instructions (``v_mfma_*``, ``wgmma.*``, ``mma.*``); `load_bits` / `store_bits` the distinct widths
    of global loads and stores (an asynchronous copy to shared memory counts as a load of its width);
    `tma` says whether tiles are loaded or stored by tensor-memory-accelerator bulk copies. `mix` is the
    instruction mix: (class, count) pairs in `MIX_CLASSES` order, zero counts left out, each instruction
    of the binary counted once (static, not executed, counts; PTX on NVIDIA); empty where unknown
    (features stored before it was read).
    `error` is set (and everything else zero) when the config did not compile.
    """

    arch: str
    compiled: bool = True
    error: str = ""
    vgprs: int = 0
    agprs: int = 0
    sgprs: int = 0
    spills: int = 0
    scratch_bytes: int = 0
    lds_bytes: int = 0
    occupancy: int = 0
    occupancy_unit: str = ""
    mma: tuple[str, ...] = ()
    load_bits: tuple[int, ...] = ()
    store_bits: tuple[int, ...] = ()
    tma: tuple[str, ...] = ()
    mix: tuple[tuple[str, int], ...] = ()
    compile_s: float = 0.0
    toolchain: dict[str, str] = field(default_factory=dict, compare=False)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StaticFeatures:
        data = json.loads(text)
        for key in ("mma", "load_bits", "store_bits", "tma"):
            data[key] = tuple(data.get(key, ()))
        data["mix"] = tuple((str(k), int(n)) for k, n in data.get("mix", ()))
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @classmethod
    def failed(cls, arch: str, error: str, compile_s: float = 0.0) -> StaticFeatures:
        return cls(arch=arch, compiled=False, error=error, compile_s=compile_s)

    @classmethod
    def mix_of(cls, counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        """`counts` by class as a `mix`: in `MIX_CLASSES` order, zeros left out; ValueError for an
        unknown class."""
        unknown = sorted(set(counts) - set(MIX_CLASSES))
        if unknown:
            raise ValueError(f"unknown instruction class(es) {', '.join(unknown)}")
        return tuple((k, int(counts[k])) for k in MIX_CLASSES if counts.get(k))

    def count(self, cls: str) -> int:
        """The instructions of class `cls` in the mix (0 where it has none, or the mix is unknown)."""
        return dict(self.mix).get(cls, 0)

    @property
    def valu_per_mma(self) -> float | None:
        """Vector ALU instructions per matrix instruction; None without matrix instructions (or a mix)."""
        mma = self.count("mma")
        return self.count("valu") / mma if mma else None

    def mix_summary(self) -> str:
        """The mix on one line (`valu 232  salu 121  mma 80 ... (valu/mma 2.9)`); "" where unknown."""
        text = "  ".join(f"{k} {n}" for k, n in self.mix)
        ratio = self.valu_per_mma
        return text + (f"  (valu/mma {ratio:.1f})" if ratio is not None and text else "")

    def summary(self) -> str:
        """One line for people: registers, spills, LDS, occupancy and matrix instructions."""
        if not self.compiled:
            return f"compile error: {self.error.splitlines()[0] if self.error else '?'}"
        regs = (
            f"vgpr {self.vgprs} agpr {self.agprs} sgpr {self.sgprs}" if self.sgprs else f"regs {self.vgprs}"
        )
        mma = ",".join(_short_mma(m) for m in self.mma) or "no mma"
        return (
            f"{regs}, spills {self.spills}, scratch {self.scratch_bytes} B, "
            f"LDS {self.lds_bytes // 1024} KiB, "
            f"occupancy {self.occupancy} {self.occupancy_unit}, {mma}, "
            f"ld {'/'.join(map(str, self.load_bits)) or '-'} st {'/'.join(map(str, self.store_bits)) or '-'}"
            + (f", tma {'+'.join(self.tma)}" if self.tma else "")
        )


def _short_mma(name: str) -> str:
    return name.replace("v_mfma_", "").replace("wgmma.mma_async.sync.aligned.", "wgmma.")


@dataclass(frozen=True)
class StaticFinding:
    """One reason a compiled config is a mistake: `check` is one of CHECKS."""

    check: str
    reason: str


#: The static checks, each with what it catches.
CHECKS: dict[str, str] = {
    "compile": "the config does not compile for the target",
    "mfma_shape": "matrix_instr_nonkdim did not produce the matching MFMA shape",
    "spills": "registers spill to scratch (local) memory",
    "lds": "shared memory (LDS) of one workgroup exceeds the target's",
    "occupancy": "occupancy falls under the floor",
}

DEFAULT_CHECKS: tuple[str, ...] = tuple(CHECKS)

#: Findings that warn and never prune, each with what it says. They compare a config with its peers (the
#: other configs of the same problem compiled in the same check), so `check_features` cannot find them.
WARNINGS: dict[str, str] = {
    "valu_per_mma": "far more vector ALU instructions per matrix instruction than the configs like it",
}

#: How far above the median of its peers a config's VALU instructions per matrix instruction must be to
#: be flagged. Tile shape, split-K and the epilogue alone move the ratio: in the configs `autotune
#: check` compiled for gfx950 bf16 GEMMs (M 16 and 256, N = K = 4096), each stayed within 0.8-2.3x of the
#: median of the configs with its MFMA (small tiles amortize their address arithmetic over fewer MFMAs).
#: Three times is outside that spread: vector work per matrix instruction that the tile does not explain
#: (emulated conversions, layout shuffles, a dequantization the matrix unit could do).
VALU_PER_MMA_FACTOR = 3.0

#: The fewest configs (the flagged one included) whose median is a norm at all.
VALU_PER_MMA_PEERS = 3


#: The version of how features are read from a binary, part of their key in the database; bumped when
#: that changes (2: NVIDIA spills to the stack frame count; 3: the instruction mix).
FEATURES_VERSION = "3"


@dataclass(frozen=True)
class StaticPolicy:
    """Which checks prune a config in a sweep, and the occupancy floor (waves per SIMD on AMD, blocks per
    SM on NVIDIA). `prune` empty turns static pruning off. `candidates`: how many of the cost model's
    best configs a compile-only sweep compiles per problem."""

    prune: tuple[str, ...] = DEFAULT_CHECKS
    min_occupancy: int = 1
    candidates: int = 8

    def __post_init__(self) -> None:
        unknown = [c for c in self.prune if c not in CHECKS]
        if unknown:
            raise ValueError(f"unknown static check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
        if self.min_occupancy < 0:
            raise ValueError(f"min_occupancy must be >= 0, got {self.min_occupancy}")
        if self.candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {self.candidates}")

    @property
    def enabled(self) -> bool:
        return bool(self.prune)

    def pruning(self, found: Sequence[StaticFinding], exempt: Set[str] = frozenset()) -> list[StaticFinding]:
        """The findings of `found` that prune a config: those of a check the policy prunes by and the
        config's backend is not `exempt` from (`Backend.exempt`)."""
        return [f for f in found if f.check in self.prune and f.check not in exempt]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StaticPolicy:
        known = {"prune", "min_occupancy", "candidates"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(unknown)} in [static]; known: {', '.join(sorted(known))}"
            )
        prune = data.get("prune", list(DEFAULT_CHECKS))
        if isinstance(prune, bool):
            prune = list(DEFAULT_CHECKS) if prune else []
        if not isinstance(prune, Sequence) or isinstance(prune, str):
            raise ValueError(f"[static] prune must be a list of check names or a boolean, got {prune!r}")
        numbers = {}
        for key, default in (("min_occupancy", 1), ("candidates", 8)):
            value = data.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"[static] {key} must be an integer, got {value!r}")
            numbers[key] = value
        return cls(prune=tuple(str(c) for c in prune), **numbers)


def check_features(
    features: StaticFeatures, config: Config, target: Target, *, min_occupancy: int = 1
) -> list[StaticFinding]:
    """Every mistake the compiled `features` of `config` on `target` show (empty: none)."""
    if not features.compiled:
        first = features.error.strip().splitlines()[0] if features.error.strip() else "unknown error"
        return [StaticFinding("compile", f"does not compile for {target.arch}: {first[:300]}")]
    found: list[StaticFinding] = []
    nonkdim = config.get("matrix_instr_nonkdim")
    if target.is_amd and nonkdim:
        want = f"{int(nonkdim)}x{int(nonkdim)}"
        mfma = [m for m in features.mma if m.startswith("v_mfma")]
        if not any(f"_{want}x" in m for m in mfma):
            got = ", ".join(mfma) or "no MFMA at all"
            found.append(
                StaticFinding("mfma_shape", f"matrix_instr_nonkdim={nonkdim} wants {want} MFMA, got {got}")
            )
    if features.spills or features.scratch_bytes:
        what = f"{features.spills} register(s)" if target.is_amd else "local memory"
        found.append(
            StaticFinding("spills", f"spills {what} to {features.scratch_bytes} B of scratch per lane")
        )
    if target.lds_bytes and features.lds_bytes > target.lds_bytes:
        found.append(
            StaticFinding(
                "lds",
                f"needs {features.lds_bytes // 1024} KiB of shared memory per workgroup; "
                f"{target.arch} has {target.lds_bytes // 1024} KiB",
            )
        )
    if features.occupancy < min_occupancy:
        found.append(
            StaticFinding(
                "occupancy",
                f"occupancy {features.occupancy} {features.occupancy_unit} "
                f"is under the floor {min_occupancy}",
            )
        )
    return found


def valu_outliers(features: Mapping[Config, StaticFeatures]) -> dict[Config, StaticFinding]:
    """The configs whose vector ALU instructions per matrix instruction are over VALU_PER_MMA_FACTOR
    times the median of their peers, each with a `valu_per_mma` warning.

    Peers are the configs of `features` (one problem's, compiled for one target) with the same backend
    and the same matrix instructions: a 32x32 MFMA does the work of two 16x16 ones, so their counts are
    not comparable. Configs without a mix or without matrix instructions are never flagged, and a group
    of fewer than VALU_PER_MMA_PEERS has no norm.
    """
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[Config, float]]] = {}
    for config, f in features.items():
        ratio = f.valu_per_mma if f.compiled else None
        if ratio is not None:
            groups.setdefault((config.backend, f.mma), []).append((config, ratio))
    found: dict[Config, StaticFinding] = {}
    for (_, mma), members in groups.items():
        if len(members) < VALU_PER_MMA_PEERS:
            continue
        norm = statistics.median(r for _, r in members)
        for config, ratio in members:
            if norm > 0 and ratio > VALU_PER_MMA_FACTOR * norm:
                found[config] = StaticFinding(
                    "valu_per_mma",
                    f"{ratio:.1f} vector ALU instructions per matrix instruction, {ratio / norm:.1f}x the "
                    f"median {norm:.1f} of {len(members)} configs with {', '.join(mma)}",
                )
    return found
