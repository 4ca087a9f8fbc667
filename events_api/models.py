"""Request and response bodies of the HTTP API, as msgspec structs (decoding is validation)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

# `(?!\n)$`: Python's `$` also matches before a final newline; this anchors at the very end in Python
# (msgspec's checks) and in ECMA-262 (JSON Schema and OpenAPI readers) alike.
TENANT_ID_PATTERN = r"^[a-z][a-z0-9-]{1,62}(?!\n)$"
EVENT_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*(?!\n)$"
MAX_EVENT_TYPE_LENGTH = 255
MAX_PARTITION_KEY_LENGTH = 1024
MAX_HEADERS = 64

EventType = Annotated[
    str,
    Meta(pattern=EVENT_TYPE_PATTERN, max_length=MAX_EVENT_TYPE_LENGTH, description="e.g. `order.created`."),
]
AwareDatetime = Annotated[datetime, Meta(tz=True, description="RFC 3339 timestamp with a time zone.")]
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text and jsonb cannot hold U+0000
PartitionKey = Annotated[str, Meta(min_length=1, max_length=MAX_PARTITION_KEY_LENGTH, pattern=NO_NUL)]
HeaderName = Annotated[str, Meta(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(?!\n)$")]
HeaderValue = Annotated[str, Meta(max_length=8192, pattern=NO_NUL)]
UserHeaders = Annotated[dict[HeaderName, HeaderValue], Meta(max_length=MAX_HEADERS)]
SchemaVersion = Annotated[int, Meta(ge=1, le=2_147_483_647)]
Scopes = Literal["events:publish", "events:read", "schemas:write", "dead-letters:manage"]


class Problem(Struct, omit_defaults=True):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[ProblemError] | None = None


class ProblemError(Struct):
    pointer: str
    message: str


# --- tenants and keys -------------------------------------------------------------------------


class TenantIn(Struct, forbid_unknown_fields=True):
    id: Annotated[str, Meta(pattern=TENANT_ID_PATTERN, description="e.g. `acme`")]


class Tenant(Struct):
    id: str
    created_at: datetime


class ApiKeyIn(Struct, forbid_unknown_fields=True):
    scopes: Annotated[list[Scopes], Meta(min_length=1, max_length=4)]
    name: Annotated[str, Meta(max_length=200)] = ""
    expires_at: AwareDatetime | None = None


class ApiKeyCreated(Struct):
    id: str
    key: Annotated[str, Meta(description="The secret API key. Shown only in this response.")]
    tenant: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None


class RoutingIn(Struct, forbid_unknown_fields=True):
    topic_template: Annotated[str, Meta(max_length=300)] = "{tenant}.{event_type}"
    dead_letter_topic: Annotated[str, Meta(max_length=300)] = "{tenant}.dead-letter"
    topics: Annotated[dict[EventType, Annotated[str, Meta(max_length=249)]], Meta(max_length=1000)] = msgspec.field(
        default_factory=dict
    )
    cluster: Annotated[str, Meta(max_length=63)] = "default"


class RoutingOut(Struct):
    tenant: str
    topic_template: str
    dead_letter_topic: str
    topics: dict[str, str]
    cluster: str


PerSecond = Annotated[int, Meta(ge=0, le=2**31 - 1)]


class RateLimitsIn(Struct, forbid_unknown_fields=True):
    events_per_second: Annotated[
        PerSecond | None,
        Meta(description="Events per second (batches count their events); 0: unlimited; null: default"),
    ] = None
    bytes_per_second: Annotated[
        PerSecond | None, Meta(description="Request body bytes per second; 0: unlimited; null: the default")
    ] = None


class RateLimitsOut(Struct):
    tenant: str
    events_per_second: Annotated[int | None, Meta(description="As set for this tenant; null: the default")]
    bytes_per_second: int | None
    effective_events_per_second: Annotated[int, Meta(description="What applies now (0: unlimited)")]
    effective_bytes_per_second: int


# --- audit ------------------------------------------------------------------------------------


class AuditEntryOut(Struct):
    id: int
    at: datetime
    tenant: str
    actor: Annotated[str, Meta(description="The API key id that made the change, or `admin`, or `cli:<user>`")]
    action: Annotated[str, Meta(description="e.g. `api_key.created`, `schema.version_registered`")]
    target: str | None
    details: dict[str, Any] | None


class AuditPage(Struct):
    entries: list[AuditEntryOut]
    next_cursor: Annotated[str | None, Meta(description="Pass as `cursor` for older entries; null at the end")]


# --- schemas ----------------------------------------------------------------------------------


class SchemaIn(Struct, forbid_unknown_fields=True):
    schema: Annotated[dict[str, Any], Meta(description="A JSON Schema (2020-12 unless `$schema` says otherwise).")]


class SchemaRegistered(Struct):
    event_type: str
    version: int
    compatibility: str


Compatibility = Literal[
    "NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"
]


class CompatibilityIn(Struct, forbid_unknown_fields=True):
    compatibility: Compatibility


class CompatibilityOut(Struct):
    event_type: str
    compatibility: str


class CompatibilityFinding(Struct):
    path: Annotated[str, Meta(description="JSON Pointer into the schema")]
    rule: str
    direction: Literal["BACKWARD", "FORWARD"]
    message: str
    undecidable: bool
    against_version: int | None


class CompatibilityCheckOut(Struct):
    compatible: bool
    messages: list[str]
    findings: list[CompatibilityFinding]


class EventTypeOut(Struct):
    event_type: str
    compatibility: str
    latest_version: int
    created_at: datetime


class EventTypeList(Struct):
    event_types: list[EventTypeOut]


class VersionOut(Struct):
    version: int
    created_at: datetime
    created_by: str | None


class VersionList(Struct):
    event_type: str
    versions: list[VersionOut]


class SchemaVersionOut(Struct):
    event_type: str
    version: int
    schema: dict[str, Any]
    compatibility: str
    created_at: datetime
    created_by: str | None


# --- events -----------------------------------------------------------------------------------


class EventIn(Struct, forbid_unknown_fields=True):
    """A native event."""

    event_type: EventType
    payload: dict[str, Any]
    partition_key: PartitionKey | None = None
    schema_version: SchemaVersion | None = None
    occurred_at: AwareDatetime | None = None
    headers: UserHeaders | None = None


class CloudEventIn(Struct):
    """A CloudEvents 1.0 event in structured mode; extension attributes are allowed and ignored
    except `partitionkey` and `schemaversion`."""

    specversion: Literal["1.0"]
    type: EventType
    data: dict[str, Any]
    id: Annotated[str, Meta(min_length=1)] | None = None
    source: Annotated[str, Meta(min_length=1)] | None = None
    partitionkey: PartitionKey | None = None
    schemaversion: SchemaVersion | None = None
    time: AwareDatetime | None = None
    datacontenttype: Literal["application/json"] | None = None


class BatchIn(Struct, forbid_unknown_fields=True):
    events: Annotated[list[EventIn], Meta(min_length=1)]


class EventAccepted(Struct):
    event_id: str
    status: Literal["accepted"]
    event_type: str
    schema_version: int
    received_at: str


class BatchAccepted(Struct):
    events: list[EventAccepted]


class KafkaCoordinates(Struct):
    topic: str
    partition: int
    offset: int


class EventStatus(Struct, omit_defaults=True):
    event_id: str
    event_type: str
    status: Literal["pending", "published", "dead_lettered"]
    attempts: int
    received_at: str
    schema_version: int
    published_at: str | None = None
    kafka: KafkaCoordinates | None = None
    last_error: str | None = None


class EventStatusList(Struct):
    events: list[EventStatus]


class DeadLetterOut(Struct):
    event_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    attempts: int
    last_error: str
    original_topic: str | None
    received_at: datetime
    dead_lettered_at: datetime


class DeadLetterPage(Struct):
    dead_letters: list[DeadLetterOut]
    next_cursor: str | None


class RedriveIn(Struct, forbid_unknown_fields=True):
    event_type: EventType | None = None


class RedriveOne(Struct):
    event_id: str
    status: Literal["pending"]


class RedriveCount(Struct):
    count: int


class Health(Struct):
    status: str
    checks: dict[str, str] = msgspec.field(default_factory=dict)
