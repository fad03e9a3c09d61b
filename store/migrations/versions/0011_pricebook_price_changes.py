"""A pricing revision may hold announced price changes: several entries for one (provider, model)
with different `effective_from` dates, as `domain/pricing.Pricebook` allows. The unique key left
the date out, so such a revision could never be published (every attempt a 409 saying it was
published concurrently); it now includes it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BEFORE = ["tenant_id", "revision", "provider", "model"]


def upgrade() -> None:
    with op.batch_alter_table("pricebook_entries") as batch:
        batch.drop_constraint("uq_pricebook_entry", type_="unique")
        batch.create_unique_constraint("uq_pricebook_entry", [*_BEFORE, "effective_from"])


def downgrade() -> None:
    with op.batch_alter_table("pricebook_entries") as batch:
        batch.drop_constraint("uq_pricebook_entry", type_="unique")
        batch.create_unique_constraint("uq_pricebook_entry", _BEFORE)
