"""Probes and reconciliation: probe samples, usage statements (imported and fetched), and the
record of every receipt the reconciler settled.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "probe_samples",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("deployment_id", sa.String(200), nullable=False),
        sa.Column("window_start", _TS, nullable=False),
        sa.Column("probed_at", _TS, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("error_class", sa.String(64), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.UniqueConstraint(
            "tenant_id", "deployment_id", "window_start", name="uq_probe_samples_window"
        ),
    )
    op.create_index("ix_probe_samples_probed_at", "probe_samples", ["probed_at"])
    op.create_table(
        "statement_imports",
        sa.Column("import_id", sa.Uuid(), primary_key=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("content_hash", sa.String(100), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("imported_at", _TS, nullable=False),
        sa.UniqueConstraint("tenant_id", "content_hash", name="uq_statement_imports_hash"),
    )
    op.create_table(
        "usage_statement_lines",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("statement_ref", sa.String(300), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("import_id", sa.Uuid(), nullable=True),
        sa.Column("tenant_id", sa.String(100), nullable=True),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("key", sa.String(400), nullable=True),
        sa.Column("bucket_start", _TS, nullable=True),
        sa.Column("bucket_end", _TS, nullable=True),
        sa.Column("provider_request_id", sa.String(200), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("fetched_at", _TS, nullable=False),
        sa.UniqueConstraint("statement_ref", name="uq_usage_statement_lines_ref"),
    )
    op.create_index(
        "ix_usage_statement_lines_bucket", "usage_statement_lines", ["provider", "bucket_start"]
    )
    op.create_index(
        "ix_usage_statement_lines_request",
        "usage_statement_lines",
        ["provider", "provider_request_id"],
    )
    op.create_table(
        "receipt_reconciliations",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("invocation_id", sa.Uuid(), nullable=False),
        sa.Column("statement_ref", sa.String(300), nullable=False),
        sa.Column("rule", sa.String(32), nullable=False),
        sa.Column("previous_usage_status", sa.String(32), nullable=False),
        sa.Column("previous_input_tokens", sa.Integer(), nullable=True),
        sa.Column("previous_output_tokens", sa.Integer(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_input_tokens", sa.Integer(), nullable=False),
        sa.Column("estimated_cost_usd", sa.Numeric(18, 8), nullable=True),
        sa.Column("reconciled_at", _TS, nullable=False),
        sa.UniqueConstraint(
            "invocation_id", "statement_ref", name="uq_receipt_reconciliations_statement"
        ),
    )
    op.create_index(
        "ix_receipt_reconciliations_tenant",
        "receipt_reconciliations",
        ["tenant_id", "reconciled_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_receipt_reconciliations_tenant", "receipt_reconciliations")
    op.drop_table("receipt_reconciliations")
    op.drop_index("ix_usage_statement_lines_request", "usage_statement_lines")
    op.drop_index("ix_usage_statement_lines_bucket", "usage_statement_lines")
    op.drop_table("usage_statement_lines")
    op.drop_table("statement_imports")
    op.drop_index("ix_probe_samples_probed_at", "probe_samples")
    op.drop_table("probe_samples")
