"""Console sessions a sign-out ended. The console's sign-in cookie is a token valid until its
`exp` (AUTH_TOKEN_TTL_SECONDS, an hour by default), and signing out only deleted the cookie: a
copy of it (a shared workstation, a log) kept its session. A sign-out now records the token's
`jti`, with its tenant and the token's expiry, and the console refuses a token so recorded
(store/console_sessions.py). A row is of no use past that expiry: the sign-outs delete such rows
a batch at a time, by the index of the expiry.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A new table: its creation waits on no lock any statement of the service holds, so the
    # migration lock timeout (store/migrate.py) has nothing to meet, on either engine; its
    # index is built with it, on no rows, so not concurrently.
    op.create_table(
        "console_sign_outs",
        sa.Column("jti", sa.String(100), primary_key=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
    )
    op.create_index("ix_console_sign_outs_expires_at", "console_sign_outs", ["expires_at"])


def downgrade() -> None:
    # The ended sessions go with it: a copy of a cookie signed out of within its token's
    # lifetime works on the console again, as it did before this revision, until its `exp`.
    op.drop_index("ix_console_sign_outs_expires_at", table_name="console_sign_outs")
    op.drop_table("console_sign_outs")
