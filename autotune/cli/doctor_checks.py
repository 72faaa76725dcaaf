"""The checks of `autotune doctor`: each gives `Check` values, one per printed line, and never raises.

A check that cannot finish is a failed `Check` with the first line of its error. Here: the toolchain, the
GPUs, the tables and the database; the ops' defaults and the timings are in `autotune.cli.doctor_ops`.
"""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.core.target import Target

log = logging.getLogger(__name__)

#: The archs our kernels are tuned for; any other GPU runs them with untuned defaults.
TUNED_ARCHS = ("gfx942", "gfx950", "sm_90")
#: Distributions that install the top-level package `triton` (PyPI's, and PyTorch's own builds).
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")


@dataclass(frozen=True)
class Check:
    """One line of the doctor: `ok` True (passed), False (failed: exit 1) or None (does not apply,
    informational). A passing check with a `hint` is a warning."""

    name: str
    ok: bool | None
    detail: str
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_line(exc: BaseException) -> str:
    """The root cause of `exc` as one line: its type and the first line of its message."""
    from autotune.core.result import root_cause

    root = root_cause(exc)
    lines = str(root).strip().splitlines()
    return f"{type(root).__name__}: {lines[0]}" if lines else type(root).__name__


def guarded(name: str, check: Callable[[], Iterable[Check]]) -> Iterator[Check]:
    """The checks of `check`, then a failed Check named `name` where it raised."""
    try:
        yield from check()
    except Exception as exc:  # a check never crashes the verb
        log.debug("doctor check %s raised", name, exc_info=True)
        yield Check(name, False, first_line(exc), "the check itself failed: run with -vv for the traceback")


