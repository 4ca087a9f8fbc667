"""Relay: tenant routing, dead letters, and a NOTIFY when events are appended.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenant_routing",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("topic_template", sa.Text(), nullable=False),
        sa.Column("dead_letter_topic", sa.Text(), nullable=False),
        sa.Column("topics", postgresql.JSONB(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_tenant_routing_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", name="pk_tenant_routing"),
    )
    op.create_table(
        "dead_letters",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("received_at", TS, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.Text(), nullable=True),
        sa.Column("lane", sa.SmallInteger(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("headers", postgresql.JSONB(), nullable=True),
        sa.Column("traceparent", sa.Text(), nullable=True),
        sa.Column("occurred_at", TS, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("original_topic", sa.Text(), nullable=True),
        sa.Column("dead_lettered_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name="pk_dead_letters"),
    )
    op.create_index(
        "ix_dead_letters_tenant_id_dead_lettered_at_event_id",
        "dead_letters",
        ["tenant_id", "dead_lettered_at", "event_id"],
    )
    op.create_index(
        "ix_dead_letters_tenant_id_event_type_dead_lettered_at_event_id",
        "dead_letters",
        ["tenant_id", "event_type", "dead_lettered_at", "event_id"],
    )
    # One NOTIFY per inserting statement (and per transaction: identical notifications are folded), so
    # relays wake as soon as events are committed, whichever code path appended them.
    op.execute(
        """
        CREATE FUNCTION events_api_notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('events_api_outbox', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER outbox_appended AFTER INSERT ON outbox "
        "FOR EACH STATEMENT EXECUTE FUNCTION events_api_notify_outbox()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER outbox_appended ON outbox")
    op.execute("DROP FUNCTION events_api_notify_outbox()")
    op.drop_index("ix_dead_letters_tenant_id_event_type_dead_lettered_at_event_id", table_name="dead_letters")
    op.drop_index("ix_dead_letters_tenant_id_dead_lettered_at_event_id", table_name="dead_letters")
    op.drop_table("dead_letters")
    op.drop_table("tenant_routing")
