"""Daily RANGE partitions of the outbox: naming, creating the ones that are missing (ahead of time),
and dropping an expired one whole once nothing in it is undelivered.

Why dropping is safe (events_api/maintenance.py decides which partitions are expired):
- Only rows in state `pending` are undelivered. Published rows are done, and dead-lettered events were
  moved out to `dead_letters` by the settle statement, so neither pins a partition. The CHECK constraint
  `ck_outbox_state` allows no other state; a new state must be added to `_PENDING_IN_PARTITION`.
- The final "nothing pending" check runs while this transaction holds ACCESS EXCLUSIVE locks on the
  outbox and on the partition, taken parent first (the order every INSERT/UPDATE takes them). A writer that
  is routing a row into the partition holds a lock on it, so the check waits for its commit and then
  sees its row; a writer that comes later waits for the drop, then finds no partition for its row and
  its statement fails whole, having stored nothing (ingest then creates the day's partition again and
  retries; a redrive fails and keeps its dead letters). Each statement in READ COMMITTED takes a new
  snapshot, so the check sees every commit that happened before the lock was granted.
- The drop also takes the partition-DDL advisory lock, so it never interleaves with a creation of the
  same day's partition.
- `lock_timeout` bounds how long ingest can queue behind the lock request; when the lock is not granted
  in time the partition is simply kept until the next run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

PARTITION_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('events_api.outbox_partitions'))"
# list_outbox_partitions: names of the partitions attached to the outbox
LIST_PARTITIONS_SQL = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'outbox'::regclass"
)

# One lock id for partition DDL so concurrent migrators/APIs do not race on CREATE TABLE.
_PARTITION_LOCK = text(PARTITION_LOCK_SQL)
_LIST_PARTITIONS = text(LIST_PARTITIONS_SQL)
_NAME = re.compile(r"outbox_p(\d{4})(\d{2})(\d{2})")

# set_lock_timeout: how long this transaction's DDL may wait for its locks (then LockNotAvailable)
_SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(timeout)s, true)"
# lock_outbox_for_drop: the parent first, as writers lock it, so a writer routing into the partition cannot deadlock
_LOCK_OUTBOX = "LOCK TABLE ONLY outbox IN ACCESS EXCLUSIVE MODE"
# partition_is_attached: is this table still a partition of the outbox (another maintainer may have dropped it)
_IS_ATTACHED = """
SELECT EXISTS (
    SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'outbox'::regclass AND c.relname = %(name)s
)
"""
# pending_in_partition: undelivered events in one partition (served by the partial index on pending rows)
_PENDING_IN_PARTITION = "SELECT count(*) FROM {} WHERE state = 'pending'"
_LOCK_PARTITION = "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE"
_DETACH = "ALTER TABLE outbox DETACH PARTITION {}"
_DROP = "DROP TABLE {}"


def partition_name(day: date) -> str:
    return f"outbox_p{day:%Y%m%d}"


def partition_day(name: str) -> date | None:
    """The day a daily partition holds, or None for a table this module did not name."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


def partition_end(day: date) -> datetime:
    """The partition's exclusive upper bound: every event in it was received before this instant."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)


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


# --- the maintenance side: one psycopg session (events_api/storage/maintenance.py) ---------------------


def _lock_timeout(timeout: timedelta) -> dict[str, str]:
    return {"timeout": f"{max(1, int(timeout.total_seconds() * 1000))}ms"}


async def list_partitions(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """list_outbox_partitions: every table attached to the outbox, by name."""
    return sorted(str(row[0]) for row in await (await conn.execute(LIST_PARTITIONS_SQL)).fetchall())


async def create_partitions(
    conn: psycopg.AsyncConnection[Any], days: list[date], *, lock_timeout: timedelta
) -> list[str]:
    """create_outbox_partitions: the missing partitions of `days`, in one transaction. CREATE … PARTITION OF
    locks the whole outbox briefly, so it waits at most `lock_timeout` (then psycopg.errors.LockNotAvailable
    and nothing is created)."""
    async with conn.transaction():
        await conn.execute(_SET_LOCK_TIMEOUT, _lock_timeout(lock_timeout))
        await conn.execute(PARTITION_LOCK_SQL)
        existing = set(await list_partitions(conn))
        missing = [d for d in days if partition_name(d) not in existing]
        for day in missing:
            await conn.execute(_create_statement(day))
    return [partition_name(d) for d in missing]


async def pending_in_partition(conn: psycopg.AsyncConnection[Any], name: str) -> int:
    """pending_in_partition: how many events in this partition are not delivered yet."""
    row = await (await conn.execute(sql.SQL(_PENDING_IN_PARTITION).format(sql.Identifier(name)))).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class DropAttempt:
    """What `drop_if_delivered` did: dropped it, found it gone already, or kept it for `pending` events."""

    dropped: bool
    gone: bool = False
    pending: int = 0


async def drop_if_delivered(conn: psycopg.AsyncConnection[Any], name: str, *, lock_timeout: timedelta) -> DropAttempt:
    """drop_delivered_partition: detach and drop one partition if, under lock, no event in it is pending.
    Raises psycopg.errors.LockNotAvailable when the locks are not granted within `lock_timeout` (nothing
    changed). See the module docstring for why no accepted event can be lost."""
    table = sql.Identifier(name)
    async with conn.transaction():
        await conn.execute(_SET_LOCK_TIMEOUT, _lock_timeout(lock_timeout))
        await conn.execute(PARTITION_LOCK_SQL)
        await conn.execute(_LOCK_OUTBOX)
        row = await (await conn.execute(_IS_ATTACHED, {"name": name})).fetchone()
        if not (row and row[0]):
            return DropAttempt(dropped=False, gone=True)
        await conn.execute(sql.SQL(_LOCK_PARTITION).format(table))
        pending = await pending_in_partition(conn, name)
        if pending:
            return DropAttempt(dropped=False, pending=pending)  # the transaction commits having changed nothing
        await conn.execute(sql.SQL(_DETACH).format(table))
        await conn.execute(sql.SQL(_DROP).format(table))
    return DropAttempt(dropped=True)
