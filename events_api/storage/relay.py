"""The relay's SQL: lane ownership (session advisory locks), claiming due events per lane in sequence
order, and settling a produced batch in one statement.

One dedicated connection per relay holds its lane locks and runs every claim and settle: if that
connection dies, the locks go with it (another relay takes the lanes) and this relay can no longer
settle anything, so it cannot mark events of lanes it no longer owns. A second connection LISTENs.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import psycopg

from events_api.lanes import LANES
from events_api.routing import Routing

APPLICATION_NAME = "events-api relay"
NOTIFY_CHANNEL = "events_api_outbox"
# Advisory lock keys are (class, lane); the class says "an outbox lane of events-api" ("EVNT").
LANE_LOCK_CLASS = 0x45564E54
STATS_SHARDS = 16


@dataclass(frozen=True, slots=True)
class ClaimedEvent:
    received_at: datetime
    event_id: str
    seq: int
    tenant_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    lane: int
    idempotency_key: str
    payload: bytes
    headers: dict[str, str] | None
    traceparent: str | None
    occurred_at: datetime | None
    attempts: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """What became of one claimed event: published (coordinates), retry later, or dead-lettered."""

    event: ClaimedEvent
    outcome: str  # "published" | "retry" | "dead"
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None


class _Published(msgspec.Struct):
    received_at: datetime
    event_id: str
    topic: str
    partition: int
    offset: int


class _Retry(msgspec.Struct):
    received_at: datetime
    event_id: str
    error: str
    next_attempt_at: datetime


class _Dead(msgspec.Struct):
    received_at: datetime
    event_id: str
    error: str
    topic: str | None


# which_lanes_are_owned: lanes any relay holds now
_OWNED_LANES = """
SELECT objid::int FROM pg_locks
WHERE locktype = 'advisory' AND classid = %(class)s AND objsubid = 2 AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
# live_relays: relays connected to this database
_LIVE_RELAYS = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %(name)s AND datname = current_database()"
)
# take_lanes: lock up to `want` of the candidate lanes; the ones locked are returned
_TAKE_LANES = """
SELECT lane FROM unnest(CAST(%(candidates)s AS int[])) AS lane
WHERE pg_try_advisory_lock(%(class)s, lane)
LIMIT %(want)s
"""
# release_lanes: unlock lanes this session holds
_RELEASE_LANES = "SELECT pg_advisory_unlock(%(class)s, lane) FROM unnest(CAST(%(lanes)s AS int[])) AS lane"
# claim_lane_batch: for each owned lane whose first pending event is due, its first pending events in
# sequence order; a lane whose head waits for a retry waits whole, so per-key order holds.
# Narrow rows (from the index) are picked and cut to the batch first; only those are read in full.
_CLAIM = """
WITH picked AS (
    SELECT p.received_at, p.event_id, p.seq
    FROM unnest(CAST(%(lanes)s AS smallint[])) AS l(lane)
    CROSS JOIN LATERAL (
        SELECT next_attempt_at FROM outbox h WHERE h.state = 'pending' AND h.lane = l.lane ORDER BY h.seq LIMIT 1
    ) AS head
    CROSS JOIN LATERAL (
        SELECT received_at, event_id, seq FROM outbox e
        WHERE e.state = 'pending' AND e.lane = l.lane ORDER BY e.seq LIMIT %(per_lane)s
    ) AS p
    WHERE head.next_attempt_at <= %(now)s
    ORDER BY p.seq
    LIMIT %(limit)s
)
SELECT o.received_at, o.event_id, o.seq, o.tenant_id, o.event_type, o.schema_version, o.partition_key, o.lane,
       o.idempotency_key, o.payload, o.headers, o.traceparent, o.occurred_at, o.attempts
FROM picked CROSS JOIN LATERAL (
    -- one primary-key lookup per picked row (a plain join lets the planner hash the whole outbox)
    SELECT * FROM outbox o WHERE o.received_at = picked.received_at AND o.event_id = picked.event_id LIMIT 1
) AS o
ORDER BY picked.seq
"""
# settle_batch: mark published events with their Kafka coordinates, reschedule retriable failures and move
# dead letters out of the outbox, and add the outcomes to this relay's shard of relay_stats, all in one statement
_SETTLE = """
WITH published AS (
    UPDATE outbox o
    SET state = 'published', published_at = %(now)s, attempts = o.attempts + 1, last_error = NULL,
        kafka_topic = p.topic, kafka_partition = p.partition, kafka_offset = p.offset
    FROM json_to_recordset(CAST(%(published)s AS json))
         AS p(received_at timestamptz, event_id text, topic text, partition int, "offset" bigint)
    WHERE o.received_at = p.received_at AND o.event_id = p.event_id AND o.state = 'pending'
    RETURNING 1
), retried AS (
    UPDATE outbox o
    SET attempts = o.attempts + 1, last_error = r.error, next_attempt_at = r.next_attempt_at
    FROM json_to_recordset(CAST(%(retry)s AS json))
         AS r(received_at timestamptz, event_id text, error text, next_attempt_at timestamptz)
    WHERE o.received_at = r.received_at AND o.event_id = r.event_id AND o.state = 'pending'
    RETURNING 1
), moved AS (
    DELETE FROM outbox o
    USING json_to_recordset(CAST(%(dead)s AS json)) AS d(received_at timestamptz, event_id text, error text, topic text)
    WHERE o.received_at = d.received_at AND o.event_id = d.event_id AND o.state = 'pending'
    RETURNING o.*, d.error AS dead_error, d.topic AS dead_topic
), buried AS (
    INSERT INTO dead_letters (tenant_id, event_id, received_at, seq, event_type, schema_version, partition_key, lane,
                              idempotency_key, payload, headers, traceparent, occurred_at, attempts, last_error,
                              original_topic, dead_lettered_at)
    SELECT tenant_id, event_id, received_at, seq, event_type, schema_version, partition_key, lane, idempotency_key,
           payload, headers, traceparent, occurred_at, attempts + 1, dead_error, dead_topic, %(now)s
    FROM moved
    RETURNING 1
), counts AS (
    SELECT (SELECT count(*) FROM published) AS published, (SELECT count(*) FROM retried) AS retried,
           (SELECT count(*) FROM buried) AS dead_lettered
), tallied AS (
    INSERT INTO relay_stats AS s (shard, published, retried, dead_lettered)
    SELECT %(shard)s, published, retried, dead_lettered FROM counts
    ON CONFLICT (shard) DO UPDATE
    SET published = s.published + excluded.published, retried = s.retried + excluded.retried,
        dead_lettered = s.dead_lettered + excluded.dead_lettered
    RETURNING 1
)
SELECT published, retried, dead_lettered, (SELECT count(*) FROM tallied) FROM counts
"""

