"""Two webhook mends.

On SQLite an outbox position is never taken twice: the table is rebuilt with AUTOINCREMENT.
Without it SQLite gives a new row the largest rowid present plus one, so once the retention
prune deleted the newest rows, the next event took a position at or below a subscriber's
cursor, and was never delivered. The rebuild keeps the rows and the indexes; the sequence starts
past every position a subscriber has delivered, since rows pruned before it may have stood
above those left. PostgreSQL's sequence never hands a value out twice: nothing to do there.

An ended subscription (deleted, its receiver gone or failing too long) keeps no signing secret:
the column may be NULL, and those of subscriptions already ended are cleared. Nothing signs for
them again, and a row kept for its history held a key to its receiver's deliveries for ever.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # Run again after its downgrade, which keeps AUTOINCREMENT, the table has a sequence
        # already: the rebuild drops it with the old table and counts again from the largest
        # position left, so the one it had is carried over.
        had: int = 0
        if bind.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
        ).scalar():
            had = bind.exec_driver_sql(
                "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'outbox_events'"
            ).scalar_one()
        # Copied, positions kept, into a table created with AUTOINCREMENT; the indexes made
        # again from the old table's, partial ones with their predicates.
        with op.batch_alter_table(
            "outbox_events", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
        op.execute(
            sa.text(
                "UPDATE sqlite_sequence SET seq = max(seq, :had, coalesce("
                "(SELECT max(delivered_position) FROM webhook_subscriptions), 0))"
                " WHERE name = 'outbox_events'"
            ).bindparams(had=had)
        )
        op.execute(
            sa.text(
                "INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_events', max(:had,"
                " coalesce((SELECT max(delivered_position) FROM webhook_subscriptions), 0))"
                " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox_events')"
            ).bindparams(had=had)
        )
    # On PostgreSQL a catalog change alone (no rewrite), within the migration lock timeout.
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.alter_column("signing_secret", existing_type=sa.String(200), nullable=True)
    op.execute(
        "UPDATE webhook_subscriptions SET signing_secret = NULL,"
        " previous_signing_secret = NULL, previous_secret_until = NULL WHERE NOT active"
    )


def downgrade() -> None:
    # An ended subscription signs nothing: an empty secret stands for the one it no longer has.
    op.execute("UPDATE webhook_subscriptions SET signing_secret = '' WHERE signing_secret IS NULL")
    with op.batch_alter_table("webhook_subscriptions") as batch:
        batch.alter_column("signing_secret", existing_type=sa.String(200), nullable=False)
    # The outbox keeps AUTOINCREMENT on SQLite: the code before reads and writes it as it did,
    # and positions still never repeat.
