"""Per-tenant rate limits and the audit log.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenant_rate_limits",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("events_per_second", sa.Integer(), nullable=True),
        sa.Column("bytes_per_second", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name="fk_tenant_rate_limits_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", name="pk_tenant_rate_limits"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("details", postgresql.JSONB(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_tenant_id_id", "audit_log", ["tenant_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_tenant_id_id", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("tenant_rate_limits")
