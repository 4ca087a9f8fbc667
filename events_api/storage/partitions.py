"""Daily RANGE partitions of the outbox: naming, and creating the ones that are missing."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

# One lock id for partition DDL so concurrent migrators/APIs do not race on CREATE TABLE.
_PARTITION_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('events_api.outbox_partitions'))")

# list_outbox_partitions: names of the partitions attached to the outbox
_LIST_PARTITIONS = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'outbox'::regclass"
)


def partition_name(day: date) -> str:
    return f"outbox_p{day:%Y%m%d}"


def partition_days(now: datetime, ahead: int) -> list[date]:
    """Today (UTC) and `ahead` days after it."""
    today = now.astimezone(UTC).date()
    return [today + timedelta(days=i) for i in range(ahead + 1)]


def _create_statement(day: date) -> str:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF outbox "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def ensure_partitions_sync(conn: Connection, days: list[date]) -> list[str]:
    """Create the missing partitions for `days` (inside the caller's transaction)."""
    existing = set(conn.execute(_LIST_PARTITIONS).scalars())
    missing = [d for d in days if partition_name(d) not in existing]
    if missing:
        conn.execute(_PARTITION_LOCK)
        for day in missing:
            conn.execute(text(_create_statement(day)))
    return [partition_name(d) for d in missing]


async def ensure_partitions(conn: AsyncConnection, days: list[date]) -> list[str]:
    return await conn.run_sync(ensure_partitions_sync, days)