# tenant_routings: the routing of each of these tenants that set one
_ROUTINGS = """
SELECT tenant_id, topic_template, dead_letter_topic, topics, cluster FROM tenant_routing
WHERE tenant_id = ANY(CAST(%(tenants)s AS text[]))
"""

_encode = msgspec.json.Encoder().encode

# A silently dropped network (no RST) must not leave a relay waiting for hours with its lanes locked on
# the server: TCP keepalives and a user timeout end the session in well under a minute; no statement of
# the relay's should ever take a minute.
_CONNECTION: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
    "options": "-c statement_timeout=60000",
}


class RelayStore:
    """The relay's connections. `connect()` first; every method raises psycopg.OperationalError when the
    database is gone, and the relay then starts over (its lanes are gone with the connection)."""

    def __init__(self, conninfo: str, *, stats_shard: int | None = None) -> None:
        self.conninfo = conninfo
        # Which relay_stats row this relay adds to; relays picking the same one only wait a moment on its lock.
        self.stats_shard = random.randrange(STATS_SHARDS) if stats_shard is None else stats_shard  # noqa: S311
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._listener: psycopg.AsyncConnection[Any] | None = None

    async def connect(self) -> None:
        self._conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name=APPLICATION_NAME, **_CONNECTION
        )
        self._listener = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name="events-api relay listener", **_CONNECTION
        )
        await self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")

    async def close(self) -> None:
        for conn in (self._conn, self._listener):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
        self._conn = self._listener = None

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise psycopg.OperationalError("the relay is not connected")
        return self._conn

    async def live_relays(self) -> int:
        row = await (await self.conn.execute(_LIVE_RELAYS, {"name": APPLICATION_NAME})).fetchone()
        return max(1, int(row[0])) if row else 1

    async def owned_by_anyone(self) -> set[int]:
        rows = await (await self.conn.execute(_OWNED_LANES, {"class": LANE_LOCK_CLASS})).fetchall()
        return {int(r[0]) for r in rows if 0 <= int(r[0]) < LANES}

    async def take_lanes(self, candidates: Sequence[int], want: int) -> set[int]:
        if want <= 0 or not candidates:
            return set()
        params = {"candidates": list(candidates), "class": LANE_LOCK_CLASS, "want": want}
        return {int(r[0]) for r in await (await self.conn.execute(_TAKE_LANES, params)).fetchall()}

    async def release_lanes(self, lanes: Sequence[int]) -> None:
        if lanes:
            await self.conn.execute(_RELEASE_LANES, {"class": LANE_LOCK_CLASS, "lanes": list(lanes)})

    async def claim(self, lanes: Sequence[int], now: datetime, *, limit: int, per_lane: int) -> list[ClaimedEvent]:
        if not lanes:
            return []
        params = {"lanes": list(lanes), "now": now, "limit": limit, "per_lane": per_lane}
        rows = await (await self.conn.execute(_CLAIM, params)).fetchall()
        # Positional construction: the columns are selected in the dataclass's field order.
        return [ClaimedEvent(*row) for row in rows]

    async def settle(self, settlements: Sequence[Settlement], now: datetime) -> tuple[int, int, int]:
        """(published, retried, dead-lettered) counts, after one statement."""
        published = [
            _Published(s.event.received_at, s.event.event_id, s.topic or "", s.partition or 0, s.offset or 0)
            for s in settlements
            if s.outcome == "published"
        ]
        retry = [
            _Retry(s.event.received_at, s.event.event_id, s.error or "", s.next_attempt_at or now)
            for s in settlements
            if s.outcome == "retry"
        ]
        dead = [
            _Dead(s.event.received_at, s.event.event_id, s.error or "undeliverable", s.topic)
            for s in settlements
            if s.outcome == "dead"
        ]
        params = {
            "now": now,
            "shard": self.stats_shard,
            "published": _encode(published).decode(),
            "retry": _encode(retry).decode(),
            "dead": _encode(dead).decode(),
        }
        row = await (await self.conn.execute(_SETTLE, params)).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    async def routings(self, tenants: Sequence[str]) -> dict[str, Routing]:
        """The routing of each tenant; the defaults for tenants that never set one."""
        rows = await (await self.conn.execute(_ROUTINGS, {"tenants": list(tenants)})).fetchall()
        found = {row[0]: Routing(row[1], row[2], dict(row[3]), row[4]) for row in rows}
        return {tenant: found.get(tenant, Routing()) for tenant in tenants}

    async def wait_for_events(self, seconds: float) -> bool:
        """True when events were appended (a NOTIFY), False after `seconds` without one."""
        if self._listener is None:
            raise psycopg.OperationalError("the relay is not connected")
        async for _ in self._listener.notifies(timeout=seconds, stop_after=1):
            return True
        return False
