"""Target: the identity and published limits of a GPU (or of Triton's CPU interpreter)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

__all__ = [
    "ARCH_LIMITS",
    "Target",
    "TargetError",
    "interpreting",
    "local_target",
    "part_limits",
    "running_target",
    "toolchain_versions",
]

MiB = 1 << 20
KiB = 1 << 10


class TargetError(RuntimeError):
    """No usable target: no GPU where one is needed, or an unknown arch name."""


#: Published limits per arch. Peaks are dense bf16 TFLOP/s and HBM GB/s of the flagship part.
ARCH_LIMITS: dict[str, dict[str, Any]] = {
    "gfx942": dict(
        vendor="amd",
        name="AMD Instinct MI300X",
        cu_count=304,
        xcds=8,
        wave_size=64,
        lds_bytes=64 * KiB,
        vgprs=512,
        llc_bytes=256 * MiB,
        memory_bytes=192 * 1024 * MiB,
        peak_tflops=1307.0,
        mem_gbps=5300.0,
    ),
    "gfx950": dict(
        vendor="amd",
        name="AMD Instinct MI355X",
        cu_count=256,
        xcds=8,
        wave_size=64,
        lds_bytes=160 * KiB,
        vgprs=512,
        llc_bytes=256 * MiB,
        memory_bytes=288 * 1024 * MiB,
        peak_tflops=2516.0,
        mem_gbps=8000.0,
    ),
    "sm_90": dict(
        vendor="nvidia",
        name="NVIDIA H100 80GB HBM3",
        cu_count=132,
        xcds=1,
        wave_size=32,
        lds_bytes=227 * KiB,
        vgprs=255,
        llc_bytes=50 * MiB,
        memory_bytes=80 * 1024 * MiB,
        peak_tflops=989.0,
        mem_gbps=3350.0,
    ),
    "interpreter": dict(
        vendor="cpu",
        name="Triton CPU interpreter",
        cu_count=4,  # modelled as a small 4-CU device so that split-K paths are exercised
        xcds=1,
        wave_size=1,
        lds_bytes=1 << 30,
        vgprs=1 << 30,
        llc_bytes=32 * MiB,
        memory_bytes=0,
        peak_tflops=0.0,
        mem_gbps=0.0,
    ),
}

# Parts that share an arch but not its memory system.
_NAME_OVERRIDES: dict[str, dict[str, Any]] = {
    "H200": dict(mem_gbps=4800.0, llc_bytes=60 * MiB),
    "MI325X": dict(memory_bytes=256 * 1024 * MiB, mem_gbps=6000.0),
    "MI350X": dict(peak_tflops=2307.0),
}


def part_limits(arch: str, name: str) -> dict[str, Any]:
    """The published limits of `arch` (ARCH_LIMITS; empty for an arch it does not list), with those of
    the part whose device name is `name` where it differs from its arch's (an H200's memory, say)."""
    fields = dict(ARCH_LIMITS.get(arch, {}))
    for key, over in _NAME_OVERRIDES.items():
        if key in name:
            fields.update(over)
    return fields


@dataclass(frozen=True)
class Target:
    """The identity of one GPU and its toolchain.

    `fingerprint()` hashes everything that can change a measurement (hardware and toolchain) and is the
    GPU's key in the database. `device_key()` hashes the hardware alone; the dispatch guard compares it.
    `interpreter` marks Triton's CPU interpreter: its results live under their own target and are never
    mixed with a GPU's.
    """

    vendor: str
    arch: str
    name: str
    cu_count: int
    xcds: int = 1
    wave_size: int = 64
    lds_bytes: int = 64 * KiB
    vgprs: int = 512
    llc_bytes: int = 0
    memory_bytes: int = 0
    peak_tflops: float = 0.0
    mem_gbps: float = 0.0
    pci_id: str = ""  # product id where the platform exposes one; informational, not part of identity
    toolchain: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    present: bool = False

    @property
    def is_amd(self) -> bool:
        return self.vendor == "amd"

    @property
    def is_nvidia(self) -> bool:
        return self.vendor == "nvidia"

    @property
    def interpreter(self) -> bool:
        return self.arch == "interpreter"

    @property
    def sm(self) -> int:
        """An NVIDIA target's compute capability as a number (sm_90, sm_90a: 90); 0 for any other arch."""
        digits = self.arch.removeprefix("sm_").rstrip("a")
        return int(digits) if self.is_nvidia and self.arch.startswith("sm_") and digits.isdigit() else 0

    @property
    def tma(self) -> bool:
        """Tensor descriptors load and store through a TMA unit: NVIDIA sm_90 and newer."""
        return self.sm >= 90

    @classmethod
    def for_arch(cls, arch: str) -> Target:
        """A target with the published limits of `arch` (gfx942, gfx950, sm_90, interpreter).

        For compile-only work where no such GPU is present (`present` is False).
        """
        arch = arch.lower()
        if arch in ("mi300x", "mi300"):
            arch = "gfx942"
        elif arch in ("mi355x", "mi350x"):
            arch = "gfx950"
        elif arch in ("h100", "h200", "hopper", "sm90"):
            arch = "sm_90"
        if arch not in ARCH_LIMITS:
            raise TargetError(f"unknown target {arch!r}; known: {', '.join(ARCH_LIMITS)}")
        return cls(arch=arch, toolchain=toolchain_versions(), **ARCH_LIMITS[arch])

    @classmethod
    def interpreter_target(cls) -> Target:
        """Triton's CPU interpreter (TRITON_INTERPRET=1): a target of its own, never a GPU's."""
        return replace(
            cls.for_arch("interpreter"), name=f"Triton CPU interpreter ({platform.machine()})", present=True
        )

    def identity(self) -> dict[str, Any]:
        """The hardware identity fields (what `device_key` hashes)."""
        return dict(vendor=self.vendor, arch=self.arch, name=self.name, cu_count=self.cu_count)

    def device_key(self) -> str:
        return _digest(self.identity())

    def fingerprint(self) -> str:
        """Hash of hardware identity + toolchain versions: the GPU's key in the database."""
        return _digest({**self.identity(), "toolchain": self.toolchain})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Target:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**fields)

    def roofline_us(self, flops: float, min_bytes: float) -> float:
        """Lower bound on time (µs) from the published peaks; 0 where peaks are unknown."""
        if self.peak_tflops <= 0 or self.mem_gbps <= 0:
            return 0.0
        return max(flops / (self.peak_tflops * 1e6), min_bytes / (self.mem_gbps * 1e3))

    def __str__(self) -> str:
        return f"{self.name} ({self.arch}, {self.cu_count} CUs)"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def toolchain_versions() -> dict[str, str]:
    """Versions of torch, triton and the GPU runtime (CUDA or HIP) that are installed."""
    out: dict[str, str] = {}
    try:
        import torch

        out["torch"] = str(torch.__version__)
        if getattr(torch.version, "hip", None):
            out["hip"] = str(torch.version.hip)
        elif getattr(torch.version, "cuda", None):
            out["cuda"] = str(torch.version.cuda)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    try:
        import triton

        out["triton"] = str(triton.__version__)
    except ImportError:
        pass
    return out


