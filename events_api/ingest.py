"""Ingest: from a request body to events committed in the outbox, exactly once per idempotency key.

Decoding (native, CloudEvents structured, batch) normalises every event into a `Submitted` that
remembers where its fields sit in the request body, so every error carries a JSON Pointer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec

from events_api.auth import TenantCaller
from events_api.decoding import decode_body
from events_api.errors import (
    FieldError,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    NotFound,
    Unauthorized,
    ValidationFailed,
)
from events_api.idempotency import fingerprint
from events_api.ids import RandomBytes, event_id_time, new_event_id, truncate_to_millis
from events_api.lanes import lane_for
from events_api.limits import check_payload
from events_api.models import (
    BatchAccepted,
    BatchIn,
    CloudEventIn,
    EventAccepted,
    EventIn,
    EventStatus,
    EventStatusList,
    KafkaCoordinates,
)
from events_api.schemas import MAX_ERRORS, SchemaRegistry, violations
from events_api.storage.database import Database
from events_api.storage.events import Acceptance, Accepted, EventRecord, EventStore, NewEvent
from events_api.storage.outbox_writer import OutboxWriter
from events_api.tenants import Tenants

Operation = Literal["event", "batch"]
BodyFormat = Literal["native", "cloudevents", "cloudevents-batch"]

# Names the relay sets itself on every Kafka record; an event's own headers may not shadow them.
RESERVED_HEADERS = frozenset({"content-type", "schema_version", "traceparent", "error", "attempts", "original_topic"})
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Submitted:
    """One event of a request, normalised, with the pointers to its fields in the request body."""

    event_type: str
    payload: dict[str, Any]
    partition_key: str | None
    schema_version: int | None
    occurred_at: datetime | None
    headers: dict[str, str] | None
    type_pointer: str
    payload_pointer: str
    version_pointer: str
    headers_pointer: str

    def normalised(self) -> dict[str, Any]:
        return {
            "event_type": self.event_type,
            "payload": self.payload,
            "partition_key": self.partition_key,
            "schema_version": self.schema_version,
            "occurred_at": None if self.occurred_at is None else self.occurred_at.isoformat(),
            "headers": self.headers,
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int
    body: bytes
    replayed: bool
    location: str | None


def _utc(at: datetime | None, pointer: str) -> datetime | None:
    """In UTC; a time whose offset pushes it outside years 1-9999 is refused (Python cannot hold it)."""
    if at is None:
        return None
    try:
        return at.astimezone(UTC)
    except OverflowError:
        raise ValidationFailed(
            "the time is out of range", errors=[FieldError(pointer, "must be within years 0001-9999 in UTC")]
        ) from None


def _native(event: EventIn, prefix: str) -> Submitted:
    check_payload(event.payload, f"{prefix}/payload")
    return Submitted(
        event.event_type,
        event.payload,
        event.partition_key,
        event.schema_version,
        _utc(event.occurred_at, f"{prefix}/occurred_at"),
        event.headers,
        type_pointer=f"{prefix}/event_type",
        payload_pointer=f"{prefix}/payload",
        version_pointer=f"{prefix}/schema_version",
        headers_pointer=f"{prefix}/headers",
    )


def _cloudevent(event: CloudEventIn, prefix: str) -> Submitted:
    check_payload(event.data, f"{prefix}/data")
    return Submitted(
        event.type,
        event.data,
        event.partitionkey,
        event.schemaversion,
        _utc(event.time, f"{prefix}/time"),
        None,
        type_pointer=f"{prefix}/type",
        payload_pointer=f"{prefix}/data",
        version_pointer=f"{prefix}/schemaversion",
        headers_pointer=f"{prefix}/headers",
    )


def decode_event(body: bytes, body_format: BodyFormat) -> Submitted:
    if body_format == "cloudevents":
        return _cloudevent(decode_body(body, CloudEventIn), "")
    return _native(decode_body(body, EventIn), "")


def decode_batch(body: bytes, body_format: BodyFormat, max_events: int) -> list[Submitted]:
    if body_format == "cloudevents-batch":
        cloudevents: list[CloudEventIn] = decode_body(body, list[CloudEventIn])
        events = [_cloudevent(e, f"/{i}") for i, e in enumerate(cloudevents)]
        where = ""
    else:
        batch: BatchIn = decode_body(body, BatchIn)
        events = [_native(e, f"/events/{i}") for i, e in enumerate(batch.events)]
        where = "/events"
    if not 1 <= len(events) <= max_events:
        raise ValidationFailed(
            f"a batch holds 1 to {max_events} events, this one has {len(events)}",
            errors=[FieldError(where, f"must hold 1 to {max_events} events")],
        )
    return events


def valid_traceparent(header: str | None) -> str | None:
    """W3C trace context: a malformed traceparent is ignored, not an error."""
    if header is None:
        return None
    value = header.strip().lower()
    return value if _TRACEPARENT.fullmatch(value) and not value.startswith("ff") else None


def timestamp(at: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, the precision event ids keep."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_status(record: EventRecord) -> EventStatus:
    kafka = None
    if record.kafka_topic is not None and record.kafka_partition is not None and record.kafka_offset is not None:
        kafka = KafkaCoordinates(record.kafka_topic, record.kafka_partition, record.kafka_offset)
    return EventStatus(
        event_id=record.event_id,
        event_type=record.event_type,
        status=record.state,  # type: ignore[arg-type]
        attempts=record.attempts,
        received_at=timestamp(record.received_at),
        schema_version=record.schema_version,
        published_at=None if record.published_at is None else timestamp(record.published_at),
        kafka=kafka,
        last_error=record.last_error,
    )


class Ingest:
    """Validates submitted events and stores them with their idempotency key in one statement."""

    def __init__(
        self,
        db: Database,
        registry: SchemaRegistry,
        tenants: Tenants,
        *,
        idempotency_ttl: timedelta,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        random: RandomBytes = os.urandom,
    ) -> None:
        self.db = db
        self.registry = registry
        self.tenants = tenants
        self.writer = OutboxWriter(db)
        self.idempotency_ttl = idempotency_ttl
        self.clock = clock
        self.random = random

    async def _validate(self, tenant_id: str, events: Sequence[Submitted]) -> list[int]:
        """The schema version each event is valid against; ValidationFailed listing every problem."""
        wanted = {(e.event_type, e.schema_version) for e in events}
        resolved = await self.registry.resolve(tenant_id, wanted)
        errors: list[FieldError] = []
        versions: list[int] = []
        for event in events:
            if event.headers:
                errors.extend(
                    FieldError(f"{event.headers_pointer}/{name}", "this header name is reserved for the relay")
                    for name in event.headers
                    if name.lower() in RESERVED_HEADERS or name.lower().startswith("ce_")
                )
            schema = resolved.get((event.event_type, event.schema_version))
            if schema is None:
                if event.schema_version is None:
                    errors.append(FieldError(event.type_pointer, f"unknown event type {event.event_type!r}"))
                else:
                    errors.append(
                        FieldError(
                            event.version_pointer,
                            f"event type {event.event_type!r} has no schema version {event.schema_version}",
                        )
                    )
                versions.append(0)
            else:
                errors.extend(
                    violations(schema.validator, event.payload, event.payload_pointer, MAX_ERRORS - len(errors))
                )
                versions.append(schema.version)
            if len(errors) >= MAX_ERRORS:
                break
        if errors:
            more = f" (first {MAX_ERRORS} shown)" if len(errors) >= MAX_ERRORS else ""
            raise ValidationFailed(f"{len(errors)} validation error(s){more}", errors=errors)
        return versions

    async def publish(
        self,
        caller: TenantCaller,
        idempotency_key: str,
        operation: Operation,
        events: Sequence[Submitted],
        *,
        traceparent: str | None = None,
    ) -> Outcome:
        tenant_id = caller.tenant_id
        request_fingerprint = fingerprint(operation, [e.normalised() for e in events])
        store = EventStore(self.db, tenant_id)
        try:
            versions = await self._validate(tenant_id, events)
        except ValidationFailed:
            # A replay of a request that was accepted before a schema changed still replays.
            replay = await self._replay(caller, store, idempotency_key, request_fingerprint)
            if replay is None:
                raise
            return replay

        now = self.clock()
        received_at = truncate_to_millis(now)
        new_events = [
            self._new_event(tenant_id, e, version, received_at) for e, version in zip(events, versions, strict=True)
        ]
        receipts = [
            EventAccepted(e.event_id, "accepted", e.event_type, e.schema_version, timestamp(received_at))
            for e in new_events
        ]
        body = _encoder.encode(receipts[0] if operation == "event" else BatchAccepted(receipts))
        acceptance = Acceptance(
            idempotency_key=idempotency_key,
            operation=operation,
            fingerprint=request_fingerprint,
            response_status=202,
            response_body=body,
            received_at=received_at,
            expires_at=received_at + self.idempotency_ttl,
            traceparent=traceparent,
        )
        for _ in range(2):
            accepted_as = await self.writer.accept(tenant_id, caller.key_id, acceptance, new_events)
            if accepted_as is Accepted.STORED:
                location = f"/v1/events/{new_events[0].event_id}" if operation == "event" else None
                return Outcome(202, body, replayed=False, location=location)
            if accepted_as is Accepted.CALLER_NOT_LIVE:
                raise Unauthorized("the API key is not valid, revoked or expired")
            replay = await self._replay(caller, store, idempotency_key, request_fingerprint)
            if replay is not None:
                return replay
            # The claim we collided with expired or was pruned between the two statements: try again.
        raise IdempotencyKeyInFlight("another request with this Idempotency-Key is being processed")

    def _new_event(self, tenant_id: str, event: Submitted, version: int, received_at: datetime) -> NewEvent:
        event_id = new_event_id(received_at, self.random)
        # Without a partition key no order is promised, so the id spreads such events over all lanes.
        ordering_key = event.partition_key if event.partition_key is not None else event_id
        return NewEvent(
            event_id=event_id,
            event_type=event.event_type,
            schema_version=version,
            partition_key=event.partition_key,
            lane=lane_for(tenant_id, ordering_key),
            payload=_encoder.encode(event.payload),
            headers=event.headers,
            occurred_at=event.occurred_at,
        )

    async def close(self) -> None:
        await self.writer.close()

    async def _replay(
        self, caller: TenantCaller, store: EventStore, idempotency_key: str, request_fingerprint: bytes
    ) -> Outcome | None:
        # The caller's key may come from a cache: re-read it before showing any stored response.
        await self.tenants.confirm(caller, self.clock())
        stored = await store.find_response(idempotency_key, self.clock())
        if stored is None:
            return None
        if stored.fingerprint != request_fingerprint:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used with a different request; use a new key for a new request"
            )
        location = f"/v1/events/{stored.event_ids[0]}" if stored.operation == "event" else None
        return Outcome(stored.status, stored.body, replayed=True, location=location)

    async def status(self, tenant_id: str, event_id: str) -> EventStatus:
        received_at = event_id_time(event_id)
        found = await EventStore(self.db, tenant_id).get([(event_id, received_at)]) if received_at else []
        if not found:
            raise NotFound(f"no event {event_id[:80]!r}")
        return event_status(found[0])

    async def status_by_key(self, tenant_id: str, idempotency_key: str) -> EventStatus | EventStatusList:
        store = EventStore(self.db, tenant_id)
        stored = await store.find_response(idempotency_key, self.clock())
        if stored is None:
            raise NotFound("no live request with this Idempotency-Key")
        refs = [(eid, at) for eid in stored.event_ids if (at := event_id_time(eid)) is not None]
        records = [event_status(r) for r in await store.get(refs)]
        if stored.operation == "event":
            if not records:
                raise NotFound("no live request with this Idempotency-Key")
            return records[0]
        return EventStatusList(records)
