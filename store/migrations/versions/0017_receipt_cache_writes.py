"""Receipts keep the part of their input written to the provider's prompt cache
(`cache_write_input_tokens`), and so do statement lines and reconciliation records: the
reconciler priced a settled receipt's cache writes as plain input (Anthropic bills them at 1.25
or 2 times input), under the bill, and a replay of a Messages or Responses answer reported no
cache writes, as the receipt kept no count of them. Null on a receipt: none reported, or
closed before this column; a statement line's count is 0 where its source states none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, or a constant default: on PostgreSQL (11 and later) the column is added to the
    # catalog alone, no table rewrite, so the brief lock it takes meets the migration lock
    # timeout (store/migrate.py) at most, never a rewrite of a week of receipts.
    with op.batch_alter_table("usage_statement_lines") as batch:
        batch.add_column(
            sa.Column(
                "cache_write_input_tokens",
                sa.BigInteger(),  # as the line's other counts (0004)
                nullable=False,
                server_default="0",
            )
        )
    with op.batch_alter_table("receipt_reconciliations") as batch:
        batch.add_column(sa.Column("cache_write_input_tokens", sa.Integer(), nullable=True))
    # The receipts last: the migration is one transaction, and the lock taken first is held
    # through the rest; taken first, every claim and close waited on the other two tables'
    # lock waits as well.
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(sa.Column("cache_write_input_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    # The counts go with them: a settled receipt's cost keeps the writes' price it was given.
    for table in ("receipt_reconciliations", "usage_statement_lines", "invocation_receipts"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("cache_write_input_tokens")
