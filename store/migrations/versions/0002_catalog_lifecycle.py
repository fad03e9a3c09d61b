"""Catalog and lifecycle: evidence refs on scores, pricebook, idempotency, webhooks.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)
_USD = sa.Numeric(18, 8)


def upgrade() -> None:
    with op.batch_alter_table("capability_scores") as batch:
        batch.add_column(
            sa.Column("evidence_ref", sa.String(300), nullable=False, server_default="")
        )
    op.create_index(
        "ix_capability_scores_deployment",
        "capability_scores",
        ["tenant_id", "deployment_id", "evidence_ref"],
    )
    op.create_table(
        "pricebook_entries",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("revision", sa.String(100), nullable=False),
        sa.Column("effective_from", _TS, nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("input_usd_per_mtok", _USD, nullable=False),
        sa.Column("output_usd_per_mtok", _USD, nullable=False),
        sa.Column("cached_input_usd_per_mtok", _USD, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint(
            "tenant_id", "revision", "provider", "model", name="uq_pricebook_entry"
        ),
    )
    op.create_table(
        "idempotency_records",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("operation", sa.String(100), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("request_hash", sa.String(100), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("tenant_id", "operation", "key", name="uq_idempotency_key"),
    )
    op.create_table(
        "webhook_subscriptions",
        sa.Column("subscription_id", sa.Uuid(), primary_key=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("signing_secret", sa.String(200), nullable=False),
        sa.Column("event_types", sa.JSON(), nullable=False),
        sa.Column("delivered_position", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_webhook_subscriptions_tenant_id", "webhook_subscriptions", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_subscriptions_tenant_id", table_name="webhook_subscriptions")
    op.drop_table("webhook_subscriptions")
    op.drop_table("idempotency_records")
    op.drop_table("pricebook_entries")
    op.drop_index("ix_capability_scores_deployment", table_name="capability_scores")
    with op.batch_alter_table("capability_scores") as batch:
        batch.drop_column("evidence_ref")
