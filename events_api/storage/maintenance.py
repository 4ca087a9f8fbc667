"""The maintenance session's SQL: who leads maintenance (session advisory locks), and pruning expired
idempotency keys in bounded batches. Partition DDL is in storage/partitions.py.

These are platform-wide maintenance queries, not scoped to a tenant: expiry is a property of the row
(`expires_at`), whoever owns it.

One dedicated connection per maintainer holds its locks and runs all of its work. If the connection
dies, the locks go with it: another relay becomes the leader at its next tick, and nothing half done
remains, because every step is its own transaction.
"""

from __future__ import annotations

import contextlib
from datetime import date, datetime, timedelta
from typing import Any

import psycopg

from events_api.storage.partitions import (
    DropAttempt,
    create_partitions,
    drop_if_delivered,
    list_partitions,
    pending_in_partition,
)

APPLICATION_NAME = "events-api maintenance"
# Advisory lock keys are (class, id); the class says "events-api maintenance" ("MNTN"), apart from the
# relay lanes' class, so lane counts never see these.
MAINTENANCE_LOCK_CLASS = 0x4D4E544E
LEADER_LOCK = 1  # held by the relay that runs the periodic maintenance, for as long as it lives
RUN_LOCK = 2  # held during one maintenance run (the leader's or `events-api maintain`), so runs never overlap

# try_lock: take a maintenance lock of this session without waiting
_TRY_LOCK = "SELECT pg_try_advisory_lock(%(class)s, %(id)s)"
# wait_for_lock: take a maintenance lock of this session, waiting at most the lock_timeout set before it
_LOCK = "SELECT pg_advisory_lock(%(class)s, %(id)s)"
_SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(timeout)s, false)"
# unlock: release a maintenance lock this session holds
_UNLOCK = "SELECT pg_advisory_unlock(%(class)s, %(id)s)"
# prune_expired_idempotency_keys (platform-wide): delete up to `batch` keys whose replay window has ended.
# SKIP LOCKED leaves alone a key a writer is re-claiming right now, and the outer re-check keeps one it
# re-claimed (with a new expiry) between the two steps.
_PRUNE_KEYS = """
WITH expired AS (
    SELECT tenant_id, key FROM idempotency_keys
    WHERE expires_at <= %(now)s
    ORDER BY expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys k USING expired e
WHERE k.tenant_id = e.tenant_id AND k.key = e.key AND k.expires_at <= %(now)s
"""

# As the relay's sessions: a vanished network ends the session (and its leadership) within a minute.
_CONNECTION: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
    "options": "-c statement_timeout=60000",
}


class MaintenanceStore:
    """A maintainer's session. `connect()` first; every method raises psycopg.OperationalError when the
    database is gone (and the locks are gone with it)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.leading = False

    async def connect(self) -> None:
        self._conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name=APPLICATION_NAME, **_CONNECTION
        )

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
        self._conn = None
        self.leading = False

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise psycopg.OperationalError("the maintainer is not connected")
        return self._conn

    async def try_lead(self) -> bool:
        """Become the maintenance leader unless another session is; True while this session leads."""
        if not self.leading:
            # Only asked when not held: advisory locks count re-entries, and one unlock must free it.
            self.leading = await self._try(LEADER_LOCK)
        return self.leading

    async def try_run_lock(self) -> bool:
        """run_lock without waiting: False when another maintenance run is in progress."""
        return await self._try(RUN_LOCK)

    async def wait_run_lock(self, lock_timeout: timedelta) -> bool:
        """run_lock, waiting at most `lock_timeout` for a run in progress elsewhere to end."""
        await self.conn.execute(_SET_LOCK_TIMEOUT, {"timeout": f"{max(1, int(lock_timeout.total_seconds() * 1000))}ms"})
        try:
            await self.conn.execute(_LOCK, {"class": MAINTENANCE_LOCK_CLASS, "id": RUN_LOCK})
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            await self.conn.execute(_SET_LOCK_TIMEOUT, {"timeout": "0"})
        return True

    async def release_run_lock(self) -> None:
        await self.conn.execute(_UNLOCK, {"class": MAINTENANCE_LOCK_CLASS, "id": RUN_LOCK})

    async def _try(self, lock_id: int) -> bool:
        params = {"class": MAINTENANCE_LOCK_CLASS, "id": lock_id}
        row = await (await self.conn.execute(_TRY_LOCK, params)).fetchone()
        return bool(row and row[0])

    async def partitions(self) -> list[str]:
        return await list_partitions(self.conn)

    async def create_partitions(self, days: list[date], *, lock_timeout: timedelta) -> list[str]:
        return await create_partitions(self.conn, days, lock_timeout=lock_timeout)

    async def pending_in_partition(self, name: str) -> int:
        return await pending_in_partition(self.conn, name)

    async def drop_if_delivered(self, name: str, *, lock_timeout: timedelta) -> DropAttempt:
        return await drop_if_delivered(self.conn, name, lock_timeout=lock_timeout)

    async def prune_idempotency_keys(self, now: datetime, batch: int) -> int:
        """One batch of expired keys deleted (at most `batch`); returns how many."""
        cursor = await self.conn.execute(_PRUNE_KEYS, {"now": now, "batch": batch})
        return max(0, cursor.rowcount)
