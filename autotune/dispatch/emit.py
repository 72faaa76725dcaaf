"""Emit a pinned Table from the database's winners (imports autotune.db: not for serving processes)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import backend_of, is_served
from autotune.core.result import VENDOR_BACKEND, Source, TrialStatus
from autotune.dispatch.narrow import served_config
from autotune.dispatch.ranges import Profile, Range, ranges_from_profile
from autotune.dispatch.table import Key, Table, _describe, key_of

if TYPE_CHECKING:
    from autotune.core.target import Target
    from autotune.db import Store, TrialRecord, Winner

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_M_POLICY", "DEFAULT_RANGE_MARGIN", "DEFAULT_VENDOR_MARGIN", "emit_table", "profiles_of"]

#: How an M between tuned buckets is served unless told otherwise: the policy with the least regret on
#: untuned M values in `benchmarks/gemm.py`'s measurements.
DEFAULT_M_POLICY = "round_up"


#: A backend must beat the vendor library by more than this fraction to be chosen over it: run-to-run
#: differences of the same kernel reach about that much, so a smaller "win" is noise and could make the
#: dispatched call slower than the vendor library.
DEFAULT_VENDOR_MARGIN = 0.01

#: At a profiled M, a config must beat the vendor library by more than this fraction to serve there (and
#: at both ends of a gap to serve between two profiled M). The profile and every served call time launches
#: back to back, as a serving engine runs them, and there the GPU runs at its power cap, where the same
#: launches vary by several percent from run to run: a smaller win can turn into a loss when served
#: (docs/notes/2026-11-27-served-timing.md, 2026-11-27-serve-every-m-rules.md).
DEFAULT_RANGE_MARGIN = 0.05

#: ... and by this many µs besides. The vendor library's own call runs at one of two speeds per CUDA-graph
#: capture on some shapes, about 0.7 µs apart on the H100 and the H200 (the same cuBLAS kernels either
#: way), so a short call that beats its slower speed by 5% can lose to its faster one
#: (docs/notes/2026-11-27-vendor-two-speeds.md). On calls of 100 µs and more this is under 1%.
DEFAULT_RANGE_SLACK_US = 0.75


def emit_table(
    store: Store,
    *,
    fingerprint: str | None = None,
    m_policy: str = DEFAULT_M_POLICY,
    vendor_margin: float = DEFAULT_VENDOR_MARGIN,
    profiles: bool = True,
    range_margin: float = DEFAULT_RANGE_MARGIN,
    range_slack_us: float = DEFAULT_RANGE_SLACK_US,
) -> Table:
    """The winners of one device as a Table.

    A device is a hardware identity (`Target.device_key()`: vendor, arch, name, CU count); the database
    may hold it under several fingerprints (one per toolchain), e.g. the cost model's picks of a
    compile-only sweep for ``Target.for_arch("gfx942")`` and the measurements of a later sweep on the
    MI300X itself. All of them make one device. `fingerprint` (or a unique prefix of at least 6
    characters) names one stored GPU and selects its device, with every fingerprint of that device;
    without it the database must hold exactly one device.

    Per problem, a measured winner supersedes a model winner. Where several fingerprints of the device
    have a winner of the same source, the newest one is used (the one whose best trial was stored last):
    a newer toolchain's measurements replace an older one's rather than competing on times taken with
    other software. A problem with only a model winner is still emitted, its bucket marked predicted,
    and then the table is predicted too. The table's target is the GPU of the newest measured pick
    (of the newest model pick where nothing is measured); its device key is the same for every pick.

    Per problem the fastest config is pinned, except that the vendor library is kept unless another
    backend beats it by more than `vendor_margin` (a fraction of the vendor's time); both times come from
    the chosen winner, so from one fingerprint and one source: the final round where it holds the fastest
    measured config (`Store.winners(final=True)`: the finalists and the vendor library timed head to
    head), else the searches' own timings.

    A shape family with a stored M profile (`autotune.sweeps.profile`, on this device) is served by M ranges
    built from it instead (`ranges_from_profile`, with `range_margin` and `range_slack_us`): each M gets the
    config measured fastest there, the vendor library unless another beats it by that margin and that
    slack, and the vendor
    library above the profile's largest M. `profiles=False` emits buckets for every family.

    Raises:
        ValueError: a negative `vendor_margin`, `range_margin` or `range_slack_us`; nothing to emit;
            `fingerprint` too short, ambiguous or naming no GPU; or several devices and no `fingerprint`
            to pick one.
    """
    if vendor_margin < 0 or range_margin < 0 or range_slack_us < 0:
        raise ValueError(
            "vendor_margin, range_margin and range_slack_us must be >= 0, "
            f"got {vendor_margin}, {range_margin}, {range_slack_us}"
        )
    chosen = _chosen(_device_winners(store, fingerprint))
    picks = _picks(store, chosen, vendor_margin)
    newest, _ = min(chosen.values(), key=lambda c: (c[1], -c[0].best.id))
    target = newest.gpu.target
    ranges = _family_ranges(store, target, range_margin, range_slack_us) if profiles else {}
    served = {(p.op, c.backend) for p, c, _, _ in picks}
    served |= {(key[0], r.config.backend) for key, rows in ranges.items() for r in rows}
    pinning = {backend for op, backend in served if backend_of(op, backend).pins}
    table = Table.from_winners(target, picks, m_policy=m_policy, ranges=ranges)
    if not pinning:
        return table

    def serves(problem: Problem, backend: str) -> bool:
        """Whether `table` serves `problem` (its exact M) with `backend`."""
        config = served_config(table, key_of(problem), problem.M)
        return config is not None and config.backend == backend

    pins = _pins(store, target.device_key(), pinning, serves)
    return Table(target=target, entries=table.entries, m_policy=table.m_policy, predicted=table.predicted,
                 pins=pins)  # fmt: skip


def _device_winners(store: Store, fingerprint: str | None) -> list[tuple[Winner, bool]]:
    """The winners of the device `fingerprint` names (of the one device the database holds without it),
    measured then model ones, each with whether it is a model's (predicted).

    Raises:
        ValueError: `fingerprint` naming no GPU, no winner, or several devices and no `fingerprint`.
    """
    device: str | None = None
    if fingerprint is not None:
        named = store.match_gpus(fingerprint)
        if not named:
            raise ValueError(
                f"no tuned results for GPU {fingerprint} in the database: {_holds(store, None)}; run "
                "`autotune sweep` first"
            )
        device = named[0].target.device_key()
    winners = [
        (w, source is Source.MODEL)
        for source in (Source.MEASURED, Source.MODEL)
        for w in store.winners(source=source, final=True)
        if device is None or w.gpu.target.device_key() == device
    ]
    if not winners:
        where = f" for GPU {fingerprint}" if fingerprint else ""
        raise ValueError(
            f"no tuned results{where} in the database: {_holds(store, fingerprint)}; run `autotune sweep` "
            "first"
        )
    devices: dict[str, list[Winner]] = {}
    for w, _ in winners:
        devices.setdefault(w.gpu.target.device_key(), []).append(w)
    if len(devices) > 1:
        listing = "; ".join(_describe_device(ws) for ws in devices.values())
        raise ValueError(f"the database holds {len(devices)} GPUs; pick one with --gpu: {listing}")
    return winners


def _chosen(winners: list[tuple[Winner, bool]]) -> dict[Problem, tuple[Winner, bool]]:
    """Per problem, the winner that serves it: measured before model, then the newest (its best trial
    stored last)."""
    chosen: dict[Problem, tuple[Winner, bool]] = {}
    for w, predicted in winners:
        held = chosen.get(w.problem)
        if held is None or (predicted, -w.best.id) < (held[1], -held[0].best.id):
            chosen[w.problem] = (w, predicted)
    return chosen


def _picks(
    store: Store, chosen: dict[Problem, tuple[Winner, bool]], vendor_margin: float
) -> list[tuple[Problem, Config, float | None, bool]]:
    """Per problem, its pinned (config, time, predicted): the fastest config the entry point serves, the
    vendor library's unless that beats it by more than `vendor_margin`; a problem with no served config
    measured is left out."""
    picks: list[tuple[Problem, Config, float | None, bool]] = []
    for w, predicted in chosen.values():
        pick = w.best if is_served(w.problem.op, w.best.config.backend) else _best_served(store, w)
        if pick is None:
            log.warning("%s: no config the run-time entry point serves was measured; left out", w.problem)
            continue
        vendor = w.vendor if w.vendor is not None and is_served(w.problem.op, w.vendor.backend) else None
        if (
            vendor is not None
            and vendor.time_us is not None
            and pick.time_us is not None
            and pick.time_us * (1 + vendor_margin) >= vendor.time_us
        ):
            pick = vendor
        picks.append((w.problem, pick.config, pick.time_us, predicted))
    return picks


def _family_ranges(
    store: Store, target: Target, range_margin: float, range_slack_us: float
) -> dict[Key, tuple[Range, ...]]:
    """The M ranges of each shape family with a stored profile on `target`'s device
    (`ranges_from_profile`); a family whose profile measured nothing keeps its buckets (left out)."""
    ranges: dict[Key, tuple[Range, ...]] = {}
    families = _profile_families(store, target.device_key())
    for key, (family, profile) in families.items():
        try:
            ranges[key] = ranges_from_profile(
                profile, is_vendor=_is_vendor, margin=range_margin, slack_us=range_slack_us,
                imported=store.baseline_configs(family, target, profile) or None,
            )  # fmt: skip
        except ValueError as exc:  # nothing measured: the family keeps its buckets
            log.warning("no M ranges for %s: %s", _describe(key), exc)
    return ranges


def _pins(
    store: Store, device_key: str, pinning: set[str], serves: Callable[[Problem, str], bool]
) -> dict[str, list[dict[str, Any]]]:
    """What the served backends that pin (`Backend.pins`) keep per shape beside their configs
    (`Table.pins`): the pin a trial of backend B holds in `extra[B]`, {"validators": {...}, "row": [...]}
    (the dense GEMM's "tunableop": TunableOp's solution), the newest per problem, measured or profiled on
    the device, of the problems the table serves with B (`serves`), grouped by validators."""
    newest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for source in (Source.MEASURED, Source.PROFILE):
        for t in store.trials(status=TrialStatus.OK, source=source):
            pin = t.extra.get(t.backend)
            if t.backend not in pinning or not isinstance(pin, dict) or "row" not in pin:
                continue
            if not serves(t.problem, t.backend):
                continue
            if t.gpu.target.device_key() != device_key:
                continue
            key = (t.backend, t.problem.key())
            if key not in newest or t.id > newest[key][0]:
                newest[key] = (t.id, pin)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (backend, _), (_, pin) in sorted(newest.items()):
        validators = {str(k): str(v) for k, v in dict(pin.get("validators", {})).items()}
        held = json.dumps(validators, sort_keys=True)
        group = out.setdefault(backend, {}).setdefault(held, {"validators": validators, "results": []})
        group["results"].append(list(pin["row"]))
    return {backend: list(groups.values()) for backend, groups in out.items()}


def _best_served(store: Store, winner: Winner) -> TrialRecord | None:
    """The fastest OK trial of `winner`'s GPU and problem whose backend the entry point serves (the
    winner's source), None where there is none."""
    served = [
        t
        for t in store.trials(
            fingerprint=winner.gpu.fingerprint, problem=winner.problem, status=TrialStatus.OK
        )
        if t.source in (winner.best.source, Source.MEASURED)
        and t.time_us is not None
        and is_served(t.problem.op, t.backend)
    ]
    return min(served, key=lambda t: (t.time_us, t.id), default=None)


def _holds(store: Store, fingerprint: str | None) -> str:
    """What the database holds, for the message of a table with nothing to emit: imported records are
    never served unless measured here."""
    holdings = store.holdings(fingerprint=fingerprint)
    imported = " (imported records are served only once measured here)" if holdings.n_imported else ""
    return f"it holds {holdings.describe()}{imported}"


def _is_vendor(config: Config) -> bool:
    return config.backend == VENDOR_BACKEND


def profiles_of(store: Store, device_key: str) -> dict[Key, Profile]:
    """The stored M profiles of one device, per shape family (`_profile_families`' profiles)."""
    return {key: profile for key, (_, profile) in _profile_families(store, device_key).items()}


def _profile_families(store: Store, device_key: str) -> dict[Key, tuple[Problem, Profile]]:
    """The stored M profiles of one device, per shape family: M → {config: time in µs}.

    A failed trial is kept with an infinite time (a vendor that failed at an M is not taken for one that
    cannot run there). A backend the run-time entry point does not serve is left out. Per family, the
    profile of one fingerprint of the device is used (the one whose latest profile trial is newest), and
    per backend only its newest kernel version (the source hash of its latest trial): a profile measured
    with older code or software is not mixed in.
    """
    trials = [t for t in store.trials(source=Source.PROFILE) if t.gpu.target.device_key() == device_key]
    by_family: dict[Key, list[TrialRecord]] = {}
    for t in trials:
        by_family.setdefault(key_of(t.problem), []).append(t)
    out: dict[Key, tuple[Problem, Profile]] = {}
    for key, rows in by_family.items():
        newest_gpu = max(rows, key=lambda t: t.id).gpu.id
        rows = [t for t in rows if t.gpu.id == newest_gpu]
        current: dict[str, tuple[int, str]] = {}
        for t in rows:
            if t.backend not in current or t.id > current[t.backend][0]:
                current[t.backend] = (t.id, t.source_hash)
        profile: dict[int, dict[Config, float]] = {}
        for t in rows:
            if t.source_hash == current[t.backend][1] and is_served(t.problem.op, t.backend):
                profile.setdefault(t.problem.M, {})[t.config] = _profile_time(t)
        out[key] = (rows[0].problem.with_m(1), profile)
    return out


def _profile_time(trial: TrialRecord) -> float:
    """A profile trial's time as ranges compare it: the median, but the vendor library's fastest run
    where that is lower. Long calls run near the GPU's power cap, and one timing of the vendor's call can
    have a median 10% above its fastest run (a 2.4 ms GEMM at 2.43 fastest, 2.71 median); a config
    served against that median loses when served. Comparing our median with the vendor's best only ever
    favours the vendor. A failed trial is infinite."""
    if trial.time_us is None:
        return math.inf
    if _is_vendor(trial.config) and trial.timing is not None and trial.timing.min_us > 0:
        return min(trial.time_us, trial.timing.min_us)
    return trial.time_us


def _describe_device(winners: list[Winner]) -> str:
    """One device of the listing: its fingerprints (newest last) and its target."""
    gpus = {w.gpu.fingerprint: w.gpu for w in sorted(winners, key=lambda w: w.gpu.id)}
    last = list(gpus.values())[-1]
    return f"{', '.join(gpus)} ({last.target})"
