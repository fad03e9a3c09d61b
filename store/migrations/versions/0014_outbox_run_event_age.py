"""An index of run events by age, for the sweeper's prune of those past their retention. The
prune asked for the oldest expired run events in position order, and the only index in that
order is the primary key: once fewer than a batch had expired (every minute at a steady 50
calls/s, some 3,000 against a batch of 5,000), PostgreSQL walked every row of the outbox to
look for more, some 130 million at the default 30 days' retention. Partial on the run events,
so that catalog events, kept for ever, pay nothing for it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.migrate import concurrent_index_block

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# As domain.events.RUN_EVENTS, written out: a migration keeps what it built.
_RUN_EVENTS = sa.text("event_type IN ('ModelFallbackUsed', 'ModelInvoked', 'RoutePlanResolved')")


def upgrade() -> None:
    # Built concurrently on PostgreSQL, outside the migration's transaction, as 0008's: the
    # outbox takes a row per invocation. If a build failed it left an invalid index: dropped,
    # then built again. No lock timeout: the build's waits hold up no read or write.
    with concurrent_index_block():
        op.drop_index(
            "ix_outbox_run_events_age",
            table_name="outbox_events",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_outbox_run_events_age",
            "outbox_events",
            ["occurred_at", "position"],
            postgresql_where=_RUN_EVENTS,
            sqlite_where=_RUN_EVENTS,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with concurrent_index_block():
        op.drop_index(
            "ix_outbox_run_events_age", table_name="outbox_events", postgresql_concurrently=True
        )
