"""An outbox that has been in service for a week, written server-side in seconds: for the `growth` scenario.

What a real outbox holds at steady state is mostly history: events the relay published, kept until their
daily partition is older than the retention (7 days) and dropped whole. A healthy relay keeps the pending
share to seconds of traffic, so the history here is all `published`; the pending events the relay's claim
is timed on are added separately (`add_pending`), as a burst the relay is draining.

- `rows` published events with `received_at` spread evenly over the last 7 x 24 h (so over 8 daily
  partitions, today's included: the one ingest writes into), 50 tenants (`bench` and `tenant-01` ...
  `tenant-49`) with 200 partition keys each, lanes from `events_api.lanes.lane_for`, event ids that are
  real ULIDs of their `received_at` (`evt_` + 10 time characters + 16 random ones), the 157-byte payload of
  `bench.backlog`, a UUID idempotency key, Kafka coordinates and `published_at` a few ms after receipt.
- One `idempotency_keys` row per event received in the last 24 h (the key TTL): what ingest stores for a
  single-event request (fingerprint, the 202 body) and what the relay's maintenance has not pruned yet.
- Every partition from 7 days back to `partitions_ahead_days` ahead exists even with 0 rows, so the sizes
  differ in rows only, not in the number of partitions the claim visits.

All of it is one `INSERT ... SELECT generate_series` per chunk (no row crosses the client connection),
then `VACUUM ANALYZE`: the state autovacuum leaves a table in (visibility map, hint bits, statistics).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.backlog import ensure_partition
from events_api.ids import truncate_to_millis
from events_api.lanes import lane_for
from events_api.settings import Settings

TENANTS = 50
KEYS_PER_TENANT = 200
RETENTION = timedelta(days=7)
CHUNK = 250_000  # rows per INSERT: one transaction each
PENDING_KEYS = 1000  # the pending burst: tenant `bench` over `k-0` ... `k-999`, as in the relay scenario
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def tenant_name(index: int) -> str:
    return "bench" if index == 0 else f"tenant-{index:02d}"


def _ulid_time(ms: str) -> str:
    """SQL for the 10 Crockford base32 characters of a ULID's 48-bit millisecond time, `ms` a bigint expression."""
    return " || ".join(f"substr('{_CROCKFORD}', (({ms} >> {5 * k}) & 31)::int + 1, 1)" for k in range(9, -1, -1))


# The payload of bench.backlog.payload(n), in SQL.
_PAYLOAD = """convert_to(
    '{"order_id":"o-' || lpad(g.n::text, 8, '0')
    || '","customer_id":"c-' || lpad(mod(g.n, 99991)::text, 5, '0')
    || '","amount":' || (2598 + mod(g.n, 100))
    || ',"currency":"EUR","items":[{"sku":"mug-blue","quantity":2}],"placed_at":"2026-11-21T08:00:00Z"}',
    'UTF8')"""

# fill_history: published events n in [first, last), received evenly between start_ms and start_ms + span_ms
_HISTORY = f"""
WITH g AS (
    SELECT n, mod(n, %(combos)s) AS c, %(start_ms)s::bigint + n * %(span_ms)s::bigint / %(total)s AS ms
    FROM generate_series(%(first)s::bigint, %(last)s::bigint - 1) AS n
)
INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, partition_key, lane,
                    idempotency_key, payload, next_attempt_at, state, attempts, published_at,
                    kafka_topic, kafka_partition, kafka_offset)
SELECT TIMESTAMPTZ 'epoch' + g.ms * INTERVAL '1 millisecond',
       'evt_' || {_ulid_time("g.ms")} || upper(substr(md5(%(salt)s || g.n), 1, 16)),
       t.tenant_id,
       'order.created',
       1,
       'o-' || g.c / %(tenants)s,
       (CAST(%(lanes)s AS smallint[]))[g.c + 1],
       md5(%(salt)s || 'key' || g.n)::uuid::text,
       {_PAYLOAD},
       TIMESTAMPTZ '0001-01-01 00:00:00+00',
       'published',
       1,
       TIMESTAMPTZ 'epoch' + (g.ms + 3 + mod(g.n, 20)) * INTERVAL '1 millisecond',
       t.tenant_id || '.order.created',
       mod(g.c / %(tenants)s, 4),
       g.n
FROM g CROSS JOIN LATERAL (
    SELECT CASE WHEN mod(g.c, %(tenants)s) = 0 THEN 'bench' ELSE 'tenant-' || lpad(mod(g.c, %(tenants)s)::text, 2, '0')
           END AS tenant_id
) AS t
"""

# fill_idempotency_keys: what ingest stored for each single-event request received since `since`
_KEYS = """
INSERT INTO idempotency_keys (tenant_id, key, operation, fingerprint, event_ids, response_status, response_body,
                              created_at, expires_at)
SELECT tenant_id, idempotency_key, 'event', sha256(convert_to(idempotency_key, 'UTF8')), ARRAY[event_id], 202,
       convert_to('{"event_id":"' || event_id || '","status":"accepted","event_type":"order.created",'
                  || '"schema_version":1,"received_at":"'
                  || to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"}', 'UTF8'),
       received_at, received_at + %(ttl)s
FROM outbox WHERE received_at >= %(since)s
"""

