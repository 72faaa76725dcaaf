"""Crash-test harness: kill a sweep at chosen points of every phase, resume it, and compare what the
database holds with what an uninterrupted run stored.

A scenario is a small spec run the way a user runs it: ``autotune sweep`` (interpreter or compile-only;
SQLite or PostgreSQL), then ``autotune emit``. A reference run passes every crash point
(`autotune.core.crashpoints`) with a journal and no kill, which lists them in order: every database
commit (before and after it), every trial measured, every compile finished, every batch of predictions,
every profile point, the table's replace. A kill point is then one of:

- ``*:N``: the process kills itself (SIGKILL) at the N-th crash point, whatever its name (deterministic);
- ``random:S``: the harness sends SIGKILL S seconds after the start.

Each point runs on a fresh database: the sweep killed there, the processes of the killed run counted
5 s later (none may be alive), the same command run again to the end, then ``emit`` (killed once at its
replace, then run again). The checks:

- lost / extra: the stored trials (GPU, kernel version, problem, config, source, status, time) and the
  compile-only features equal the reference run's, as a set;
- duplicated: no trial key twice;
- re-run: no trial stored before the resume is measured again by it, and at most one measured by the
  killed run was not stored (the trial in flight);
- every sweep row closed (none left "running"), every claim of the work done;
- the emitted table equals the reference's (its creation time aside), and no temporary file is left.

Trials run for real (interpreted kernels checked against their references); with ``fake_timing`` their
times are a function of the problem and config so that two runs store the same rows (tests/crash/
zygote.py). Run it on demand: ``python tests/crash/crash_harness.py --points 200`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("zygote.py")

#: An interpreter sweep: two problems, exhaustive over 4 configs, a final round, a profile at 4 M.
INTERPRET_SPEC = """
name = "crash-interpret"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 16]
nk = [[32, 32]]
strategy = "exhaustive"
trials = 4
warm_start = false
final_rounds = 1
profile_m = [1, 4, 8, 16]
"""

#: A compile-only sweep for gfx942: two problems, 3 candidates compiled each.
COMPILE_SPEC = """
name = "crash-compile"
[[sweep]]
op = "gemm"
dtype = "bf16"
m = [1, 16]
nk = [[256, 256]]

[static]
candidates = 3
"""


@dataclass(frozen=True)
class Scenario:
    """What is swept and how: `mode` "interpret" or "compile"; `db` "sqlite" or a PostgreSQL base URL
    (each run gets a database of its own there)."""

    mode: str
    db: str = "sqlite"

    @property
    def spec(self) -> str:
        return INTERPRET_SPEC if self.mode == "interpret" else COMPILE_SPEC

    def sweep_argv(self, url: str) -> list[str]:
        how = ["--interpret"] if self.mode == "interpret" else ["--target", "gfx942", "--workers", "1"]
        return ["sweep", "spec.toml", *how, "--db", url, "--no-progress"]

    def emit_argv(self, url: str) -> list[str]:
        return ["emit", "--db", url, "--out", "table.json"]


@dataclass
class Outcome:
    """What one kill point found; `problems` is empty when everything held."""

    point: str
    killed_at: str = ""
    problems: list[str] = field(default_factory=list)
    alive_after_kill: int = 0
    lost: int = 0
    extra: int = 0
    duplicated: int = 0
    rerun: int = 0
    in_flight: int = 0


class Zygote:
    """The forking server of tests/crash/zygote.py, one command at a time."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        full.pop("AUTOTUNE_CRASH_AT", None)
        full.pop("AUTOTUNE_CRASH_JOURNAL", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=full, text=True
        )
        self._read()  # ready

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self.proc.wait()})")
        return dict(json.loads(line))

    def run(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: dict[str, str],
        *,
        fake_timing: bool,
        kill_after: float | None,
    ) -> tuple[int, int]:
        """Runs ``autotune argv``; returns (pid, exit status: minus the signal where one ended it)."""
        assert self.proc.stdin is not None
        request = {"argv": list(argv), "cwd": str(cwd), "env": env, "fake_timing": fake_timing}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = int(self._read()["pid"])
        if kill_after is not None:
            time.sleep(kill_after)
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pid, int(self._read()["status"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- what a database holds --------------------------------------------------------------------------


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    if url.startswith("postgresql"):
        from sqlalchemy import create_engine, text
        from sqlalchemy.exc import ProgrammingError

        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(query))]
        except ProgrammingError:  # killed before its tables were created
            return []
        finally:
            engine.dispose()
    path = url.removeprefix("sqlite:///")
    if not Path(path).exists():  # killed before it was created
        return []
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(query).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return []
    finally:
        con.close()


