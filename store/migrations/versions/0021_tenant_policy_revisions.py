"""Every policy revision a tenant published. A tenant's policy was one row, its current one, and
a PUT compared its revision with that row's alone: r1 (rules A), then r2, then r1 with rules C
was accepted, as was a first r1 after other history. Route plans, decision records, receipts
and events name the policy they were decided under by its revision alone, so `r1` no longer
named one set of rules. Each revision now keeps its rules here, and a PUT of one published
with other rules is refused (store/routing_settings.put_policy).

The table starts with each tenant's current revision, as first published at the time it was
last written: the revisions replaced before this one are gone, and cannot be recovered.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A new table: its creation waits on no lock any statement of the service holds, so the
    # migration lock timeout (store/migrate.py) has nothing to meet, on either engine. The
    # backfill reads tenant_policies (a row a tenant, written only by an operator's PUT), in
    # the migration's own transaction with the creation: interrupted, neither is left.
    op.create_table(
        "tenant_policy_revisions",
        sa.Column("tenant_id", sa.String(100), primary_key=True),
        sa.Column("revision", sa.String(100), primary_key=True),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("published_at", _TS, nullable=False),
    )
    op.execute(
        "INSERT INTO tenant_policy_revisions (tenant_id, revision, document, published_at)"
        " SELECT tenant_id, revision, document, updated_at FROM tenant_policies"
    )


def downgrade() -> None:
    # The history goes with it: each tenant keeps its current policy, and a PUT is compared with
    # that alone again, as before this revision.
    op.drop_table("tenant_policy_revisions")
