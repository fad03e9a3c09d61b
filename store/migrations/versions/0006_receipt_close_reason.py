"""Receipts say why they closed (`close_reason`: completed, provider, timeout, caller-lost,
swept, …), so a replay answers with that reason instead of blaming the provider; and an index
the receipt sweeper uses to find receipts still open.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(sa.Column("close_reason", sa.String(40), nullable=True))
    # Open receipts (ended_at null) are few; the sweeper scans them by age.
    op.create_index(
        "ix_receipts_open",
        "invocation_receipts",
        ["started_at"],
        postgresql_where=sa.text("ended_at IS NULL"),
        sqlite_where=sa.text("ended_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_receipts_open", table_name="invocation_receipts")
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.drop_column("close_reason")