class Budget:
    """The doctor's time budget: `left()` seconds until its deadline (never negative)."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.start


# -- 1. toolchain ----------------------------------------------------------------------------------------


def toolchain() -> Iterator[Check]:
    """torch's version and build, the imported Triton's version and folder; the Triton distributions."""
    import torch

    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    build = f"ROCm {hip}" if hip else f"CUDA {cuda}" if cuda else "CPU"
    torch_text = f"torch {torch.__version__} ({build} build)"
    try:
        import triton
    except Exception as exc:  # not installed, or a broken install that fails on import
        yield Check(
            "toolchain",
            False,
            f"{torch_text}; triton does not import ({first_line(exc)})",
            "a CUDA or ROCm torch brings its own Triton; on a CPU-only machine install the triton extra "
            "(pip install '.[triton]' in a checkout)",
        )
        return
    folder = Path(str(getattr(triton, "__file__", "") or "?")).parent
    version = str(getattr(triton, "__version__", "?"))
    yield Check("toolchain", True, f"{torch_text}; triton {version} from {folder}")
    yield triton_packages(version)


def triton_distributions() -> list[tuple[str, str]]:
    """(name, version) of every installed distribution that provides the top-level package `triton`."""
    names = {_normal(n) for n in metadata.packages_distributions().get("triton", [])}
    for name in TRITON_DISTRIBUTIONS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        names.add(name)
    found = []
    for name in sorted(names):
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, "?"))
    return found


def torch_pinned_triton() -> tuple[str, str] | None:
    """(name, version) of the Triton distribution the installed torch requires with `==`, if any."""
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^]]*\])?\s*==\s*([^\s;,]+)", line)
        if m and _normal(m.group(1)) in TRITON_DISTRIBUTIONS:
            return _normal(m.group(1)), m.group(2)
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _base(version: str) -> str:
    return version.split("+")[0]


def triton_packages(imported: str) -> Check:
    """Failed where two distributions provide `triton` (one overwrote the other's files: the classic broken
    ROCm install); a warning where the imported version is not the one torch pins."""
    found = triton_distributions()
    pinned = torch_pinned_triton()
    listed = ", ".join(f"{n} {v}" for n, v in found)
    if len(found) > 1:
        keep = f"{pinned[0]}=={pinned[1]}" if pinned else "the one your torch build names"
        return Check(
            "triton packages",
            False,
            f"{len(found)} distributions provide `triton` ({listed}): one overwrote the other's files",
            f"keep only {keep}: pip uninstall -y {' '.join(n for n, _ in found)}, then install it again",
        )
    if not found:
        return Check("triton packages", True, f"triton {imported} is imported from no installed distribution")
    if pinned and _base(pinned[1]) != _base(imported):
        return Check(
            "triton packages",
            True,
            f"{listed} is imported, but torch pins {pinned[0]} {pinned[1]}",
            f"kernels may not compile or run as tuned: pip install {pinned[0]}=={pinned[1]} "
            "(from torch's own package index)",
        )
    return Check("triton packages", True, f"one distribution provides `triton`: {listed}")


#: (distribution, what it is for): dependencies first, then optional packages.
_DEPENDENCIES = ("sqlalchemy", "optuna", "pandas")
_OPTIONAL = (("psycopg", "PostgreSQL, the postgres extra"), ("ray", "--executor ray, the ray extra"))


def packages() -> Iterator[Check]:
    """The database and search dependencies' versions (failed where one is missing) and the optional
    packages, on one line."""
    parts, missing = [], []
    for name in _DEPENDENCIES:
        version = _version(name)
        parts.append(f"{name} {version}" if version else f"{name} missing")
        if not version:
            missing.append(name)
    for name, role in _OPTIONAL:
        version = _version(name)
        parts.append(f"{name} {version}" if version else f"{name} not installed ({role})")
    hint = f"reinstall autotune: its dependencies {', '.join(missing)} are missing" if missing else ""
    yield Check("packages", not missing, "; ".join(parts), hint)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


# -- 2. GPUs ---------------------------------------------------------------------------------------------


def gpus(found: list[Target]) -> Iterator[Check]:
    """A line per visible GPU (appended to `found`), or one saying there is none and what compile-only
    work does instead."""
    import torch

    from autotune.core.target import local_target

    if not torch.cuda.is_available():
        hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
        why = (
            "torch is a CPU build"
            if not (hip or cuda)
            else f"torch's {'ROCm' if hip else 'CUDA'} runtime finds no device (driver, permissions, "
            "HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)"
        )
        yield Check(
            "gpu",
            None,
            f"no GPU visible to torch ({why})",
            "compile-only work: `autotune sweep SPEC` compiles for gfx942 by default and stores the cost "
            "model's predictions; --target gfx950|sm_90 for another arch; --interpret runs the kernels in "
            "Triton's CPU interpreter",
        )
        return
    for i in range(torch.cuda.device_count()):
        target = local_target(i)
        found.append(target)
        yield _gpu_line(i, target, torch.cuda.get_device_properties(i))


def _gpu_line(index: int, target: Target, props: Any) -> Check:
    parts = [props.name if hasattr(props, "name") else target.name, target.arch]
    raw_arch = str(getattr(props, "gcnArchName", "") or "") if target.is_amd else ""  # CUDA: the name
    if raw_arch and raw_arch != target.arch:
        parts[-1] = f"{target.arch} ({raw_arch})"
    parts.append(f"{target.cu_count} {'CUs' if target.is_amd else 'SMs'}")
    if target.is_amd and target.arch in TUNED_ARCHS:
        parts.append(f"{target.xcds} XCDs")
    parts.append(f"{target.memory_bytes / 2**30:.0f} GiB")
    if target.llc_bytes:
        parts.append(f"{'LLC' if target.is_amd else 'L2'} {target.llc_bytes >> 20} MiB")
    clock = gpu_clock_mhz(index, props)
    parts.append(f"clock {clock} MHz" if clock else "clock unknown")
    detail = ", ".join(parts)
    if target.arch not in TUNED_ARCHS:
        return Check(
            f"gpu {index}",
            True,
            f"{detail}: an arch our kernels are not tuned for",
            f"the kernels run, but their defaults were tuned on {', '.join(TUNED_ARCHS)}: sweep before "
            "serving (`autotune sweep SPEC`)",
        )
    return Check(f"gpu {index}", True, f"{detail}: tuned arch")


def gpu_clock_mhz(index: int, props: Any) -> int | None:
    """The GPU's clock: its properties' `clock_rate` (kHz) where the build has one, else what torch reads
    through pynvml or amdsmi; None where neither answers."""
    rate = getattr(props, "clock_rate", None)
    if isinstance(rate, (int, float)) and rate > 0:
        return int(rate / 1000)
    try:
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mhz = torch.cuda.clock_rate(index)
        return int(mhz) if mhz else None
    except Exception:  # no pynvml / amdsmi, or a build without clock_rate
        return None


# -- 5. tables -------------------------------------------------------------------------------------------


def tables(device: Target | None) -> Iterator[Check]:
    """Each table $AUTOTUNE_TABLES names: loaded or not (why), its target, and whether it fits `device`
    (the running GPU, or the interpreter; None: neither) as the dispatcher's device-key guard decides."""
    from autotune.dispatch import Table, TableError
    from autotune.dispatch.dispatcher import ENV_TABLES

    value = os.environ.get(ENV_TABLES, "")
    items = [item.strip() for item in value.split(os.pathsep) if item.strip()]
    if not items:
        yield Check(
            "tables",
            None,
            f"${ENV_TABLES} is not set: every served call runs its op's fallback",
            f"after a sweep, `autotune emit --out table.json` and set {ENV_TABLES}=table.json",
        )
        return
    for item in items:
        path = Path(item).expanduser()
        if not path.exists():
            yield Check(
                f"table {item}", False, "does not exist", f"fix ${ENV_TABLES}: it names a missing path"
            )
            continue
        files = sorted(p for p in path.glob("*.json") if p.is_file()) if path.is_dir() else [path]
        if not files:
            yield Check(f"table {item}", False, "a folder with no *.json tables", f"fix ${ENV_TABLES}")
        for file in files:
            name = f"table {file if path.is_dir() else item}"
            try:
                table = Table.load(file)
            except (TableError, OSError) as exc:
                yield Check(
                    name, False, f"not loaded: {str(exc).splitlines()[0]}", "emit it again (`autotune emit`)"
                )
                continue
            yield _table_line(name, table, device)


