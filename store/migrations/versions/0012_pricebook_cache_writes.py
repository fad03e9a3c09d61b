"""A price may name what the provider bills for input written to its prompt cache
(`cache_write_usd_per_mtok`: Anthropic bills it above input): receipts priced every cache write
as plain input, a quarter below the bill on a coding agent's growing history. Null: the input
price, as before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pricebook_entries") as batch:
        batch.add_column(
            sa.Column(
                "cache_write_usd_per_mtok",
                sa.Numeric(18, 8),  # as the entry's other prices (0002)
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("pricebook_entries") as batch:
        batch.drop_column("cache_write_usd_per_mtok")
