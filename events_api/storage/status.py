"""The operator's view of the platform (`events-api status`, `events-api tenants list`, `GET /metrics`):
backlog, dead letters, the relays and their lanes, partitions, per tenant.

These are platform-wide admin queries, deliberately not scoped to one tenant; nothing on a tenant's
request path may call them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from events_api.storage.database import Database
from events_api.storage.maintenance import APPLICATION_NAME as MAINTENANCE_APPLICATION
from events_api.storage.maintenance import LEADER_LOCK, MAINTENANCE_LOCK_CLASS
from events_api.storage.relay import APPLICATION_NAME as RELAY_APPLICATION
from events_api.storage.relay import LANE_LOCK_CLASS

# platform_backlog: pending events, the oldest one's arrival, and dead letters, across every tenant
_BACKLOG = text(
    """
SELECT (SELECT count(*) FROM outbox WHERE state = 'pending') AS pending,
       (SELECT min(received_at) FROM outbox WHERE state = 'pending') AS oldest_pending,
       (SELECT count(*) FROM dead_letters) AS dead_letters
"""
)
# relay_sessions: every relay session of this database and the lanes each holds (session advisory locks of
# the lanes' class, as storage/relay.py takes them), plus the session that leads maintenance
_RELAYS = text(
    """
WITH locks AS (
    SELECT pid, classid, objid FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT a.pid, a.application_name, host(a.client_addr) AS client_addr, a.backend_start,
       (SELECT count(*) FROM locks l WHERE l.pid = a.pid AND l.classid = :lane_class) AS lanes,
       EXISTS (SELECT FROM locks l WHERE l.pid = a.pid AND l.classid = :maintenance_class AND l.objid = :leader)
           AS maintenance_leader
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.application_name IN (:relay, :maintenance)
ORDER BY a.backend_start, a.pid
"""
)
# tenant_backlogs: per tenant with anything pending or dead-lettered: pending, oldest pending arrival, dead letters
_TENANT_BACKLOGS = text(
    """
WITH pending AS (
    SELECT tenant_id, count(*) AS pending, min(received_at) AS oldest_pending
    FROM outbox WHERE state = 'pending' GROUP BY tenant_id
), dead AS (
    SELECT tenant_id, count(*) AS dead_letters FROM dead_letters GROUP BY tenant_id
)
SELECT coalesce(p.tenant_id, d.tenant_id) AS tenant_id, coalesce(p.pending, 0) AS pending, p.oldest_pending,
       coalesce(d.dead_letters, 0) AS dead_letters
FROM pending p FULL JOIN dead d ON d.tenant_id = p.tenant_id
ORDER BY p.oldest_pending NULLS LAST, 4 DESC, 1
"""
)
# schema_migrated: whether the database was ever migrated (alembic_version exists)
_MIGRATED = text("SELECT to_regclass('alembic_version') IS NOT NULL")
# schema_revision: the Alembic revision the database is at
_REVISION = text("SELECT version_num FROM alembic_version")
# platform_gauges: what GET /metrics reads from the database, in one round trip: the backlog and the age of its
# oldest event (by the database's clock, so API hosts' clocks do not matter), dead letters, the outbox
# partitions and their size on disk, and the relays' cumulative delivery counts (relay_stats, one row per shard)
_PLATFORM_GAUGES = text(
    """
SELECT (SELECT count(*) FROM outbox WHERE state = 'pending') AS pending,
       (SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0) FROM outbox WHERE state = 'pending')
           AS oldest_pending_age,
       (SELECT count(*) FROM dead_letters) AS dead_letters,
       (SELECT count(*) FROM pg_inherits WHERE inhparent = CAST('outbox' AS regclass)) AS partitions,
       (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits
        WHERE inhparent = CAST('outbox' AS regclass)) AS partition_bytes,
       (SELECT coalesce(sum(published), 0) FROM relay_stats) AS published,
       (SELECT coalesce(sum(retried), 0) FROM relay_stats) AS retried,
       (SELECT coalesce(sum(dead_lettered), 0) FROM relay_stats) AS dead_lettered
"""
)
# list_tenants: every tenant with its count of live API keys (platform admin listing)
_TENANTS = text(
    """