def _table_line(name: str, table: Any, device: Target | None) -> Check:
    from autotune.dispatch.dispatcher import ENV_TABLES

    shapes = f"{len(table.entries)} shape{'s' if len(table.entries) != 1 else ''}"
    kind = "predicted" if table.predicted else "measured"
    about = f"{shapes}, {kind}, tuned on {table.target}"
    if device is None or table.device_key != device.device_key():
        here = str(device) if device is not None else "no GPU here"
        return Check(
            name,
            False,
            f"{about}: does not fit this device ({here}); its shapes run the fallback",
            f"emit a table on this GPU (`autotune emit`) or point ${ENV_TABLES} at the right one",
        )
    return Check(name, True, f"{about}: fits this device")


# -- 6. database -----------------------------------------------------------------------------------------


def database(url: str | None) -> Iterator[Check]:
    """The database of `url` ($AUTOTUNE_DB, else ./autotune.db): opened read-only where it exists (never
    created), with its schema version."""
    from autotune.db import SCHEMA_VERSION, Store, StoreError
    from autotune.db.engine import mask_url, resolve_url, sqlite_path

    resolved = resolve_url(url)
    path = sqlite_path(resolved)
    shown = (url or os.environ.get("AUTOTUNE_DB") or "").strip() or "./autotune.db"
    if path is not None and not path.exists():
        yield Check(
            "database",
            None,
            f"no database at {shown} (--db, else $AUTOTUNE_DB, else ./autotune.db)",
            "`autotune sweep SPEC` makes one; `autotune import` fills one from vLLM, aiter, TunableOp files",
        )
        return
    try:
        with Store(resolved, read_only=True) as store:
            del store
    except StoreError as exc:
        yield Check("database", False, str(exc).splitlines()[0], "name another with --db or $AUTOTUNE_DB")
        return
    yield Check(
        "database",
        True,
        f"{mask_url(resolved) if path is None else shown} opens read-only, schema version {SCHEMA_VERSION}",
    )
