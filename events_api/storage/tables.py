"""SQLAlchemy metadata: the single description of the schema. Alembic migrations must produce
exactly this (tests/integration/test_migrations.py proves it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _timestamp(name: str, *, nullable: bool = False) -> Column[Any]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


tenants = Table(
    "tenants",
    metadata,
    Column("id", Text, primary_key=True),
    _timestamp("created_at"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, ForeignKey("tenants.id"), nullable=False, index=True),
    Column("name", Text, nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    # SHA-256 of the secret part; keys are 256-bit random so a slow hash adds nothing.
    Column("secret_hash", LargeBinary, nullable=False),
    _timestamp("created_at"),
    _timestamp("expires_at", nullable=True),
    _timestamp("revoked_at", nullable=True),
)

event_types = Table(
    "event_types",
    metadata,
    Column("tenant_id", Text, ForeignKey("tenants.id"), nullable=False),
    Column("event_type", Text, nullable=False),
    Column("compatibility", Text, nullable=False, server_default="BACKWARD"),
    _timestamp("created_at"),
    PrimaryKeyConstraint("tenant_id", "event_type"),
)

schema_versions = Table(
    "schema_versions",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("schema", JSONB, nullable=False),
    # SHA-256 of the canonical JSON of the schema: an identical registration finds its version.
    Column("fingerprint", LargeBinary, nullable=False),
    _timestamp("created_at"),
    Column("created_by", Text, nullable=True),
    PrimaryKeyConstraint("tenant_id", "event_type", "version"),
    UniqueConstraint("tenant_id", "event_type", "fingerprint"),
    ForeignKeyConstraint(
        ["tenant_id", "event_type"],
        ["event_types.tenant_id", "event_types.event_type"],
        name="fk_schema_versions_event_type_event_types",
    ),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("operation", Text, nullable=False),
    # SHA-256 of the normalised request: same key with another request is refused.
    Column("fingerprint", LargeBinary, nullable=False),
    Column("event_ids", ARRAY(Text), nullable=False),
    Column("response_status", SmallInteger, nullable=False),
    Column("response_body", LargeBinary, nullable=False),
    _timestamp("created_at"),
    _timestamp("expires_at"),
    PrimaryKeyConstraint("tenant_id", "key"),
    CheckConstraint("operation IN ('event', 'batch')", name="operation"),
    Index(None, "expires_at"),
)

outbox_seq = Sequence("outbox_seq", metadata=metadata)


def _event_columns() -> list[Column[Any]]:
    """What an event is, wherever it is kept: in the outbox, or moved out to the dead letters."""
    return [
        _timestamp("received_at"),
        Column("event_id", Text, nullable=False),
        Column("tenant_id", Text, nullable=False),
        Column("event_type", Text, nullable=False),
        Column("schema_version", Integer, nullable=False),
        Column("partition_key", Text, nullable=True),
        Column("lane", SmallInteger, nullable=False),
        Column("idempotency_key", Text, nullable=False),
        # The payload as the JSON bytes the relay will send, so it is never re-encoded.
        Column("payload", LargeBinary, nullable=False),
        Column("headers", JSONB, nullable=True),
        Column("traceparent", Text, nullable=True),
        _timestamp("occurred_at", nullable=True),
    ]


# Partitioned by RANGE (received_at), one partition per UTC day (storage/partitions.py). The primary
# key must contain the partition column; the event id encodes received_at, so lookups prune.
outbox = Table(
    "outbox",
    metadata,
    Column("seq", BigInteger, outbox_seq, server_default=outbox_seq.next_value(), nullable=False),
    *_event_columns(),
    Column("state", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    _timestamp("next_attempt_at"),
    Column("last_error", Text, nullable=True),
    _timestamp("published_at", nullable=True),
    Column("kafka_topic", Text, nullable=True),
    Column("kafka_partition", Integer, nullable=True),
    Column("kafka_offset", BigInteger, nullable=True),
    PrimaryKeyConstraint("received_at", "event_id"),
    CheckConstraint("state IN ('pending', 'published')", name="state"),
    # The relay's claim: pending rows of a lane in sequence order.
    Index("ix_outbox_pending_lane_seq", "lane", "seq", postgresql_where=text("state = 'pending'")),
    postgresql_partition_by="RANGE (received_at)",
)

# Where a tenant's events go: topic template, per-type overrides, dead-letter topic, Kafka cluster name.
tenant_routing = Table(
    "tenant_routing",
    metadata,
    Column("tenant_id", Text, ForeignKey("tenants.id"), primary_key=True),
    Column("topic_template", Text, nullable=False),
    Column("dead_letter_topic", Text, nullable=False),
    Column("topics", JSONB, nullable=False),
    Column("cluster", Text, nullable=False),
    _timestamp("updated_at"),
)

# Events that could not be delivered, moved out of the outbox so they never block their lane or pin a
# partition; redriving moves them back.
dead_letters = Table(
    "dead_letters",
    metadata,
    # The outbox sequence it had: letters redriven together go back in the order they were accepted.
    Column("seq", BigInteger, nullable=False),
    *_event_columns(),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=False),
    Column("original_topic", Text, nullable=True),
    _timestamp("dead_lettered_at"),
    PrimaryKeyConstraint("tenant_id", "event_id"),
    Index(None, "tenant_id", "dead_lettered_at", "event_id"),
    Index(None, "tenant_id", "event_type", "dead_lettered_at", "event_id"),
)

# Per-tenant ingest rate limits; a missing row or a NULL column means the EVENTS_API_RATE_LIMIT_* default.
tenant_rate_limits = Table(
    "tenant_rate_limits",
    metadata,
    Column("tenant_id", Text, ForeignKey("tenants.id"), primary_key=True),
    Column("events_per_second", Integer, nullable=True),
    Column("bytes_per_second", BigInteger, nullable=True),
    _timestamp("updated_at"),
)

# Every admin and schema change, written in the transaction that makes the change. `tenant_id` is the
# tenant the change concerns; `actor` is the key id that made it, `admin` (platform token) or `cli:<user>`.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    _timestamp("at"),
    Column("tenant_id", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=True),
    Column("details", JSONB, nullable=True),
    Index(None, "tenant_id", "id"),
)

# What the relays have done since the first one ran, for GET /metrics (relay_published_total, ...): each relay
# adds its batch's outcomes in the statement that settles the batch, to the row of a shard it picked at start
# (so relays seldom wait on each other's row lock). The sums over the rows only ever grow.
relay_stats = Table(
    "relay_stats",
    metadata,
    Column("shard", SmallInteger, primary_key=True),
    Column("published", BigInteger, nullable=False, server_default="0"),
    Column("retried", BigInteger, nullable=False, server_default="0"),
    Column("dead_lettered", BigInteger, nullable=False, server_default="0"),
)
