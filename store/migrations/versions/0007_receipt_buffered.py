"""Receipts say whether the answer was held until complete (`buffered`, issue 20): a non-stream
call, or a stream held on a Batch profile or at the caller's request, is never Partial, and its
time to first token is the time to the first byte the caller got. And which provider attempt
answered (`provider_attempt`, 1 for the first, counting retries and fallbacks), written at the
close, so a replay names it as the live call did.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Receipts from before this column read false, the default of every claim that does not
    # say otherwise (a denial, a closed abandoned call).
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(
            sa.Column("buffered", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("provider_attempt", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.drop_column("provider_attempt")
        batch.drop_column("buffered")
