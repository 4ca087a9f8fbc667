"""Outbox rows and idempotency keys of one tenant: what is written (`NewEvent`, `Acceptance`, written
by storage/outbox_writer.py) and the reads (stored responses for replay, event status)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, literal, null, select, tuple_, union_all

from events_api.storage.database import Database
from events_api.storage.tables import dead_letters, idempotency_keys, outbox


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
        in_outbox = select(*_EVENT_COLUMNS).where(
            and_(
                outbox.c.tenant_id == self.tenant_id,
                tuple_(outbox.c.received_at, outbox.c.event_id).in_([(at, eid) for eid, at in refs]),
            )
        )
        # Dead letters have left the outbox (so they never pin a partition); they are found here.
        dead = select(
            dead_letters.c.event_id,
            dead_letters.c.event_type,
            dead_letters.c.schema_version,
            literal("dead_lettered"),
            dead_letters.c.attempts,
            dead_letters.c.received_at,
            null(),
            dead_letters.c.original_topic,
            null(),
            null(),
            dead_letters.c.last_error,
        ).where(dead_letters.c.tenant_id == self.tenant_id, dead_letters.c.event_id.in_([eid for eid, _ in refs]))
        stmt = union_all(in_outbox, dead)
        async with self.db.autocommit() as conn:
            found = {row.event_id: EventRecord(*row) for row in await conn.execute(stmt)}
        return [found[eid] for eid, _ in refs if eid in found]
