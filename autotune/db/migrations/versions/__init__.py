"""The Alembic revisions of the autotune database, one per schema version (see `autotune.db.models`)."""
