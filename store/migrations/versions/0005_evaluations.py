"""Evaluations: the status of capability-suite runs, so an operator sees progress and why a
run could not complete. Scores themselves are capability_scores; the record is an artifact.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("evaluation_id", sa.String(300), primary_key=True),
        sa.Column("tenant_id", sa.String(100), nullable=False),
        sa.Column("deployment_id", sa.String(200), nullable=False),
        sa.Column("suite_version", sa.String(50), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.String(500), nullable=True),
        sa.Column("evidence_ref", sa.String(300), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("ended_at", _TS, nullable=True),
    )
    op.create_index(
        "ix_evaluations_deployment", "evaluations", ["tenant_id", "deployment_id", "started_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_evaluations_deployment", table_name="evaluations")
    op.drop_table("evaluations")
