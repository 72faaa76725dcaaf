"""Store: the tuned-config database. SQLite by default, PostgreSQL for a fleet of hosts.

The Store is a facade over one class per concept, each in its own module and all sharing one
`Database` (the engine, the session context, the retry state, the row-id caches):

- `SweepLog` (`sweep_log`): the sweeps' rows, started, kept alive, finished, listed;
- `Claims` (`claims`): the items of a sweep shared by processes and hosts;
- `TrialWrites` (`trial_writes`): trials written as they finish, and read back to resume;
- `TrialStream` (`trial_stream`): an import's trials streamed in one transaction;
- `FeatureCache` (`feature_cache`): static features of compiled configs;
- `Queries` and `Winners` (`queries`, `winners`): reading trials, GPUs, counts and winners;
- `Baselines` (`baselines`): imported configs, vLLM's deployment configs, warm starts.
"""

from __future__ import annotations

from autotune.core.result import VENDOR_BACKEND

from .baselines import Baselines
from .claims import Claims
from .database import MIN_PREFIX
from .engine import StoreError, resolve_url
from .feature_cache import FeatureCache
from .records import NewTrial
from .retry import RETRY_ENV
from .sweep_log import SweepLog
from .trial_stream import TrialStream
from .trial_writes import TrialWrites
from .winners import Winners

__all__ = ["MIN_PREFIX", "RETRY_ENV", "VENDOR_BACKEND", "NewTrial", "Store", "StoreError", "resolve_url"]


class Store(SweepLog, Claims, TrialWrites, TrialStream, FeatureCache, Winners, Baselines):
    """The database of GPUs, kernels, problems, sweeps, trials and static features.

    Opening creates the schema in an empty database (at the current schema version, stamped with its
    Alembic revision) and otherwise checks its schema version (and creates the tables of `ADDITIVE_TABLES`
    that a database of this version lacks); a database of an older version is refused with the command
    that upgrades it (``autotune db upgrade``). Every failure to open raises StoreError with the
    (password-masked) URL and the reason. Each write runs in its own transaction and
    is committed before the call returns, so a crash loses nothing that was recorded; `record_many`
    writes a whole batch (an import) in one transaction, all or nothing. `record` and `record_many` are
    idempotent on the trial key (GPU fingerprint, kernel name + source hash, problem, config hash,
    source), `record_features` on its key (arch, toolchain, kernel name + source hash, problem, config
    hash), also when processes race.

    Writes that fail with a transient error (a dropped connection, a restarting server, SQLite locked past
    its busy timeout) are retried with back-off (`retry_delays_s`) within one budget per outage for all
    calls together (`retry_budget_s`, about a minute) before StoreError; a full disk or a read-only
    file is not retried.

    With `read_only` the database is only read (a SQLite file opened read-only, so that a copy, a file
    of mode 0444 or one in a read-only folder can be inspected; nothing is created); a write raises
    StoreError.

    Thread safety: a Store may be shared by threads (each call has its own session and pooled connection;
    the sweep's per-GPU threads share one). Separate processes (and hosts, with PostgreSQL) may share one
    database, each with its own Store. Errors inside the database surface as
    StoreError; bad arguments as ValueError.

    Its methods are those of its parts (this module's docstring lists them), each a `Database` that calls
    only its own methods and the Database's, so that each can be read alone.
    """

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
