"""The Alembic environment of the autotune database.

`autotune.db.migrations.upgrade` (``autotune db upgrade``) runs it with a connection already inside the
transaction of the whole upgrade (``config.attributes["connection"]``), so that every revision and the
``alembic_version`` and ``meta`` updates commit together or not at all. Run by Alembic's own commands
with `autotune.db.migrations.alembic_config` instead, it connects to ``sqlalchemy.url`` (else
$AUTOTUNE_DB, else ./autotune.db) and runs them in one transaction too. SQLite alters tables in batch
mode (copy and rename), as it cannot ALTER most things in place. There is no offline (``--sql``) mode:
the baseline revision inspects the database it adopts.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection, make_url

from autotune.db.engine import WRITE_OPTION, make_engine, resolve_url
from autotune.db.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    if context.is_offline_mode():
        raise RuntimeError("autotune's migrations need a database connection: no offline (--sql) mode")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(make_url(resolve_url(context.config.get_main_option("sqlalchemy.url"))))
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                _run(conn)
    finally:
        engine.dispose()


_main()
