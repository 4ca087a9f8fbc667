"""The migrations produce exactly the SQLAlchemy metadata, and `migrate` is idempotent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from events_api.settings import Settings
from events_api.storage.migrate import head_revision, migrate
from events_api.storage.partitions import partition_days, partition_name
from events_api.storage.tables import metadata


def _include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    # Partitions are created at run time (one per day), not described by the metadata.
    return not (type_ == "table" and name is not None and name.startswith("outbox_p"))


def test_migrated_schema_equals_the_models(database_url: str) -> None:
    engine = create_engine(Settings(database_url=database_url).sqlalchemy_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_object": _include, "compare_type": True, "compare_server_default": True}
            )
            diff = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_migrate_is_idempotent_and_creates_partitions_ahead(database_url: str, sql: psycopg.Connection[Any]) -> None:
    url = Settings(database_url=database_url).sqlalchemy_url
    now = datetime.now(UTC)
    migrate(url, now=now, partitions_ahead_days=3)
    assert migrate(url, now=now, partitions_ahead_days=3) == []
    partitions = {
        row[0]
        for row in sql.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'outbox'::regclass"
        )
    }
    assert {partition_name(d) for d in partition_days(now, 3)} <= partitions
    assert sql.execute("SELECT version_num FROM alembic_version").fetchone() == (head_revision(),)
    kind = sql.execute("SELECT relkind FROM pg_class WHERE relname = 'outbox'").fetchone()
    assert kind == ("p",)
