"""The Store under a fleet's conditions: threads sharing it, dropped connections, transient errors."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Timing, TrialResult, TrialStatus
from autotune.core.target import Target
from autotune.db import Store, StoreError
from autotune.db.retry import retrying

H100 = Target.for_arch("sm_90")
PROBLEM = Problem.of("gemm", 16, 64, 64)


def result(block_m: int, thread: int) -> TrialResult:
    timing = Timing(10.0 + block_m, 9.0, 9.5, 11.0, 10.2, 0.3, 20, "events")
    return TrialResult(Config(backend="triton", BLOCK_M=block_m, T=thread), TrialStatus.OK, timing=timing)


def test_threads_share_one_store(db_url: str) -> None:
    """What a sweep on several GPUs does: a thread per worker writing through one Store."""
    errors: list[BaseException] = []
    with Store(db_url) as store:
        sweep = store.start_sweep("threads", "", H100, problems_total=4, workers=4)

        def write(thread: int) -> None:
            try:
                for bm in range(25):
                    store.record(target=H100, kernel="gemm.triton", source_hash="h", problem=PROBLEM,
                                 result=result(bm, thread), sweep_id=sweep)  # fmt: skip
                    store.touch_sweep(sweep, trials_done=bm)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        trials = store.trials()
    assert len(trials) == 100 and len({t.config.digest() for t in trials}) == 100


class Flaky:
    """Fails its first `n` calls with the StoreError a dropped connection gives."""

    def __init__(self, n: int, cause: Exception) -> None:
        self.n, self.cause, self.calls = n, cause, 0
        self.retry_delays_s = (0.0, 0.0, 0.0)

    @retrying
    def write(self) -> str:
        self.calls += 1
        if self.calls <= self.n:
            raise StoreError("database error: connection lost") from self.cause
        return "written"


def test_transient_errors_are_retried_with_back_off_then_raised() -> None:
    dropped = OperationalError("INSERT", {}, Exception("server closed the connection unexpectedly"))
    flaky: Any = Flaky(2, dropped)
    assert flaky.write() == "written" and flaky.calls == 3
    hopeless: Any = Flaky(10, dropped)
    with pytest.raises(StoreError, match="connection lost"):
        hopeless.write()
    assert hopeless.calls == 4  # the first try and three retries
    duplicate: Any = Flaky(1, IntegrityError("INSERT", {}, Exception("duplicate key")))
    with pytest.raises(StoreError):
        duplicate.write()
    assert duplicate.calls == 1  # not transient: no retry


@pytest.mark.postgres
def test_a_dropped_postgres_connection_costs_no_trial(pg_url: str) -> None:
    """The server drops every connection of the store between two writes (a restart, a failover): the
    next write reconnects and nothing is lost."""
    with Store(pg_url) as store:
        store.record(target=H100, kernel="gemm.triton", source_hash="h", problem=PROBLEM, result=result(1, 0))
        name = make_url(pg_url).database
        admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            killed = conn.execute(
                text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :d"),
                {"d": name},
            ).scalar()
        admin.dispose()
        assert killed and killed >= 1
        store.record(target=H100, kernel="gemm.triton", source_hash="h", problem=PROBLEM, result=result(2, 0))
        assert len(store.trials()) == 2
