"""Receipts keep their call's data classification (`data_classification`: `Public`,
`Internal`, `Confidential` or `Restricted`), written at the claim. A Responses request may
refer to this gateway's earlier output items by id, and the referenced answer is put into the
new call's input: without the answer's classification, a call sent as Internal could refer to
an answer produced under Restricted (routed to a Local deployment) and have it sent to an
External one. A reference to an answer of a higher classification than the call's is now
refused (api/responses_references.py). Null on receipts claimed before this column: their
answers are read as Internal, the classification a call without one has.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: on PostgreSQL the column is added to the catalog alone, no table
    # rewrite, so its brief lock meets the migration lock timeout (store/migrate.py) at most.
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.add_column(sa.Column("data_classification", sa.String(32), nullable=True))


def downgrade() -> None:
    # The classifications go with it: the code before it checks no reference's classification.
    with op.batch_alter_table("invocation_receipts") as batch:
        batch.drop_column("data_classification")
