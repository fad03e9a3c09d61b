"""Two indexes for reads that walked far more rows than they returned.

A run's receipts, a page at a time, in start order (store/repositories.list_for_run, the
receipts API): the index of a tenant's run (tenant_id, run_id) gave the rows, not their order,
so every page read and sorted the whole run, a page of a 50,000-call agent run some 50,000
rows, the whole run's pages quadratic in its size. It gains the order (started_at, then the
id that breaks its ties), and replaces the old one, whose reads it serves as well. Partial on
receipts of a run, which a read by run implies and the invoke path's statements do not: they
name the tenant, the id and at times the start, three of its columns, and on a table not yet
analyzed PostgreSQL read a receipt's claim and close by it (tests/test_hot_path_indexes.py),
as 0008 says of the console's index.

The outbox by the time each row was written (`inserted_at`, migration 0009), for the horizon
of settled positions (store/outbox_horizon.py): the newest row written before the oldest open
writer began was looked for by walking the primary key back from the newest position, every
row written since read and passed over. A session left in a transaction that wrote, for an
hour at 150 events a second, made each reader's poll read some 540,000 rows. Partial on the
rows that have the time: those from before 0009 have none, and on SQLite no row has it (the
index is empty there).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.migrate import concurrent_index_block

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_IN_A_RUN = sa.text("run_id IS NOT NULL")
_WRITTEN = sa.text("inserted_at IS NOT NULL")


def upgrade() -> None:
    # Built concurrently on PostgreSQL, as 0008's, 0014's and 0015's: the receipts and the
    # outbox take a row per invocation. Each dropped first, in case an interrupted build left
    # it invalid; the old receipts index goes once the new one serves its reads.
    with concurrent_index_block():
        op.drop_index(
            "ix_receipts_tenant_run_started",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_receipts_tenant_run_started",
            "invocation_receipts",
            ["tenant_id", "run_id", "started_at", "invocation_id"],
            postgresql_where=_IN_A_RUN,
            sqlite_where=_IN_A_RUN,
            postgresql_concurrently=True,
        )
        op.drop_index(
            "ix_receipts_tenant_run",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.drop_index(
            "ix_outbox_inserted_at",
            table_name="outbox_events",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_outbox_inserted_at",
            "outbox_events",
            ["inserted_at", "position"],
            postgresql_where=_WRITTEN,
            sqlite_where=_WRITTEN,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with concurrent_index_block():
        # Each drop may meet its index gone: an interrupted downgrade is run again.
        op.drop_index(
            "ix_outbox_inserted_at",
            table_name="outbox_events",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.drop_index(
            "ix_receipts_tenant_run",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_receipts_tenant_run",
            "invocation_receipts",
            ["tenant_id", "run_id"],
            postgresql_concurrently=True,
        )
        op.drop_index(
            "ix_receipts_tenant_run_started",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
            if_exists=True,
        )
