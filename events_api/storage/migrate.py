"""Bringing a database up to date: Alembic migrations, then the outbox partitions for the next days."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from events_api.storage.partitions import ensure_partitions_sync, partition_days

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(sqlalchemy_url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["sqlalchemy_url"] = sqlalchemy_url
    return config


@cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def schema_is_current(revision: str | None, head: str) -> bool:
    """Whether a database at `revision` serves a build whose newest migration is `head`: at it, or past it
    (revisions are numbered in order, and each migration keeps the previous build working)."""
    return revision is not None and revision.isdigit() and int(revision) >= int(head)


def migrate(sqlalchemy_url: str, *, now: datetime, partitions_ahead_days: int) -> list[str]:
    """Idempotent: apply pending migrations and create missing partitions. Returns created partitions."""
    command.upgrade(alembic_config(sqlalchemy_url), "head")
    engine = create_engine(sqlalchemy_url)
    try:
        with engine.begin() as conn:
            return ensure_partitions_sync(conn, partition_days(now, partitions_ahead_days))
    finally:
        engine.dispose()
