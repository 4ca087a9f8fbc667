"""A relay backlog written straight into the bench database: N pending events in `outbox`, and the
same events in `naive_relay_outbox` for the seed-style relay (`bench.naive_relay`).

The rows are what ingest would have stored (CONTRACT.md): `event_id` from `events_api.ids`, `lane`
from `events_api.lanes`, `received_at` at millisecond precision and due now, the payload as JSON
bytes (≈150 bytes), a unique idempotency key per event. They are written with one COPY, which is
far faster than going through the API and does not need it running.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from events_api.ids import new_event_id, truncate_to_millis
from events_api.lanes import lane_for
from events_api.storage.partitions import partition_name

NAIVE_TABLE = "naive_relay_outbox"
# The seed articles' outbox table: a serial id, the event, and a `published` flag. The partial index is the
# usual companion of `WHERE published = false ORDER BY id` (without it every poll would scan past every row
# published so far).
NAIVE_DDL = f"""
DROP TABLE IF EXISTS {NAIVE_TABLE};
CREATE TABLE {NAIVE_TABLE} (
    id bigserial PRIMARY KEY,
    event_id text NOT NULL,
    tenant_id text NOT NULL,
    event_type text NOT NULL,
    partition_key text,
    payload bytea NOT NULL,
    published boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX {NAIVE_TABLE}_unpublished ON {NAIVE_TABLE} (id) WHERE published = false;
"""
_COPY = (
    "COPY outbox (received_at, event_id, tenant_id, event_type, schema_version, partition_key, lane, "
    "idempotency_key, payload, next_attempt_at) FROM STDIN"
)
_COPY_NAIVE = f"""
INSERT INTO {NAIVE_TABLE} (event_id, tenant_id, event_type, partition_key, payload)
SELECT event_id, tenant_id, event_type, partition_key, payload FROM outbox ORDER BY seq
"""


@dataclass(frozen=True, slots=True)
class Backlog:
    events: int
    keys: int
    tenant: str
    event_type: str
    topic: str  # where the default routing sends them
    payload_bytes: int  # of one event (they differ by a few digits)


def payload(n: int) -> bytes:
    return (
        b'{"order_id":"o-%08d","customer_id":"c-%05d","amount":%d,"currency":"EUR",'
        b'"items":[{"sku":"mug-blue","quantity":2}],"placed_at":"2026-11-21T08:00:00Z"}'
        % (n, n % 99991, 2598 + n % 100)
    )


def clear_outbox(conn: psycopg.Connection[Any]) -> None:
    """Start from an empty outbox: earlier scenarios leave hundreds of thousands of pending events that a
    relay would otherwise drain first."""
    conn.execute("TRUNCATE outbox, dead_letters")


def ensure_partition(conn: psycopg.Connection[Any], at: datetime) -> None:
    """`events-api migrate` creates today's partition; a run that crosses midnight (UTC) needs the next."""
    day = at.astimezone(UTC).date()
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF outbox "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{(start + timedelta(days=1)).isoformat()}')".encode()
    )


def fill(
    database_url: str,
    events: int,
    *,
    keys: int = 1000,
    tenant: str = "bench",
    event_type: str = "order.created",
    label: str = "backlog",
) -> Backlog:
    """Empty the outbox, write `events` pending events for `tenant` over `keys` partition keys, copy them into
    the naive relay's table, and VACUUM ANALYZE both (a backlog that built up while no relay ran has been
    vacuumed too; this also sets hint bits so the first relay does not pay for that)."""
    received_at = truncate_to_millis(datetime.now(UTC))
    lanes = [lane_for(tenant, f"k-{k}") for k in range(keys)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        clear_outbox(conn)
        ensure_partition(conn, received_at)
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(_COPY) as copy:
            for n in range(events):
                key = n % keys
                row = (received_at, new_event_id(received_at), tenant, event_type, 1, f"k-{key}", lanes[key])
                copy.write_row((*row, f"{label}-{n}", payload(n), received_at))
        conn.execute(NAIVE_DDL)
        conn.execute(_COPY_NAIVE)
        conn.execute("VACUUM ANALYZE outbox")
        conn.execute(f"VACUUM ANALYZE {NAIVE_TABLE}")
    return Backlog(events, keys, tenant, event_type, f"{tenant}.{event_type}", len(payload(events // 2)))
