"""A webhook subscription's secret can be rotated: the one replaced is kept, and signed with
beside the new one, until `previous_secret_until`, so that its receiver takes the new one up
with no delivery failing to verify. A leaked secret could only be replaced by deleting the
subscription, its receiver reconfigured, and its cursor guessed again.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.add_column(sa.Column("previous_signing_secret", sa.String(length=200), nullable=True))
        batch.add_column(
            sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.drop_column("previous_secret_until")
        batch.drop_column("previous_signing_secret")
