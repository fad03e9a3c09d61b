"""Receipts keep their failure's kind (`error_kind`: a provider's `rate_limit`, `server_error`,
`overloaded`, …, or the router's own `timeout`, `unavailable`, …). The close reason names every
provider failure `provider`, and a replay told by it alone answered a transient failure (a rate
limit, a provider 5xx) as a permanent 502 with no `x-should-retry: false`, which the SDKs then
retried; with its kind it answers as the call did. Null on a receipt in flight, on a completed
one, and on those closed before this column: their replays go on answering with the kind their
close reason names (domain/receipt_fields.summary_of). Close reasons are unchanged.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: on PostgreSQL the column is added to the catalog alone, no table
    # rewrite, so its brief lock meets the migration lock timeout (store/migrate.py) at most.
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(sa.Column("error_kind", sa.String(40), nullable=True))


def downgrade() -> None:
    # The kinds go with it: the code before it replays by the close reason alone.
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.drop_column("error_kind")
