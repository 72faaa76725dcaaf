"""Why a prefill GEMM's sweep timing and its served timing disagree (GPU): four timing methods side by side.

A 4096-row bf16 prefill GEMM (B as (N, K)) whose persistent TMA config beat cuBLAS by 1% in a sweep's
final round ran at 0.93x and 0.96x of cuBLAS when served (`autotune.kernels.gemm`, CUDA-graph replay
over rotating buffers larger than L2). Per shape, this script times cuBLAS, the heuristic default and up
to `--others` other TMA configs of the space by four methods, in `--rounds` rounds; in each round every
method times every config, the configs interleaved (their order rotates from round to round):

- `search`: `Benchmarker(GEMM, target).run(problem, config, full=True)` with the default settings, as a
  sweep times (events method above 40 µs: an L2 flush and a ~100 µs GPU spin before each timed launch,
  so the GPU idles between GEMMs); its median;
- `graph_b2b`: a CUDA graph of 20 back-to-back launches from `GEMM.prepare`, rotating over input sets
  whose bytes exceed twice the L2 cache; µs per launch, median over replays;
- `served`: the same, each launch being the run-time entry point `launch_config(config, a, b, out=c)`;
- `sustained`: `--sustain-s` seconds of back-to-back replays of every config's `graph_b2b` graph in
  turn (the GPU at its power-limited steady state), then per config `--settle-s` seconds of its own
  replays, then timed as `graph_b2b`.

A background thread samples the SM clock, power draw, temperature and clock event reasons (nvidia-smi
in loop mode, else pynvml, else nothing) and gives their means per (method, config) over the time that
method spent on that config (for `sustained`, its settle and timed replays). Each config's output is
checked against the fp32 reference through both launch paths first; a config that fails is left out.

    python benchmarks/served_timing.py --out results/
    python benchmarks/served_timing.py --quick --out results/   # one shape, 2 rounds: a smoke run

3.5 to 4 minutes on an H100 at the defaults (12 shapes; an estimate is printed first). Prints a table per
shape last (µs, cuBLAS µs / config µs, mean SM MHz and W per method); the details, every per-replay time
and every telemetry sample go to --out (served_timing.json; served_timing.csv: one row per shape, config
and method).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import csv
import dataclasses
import functools
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune.bench import classify_error, graph_replays, rel_error
from autotune.config import Config, Value
from autotune.problem import Problem
from autotune.result import TrialStatus
from autotune.target import Target

METHODS = ("search", "graph_b2b", "served", "sustained")
CUBLAS = "cublas"
DEFAULT = "default"
TORCH = Config(backend="torch")

DEFAULT_M = (4096, 3072, 1536)
DEFAULT_NK = ((28672, 4096), (6144, 4096), (4096, 14336), (14336, 8192))

#: Launches captured per graph (as the Benchmarker's graph method), replays timed per config and round.
GRAPH_LAUNCHES = 20
MIN_REPLAYS = 3
MAX_REPLAYS = 400
#: Most rotating input sets per shape (as BenchSettings.max_input_sets).
MAX_SETS = 32
#: Each call of a graph's sampler while keeping the GPU busy lasts about this long (then one host sync).
CHUNK_S = 0.05

#: The TMA tile the other configs start from: 128 x 256, 8 warps, 3 stages, persistent (the default's
#: tile at these M); `CANDIDATES` replace some knobs.
_TMA_BASE: dict[str, Value] = dict(
    backend="triton_tma",
    BLOCK_M=128,
    BLOCK_N=256,
    BLOCK_K=64,
    GROUP_M=8,
    SPLIT_K=1,
    PERSISTENT=1,
    TAIL_SPLIT=0,
    EPILOGUE_N=0,
    num_warps=8,
    num_stages=3,
)
#: Other TMA configs timed beside the default, first ones first: (label, knobs replacing `_TMA_BASE`).
#: A candidate equal to a config already picked, or outside the problem's space, is left out.
CANDIDATES: tuple[tuple[str, dict[str, Value]], ...] = (
    ("persist", {}),  # 128 x 256, persistent, no tail split (the default splits the tail where it can)
    ("one-tile", {"PERSISTENT": 0}),  # the same tile, one program per tile
    ("slice-s4", {"EPILOGUE_N": 64, "num_stages": 4}),  # C stored in 64-column slices: room for 4 stages
    ("sq128-w4", {"BLOCK_N": 128, "num_warps": 4, "num_stages": 5}),  # the square tile, 4 warps
)

#: NVML clock event reasons (nvidia-smi's clocks_event_reasons.active): the software power cap, and
#: thermal or power-brake slowdowns.
REASON_POWER_CAP = 0x4
REASON_THERMAL = 0x20 | 0x40
REASON_HW_SLOWDOWN = 0x8 | 0x80

#: The estimate's assumptions: TFLOP/s of a large bf16 GEMM on an H100, host and GPU time per events run
#: beyond the kernel (flush, spin, records), one-off time per shape (inputs, checks, captures) and
#: compile time per distinct Triton config.
ASSUMED_TFLOPS = 650.0
EVENTS_OVERHEAD_S = 150e-6
SHAPE_SETUP_S = 3.0
COMPILE_S = 4.0


# -- pure helpers (tested on the CPU) -----------------------------------------------------------------
def parse_nk(text: str) -> list[tuple[int, int]]:
    """'28672x4096,6144x4096' -> [(28672, 4096), (6144, 4096)]."""
    out = []
    for part in text.split(","):
        n, _, k = part.strip().lower().partition("x")
        if not n or not k:
            raise argparse.ArgumentTypeError(f"expected NxK, got {part!r}")
        out.append((int(n), int(k)))
    return out


def parse_ints(text: str) -> list[int]:
    """'4096,3072' -> [4096, 3072]."""
    return [int(v) for v in text.split(",") if v.strip()]


def input_sets(min_bytes: float, llc_bytes: int) -> int:
    """Rotating input sets for the graph methods: at least 2, and enough that their bytes exceed twice
    the last-level cache (at most MAX_SETS)."""
    need = math.ceil(2 * llc_bytes / max(min_bytes, 1.0))
    return max(2, min(MAX_SETS, need))


def rotate(labels: Sequence[str], r: int) -> list[str]:
    """`labels` starting at position r (mod its length): round r's order."""
    if not labels:
        return []
    k = r % len(labels)
    return [*labels[k:], *labels[:k]]


