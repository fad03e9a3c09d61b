"""Webhook subscriptions say when their delivery is failing (`failing_since`, `failed_attempts`,
`last_error`): every attempt is retried in order, so a receiver that keeps refusing one event
holds every later one, and nothing showed it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.add_column(sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("failed_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("last_error", sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.drop_column("last_error")
        batch.drop_column("failed_attempts")
        batch.drop_column("failing_since")
