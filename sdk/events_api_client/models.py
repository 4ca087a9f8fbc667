"""What the client sends and returns, as plain typed dataclasses. Response fields carry the API's own
names (a test checks them against `openapi.yaml`), parsed into Python types (`datetime`, not strings)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

EventState = Literal["pending", "published", "dead_lettered"]


@dataclass(frozen=True, slots=True)
class Event:
    """One event to publish: the `EventIn` body of the API. `occurred_at` must carry a time zone."""

    event_type: str
    payload: dict[str, Any]
    partition_key: str | None = None
    schema_version: int | None = None
    headers: dict[str, str] | None = None
    occurred_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """The request body; members left unset are omitted rather than sent as null."""
        body: dict[str, Any] = {"event_type": self.event_type, "payload": self.payload}
        if self.partition_key is not None:
            body["partition_key"] = self.partition_key
        if self.schema_version is not None:
            body["schema_version"] = self.schema_version
        if self.headers is not None:
            body["headers"] = self.headers
        if self.occurred_at is not None:
            if self.occurred_at.tzinfo is None:
                raise ValueError("occurred_at needs a time zone (e.g. datetime.now(UTC))")
            body["occurred_at"] = self.occurred_at.isoformat()
        return body


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The answer to a publish. `status` is "accepted" once the API has stored the event durably, or
    "spooled" when the API was unreachable and the event waits in the local spool (then `event_id`,
    `schema_version` and `received_at` are None until the spool delivers it under `idempotency_key`)."""

    event_id: str | None
    status: Literal["accepted", "spooled"]
    event_type: str
    schema_version: int | None
    received_at: datetime | None
    idempotency_key: str
    #: The API had already stored this key: the event was stored once, by an earlier attempt or call.
    replayed: bool = False
    location: str | None = None

    @property
    def spooled(self) -> bool:
        return self.status == "spooled"

    @classmethod
    def from_json(
        cls, body: dict[str, Any], *, idempotency_key: str, replayed: bool, location: str | None = None
    ) -> PublishResult:
        return cls(
            event_id=body["event_id"],
            status=body["status"],
            event_type=body["event_type"],
            schema_version=body["schema_version"],
            received_at=datetime.fromisoformat(body["received_at"]),
            idempotency_key=idempotency_key,
            replayed=replayed,
            location=location,
        )


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The answer to a batch publish: one `PublishResult` per event, in request order (empty when spooled)."""

    events: list[PublishResult]
    status: Literal["accepted", "spooled"]
    idempotency_key: str
    replayed: bool = False

    @property
    def spooled(self) -> bool:
        return self.status == "spooled"


@dataclass(frozen=True, slots=True)
class KafkaCoordinates:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class EventStatus:
    """Where an event is on its way to Kafka (`GET /v1/events/{event_id}`)."""

    event_id: str
    event_type: str
    status: EventState
    attempts: int
    received_at: datetime
    schema_version: int
    published_at: datetime | None = None
    kafka: KafkaCoordinates | None = None
    last_error: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> EventStatus:
        kafka = body.get("kafka")
        published_at = body.get("published_at")
        return cls(
            event_id=body["event_id"],
            event_type=body["event_type"],
            status=body["status"],
            attempts=body["attempts"],
            received_at=datetime.fromisoformat(body["received_at"]),
            schema_version=body["schema_version"],
            published_at=datetime.fromisoformat(published_at) if published_at else None,
            kafka=KafkaCoordinates(kafka["topic"], kafka["partition"], kafka["offset"]) if kafka else None,
            last_error=body.get("last_error"),
        )


class NextStep(enum.Enum):
    """What to do about a publish whose answer was lost."""

    #: The event is stored: nothing to do; do not publish it again under a new key.
    DONE = "done"
    #: Nothing is stored under the key (yet): publish again with the same idempotency key. That is always
    #: safe: if the lost attempt is still being committed, the API stores at most one event per key.
    REPUBLISH_SAME_KEY = "republish_same_key"


@dataclass(frozen=True, slots=True)
class LandingCheck:
    """The answer of `check_landed(key)`: did a publish under this key store its event(s)?"""

    idempotency_key: str
    events: list[EventStatus] = field(default_factory=list)
    #: The key was used for a batch (`events` in batch order).
    batch: bool = False

    @property
    def landed(self) -> bool:
        return bool(self.events)

    def single_event(self) -> EventStatus | None:
        """The event of a single publish under the key, or None when nothing is stored."""
        if self.batch:
            raise ValueError(f"{self.idempotency_key!r} was used for a batch: read check_landed(key).events")
        return self.events[0] if self.events else None

    @property
    def next_step(self) -> NextStep:
        return NextStep.DONE if self.landed else NextStep.REPUBLISH_SAME_KEY


@dataclass(frozen=True, slots=True)
class SchemaRegistered:
    """A registered schema version; `created` is False when an identical version already existed."""

    event_type: str
    version: int
    compatibility: str
    created: bool = True


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event the relay gave up on, with its last error; `redrive(event_id)` delivers it again."""

    event_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    attempts: int
    last_error: str
    original_topic: str | None
    received_at: datetime
    dead_lettered_at: datetime

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> DeadLetter:
        return cls(
            event_id=body["event_id"],
            event_type=body["event_type"],
            schema_version=body["schema_version"],
            partition_key=body.get("partition_key"),
            attempts=body["attempts"],
            last_error=body["last_error"],
            original_topic=body.get("original_topic"),
            received_at=datetime.fromisoformat(body["received_at"]),
            dead_lettered_at=datetime.fromisoformat(body["dead_lettered_at"]),
        )


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    dead_letters: list[DeadLetter]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class FlushReport:
    """What one `flush()` of the spool did: `remaining` events still wait (the API is still unreachable),
    `rejected` ones were refused for good by the API (kept in the spool file, see `Spool.rejected()`)."""

    delivered: int
    rejected: int
    remaining: int