@lru_cache(maxsize=8)
def local_target(device: int = 0) -> Target:
    """The GPU `device` of this machine as torch sees it. Raises TargetError without one."""
    import torch

    if not torch.cuda.is_available():
        raise TargetError(
            "no GPU visible to torch (torch.cuda.is_available() is False). Run on a machine with a "
            "CUDA or ROCm GPU, or pass --interpret to run the kernels in Triton's CPU interpreter."
        )
    if device >= torch.cuda.device_count():
        raise TargetError(f"GPU index {device} does not exist; {torch.cuda.device_count()} visible")
    props = torch.cuda.get_device_properties(device)
    is_hip = bool(getattr(torch.version, "hip", None))
    if is_hip:
        arch = str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    base = part_limits(arch, str(props.name))
    base.update(
        vendor="amd" if is_hip else "nvidia",
        name=str(props.name),
        cu_count=int(props.multi_processor_count),
        memory_bytes=int(props.total_memory),
    )
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    if l2 and not is_hip:
        base["llc_bytes"] = l2
    base.setdefault("llc_bytes", max(l2, 64 * MiB))
    base.setdefault("wave_size", 64 if is_hip else 32)
    smem = getattr(props, "shared_memory_per_block_optin", 0)
    if smem:
        base["lds_bytes"] = int(smem)
    return Target(arch=arch, toolchain=toolchain_versions(), present=True, **base)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() not in ("", "0", "false", "no")


def running_target() -> Target | None:
    """The target kernels launch on in this process: GPU 0, else the interpreter if enabled, else None."""
    try:
        import torch

        if torch.cuda.is_available():
            return local_target(torch.cuda.current_device())
    except ImportError:  # pragma: no cover
        return None
    return Target.interpreter_target() if interpreting() else None
