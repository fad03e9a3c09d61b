"""Indexes for the console's reads, which otherwise scan a tenant's whole history: closed
receipts by tenant and start (the receipts list and the overview, newest first; open ones are
few and ix_receipts_open finds them), and a deployment's own events in the outbox (its history
page), partial so that the invocation events, nearly all of the outbox, pay nothing for it.

The receipts index is partial on `ended_at IS NOT NULL` so that the invoke path cannot use it:
its statements look a receipt up by tenant and id among the open ones. A plain (tenant_id,
started_at) index was measured first: on a table not yet analyzed, PostgreSQL joined it to the
primary key in a bitmap AND for the close, reading every receipt of the tenant (about 1,060
index entries a statement after 2,000 calls), and the database's CPU per invocation went from
0.27 to 0.67 ms (bench/bench_receipt_statements.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.migrate import concurrent_index_block

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_DEPLOYMENT_EVENTS = sa.text("aggregate_type = 'ModelDeployment'")
_CLOSED = sa.text("ended_at IS NOT NULL")


def upgrade() -> None:
    # Built concurrently on PostgreSQL, outside the migration's transaction: a plain CREATE
    # INDEX on the receipts table would hold every claim and close until it is built. A build
    # that was interrupted (a lock timeout, a cancelled Job, a dropped connection) leaves an
    # INVALID index of the same name, and every later run failed "relation already exists":
    # each is dropped first, as 0014 does, so a run of this migration can always be repeated.
    with concurrent_index_block():
        op.drop_index(
            "ix_receipts_tenant_closed",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_receipts_tenant_closed",
            "invocation_receipts",
            ["tenant_id", "started_at"],
            postgresql_where=_CLOSED,
            sqlite_where=_CLOSED,
            postgresql_concurrently=True,
        )
        op.drop_index(
            "ix_outbox_deployment_events",
            table_name="outbox_events",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_outbox_deployment_events",
            "outbox_events",
            ["tenant_id", "aggregate_id", "position"],
            postgresql_where=_DEPLOYMENT_EVENTS,
            sqlite_where=_DEPLOYMENT_EVENTS,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with concurrent_index_block():
        op.drop_index(
            "ix_outbox_deployment_events", table_name="outbox_events", postgresql_concurrently=True
        )
        op.drop_index(
            "ix_receipts_tenant_closed",
            table_name="invocation_receipts",
            postgresql_concurrently=True,
        )
