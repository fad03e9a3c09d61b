"""Routing and receipts: tenant policies, the catalog version, route-plan decision records,
and the receipt columns reconciliation needs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenant_policies",
        sa.Column("tenant_id", sa.String(100), primary_key=True),
        sa.Column("revision", sa.String(100), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    # One row: bumped in the same transaction as any change a routing decision depends on, so
    # processes rebuild their in-memory catalog snapshot when (and only when) it moved.
    op.create_table(
        "catalog_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        # ModelAccess:Routing:Weights, reloadable: part of the catalog's version like the rest.
        sa.Column("weights", sa.JSON(), nullable=True),
    )
    op.execute("INSERT INTO catalog_state (id, version) VALUES (1, 1)")
    # Not a spec field: the model's context window (from provider documentation or the serving
    # pool's configuration); the router refuses deployments whose window cannot hold a request.
    with op.batch_alter_table("model_deployments") as batch:
        batch.add_column(sa.Column("context_window_tokens", sa.Integer(), nullable=True))
    with op.batch_alter_table("route_plans") as batch:
        batch.add_column(sa.Column("snapshot_version", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("policy_decision_id", sa.Uuid(), nullable=True))
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(sa.Column("provider_request_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("cached_input_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("time_to_first_token_ms", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("statement_ref", sa.String(300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.drop_column("statement_ref")
        batch.drop_column("time_to_first_token_ms")
        batch.drop_column("cached_input_tokens")
        batch.drop_column("provider_request_id")
    with op.batch_alter_table("route_plans") as batch:
        batch.drop_column("policy_decision_id")
        batch.drop_column("snapshot_version")
    with op.batch_alter_table("model_deployments") as batch:
        batch.drop_column("context_window_tokens")
    op.drop_table("catalog_state")
    op.drop_table("tenant_policies")
