"""Executors: the workers a sweep runs on (one per GPU, locally or on Ray) and the sweep's log files."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.engine.workers import InlineWorker, ProcessWorker, Worker, check_devices, device_env

if TYPE_CHECKING:
    from autotune.core.target import Target
    from autotune.engine.bench import BenchSettings

__all__ = ["EXECUTORS", "log_stem", "make_workers", "parse_gpus", "sweep_log"]

#: "local": a worker process per GPU of this host (crash isolation); "ray": a Ray actor per GPU of a
#: cluster; "inline": in this process, one GPU, no isolation (for debugging).
EXECUTORS: tuple[str, ...] = ("local", "ray", "inline")

log = logging.getLogger(__name__)


def parse_gpus(text: str | None) -> list[int] | None:
    """GPU indices from "0,1,3" or "0-3"; None for "all" or nothing. ValueError for anything else."""
    if text is None or text.strip().lower() == "all":
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"--gpus {text!r}: give indices like 0,1,3 or 0-3, or all")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    if len(set(out)) != len(out):
        raise ValueError(f"--gpus {text!r}: an index repeats")
    return out


def log_stem(log_dir: str | Path, name: str) -> Path:
    """The path, without suffix, of a new sweep's log files: DIR/NAME-YYYYmmdd-HHMMSS-PID."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "sweep"
    return Path(log_dir) / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def make_workers(
    executor: str,
    *,
    gpus: Sequence[int] | None,
    interpret: bool,
    timeout_s: float,
    stem: Path | None,
    target: Target | None = None,
    address: str | None = None,
    settings: BenchSettings | None = None,
) -> list[Worker]:
    """The workers of a sweep (ValueError, before anything starts, for a GPU index that does not exist,
    an executor that cannot run here, or a Ray cluster without GPUs).

    local: a ProcessWorker per GPU index (all visible GPUs when `gpus` is None); under the interpreter
    each index is one interpreter process. ray: a RayWorker per index, or per GPU of the cluster.
    inline: one InlineWorker on `target`. Worker logs go to STEM.WORKER.log.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    if timeout_s <= 0:
        raise ValueError(f"--trial-timeout must be positive, got {timeout_s:g}")

    def log_path(name: str) -> Path | None:
        return None if stem is None else stem.with_name(f"{stem.name}.{name}.log")

    if executor == "inline":
        if target is None:
            raise ValueError("the inline executor needs the local target")
        if gpus is not None and len(gpus) > 1:
            raise ValueError("the inline executor runs on one GPU: give one --gpus index, or use local")
        return [InlineWorker(target, settings)]
    if executor == "ray":
        from autotune.engine.rayworker import RayWorker, connect, ray_gpu_count

        try:
            connect(address, interpret=interpret)
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
        if gpus is not None:
            count = len(gpus)
        elif interpret:
            count = 1
        else:
            count = ray_gpu_count()
            if count == 0:
                raise ValueError("the Ray cluster has no GPUs (ray.cluster_resources() lists none)")
        return [
            RayWorker(name=f"ray{i}", interpret=interpret, settings=settings, timeout_s=timeout_s)
            for i in range(count)
        ]
    if interpret:
        indices = list(gpus) if gpus is not None else [0]
        return [
            ProcessWorker(
                name=f"cpu{i}",
                interpret=True,
                settings=settings,
                timeout_s=timeout_s,
                log_path=log_path(f"cpu{i}"),
            )
            for i in indices
        ]
    devices = check_devices(gpus)
    if not devices:
        raise ValueError("no GPU visible to this process")
    indices = list(gpus) if gpus is not None else list(range(len(devices)))
    return [
        ProcessWorker(
            name=f"gpu{i}",
            env=device_env(dev),
            settings=settings,
            timeout_s=timeout_s,
            log_path=log_path(f"gpu{i}"),
        )
        for i, dev in zip(indices, devices, strict=True)
    ]


@contextmanager
def sweep_log(path: Path | None) -> Iterator[None]:
    """Everything autotune logs at INFO and above also goes to `path` while the block runs (the console
    keeps its own level)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
    logger = logging.getLogger("autotune")
    saved = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
        handler.close()
