"""Kill the sweep at points of every phase, resume, and compare with an uninterrupted run
(tests/crash/crash_harness.py).

CI runs a few dozen points: every phase of an interpreter sweep and of a compile-only one on SQLite, and
an interpreter sweep on PostgreSQL. ``AUTOTUNE_CRASH_POINTS=N`` runs N points a scenario instead (the
harness's own command line runs hundreds: ``python tests/crash/crash_harness.py --points 200``).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).parent))
from crash_harness import Harness, Scenario, harness

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, SIGKILL and /proc")

#: Points a scenario in CI: (interpreter on SQLite, compile-only on SQLite, interpreter on PostgreSQL).
CI_POINTS = {"interpret": 14, "compile": 6, "interpret-pg": 6}


def points(name: str) -> int:
    return int(os.environ.get("AUTOTUNE_CRASH_POINTS", "0")) or CI_POINTS[name]


def check_all(h: Harness, n: int, phases: set[str]) -> None:
    outcomes = [h.check(point, i) for i, point in enumerate(h.kill_points(n, seed=7))]
    failures = [f"{o.point} at {o.killed_at}: {'; '.join(o.problems)}" for o in outcomes if o.problems]
    assert not failures, "\n".join(failures)
    killed_at = {o.killed_at for o in outcomes}
    assert phases <= killed_at, f"no kill in {phases - killed_at}: {sorted(killed_at)}"
    assert sum(o.lost + o.duplicated + o.rerun for o in outcomes) == 0


def test_interpreter_sweep_on_sqlite(tmp_path: Path) -> None:
    with harness(Scenario("interpret"), tmp_path) as h:
        kinds = {name for name, _ in h.points}
        assert {"sweep.planned", "db.commit", "db.committed", "trial.measured", "profile.measured"} <= kinds
        check_all(h, points("interpret"), {"db.commit", "trial.measured", "profile.measured"})


def test_compile_only_sweep_on_sqlite(tmp_path: Path) -> None:
    with harness(Scenario("compile"), tmp_path) as h:
        assert {"compile.done", "predict.batch"} <= {name for name, _ in h.points}
        check_all(h, points("compile"), set())


@pytest.fixture
def pg_databases(pg_admin: Engine) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases (URLs) on the test server, all dropped afterwards."""
    made: list[str] = []

    def new() -> str:
        name = f"autotune_crash_{uuid.uuid4().hex[:12]}"
        with pg_admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        made.append(name)
        return pg_admin.url.set(database=name).render_as_string(hide_password=False)

    yield new
    with pg_admin.connect() as conn:
        for name in made:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_interpreter_sweep_on_postgresql(tmp_path: Path, pg_databases: Callable[[], str]) -> None:
    with harness(Scenario("interpret", "postgresql"), tmp_path, pg_databases) as h:
        check_all(h, points("interpret-pg"), set())
