"""The relays' cumulative delivery counts (GET /metrics: relay_published_total and its siblings).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relay_stats",
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("published", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("retried", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("dead_lettered", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("shard", name="pk_relay_stats"),
    )


def downgrade() -> None:
    op.drop_table("relay_stats")