SELECT t.id, t.created_at,
       count(k.id) FILTER (WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > :now)) AS live_keys,
       count(k.id) AS keys
FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id
GROUP BY t.id, t.created_at
ORDER BY t.id
"""
)


@dataclass(frozen=True, slots=True)
class Backlog:
    pending: int
    oldest_pending: datetime | None
    dead_letters: int


@dataclass(frozen=True, slots=True)
class RelaySession:
    pid: int
    application_name: str
    client_addr: str | None
    started_at: datetime
    lanes: int
    maintenance_leader: bool


@dataclass(frozen=True, slots=True)
class TenantBacklog:
    tenant_id: str
    pending: int
    oldest_pending: datetime | None
    dead_letters: int


@dataclass(frozen=True, slots=True)
class PlatformGauges:
    """The database's side of GET /metrics."""

    pending: int
    oldest_pending_age_seconds: float
    dead_letters: int
    partitions: int
    partition_bytes: int
    published: int  # events the relays published, dead-lettered and scheduled for retry, since the first relay ran
    retried: int
    dead_lettered: int
    relays: list[RelaySession]


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant_id: str
    created_at: datetime
    live_keys: int
    keys: int


class StatusStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def backlog(self) -> Backlog:
        async with self.db.autocommit() as conn:
            row = (await conn.execute(_BACKLOG)).one()
        return Backlog(int(row.pending), row.oldest_pending, int(row.dead_letters))

    async def relay_sessions(self) -> list[RelaySession]:
        params = {
            "lane_class": LANE_LOCK_CLASS,
            "maintenance_class": MAINTENANCE_LOCK_CLASS,
            "leader": LEADER_LOCK,
            "relay": RELAY_APPLICATION,
            "maintenance": MAINTENANCE_APPLICATION,
        }
        async with self.db.autocommit() as conn:
            rows = (await conn.execute(_RELAYS, params)).all()
        return [RelaySession(r[0], r[1], r[2], r[3], int(r[4]), bool(r[5])) for r in rows]

    async def platform_gauges(
        self, *, timeout_ms: int, serves: Callable[[str | None], bool]
    ) -> tuple[str | None, PlatformGauges | None]:
        """The schema revision, and when `serves(revision)` (the tables are as this build knows them) the gauges.
        One connection, every query under one statement timeout: a scrape must never queue behind a slow database."""
        params = {
            "lane_class": LANE_LOCK_CLASS,
            "maintenance_class": MAINTENANCE_LOCK_CLASS,
            "leader": LEADER_LOCK,
            "relay": RELAY_APPLICATION,
            "maintenance": MAINTENANCE_APPLICATION,
        }
        async with self.db.transaction() as conn:
            await conn.execute(text(f"SET LOCAL statement_timeout = {int(timeout_ms)}"))
            migrated = (await conn.execute(_MIGRATED)).scalar_one()
            revision = (await conn.execute(_REVISION)).scalar_one_or_none() if migrated else None
            if not serves(revision):
                return revision, None
            row = (await conn.execute(_PLATFORM_GAUGES)).one()
            rows = (await conn.execute(_RELAYS, params)).all()
        return revision, PlatformGauges(
            pending=int(row.pending),
            oldest_pending_age_seconds=float(row.oldest_pending_age),
            dead_letters=int(row.dead_letters),
            partitions=int(row.partitions),
            partition_bytes=int(row.partition_bytes),
            published=int(row.published),
            retried=int(row.retried),
            dead_lettered=int(row.dead_lettered),
            relays=[RelaySession(r[0], r[1], r[2], r[3], int(r[4]), bool(r[5])) for r in rows],
        )

    async def tenant_backlogs(self) -> list[TenantBacklog]:
        async with self.db.autocommit() as conn:
            rows = (await conn.execute(_TENANT_BACKLOGS)).all()
        return [TenantBacklog(r[0], int(r[1]), r[2], int(r[3])) for r in rows]

    async def tenants(self, now: datetime) -> list[TenantRow]:
        async with self.db.autocommit() as conn:
            rows = (await conn.execute(_TENANTS, {"now": now})).all()
        return [TenantRow(r[0], r[1], int(r[2]), int(r[3])) for r in rows]
