"""Tenants, API keys, schema registry, idempotency keys and the partitioned outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("secret_hash", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_api_keys_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "event_types",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("compatibility", sa.Text(), server_default="BACKWARD", nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_event_types_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", "event_type", name="pk_event_types"),
    )
    op.create_table(
        "schema_versions",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("schema", postgresql.JSONB(), nullable=False),
        sa.Column("fingerprint", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("created_by", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id", "event_type"],
            ["event_types.tenant_id", "event_types.event_type"],
            name="fk_schema_versions_event_type_event_types",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "event_type", "version", name="pk_schema_versions"),
        sa.UniqueConstraint(
            "tenant_id",
            "event_type",
            "fingerprint",
            name="uq_schema_versions_tenant_id_event_type_fingerprint",
        ),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.LargeBinary(), nullable=False),
        sa.Column("event_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("response_status", sa.SmallInteger(), nullable=False),
        sa.Column("response_body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.CheckConstraint("operation IN ('event', 'batch')", name="ck_idempotency_keys_operation"),
        sa.PrimaryKeyConstraint("tenant_id", "key", name="pk_idempotency_keys"),
    )
    op.create_index("ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"])

    op.execute(sa.schema.CreateSequence(sa.Sequence("outbox_seq")))
    op.create_table(
        "outbox",
        sa.Column("received_at", TS, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), server_default=sa.text("nextval('outbox_seq')"), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.Text(), nullable=True),
        sa.Column("lane", sa.SmallInteger(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("headers", postgresql.JSONB(), nullable=True),
        sa.Column("traceparent", sa.Text(), nullable=True),
        sa.Column("occurred_at", TS, nullable=True),
        sa.Column("state", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("published_at", TS, nullable=True),
        sa.Column("kafka_topic", sa.Text(), nullable=True),
        sa.Column("kafka_partition", sa.Integer(), nullable=True),
        sa.Column("kafka_offset", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('pending', 'published')", name="ck_outbox_state"),
        sa.PrimaryKeyConstraint("received_at", "event_id", name="pk_outbox"),
        postgresql_partition_by="RANGE (received_at)",
    )
    op.create_index(
        "ix_outbox_pending_lane_seq",
        "outbox",
        ["lane", "seq"],
        postgresql_where=sa.text("state = 'pending'"),
    )


def downgrade() -> None:
    op.drop_table("outbox")
    op.execute(sa.schema.DropSequence(sa.Sequence("outbox_seq")))
    op.drop_table("idempotency_keys")
    op.drop_table("schema_versions")
    op.drop_table("event_types")
    op.drop_table("api_keys")
    op.drop_table("tenants")
