"""Alembic environment: runs migrations online with a sync psycopg connection, one migrator at a time."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, text

from events_api.settings import Settings
from events_api.storage.tables import metadata

config = context.config
url = config.attributes.get("sqlalchemy_url") or Settings.from_env(os.environ).sqlalchemy_url

engine = create_engine(url)
with engine.connect() as connection:
    # Concurrent `events-api migrate` runs (several pods starting) wait for each other.
    connection.execute(text("SELECT pg_advisory_lock(hashtext('events_api.migrate'))"))
    connection.commit()
    try:
        context.configure(connection=connection, target_metadata=metadata, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(hashtext('events_api.migrate'))"))
        connection.commit()
engine.dispose()
