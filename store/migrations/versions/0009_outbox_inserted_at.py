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
    # On SQLite the column goes by a rebuild of the table, which SQLAlchemy reflects without
    # 0018's AUTOINCREMENT (its downgrade keeps it, so that no position is taken twice): kept
    # here as well, and its sequence with it, which the old table's drop deleted and the copy
    # started again from the largest position left (the newest may have been pruned).
    bind = op.get_bind()
    sequence: int | None = None
    if bind.dialect.name == "sqlite":
        created = bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'outbox_events'"
        ).scalar()
        if "AUTOINCREMENT" in str(created).upper():
            sequence = bind.exec_driver_sql(
                "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'outbox_events'"
            ).scalar()
    kept = {} if sequence is None else {"sqlite_autoincrement": True}
    with op.batch_alter_table("outbox_events", table_kwargs=kept) as batch:
        batch.drop_column("inserted_at")
    if sequence is not None:
        op.execute(
            sa.text(
                "UPDATE sqlite_sequence SET seq = max(seq, :seq) WHERE name = 'outbox_events'"
            ).bindparams(seq=sequence)
        )
        op.execute(
            sa.text(
                "INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_events', :seq WHERE"
                " NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox_events')"
            ).bindparams(seq=sequence)
        )
