"""Outbox rows say when they were written, by the database's clock (`inserted_at`, PostgreSQL's
`clock_timestamp()` as the row takes its position), so that a reader in position order can tell
how far every position is settled (store/outbox_horizon.py). Positions are taken at insert, not
at commit: a reader that moved past a position whose transaction had not committed yet never
saw that event (a webhook subscription's cursor, an `/factory/events` reader's `nextAfter`).

Rows from before this revision keep NULL and count as settled: they were written before any
transaction now running began. No backfill, so the upgrade does not rewrite the outbox.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    # A volatile default on PostgreSQL is evaluated per row as it is inserted: adding it does
    # not rewrite the table (existing rows read NULL, as the column is added without it first).
    with op.batch_alter_table("outbox_events") as batch:
        batch.add_column(sa.Column("inserted_at", sa.DateTime(timezone=True), nullable=True))
    if postgres:
        op.execute(
            "ALTER TABLE outbox_events ALTER COLUMN inserted_at SET DEFAULT clock_timestamp()"
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox_events") as batch:
        batch.drop_column("inserted_at")