def pick_configs(
    problem: Problem, target: Target, others: int = 3, extra: Sequence[Config] = ()
) -> tuple[dict[str, Config], list[str]]:
    """The configs to time, by label: cuBLAS, the heuristic default, `extra` (user1, ...) and up to `others`
    of `CANDIDATES`; and a note for each one left out (outside the space, or equal to one picked)."""
    from autotune.kernels.gemm_space import gemm_default_config, gemm_space

    space = gemm_space(problem, target)
    chosen: dict[str, Config] = {CUBLAS: TORCH, DEFAULT: gemm_default_config(problem, target)}
    notes: list[str] = []

    def add(label: str, config: Config) -> bool:
        why = space.check(config)
        same = next((k for k, v in chosen.items() if v == config), None)
        if why is not None:
            notes.append(f"{label} ({config.short()}) left out: {why}")
        elif same is not None:
            notes.append(f"{label} left out: it is {same}")
        else:
            chosen[label] = config
            return True
        return False

    for i, config in enumerate(extra, 1):
        add(f"user{i}", config)
    picked = 0
    for label, knobs in CANDIDATES:
        if picked < others and add(label, Config({**_TMA_BASE, **knobs})):
            picked += 1
    return chosen, notes


def estimate_s(
    shapes: Iterable[tuple[int, int, int]],
    n_configs: int,
    rounds: int,
    graph_s: float,
    sustain_s: float,
    settle_s: float,
    tflops: float = ASSUMED_TFLOPS,
) -> float:
    """Seconds a run should take (compiling not counted): per shape and round, each config's Benchmarker
    run (events: 0.15 s of kernel time, 10 to 200 runs), two graph timings, the sustained warm-up and
    each config's settle and graph timing."""
    total = 0.0
    for M, N, K in shapes:
        t = 2.0 * M * N * K / (tflops * 1e12)
        reps = max(10, min(200, int(0.15 / t)))
        search = reps * (t + EVENTS_OVERHEAD_S) + 4 * t + 0.01
        graph = max(graph_s, MIN_REPLAYS * GRAPH_LAUNCHES * t) + GRAPH_LAUNCHES * t
        per_round = n_configs * (search + 2 * graph) + sustain_s + n_configs * (settle_s + graph)
        total += rounds * per_round + SHAPE_SETUP_S
    return total


@dataclass(frozen=True)
class Sample:
    """One telemetry reading: wall time (time.time()), SM MHz, board W, °C, clock event reasons (NVML
    bitmask; None where unknown). NaN for a value not read."""

    t: float
    sm_mhz: float
    power_w: float
    temp_c: float
    reasons: int | None = None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return math.nan


