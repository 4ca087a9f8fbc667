"""An outbox event as a Kafka record (CONTRACT.md, "Kafka records"): pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from events_api.routing import Routing, dead_letter_topic_for, topic_for, valid_topic
from events_api.storage.relay import ClaimedEvent


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    cluster: str
    topic: str
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


_SPECVERSION = ("ce_specversion", b"1.0")
_CONTENT_TYPE = ("content-type", b"application/json")


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cloudevent_headers(event: ClaimedEvent) -> list[tuple[str, bytes]]:
    """CloudEvents binary mode, then traceparent, then the event's own headers."""
    headers = [
        _SPECVERSION,
        ("ce_id", event.event_id.encode()),
        ("ce_source", b"/tenants/" + event.tenant_id.encode()),
        ("ce_type", event.event_type.encode()),
        ("ce_time", _rfc3339(event.occurred_at or event.received_at).encode()),
        _CONTENT_TYPE,
        ("schema_version", str(event.schema_version).encode()),
    ]
    if event.traceparent:
        headers.append(("traceparent", event.traceparent.encode()))
    headers.extend((name, value.encode()) for name, value in (event.headers or {}).items())
    return headers


def record_for(event: ClaimedEvent, routing: Routing) -> KafkaRecord | str:
    """The record to publish, or why it can never be published (a permanent error name)."""
    topic = topic_for(routing, event.tenant_id, event.event_type)
    if not valid_topic(topic):
        return "INVALID_TOPIC"
    key = (event.partition_key if event.partition_key is not None else event.event_id).encode()
    return KafkaRecord(routing.cluster, topic, key, event.payload, cloudevent_headers(event))


def dead_letter_record(
    event: ClaimedEvent, routing: Routing, *, error: str, attempts: int, original_topic: str | None, with_value: bool
) -> KafkaRecord | str:
    """The record for the tenant's dead-letter topic; without the value when the value itself cannot be sent."""
    topic = dead_letter_topic_for(routing, event.tenant_id, event.event_type)
    if not valid_topic(topic):
        return "INVALID_TOPIC"
    headers = [
        *cloudevent_headers(event),
        ("error", error.encode()),
        ("attempts", str(attempts).encode()),
        ("original_topic", (original_topic or "").encode()),
    ]
    if not with_value:
        headers.append(("value_omitted", b"the value could not be sent; fetch it with GET /v1/dead-letters"))
    key = (event.partition_key if event.partition_key is not None else event.event_id).encode()
    return KafkaRecord(routing.cluster, topic, key, event.payload if with_value else None, headers)


def held_back(
    ordering_keys: Sequence[tuple[str, str] | None], destinations: Sequence[tuple[str, str] | None]
) -> list[bool]:
    """Which records of a batch (in sequence order) wait for the next batch.

    Kafka orders records within one topic partition only. So that an event that fails and is retried can
    never be overtaken by a later event of its key on another topic or cluster, each key sends only its
    leading run of records with one destination; the rest wait, untouched. Records without an ordering key
    (no partition key, or nothing to send) never wait.
    """
    first: dict[tuple[str, str], tuple[str, str] | None] = {}
    holding: set[tuple[str, str]] = set()
    waits: list[bool] = []
    for key, destination in zip(ordering_keys, destinations, strict=True):
        if key is None:
            waits.append(False)
            continue
        if key in holding or first.setdefault(key, destination) != destination:
            holding.add(key)
            waits.append(True)
        else:
            waits.append(False)
    return waits
