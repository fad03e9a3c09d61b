"""Routing weights are a tenant's own. They were one platform-wide value (catalog_state.weights)
that any tenant's PlatformAdmin could set, and so re-rank every other tenant's routes: roles are
granted per tenant client. A tenant's weights now live in a row of its own; the platform-wide
value stays, as what a tenant that set none of its own routes with, so an installation that set
weights before keeps them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A new table: its creation waits on no lock any statement of the service holds, so the
    # migration lock timeout (store/migrate.py) has nothing to meet, on either engine.
    op.create_table(
        "tenant_routing_weights",
        sa.Column("tenant_id", sa.String(100), primary_key=True),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )


def downgrade() -> None:
    # The tenants' own weights go with it: each tenant routes with the platform-wide ones again.
    op.drop_table("tenant_routing_weights")
