"""Outbox rows and idempotency keys of one tenant.

`accept` is the hot path: one statement that claims the idempotency key and appends the events.
Run in autocommit, the statement is its own transaction, so when it returns the events are
committed and the 202 may go out; when it raises, nothing was stored (or, if the connection broke
mid-commit, the client's retry with the same key finds out which).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import psycopg.errors
from sqlalchemy import and_, select, tuple_

from events_api.storage.database import Database
from events_api.storage.partitions import ensure_partitions
from events_api.storage.tables import idempotency_keys, outbox


@dataclass(frozen=True, slots=True)
class NewEvent:
    event_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    lane: int
    payload: bytes
    headers: dict[str, str] | None
    occurred_at: datetime | None


@dataclass(frozen=True, slots=True)
class Acceptance:
    """What `accept` stores besides the events: the key, its fingerprint and the response to replay."""

    idempotency_key: str
    operation: str
    fingerprint: bytes
    response_status: int
    response_body: bytes
    received_at: datetime
    expires_at: datetime
    traceparent: str | None


@dataclass(frozen=True, slots=True)
class StoredResponse:
    operation: str
    fingerprint: bytes
    event_ids: list[str]
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class EventRecord:
    event_id: str
    event_type: str
    schema_version: int
    state: str
    attempts: int
    received_at: datetime
    published_at: datetime | None
    kafka_topic: str | None
    kafka_partition: int | None
    kafka_offset: int | None
    last_error: str | None


# accept_events: if the caller's key is live, claim (tenant, key) unless a live claim exists, and append
# the events if claimed. Checking the key here makes a revocation binding on the very next statement,
# on every replica, whatever the API processes have cached.
_ACCEPT = """
WITH caller AS (
    SELECT FROM api_keys
    WHERE id = %(api_key_id)s AND tenant_id = %(tenant_id)s AND revoked_at IS NULL
      AND (expires_at IS NULL OR expires_at > %(now)s)
), claimed AS (
    INSERT INTO idempotency_keys AS k
        (tenant_id, key, operation, fingerprint, event_ids, response_status, response_body, created_at, expires_at)
    SELECT %(tenant_id)s, %(key)s, %(operation)s, %(fingerprint)s, CAST(%(event_ids)s AS text[]),
           %(status)s, %(body)s, %(now)s, %(expires_at)s
    WHERE EXISTS (SELECT FROM caller)
    ON CONFLICT (tenant_id, key) DO UPDATE
        SET operation = excluded.operation, fingerprint = excluded.fingerprint, event_ids = excluded.event_ids,
            response_status = excluded.response_status, response_body = excluded.response_body,
            created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE k.expires_at <= excluded.created_at
    RETURNING 1
), stored AS (
    INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, partition_key, lane,
                        idempotency_key, payload, headers, traceparent, occurred_at, next_attempt_at)
    SELECT %(now)s, e.event_id, %(tenant_id)s, e.event_type, e.schema_version, e.partition_key, e.lane,
           %(key)s, e.payload, CAST(e.headers AS jsonb), %(traceparent)s, e.occurred_at, %(now)s
    FROM unnest(CAST(%(event_ids)s AS text[]), CAST(%(event_types)s AS text[]), CAST(%(schema_versions)s AS int[]),
                CAST(%(partition_keys)s AS text[]), CAST(%(lanes)s AS smallint[]), CAST(%(payloads)s AS bytea[]),
                CAST(%(headers)s AS text[]), CAST(%(occurred_ats)s AS timestamptz[]))
         WITH ORDINALITY AS e(event_id, event_type, schema_version, partition_key, lane, payload, headers,
                              occurred_at, ord)
    WHERE EXISTS (SELECT FROM claimed)
    ORDER BY e.ord
    RETURNING 1
)
SELECT EXISTS (SELECT FROM caller) AS caller_live, (SELECT count(*) FROM stored) AS stored
"""


class Accepted(enum.Enum):
    STORED = "stored"
    KEY_TAKEN = "key-taken"
    CALLER_NOT_LIVE = "caller-not-live"


_EVENT_COLUMNS = (
    outbox.c.event_id,
    outbox.c.event_type,
    outbox.c.schema_version,
    outbox.c.state,
    outbox.c.attempts,
    outbox.c.received_at,
    outbox.c.published_at,
    outbox.c.kafka_topic,
    outbox.c.kafka_partition,
    outbox.c.kafka_offset,
    outbox.c.last_error,
)


class EventStore:
    """Every query is scoped to `tenant_id`, fixed at construction."""

    def __init__(self, db: Database, tenant_id: str) -> None:
        self.db = db
        self.tenant_id = tenant_id

    async def accept(self, api_key_id: str, acceptance: Acceptance, events: Sequence[NewEvent]) -> Accepted:
        """Store the events under the idempotency key atomically, or nothing (and say why)."""
        params = {
            "api_key_id": api_key_id,
            "tenant_id": self.tenant_id,
            "key": acceptance.idempotency_key,
            "operation": acceptance.operation,
            "fingerprint": acceptance.fingerprint,
            "status": acceptance.response_status,
            "body": acceptance.response_body,
            "now": acceptance.received_at,
            "expires_at": acceptance.expires_at,
            "traceparent": acceptance.traceparent,
            "event_ids": [e.event_id for e in events],
            "event_types": [e.event_type for e in events],
            "schema_versions": [e.schema_version for e in events],
            "partition_keys": [e.partition_key for e in events],
            "lanes": [e.lane for e in events],
            "payloads": [e.payload for e in events],
            "headers": [None if e.headers is None else msgspec.json.encode(e.headers).decode() for e in events],
            "occurred_ats": [e.occurred_at for e in events],
        }
        async with self.db.autocommit_driver() as conn:
            try:
                row = await (await conn.execute(_ACCEPT, params)).fetchone()
            except psycopg.errors.CheckViolation as exc:
                if "no partition" not in str(exc):
                    raise
                # Partitions are made days ahead; this is the backstop if that ever fell behind.
                async with self.db.transaction() as ddl:
                    await ensure_partitions(ddl, [acceptance.received_at.astimezone(UTC).date()])
                row = await (await conn.execute(_ACCEPT, params)).fetchone()
        assert row is not None
        caller_live, stored = row
        if not caller_live:
            return Accepted.CALLER_NOT_LIVE
        return Accepted.STORED if stored == len(events) else Accepted.KEY_TAKEN

    async def find_response(self, idempotency_key: str, now: datetime) -> StoredResponse | None:
        """find_idempotent_response: the live (unexpired) stored response for a key."""
        stmt = select(
            idempotency_keys.c.operation,
            idempotency_keys.c.fingerprint,
            idempotency_keys.c.event_ids,
            idempotency_keys.c.response_status,
            idempotency_keys.c.response_body,
        ).where(
            idempotency_keys.c.tenant_id == self.tenant_id,
            idempotency_keys.c.key == idempotency_key,
            idempotency_keys.c.expires_at > now,
        )
        async with self.db.autocommit() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return StoredResponse(
            row.operation,
            bytes(row.fingerprint),
            list(row.event_ids),
            row.response_status,
            bytes(row.response_body),
        )

    async def get(self, refs: Sequence[tuple[str, datetime]]) -> list[EventRecord]:
        """get_events: events by (event id, received_at), which prunes to their partitions; in the given order."""
        if not refs:
            return []
        stmt = select(*_EVENT_COLUMNS).where(
            and_(
                outbox.c.tenant_id == self.tenant_id,
                tuple_(outbox.c.received_at, outbox.c.event_id).in_([(at, eid) for eid, at in refs]),
            )
        )
        async with self.db.autocommit() as conn:
            found = {row.event_id: EventRecord(*row) for row in await conn.execute(stmt)}
        return [found[eid] for eid, _ in refs if eid in found]