# add_pending: n pending events of tenant `bench`, due now, in today's partition (the relay's claim sees these)
_PENDING = f"""
WITH g AS (
    SELECT n, mod(n, %(keys)s) AS c, %(now_ms)s::bigint AS ms
    FROM generate_series(%(first)s::bigint, %(first)s::bigint + %(count)s - 1) AS n
)
INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, partition_key, lane,
                    idempotency_key, payload, next_attempt_at)
SELECT TIMESTAMPTZ 'epoch' + g.ms * INTERVAL '1 millisecond',
       'evt_' || {_ulid_time("g.ms")} || upper(substr(md5(%(salt)s || g.n), 1, 16)),
       'bench', 'order.created', 1, 'k-' || g.c, (CAST(%(lanes)s AS smallint[]))[g.c + 1],
       md5(%(salt)s || 'key' || g.n)::uuid::text,
       {_PAYLOAD},
       TIMESTAMPTZ 'epoch' + g.ms * INTERVAL '1 millisecond'
FROM g
"""


@dataclass(frozen=True, slots=True)
class History:
    rows: int
    idempotency_keys: int
    partitions: int
    outbox_mb: float  # heap + indexes + TOAST of every partition
    keys_mb: float
    seconds: float  # to write it, vacuum included


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _size_mb(conn: psycopg.Connection[Any], query: str) -> float:
    row = conn.execute(query.encode()).fetchone()
    return float(row[0] or 0) / 1024 / 1024 if row else 0.0


def outbox_mb(conn: psycopg.Connection[Any]) -> float:
    return _size_mb(
        conn,
        "SELECT sum(pg_total_relation_size(i.inhrelid)) FROM pg_inherits i WHERE i.inhparent = 'outbox'::regclass",
    )


def ensure_partitions(conn: psycopg.Connection[Any], now: datetime) -> int:
    """Every daily partition from the oldest a 7-day retention keeps to the days the API creates ahead."""
    ahead = Settings.from_env().partitions_ahead_days
    first = (now - RETENTION).date()
    days = (now.date() - first).days + ahead + 1
    for i in range(days):
        day = first + timedelta(days=i)
        ensure_partition(conn, datetime(day.year, day.month, day.day, tzinfo=UTC))
    row = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass").fetchone()
    return int(row[0]) if row else 0


def fill(database_url: str, rows: int, *, salt: str) -> History:
    """Empty the outbox and the idempotency keys, then write `rows` events of history (see the module docstring)."""
    started = time.perf_counter()
    now = truncate_to_millis(datetime.now(UTC))
    # History ends a minute ago: nothing of it is fresher than what the bench sends next.
    end_ms, span_ms = _ms(now) - 60_000, int(RETENTION.total_seconds() * 1000)
    lanes = [lane_for(tenant_name(c % TENANTS), f"o-{c // TENANTS}") for c in range(TENANTS * KEYS_PER_TENANT)]
    ttl = Settings.from_env().idempotency_ttl
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox, dead_letters, idempotency_keys")
        partitions = ensure_partitions(conn, now)
        common = {
            "combos": len(lanes),
            "tenants": TENANTS,
            "start_ms": end_ms - span_ms,
            "span_ms": span_ms,
            "total": rows,
            "salt": salt,
            "lanes": lanes,
        }

        def write(first: int) -> None:
            with psycopg.connect(database_url, autocommit=True) as writer:
                writer.execute(_HISTORY, {**common, "first": first, "last": min(rows, first + CHUNK)})

        # One writer per core: the statement is CPU-bound in its backend (ids, payloads, index entries).
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(write, range(0, rows, CHUNK)))
        keys = conn.execute(_KEYS, {"ttl": ttl, "since": now - ttl}).rowcount if rows else 0
        conn.execute("VACUUM ANALYZE outbox")
        conn.execute("VACUUM ANALYZE idempotency_keys")
        return History(
            rows=rows,
            idempotency_keys=keys,
            partitions=partitions,
            outbox_mb=outbox_mb(conn),
            keys_mb=_size_mb(conn, "SELECT pg_total_relation_size('idempotency_keys')"),
            seconds=time.perf_counter() - started,
        )


def publish_pending(conn: psycopg.Connection[Any]) -> int:
    """Mark whatever is pending as published (what a relay would have done): the events the ingest phase added
    must not be among those the claim is timed on. `add_pending` vacuums afterwards."""
    done = conn.execute(
        "UPDATE outbox SET state = 'published', attempts = attempts + 1, published_at = now(), "
        "kafka_topic = tenant_id || '.' || event_type, kafka_partition = 0, kafka_offset = 0 "
        "WHERE state = 'pending'"
    ).rowcount
    return done


def add_pending(conn: psycopg.Connection[Any], count: int, *, salt: str, first: int = 0) -> int:
    """`count` pending events of tenant `bench` over `PENDING_KEYS` partition keys, due now, then VACUUM ANALYZE
    (statistics that know the burst, and no autovacuum of it starting in the middle of a timed drain); the
    number written."""
    now = truncate_to_millis(datetime.now(UTC))
    ensure_partition(conn, now)
    lanes = [lane_for("bench", f"k-{k}") for k in range(PENDING_KEYS)]
    params = {"keys": PENDING_KEYS, "now_ms": _ms(now), "first": first, "count": count, "salt": salt, "lanes": lanes}
    written = conn.execute(_PENDING, params).rowcount
    conn.execute("VACUUM ANALYZE outbox")
    return written
