"""Initial schema: catalog, route plans, receipts, outbox, tenants and OAuth clients.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, length=32)


_PRIVACY = ("External", "Regional", "Confidential", "Local")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(100), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_table(
        "oauth_clients",
        sa.Column("client_id", sa.String(100), primary_key=True),
        sa.Column("tenant_id", sa.String(100), sa.ForeignKey("tenants.tenant_id"), nullable=False),
        sa.Column("secret_hash", sa.String(300), nullable=False),
        sa.Column("roles", sa.JSON(), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_oauth_clients_tenant_id", "oauth_clients", ["tenant_id"])

    op.create_table(
        "model_profiles",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("profile_id", sa.String(200), nullable=False),
        sa.Column("version", sa.String(50), nullable=False),
        sa.Column("release_id", sa.String(200), nullable=False),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("modality", _enum("modality", "Chat", "Embedding", "Rerank"), nullable=False),
        sa.Column("required_capabilities", sa.JSON(), nullable=False),
        sa.Column("privacy_class", _enum("privacy_class", *_PRIVACY), nullable=False),
        sa.Column(
            "latency_class",
            _enum("latency_class", "Interactive", "Standard", "Batch"),
            nullable=False,
        ),
        sa.Column("max_context_tokens", sa.Integer(), nullable=False),
        sa.Column("max_output_tokens", sa.Integer(), nullable=False),
        sa.Column("allowed_regions", sa.JSON(), nullable=False),
        sa.Column("allowed_deployments", sa.JSON(), nullable=False),
        sa.Column("fallback_chain", sa.JSON(), nullable=False),
        sa.Column("fallback_enabled", sa.Boolean(), nullable=False),
        sa.Column("embedding_compatibility", sa.String(200), nullable=True),
        sa.Column("price_basis", sa.String(100), nullable=False),
        sa.Column("status", _enum("profile_status", "Active", "Retired"), nullable=False),
        sa.UniqueConstraint("tenant_id", "profile_id", "version", name="uq_model_profiles_version"),
    )

    op.create_table(
        "model_deployments",
        sa.Column("tenant_id", sa.String(100), primary_key=True),
        sa.Column("deployment_id", sa.String(200), primary_key=True),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("privacy_class", _enum("privacy_class", *_PRIVACY), nullable=False),
        sa.Column("endpoint_ref", sa.String(400), nullable=False),
        sa.Column("compute_pool_id", sa.String(200), nullable=True),
        sa.Column("capability_evidence_ref", sa.String(300), nullable=True),
        sa.Column("license_metadata", sa.JSON(), nullable=True),
        sa.Column(
            "state",
            _enum("deployment_state", "Candidate", "Evaluated", "Approved", "Degraded", "Retired"),
            nullable=False,
        ),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_model_deployments_tenant_state", "model_deployments", ["tenant_id", "state"]
    )

    op.create_table(
        "capability_scores",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("deployment_id", sa.String(200), nullable=False),
        sa.Column("capability", sa.String(64), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("score", sa.Numeric(6, 4), nullable=True),
        sa.Column("evaluated_at", _TS, nullable=False),
        sa.Column("suite_version", sa.String(50), nullable=False),
    )

    op.create_table(
        "route_plans",
        sa.Column("route_plan_id", sa.Uuid(), primary_key=True),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("profile_id", sa.String(200), nullable=False),
        sa.Column("profile_version", sa.String(50), nullable=False),
        sa.Column("policy_revision", sa.String(100), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("constraints", sa.JSON(), nullable=False),
        sa.Column("resolved_at", _TS, nullable=False),
        sa.UniqueConstraint("tenant_id", "run_id", "profile_id", name="uq_route_plans_run_profile"),
    )

    op.create_table(
        "invocation_receipts",
        sa.Column("invocation_id", sa.Uuid(), primary_key=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("project_id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("attempt_id", sa.Uuid(), nullable=True),
        sa.Column("profile_id", sa.String(200), nullable=False),
        sa.Column("deployment_id", sa.String(200), nullable=False),
        sa.Column("route_plan_id", sa.Uuid(), nullable=True),
        sa.Column("fallback_used", sa.Boolean(), nullable=False),
        sa.Column("request_hash", sa.String(100), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("policy_decision_id", sa.Uuid(), nullable=False),
        sa.Column(
            "outcome",
            _enum("invocation_outcome", "Completed", "Partial", "Failed", "Denied", "Cancelled"),
            nullable=False,
        ),
        sa.Column(
            "usage_status",
            _enum("usage_status", "Reported", "Estimated", "Unknown", "Reconciled"),
            nullable=False,
        ),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("estimated_cost_usd", sa.Numeric(18, 8), nullable=True),
        sa.Column("pricing_revision", sa.String(100), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("output_artifact_ref", sa.String(300), nullable=True),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("ended_at", _TS, nullable=True),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_receipts_idempotency"),
    )
    op.create_index("ix_receipts_tenant_run", "invocation_receipts", ["tenant_id", "run_id"])
    op.create_index(
        "ix_receipts_usage_status", "invocation_receipts", ["usage_status", "started_at"]
    )

    op.create_table(
        "outbox_events",
        sa.Column("position", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.Uuid(), nullable=False, unique=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("event_type", sa.String(100), nullable=False),
        sa.Column("topic", sa.String(200), nullable=False),
        sa.Column("aggregate_type", sa.String(100), nullable=False),
        sa.Column("aggregate_id", sa.String(300), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("occurred_at", _TS, nullable=False),
    )
    op.create_index("ix_outbox_tenant_position", "outbox_events", ["tenant_id", "position"])


def downgrade() -> None:
    op.drop_index("ix_outbox_tenant_position", table_name="outbox_events")
    op.drop_table("outbox_events")
    op.drop_index("ix_receipts_usage_status", table_name="invocation_receipts")
    op.drop_index("ix_receipts_tenant_run", table_name="invocation_receipts")
    op.drop_table("invocation_receipts")
    op.drop_table("route_plans")
    op.drop_table("capability_scores")
    op.drop_index("ix_model_deployments_tenant_state", table_name="model_deployments")
    op.drop_table("model_deployments")
    op.drop_table("model_profiles")
    op.drop_index("ix_oauth_clients_tenant_id", table_name="oauth_clients")
    op.drop_table("oauth_clients")
    op.drop_table("tenants")