TRIALS = """
SELECT g.fingerprint, k.name, k.source_hash, p.key, t.config_hash, t.source, t.status, t.time_us
FROM trials t JOIN gpus g ON g.id = t.gpu_id JOIN kernels k ON k.id = t.kernel_id
JOIN problems p ON p.id = t.problem_id
"""
FEATURES = "SELECT f.arch, f.config_hash, p.key FROM static_features f JOIN problems p ON p.id = f.problem_id"


def trials(url: str) -> list[tuple[Any, ...]]:
    """Every stored trial as its key, status and time (rounded)."""
    return [(*r[:7], None if r[7] is None else round(float(r[7]), 3)) for r in _rows(url, TRIALS)]


def features(url: str) -> list[tuple[Any, ...]]:
    return _rows(url, FEATURES)


def _journal(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split("\t", 1)) for line in path.read_text().splitlines() if line]  # type: ignore[misc]


def _run_processes(workdir: Path) -> list[int]:
    """Processes (other than this one and the zygote) whose working directory is `workdir`: what a run
    in that folder started."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") == str(workdir):
                out.append(int(entry))
        except OSError:
            continue
    return out


# -- the runs ---------------------------------------------------------------------------------------


class Harness:
    """Runs a scenario's reference once, then kill points against it (module docstring)."""

    def __init__(self, scenario: Scenario, root: Path, zygote: Zygote, new_pg_db: Any = None) -> None:
        self.scenario, self.root, self.zygote, self.new_pg_db = scenario, root, zygote, new_pg_db
        self.fake = scenario.mode == "interpret"
        self.reference: list[tuple[Any, ...]] = []
        self.reference_features: list[tuple[Any, ...]] = []
        self.reference_table: dict[str, Any] = {}
        self.points: list[tuple[str, str]] = []  # the reference's crash points, in order
        self.duration_s = 0.0

    def _workdir(self, name: str) -> tuple[Path, str]:
        workdir = self.root / name
        workdir.mkdir(parents=True)
        (workdir / "spec.toml").write_text(self.scenario.spec)
        if self.scenario.db == "sqlite":
            return workdir, f"sqlite:///{workdir / 'crash.db'}"
        return workdir, self.new_pg_db()

    def _run(
        self, argv: Sequence[str], workdir: Path, env: dict[str, str], kill_after: float | None = None
    ) -> int:
        return self.zygote.run(argv, workdir, env, fake_timing=self.fake, kill_after=kill_after)[1]

    def prepare(self) -> None:
        """The uninterrupted reference run (run twice first, so that compile caches are warm and both
        take the same path)."""
        for i in range(2):
            workdir, url = self._workdir(f"reference-{i}")
            journal = workdir / "journal.txt"
            t0 = time.monotonic()
            code = self._run(self.scenario.sweep_argv(url), workdir, {"AUTOTUNE_CRASH_JOURNAL": str(journal)})
            self.duration_s = time.monotonic() - t0
            assert code == 0, (workdir / "out.txt").read_text()[-3000:]
            assert self._run(self.scenario.emit_argv(url), workdir, {}) == 0, (
                workdir / "out.txt"
            ).read_text()
        self.reference = trials(url)
        self.reference_features = features(url)
        self.reference_table = _table(workdir / "table.json")
        self.points = _journal(journal)
        assert self.reference and self.points

    def kill_points(self, n: int, seed: int = 0, *, random_share: float = 0.25) -> list[str]:
        """`n` points: crash points of every name first (one each, drawn at random), more drawn from
        the whole run (all of them when `n` allows), and `random_share` of `n` SIGKILLs at random
        moments."""
        rng = random.Random(seed)
        n_random = int(n * random_share)
        total = len(self.points)
        k = min(n - n_random, total)
        by_name: dict[str, list[int]] = {}
        for i, (name, _) in enumerate(self.points, start=1):
            by_name.setdefault(name, []).append(i)
        picked = {rng.choice(indices) for indices in by_name.values()}  # every phase once, at least
        rest = [i for i in range(1, total + 1) if i not in picked]
        picked.update(rng.sample(rest, max(0, min(k - len(picked), len(rest)))))
        out = [f"*:{i}" for i in sorted(picked)]
        out += [f"random:{rng.uniform(0.05, self.duration_s):.2f}" for _ in range(n - len(out))]
        return out

    def check(self, point: str, index: int) -> Outcome:
        """Kills the sweep at `point`, resumes it, emits, and compares (module docstring)."""
        workdir, url = self._workdir(f"point-{index}")
        outcome = Outcome(point)
        killed_journal, resumed_journal = workdir / "killed.txt", workdir / "resumed.txt"
        env = {"AUTOTUNE_CRASH_JOURNAL": str(killed_journal)}
        kill_after = None
        if point.startswith("random:"):
            kill_after = float(point.split(":", 1)[1])
        else:
            env["AUTOTUNE_CRASH_AT"] = point
        code = self._run(self.scenario.sweep_argv(url), workdir, env, kill_after)
        passed = _journal(killed_journal)
        outcome.killed_at = passed[-1][0] if passed and code == -signal.SIGKILL else "(finished first)"
        if code not in (0, -signal.SIGKILL):
            outcome.problems.append(f"killed run exited {code}: {(workdir / 'out.txt').read_text()[-1500:]}")
        deadline = time.monotonic() + 5
        while (alive := _run_processes(workdir)) and time.monotonic() < deadline:
            time.sleep(0.1)
        outcome.alive_after_kill = len(alive)
        if alive:
            outcome.problems.append(f"{len(alive)} processes of the killed run alive 5 s after: {alive}")
            for pid in alive:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        before = {(r[3], r[4], r[5]) for r in trials(url)}
        code = self._run(
            self.scenario.sweep_argv(url), workdir, {"AUTOTUNE_CRASH_JOURNAL": str(resumed_journal)}
        )
        if code != 0:
            outcome.problems.append(f"resumed run exited {code}: {(workdir / 'out.txt').read_text()[-1500:]}")
        # emit, killed at its replace, then again
        self._run(self.scenario.emit_argv(url), workdir, {"AUTOTUNE_CRASH_AT": "emit.replace:1"})
        if (workdir / "table.json").exists():
            outcome.problems.append("a table was written by an emit killed before its replace")
        if self._run(self.scenario.emit_argv(url), workdir, {}) != 0:
            outcome.problems.append(f"emit failed: {(workdir / 'out.txt').read_text()[-1500:]}")
        elif _table(workdir / "table.json") != self.reference_table:
            outcome.problems.append("the emitted table differs from the reference's")
        if leftovers := sorted(p.name for p in workdir.glob(".table.json.*")):
            outcome.problems.append(f"temporary files left: {leftovers}")
        self._compare(url, before, passed, _journal(resumed_journal), outcome)
        return outcome

    def _compare(
        self,
        url: str,
        before: set[tuple[Any, ...]],
        killed: list[tuple[str, str]],
        resumed: list[tuple[str, str]],
        outcome: Outcome,
    ) -> None:
        got = trials(url)
        keys = [r[:6] for r in got]
        outcome.duplicated = len(keys) - len(set(keys))
        want = set(self.reference)
        outcome.lost, outcome.extra = len(want - set(got)), len(set(got) - want)
        if outcome.lost or outcome.extra or outcome.duplicated:
            outcome.problems.append(
                f"trials: {outcome.lost} lost, {outcome.extra} extra, {outcome.duplicated} duplicated; "
                f"lost {sorted(want - set(got))[:3]}, extra {sorted(set(got) - want)[:3]}"
            )
        if set(features(url)) != set(self.reference_features):
            outcome.problems.append("compile-only features differ from the reference's")
        measured = ("trial.measured", "profile.measured")
        source = {"trial.measured": "measured", "profile.measured": "profile"}

        def runs(journal: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
            return [(*detail.rsplit(" ", 1), source[name]) for name, detail in journal if name in measured]  # type: ignore[misc]

        rerun = [r for r in runs(resumed) if r in before]
        in_flight = [r for r in runs(killed) if r not in before]
        outcome.rerun, outcome.in_flight = len(rerun), len(in_flight)
        if rerun:
            outcome.problems.append(f"{len(rerun)} stored trials measured again: {rerun[:3]}")
        if len(in_flight) > 1:
            outcome.problems.append(f"{len(in_flight)} trials measured and not stored (1 may be in flight)")
        running = _rows(url, "SELECT id FROM sweeps WHERE status = 'running'")
        if running:
            outcome.problems.append(f"sweep rows left running: {running}")
        open_claims = _rows(url, "SELECT item FROM claims WHERE done = false")
        if open_claims:
            outcome.problems.append(f"claims left open: {open_claims}")


def _table(path: Path) -> dict[str, Any]:
    data = dict(json.loads(path.read_text()))
    for key in ("created", "created_at", "emitted_at", "source"):
        data.pop(key, None)
    return data


@contextmanager
def harness(scenario: Scenario, root: Path, new_pg_db: Any = None) -> Iterator[Harness]:
    zygote = Zygote()
    try:
        h = Harness(scenario, root, zygote, new_pg_db)
        h.prepare()
        yield h
    finally:
        zygote.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=200, help="kill points in all (default 200)")
    parser.add_argument("--mode", choices=("interpret", "compile", "both"), default="both")
    parser.add_argument(
        "--pg", help="also on PostgreSQL: a server URL, e.g. postgresql+psycopg://postgres@127.0.0.1/test"
    )
    parser.add_argument("--root", default="crash-runs", help="folder for the runs (default ./crash-runs)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    scenarios = [Scenario(m) for m in (("interpret", "compile") if args.mode == "both" else (args.mode,))]
    if args.pg:
        scenarios += [Scenario(s.mode, args.pg) for s in scenarios]
    per = max(1, args.points // len(scenarios))
    failed = 0
    summary = []
    for i, scenario in enumerate(scenarios):
        root = Path(args.root).resolve() / f"{scenario.mode}-{'pg' if scenario.db != 'sqlite' else 'sqlite'}"
        new_db = _pg_factory(scenario.db) if scenario.db != "sqlite" else None
        with harness(scenario, root, new_db) as h:
            outcomes = []
            for j, point in enumerate(h.kill_points(per, seed=args.seed + i)):
                o = h.check(point, j)
                outcomes.append(o)
                failed += bool(o.problems)
                print(f"{scenario.mode:9} {scenario.db[:10]:10} {point:14} {o.killed_at:18} "
                      f"{'ok' if not o.problems else '; '.join(o.problems)}", flush=True)  # fmt: skip
        phases = sorted({o.killed_at for o in outcomes})
        summary.append(
            f"{scenario.mode} on {'PostgreSQL' if scenario.db != 'sqlite' else 'SQLite'}: "
            f"{len(outcomes)} points "
            f"({len(h.points)} crash points in the reference), killed at {', '.join(phases)}; "
            f"lost {sum(o.lost for o in outcomes)}, duplicated {sum(o.duplicated for o in outcomes)}, "
            f"re-run {sum(o.rerun for o in outcomes)}, in flight at most "
            f"{max((o.in_flight for o in outcomes), default=0)}, processes alive 5 s after "
            f"{sum(o.alive_after_kill for o in outcomes)}; {sum(bool(o.problems) for o in outcomes)} failed"
        )
    print("\n".join(summary))
    return 1 if failed else 0


def _pg_factory(base: str) -> Any:
    import uuid

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    admin = create_engine(base, isolation_level="AUTOCOMMIT")

    def new() -> str:
        name = f"autotune_crash_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        return make_url(base).set(database=name).render_as_string(hide_password=False)

    return new


if __name__ == "__main__":
    sys.exit(main())