def parse_smi_line(line: str, fields: Sequence[str], read_t: float) -> Sample | None:
    """A line of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`, read at `read_t`; None
    for a line that does not fit. The line's own `timestamp` (local time, ms) is its time where it is
    within 2 s of `read_t` (nvidia-smi may hold lines back in a pipe), else `read_t`."""
    values = [v.strip() for v in line.strip().split(",")]
    if len(values) != len(fields) or not line.strip():
        return None
    got = dict(zip(fields, values, strict=True))
    t = read_t
    if "timestamp" in got:
        with contextlib.suppress(ValueError):
            stamp = datetime.strptime(got["timestamp"], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            if abs(stamp - read_t) < 2.0:
                t = stamp
    power = _number(got.get("power.draw.instant", "nan"))
    if math.isnan(power):
        power = _number(got.get("power.draw", "nan"))
    reasons = None
    for name in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if name in got:
            with contextlib.suppress(ValueError):
                reasons = int(got[name], 16)
    mhz, temp = _number(got.get("clocks.sm", "nan")), _number(got.get("temperature.gpu", "nan"))
    sample = Sample(t, mhz, power, temp, reasons)
    if math.isnan(sample.sm_mhz) and math.isnan(sample.power_w):
        return None
    return sample


def _mean(xs: Iterable[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return statistics.fmean(vals) if vals else math.nan


def window_stats(samples: Sequence[Sample], windows: Iterable[tuple[float, float]]) -> dict[str, float]:
    """Means of the samples (sorted by time) taken inside any of `windows` ((t0, t1), wall time): SM MHz,
    W, °C, the fractions of samples power-capped and thermally slowed (of those with reasons), and their
    count."""
    times = [s.t for s in samples]
    picked: set[int] = set()
    for t0, t1 in windows:
        picked.update(range(bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)))
    inside = [samples[i] for i in sorted(picked)]
    known = [s.reasons for s in inside if s.reasons is not None]
    return dict(
        sm_mhz=_mean(s.sm_mhz for s in inside),
        power_w=_mean(s.power_w for s in inside),
        temp_c=_mean(s.temp_c for s in inside),
        power_capped=_mean(float(bool(r & REASON_POWER_CAP)) for r in known),
        thermal=_mean(float(bool(r & (REASON_THERMAL | REASON_HW_SLOWDOWN))) for r in known),
        samples=float(len(inside)),
    )


def median_or_nan(xs: Sequence[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return statistics.median(vals) if vals else math.nan


def _cell(x: float, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if x is None or math.isnan(x) else f"{x:{width}.{digits}f}"


def format_table(title: str, rows: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """Lines of one shape's table: a row per config label, per method µs, cuBLAS µs / config µs, mean SM
    MHz and W. `rows[label][method]` holds median_us, ratio, sm_mhz and power_w (NaN: not measured)."""
    group = 27
    lines = [title]
    lines.append(f"{'':10} | " + " | ".join(f"{m:^{group}}" for m in METHODS))
    sub = f"{'µs':>9} {'cub/x':>6} {'MHz':>5} {'W':>4}"
    lines.append(f"{'config':10} | " + " | ".join(sub for _ in METHODS))
    for label, per in rows.items():
        cells = []
        for m in METHODS:
            r = per.get(m, {})
            cells.append(
                f"{_cell(r.get('median_us', math.nan), 9, 2)} {_cell(r.get('ratio', math.nan), 6, 3)} "
                f"{_cell(r.get('sm_mhz', math.nan), 5, 0)} {_cell(r.get('power_w', math.nan), 4, 0)}"
            )
        lines.append(f"{label[:10]:10} | " + " | ".join(cells))
    return lines


# -- telemetry --------------------------------------------------------------------------------------
SMI_REQUIRED = ("clocks.sm", "power.draw", "temperature.gpu")
#: Optional fields, each group's first valid name taken: the line's own time, power not averaged over a
#: second (Ampere and newer average power.draw), and why clocks are below their maximum.
SMI_OPTIONAL = (
    ("timestamp",),
    ("power.draw.instant",),
    ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
)
SMI_INFO = ("name", "driver_version", "power.limit", "enforced.power.limit", "clocks.max.sm",
            "clocks.applications.graphics", "persistence_mode")  # fmt: skip


def _smi(ident: str, fields: Sequence[str]) -> str | None:
    """One line of an nvidia-smi query of `fields`, or None where it fails."""
    cmd = ["nvidia-smi", "-i", ident, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = r.stdout.strip().splitlines()
    return lines[0] if r.returncode == 0 and lines else None


class GpuMonitor:
    """Samples one GPU's SM clock, power draw, temperature and clock event reasons every `interval_s` in
    a background thread: `nvidia-smi` in loop mode where it answers, else pynvml where importable, else
    nothing (`source` "none").

    Never raises: a failed start leaves `source` "none" with the reason in `note`. `samples` grows while
    running; read it after `stop()`. Driven from one thread. It never touches torch: a thread calling the
    CUDA runtime during a graph capture would break the capture.
    """

    def __init__(self, idents: Sequence[str], interval_s: float = 0.05) -> None:
        self.idents = list(idents)
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.source = "none"
        self.fields: list[str] = []
        self.info: dict[str, str] = {}
        self.note = ""
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        if shutil.which("nvidia-smi"):
            for ident in self.idents:
                if _smi(ident, SMI_REQUIRED) is not None:
                    self._start_smi(ident)
                    return
            self.note = f"nvidia-smi did not answer for {self.idents}; "
        reader = self._nvml_reader()
        if reader is None:
            self.note += "; no telemetry"
            return
        self.source = "pynvml (power.draw: NVML power usage)"
        self._thread = threading.Thread(target=self._poll, args=(reader,), daemon=True)
        self._thread.start()

    def _start_smi(self, ident: str) -> None:
        fields = list(SMI_REQUIRED)
        for group in SMI_OPTIONAL:
            for name in group:
                line = _smi(ident, [*fields, name])
                if line is not None and not line.split(",")[-1].strip().startswith("["):
                    fields.append(name)
                    break
        line = _smi(ident, SMI_INFO)
        if line is not None and len(line.split(",")) == len(SMI_INFO):
            self.info = dict(zip(SMI_INFO, (v.strip() for v in line.split(",")), strict=True))
        else:
            for name in SMI_INFO:
                value = _smi(ident, [name])
                if value is not None:
                    self.info[name] = value.strip()
        cmd = ["nvidia-smi", "-i", ident, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
               "-lms", str(max(1, round(self.interval_s * 1000)))]  # fmt: skip
        if shutil.which("stdbuf"):  # a line as soon as it is written (the timestamp field covers the rest)
            cmd = ["stdbuf", "-oL", *cmd]
        try:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
            )
        except OSError as exc:
            self.note = f"nvidia-smi loop failed to start: {exc}"
            return
        self.fields, self.source = fields, f"nvidia-smi -i {ident}"
        self._thread = threading.Thread(target=self._read_smi, args=(self._proc, fields), daemon=True)
        self._thread.start()

    def _read_smi(self, proc: subprocess.Popen[str], fields: list[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sample = parse_smi_line(line, fields, time.time())
            if sample is not None:
                self.samples.append(sample)

    def _nvml_reader(self) -> Callable[[], Sample] | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = None
            for ident in self.idents:
                with contextlib.suppress(Exception):
                    handle = (
                        pynvml.nvmlDeviceGetHandleByUUID(ident)
                        if ident.startswith(("GPU-", "MIG-"))
                        else pynvml.nvmlDeviceGetHandleByIndex(int(ident))
                    )
                if handle is not None:
                    break
            if handle is None:
                self.note += f"pynvml found no GPU {self.idents}"
                return None
            reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )

            def read() -> Sample:
                reasons = None
                if reasons_of is not None:
                    with contextlib.suppress(Exception):
                        reasons = int(reasons_of(handle))
                return Sample(
                    time.time(),
                    float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                    pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
                    reasons,
                )

            read()
            self.fields = ["clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active"]
            return read
        except Exception as exc:  # no pynvml, no driver: go on without telemetry
            self.note += f"pynvml: {type(exc).__name__}: {exc}"
            return None

    def _poll(self, read: Callable[[], Sample]) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(read())
            except Exception as exc:  # stop sampling, keep what was read
                self.note += f"; sampling stopped: {type(exc).__name__}: {exc}"
                return

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=3)
        if self._thread is not None:
            self._thread.join(timeout=3)

    def power_field(self) -> str:
        if "power.draw.instant" in self.fields:
            return "power.draw.instant"
        return "power.draw (averaged over about 1 s on Ampere and newer)" if self.fields else ""


# -- GPU side ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Graph:
    """A captured graph of `launches` launches; `sample(count)` replays it `count` times and gives µs per
    launch for each replay (`autotune.bench.graph_replays`)."""

    sample: Callable[[int], list[float]]
    launches: int

    def replays_for(self, seconds: float, us_per_launch: float) -> int:
        return max(1, math.ceil(seconds / max(us_per_launch * 1e-6 * self.launches, 1e-9)))


def make_sets(problem: Problem, n: int, seed: int = 1) -> list[tuple[Any, Any, Any]]:
    """`n` input sets (A, B, C) of `problem` on the GPU, normal random values as `GEMM.make_inputs` (drawn
    on the GPU: the host's generator takes seconds for a 28672 x 4096 weight)."""
    import torch

    from autotune.kernels.gemm_op import torch_dtype

    dtype, out_dtype = torch_dtype(problem.dtype_a), torch_dtype(problem.dtype_out)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b_shape = (problem.N, problem.K) if problem.layout == "nk" else (problem.K, problem.N)
    sets = []
    for _ in range(n):
        a = torch.randn(problem.M, problem.K, generator=gen, device="cuda", dtype=dtype)
        b = torch.randn(*b_shape, generator=gen, device="cuda", dtype=dtype)
        c = torch.empty(problem.M, problem.N, device="cuda", dtype=out_dtype)
        sets.append((a, b, c))
    return sets


def launch_paths(
    problem: Problem, config: Config, target: Target, sets: Sequence[tuple[Any, Any, Any]]
) -> dict[str, list[Callable[[], object]]]:
    """Per graph method, a launch per input set: `GEMM.prepare`'s launch, and the entry point's call."""
    from autotune.kernels import GEMM, launch_config

    return {
        "graph_b2b": [GEMM.prepare(problem, config, target, (a, b), c) for a, b, c in sets],
        "served": [functools.partial(launch_config, config, a, b, problem.layout, out=c) for a, b, c in sets],
    }


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def _failed(exc: BaseException, what: str) -> str:
    """The status text of a config that failed; re-raises a device fault (nothing can run after it)."""
    status = classify_error(exc)
    if status is TrialStatus.CRASHED:
        raise exc
    return f"{status.value} during {what}: {type(exc).__name__}: {str(exc).strip()[:300]}"


def check_config(
    launches: Mapping[str, Sequence[Callable[[], object]]], out: Any, ref: Any, tol: float
) -> tuple[str, dict[str, float]]:
    """Runs each path's first launch once into a NaN-filled `out` (the first call compiles) and compares
    with `ref`: ("ok", errors) where every relative error is within `tol`."""
    errs: dict[str, float] = {}
    for path, fns in launches.items():
        try:
            out.fill_(float("nan"))
            _sync()
            fns[0]()
            _sync()
        except Exception as exc:
            return _failed(exc, f"the {path} path's first launch"), errs
        errs[path] = rel_error(out, ref)
    bad = {k: v for k, v in errs.items() if not v <= tol}
    if bad:
        return "wrong result: " + ", ".join(
            f"{k} relative error {v:.3g} > {tol:g}" for k, v in bad.items()
        ), errs
    return "ok", errs


def capture(launches: Sequence[Callable[[], object]]) -> tuple[Graph | None, str]:
    """A Graph of GRAPH_LAUNCHES (at least one per set) of `launches`, or None and why capture failed."""
    n = max(GRAPH_LAUNCHES, len(launches))
    try:
        return Graph(graph_replays(launches, n), n), ""
    except Exception as exc:  # this launch cannot be captured: report it, time the others
        why = _failed(exc, "graph capture")
        with contextlib.suppress(Exception):
            _sync()
        return None, why


def time_graph(graph: Graph, seconds: float, est_us: float | None) -> list[float]:
    """One replay untimed, then replays for about `seconds` (MIN_REPLAYS to MAX_REPLAYS): µs per launch
    of each."""
    first = graph.sample(1)[0]
    count = graph.replays_for(seconds, est_us or first)
    return graph.sample(max(MIN_REPLAYS, min(MAX_REPLAYS, count)))


def keep_busy(
    graphs: Sequence[tuple[str, Graph]], seconds: float, est_us: Mapping[str, float]
) -> list[tuple[float, str, float]]:
    """Replays `graphs` in turn, CHUNK_S at a time, for `seconds`: (wall time, label, median µs per launch)
    of each chunk."""
    trace: list[tuple[float, str, float]] = []
    end = time.perf_counter() + seconds
    while graphs and time.perf_counter() < end:
        for label, graph in graphs:
            est = est_us.get(label) or graph.sample(1)[0]
            us = graph.sample(min(MAX_REPLAYS, graph.replays_for(CHUNK_S, est)))
            trace.append((time.time(), label, statistics.median(us)))
            if time.perf_counter() >= end:
                break
    return trace


def measure_shape(
    problem: Problem, target: Target, configs: Mapping[str, Config], args: argparse.Namespace
) -> dict[str, Any]:
    """Checks, then times every config of `problem` by every method in `args.rounds` rounds; gives the
    shape's record: statuses, errors, and one run per (round, method, config) with its wall-time window."""
    import torch

    from autotune.bench import Benchmarker
    from autotune.kernels import GEMM

    n_sets = input_sets(problem.min_bytes(), target.llc_bytes)
    sets = make_sets(problem, n_sets)
    ref = GEMM.reference(problem, (sets[0][0], sets[0][1]))
    tol = GEMM.tolerance(problem)
    status: dict[str, str] = {}
    errors: dict[str, dict[str, float]] = {}
    paths: dict[str, dict[str, list[Callable[[], object]]]] = {}
    for label, config in configs.items():
        try:
            paths[label] = launch_paths(problem, config, target, sets)
        except Exception as exc:
            status[label] = _failed(exc, "prepare")
            continue
        t = time.perf_counter()
        status[label], errors[label] = check_config(paths[label], sets[0][2], ref, tol)
        print(
            f"  {label}: {status[label]} ({time.perf_counter() - t:.1f} s, first launches compile)",
            flush=True,
        )
    del ref
    live = [label for label in configs if status[label] == "ok"]
    graphs: dict[str, dict[str, Graph | None]] = {"graph_b2b": {}, "served": {}}
    captures: dict[str, str] = {}
    for label in live:
        for method in graphs:
            graph, why = capture(paths[label][method])
            graphs[method][label] = graph
            if why:
                captures[f"{method} {label}"] = why
                print(f"  {label} {method}: {why}", flush=True)
    # `paths` stays alive with the graphs: a prepared launch owns its split-K workspace, which they write
    bench = Benchmarker(GEMM, target)
    bench.run(problem, TORCH, full=True)  # builds its inputs (host time) and fixes its method, on cuBLAS
    runs: list[dict[str, Any]] = []
    est: dict[str, float] = {}

    def record(method: str, label: str, r: int, t0: float, us: list[float], **extra: Any) -> None:
        runs.append(dict(method=method, config=label, round=r, t0=t0, t1=time.time(),
                         median_us=median_or_nan(us), us=us, **extra))  # fmt: skip

    for r in range(args.rounds):
        t_round = time.perf_counter()
        order = rotate(live, r)
        for method in METHODS:
            if method == "search":
                for label in order:
                    t0 = time.time()
                    res = bench.run(problem, configs[label], full=True)
                    timing = res.timing
                    us = [timing.median_us] if res.ok and timing is not None else []
                    record(method, label, r, t0, us, status=res.status.value, error=res.error or "",
                           timing=(dataclasses.asdict(timing) if timing is not None else None))  # fmt: skip
            elif method in ("graph_b2b", "served"):
                for label in order:
                    graph = graphs[method][label]
                    if graph is None:
                        continue
                    t0 = time.time()
                    us = time_graph(graph, args.graph_s, est.get(label))
                    record(method, label, r, t0, us)
                    if method == "graph_b2b":
                        est[label] = statistics.median(us)
            else:
                ready = [(label, g) for label in order if (g := graphs["graph_b2b"][label]) is not None]
                t0 = time.time()
                trace = keep_busy(ready, args.sustain_s, est)
                record("sustain_warm", "all", r, t0, [u for _, _, u in trace],
                       trace=[(t, label, u) for t, label, u in trace])  # fmt: skip
                for label, graph in ready:
                    t0 = time.time()
                    keep_busy([(label, graph)], args.settle_s, est)
                    record(method, label, r, t0, time_graph(graph, args.graph_s, est.get(label)))
        print(f"  round {r + 1}/{args.rounds}: {time.perf_counter() - t_round:.1f} s", flush=True)
    shape = dict(
        M=problem.M, N=problem.N, K=problem.K, dtype=problem.dtype_a, layout=problem.layout,
        min_mb=problem.min_bytes() / 1e6, input_sets=n_sets, graph_launches=max(GRAPH_LAUNCHES, n_sets),
        search_method=bench.method_for(problem), status=status, rel_error=errors, captures=captures,
        runs=runs,
    )  # fmt: skip
    del bench, graphs, paths, sets
    gc.collect()
    torch.cuda.empty_cache()
    return shape


def summarize(
    shape: Mapping[str, Any], labels: Sequence[str], samples: Sequence[Sample]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per config label and method: the median of the round medians, cuBLAS µs / config µs, the rounds
    and the telemetry means over that method's windows on that config."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    runs = shape["runs"]
    for label in labels:
        out[label] = {}
        for method in METHODS:
            mine = [x for x in runs if x["method"] == method and x["config"] == label]
            med = median_or_nan([x["median_us"] for x in mine])
            stats = window_stats(samples, [(x["t0"], x["t1"]) for x in mine])
            out[label][method] = dict(median_us=med, rounds=float(len(mine)), **stats)
    for method in METHODS:
        base = out.get(CUBLAS, {}).get(method, {}).get("median_us", math.nan)
        for label in labels:
            r = out[label][method]
            r["ratio"] = base / r["median_us"] if r["median_us"] > 0 else math.nan
    return out


def _gpu_idents() -> list[str]:
    """Names nvidia-smi and NVML know this process's GPU by: its UUID, then its index."""
    import torch

    idents = []
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        idents.append(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    idents.append(visible if visible.isdigit() else str(torch.cuda.current_device()))
    return idents


CSV_COLUMNS = (
    "median_us",
    "ratio",
    "rounds",
    "sm_mhz",
    "power_w",
    "temp_c",
    "power_capped",
    "thermal",
    "samples",
)


def write_csv(path: Path, shapes: Sequence[Mapping[str, Any]]) -> None:
    """One row per shape, config and method of the shapes' summaries."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("M", "N", "K", "label", "config", "status", "method", *CSV_COLUMNS))
        for shape in shapes:
            for label, per in shape.get("summary", {}).items():
                status = shape["status"].get(label, "")
                for method, r in per.items():
                    values = (f"{r[c]:.4g}" for c in CSV_COLUMNS)
                    w.writerow((shape["M"], shape["N"], shape["K"], label, shape["configs_short"][label],
                                status, method, *values))  # fmt: skip


def print_shape(shape: Mapping[str, Any]) -> None:
    """The shape's table, then what each label is, and any config left out or not captured."""
    title = (
        f"\n{shape['M']} x {shape['N']} x {shape['K']} bf16, B (N, K): {shape['input_sets']} input sets "
        f"of {shape['min_mb']:.0f} MB, search timed by {shape['search_method']}"
    )
    for line in format_table(title, shape.get("summary", {})):
        print(line)
    warm = shape.get("sustain_warm_telemetry")
    if warm and warm["samples"]:
        print(f"  sustained warm-ups (all configs in turn): {warm['sm_mhz']:.0f} MHz, "
              f"{warm['power_w']:.0f} W, {warm['temp_c']:.0f} °C, power-capped in "
              f"{warm['power_capped']:.0%} of samples")  # fmt: skip
    for label, short in shape["configs_short"].items():
        st = shape["status"].get(label, "")
        print(f"  {label:10} {short}" + ("" if st == "ok" else f"  [{st}]"))
    for line in [*shape["notes"], *(f"{k}: {v}" for k, v in shape["captures"].items())]:
        print(f"  {line}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")),
        help="folder for served_timing.json and .csv (default $OUT, else bench-out)")  # fmt: skip
    add("--m", type=parse_ints, default=list(DEFAULT_M), help="rows of A, e.g. 4096,3072,1536")
    add("--nk", type=parse_nk, default=list(DEFAULT_NK),
        help="N x K of each weight, e.g. 28672x4096,6144x4096,4096x14336,14336x8192")  # fmt: skip
    add("--rounds", type=int, default=3, help="rounds; each times every method and config")
    others = ", ".join(label for label, _ in CANDIDATES)
    add("--others", type=int, default=3,
        help=f"other TMA configs per shape beside the default, the first valid of: {others}")  # fmt: skip
    add("--config", action="append", default=[], metavar="JSON",
        help="an extra config to time (a Config's JSON, a sweep's winner); repeatable")  # fmt: skip
    add("--graph-s", type=float, default=0.05,
        help="seconds of timed replays per config and round in the graph methods")  # fmt: skip
    add("--sustain-s", type=float, default=2.0,
        help="seconds of back-to-back replays of all configs before each sustained round")  # fmt: skip
    add("--settle-s", type=float, default=0.15,
        help="seconds of a config's own replays before its sustained timing")  # fmt: skip
    add("--interval-ms", type=int, default=50, help="telemetry sampling interval")
    add("--quick", action="store_true", help="smoke run: the first M and N x K only, 2 rounds")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.m, args.nk, args.rounds = args.m[:1], args.nk[:1], 2
    extra = [Config.from_json(text) for text in args.config]
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/served_timing.py needs a GPU", file=sys.stderr)
        return 2
    from autotune.target import local_target

    target = local_target()
    problems = [Problem.gemm(m, n, k, "bf16", "nk") for m in args.m for n, k in args.nk]
    picks = {p: pick_configs(p, target, args.others, extra) for p in problems}
    n_configs = max(len(c) for c, _ in picks.values())
    distinct = {c for chosen, _ in picks.values() for c in chosen.values() if c.backend != "torch"}
    est = estimate_s([(p.M, p.N, p.K) for p in problems], n_configs, args.rounds, args.graph_s,
                     args.sustain_s, args.settle_s) + COMPILE_S * len(distinct)  # fmt: skip
    print(f"{target.name}: {len(problems)} shapes, up to {n_configs} configs, {args.rounds} rounds; "
          f"estimated {est:.0f} s ({len(distinct)} Triton configs to compile)", flush=True)  # fmt: skip

    monitor = GpuMonitor(_gpu_idents(), args.interval_ms / 1000)
    monitor.start()
    print(f"telemetry: {monitor.source}; fields {monitor.fields}; {monitor.note}".rstrip("; "), flush=True)
    t_start = time.time()
    shapes: list[dict[str, Any]] = []
    info: dict[str, Any] = dict(
        gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d %H:%M"),
        llc_bytes=target.llc_bytes, args={k: str(v) for k, v in vars(args).items()}, estimate_s=est,
        gpu_info=monitor.info, t_start=t_start, shapes=shapes,
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)

    def write(final: bool = False) -> None:
        samples = sorted(monitor.samples, key=lambda s: s.t)
        info["monitor"] = dict(source=monitor.source, fields=monitor.fields, power=monitor.power_field(),
                               note=monitor.note, interval_ms=args.interval_ms)  # fmt: skip
        info["elapsed_s"] = time.time() - t_start
        info["samples_columns"] = ["t_rel_s", "sm_mhz", "power_w", "temp_c", "reasons"]
        info["samples"] = [
            [round(s.t - t_start, 3), s.sm_mhz, s.power_w, s.temp_c, s.reasons] for s in samples
        ]
        for shape in shapes:
            if final or "summary" not in shape:  # a shape's windows are past: only late lines change it
                shape["summary"] = summarize(shape, list(shape["configs"]), samples)
            warm = [(x["t0"], x["t1"]) for x in shape["runs"] if x["method"] == "sustain_warm"]
            shape["sustain_warm_telemetry"] = window_stats(samples, warm)
        (args.out / "served_timing.json").write_text(json.dumps(info, indent=1, default=str))

    try:
        for p in problems:
            chosen, notes = picks[p]
            print(
                f"[{p.M}x{p.N}x{p.K}] " + "; ".join(f"{k}: {c.short()}" for k, c in chosen.items()),
                flush=True,
            )
            for note in notes:
                print(f"  {note}", flush=True)
            t = time.perf_counter()
            shape = measure_shape(p, target, chosen, args)
            shape["configs"] = {k: c.canonical() for k, c in chosen.items()}
            shape["configs_short"] = {k: c.short() for k, c in chosen.items()}
            shape["notes"] = notes
            shapes.append(shape)
            write()
            print(f"  {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        monitor.stop()
        write(final=True)

    write_csv(args.out / "served_timing.csv", shapes)
    gi = monitor.info
    print(
        f"\n{target.name} {target.toolchain} {info['date']}; "
        f"power limit {gi.get('enforced.power.limit', '?')} W, "
        f"max SM clock {gi.get('clocks.max.sm', '?')} MHz; "
        f"telemetry {monitor.source} ({monitor.power_field()}); {time.time() - t_start:.0f} s"
    )
    print(
        f"µs per launch, median of {args.rounds} rounds; cub/x = cuBLAS µs / config µs (> 1: faster than "
        "cuBLAS); MHz and W: mean SM clock and board power while the method ran that config"
    )
    for shape in shapes:
        print_shape(shape)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
