"""An index of probe samples by window, for the prune of those past their retention
(store/probes.prune_samples deletes `window_start < cutoff`). The table had only the window's
unique key, which leads with the tenant, and an index of `probed_at`, which the prune does not
name: each prune read every sample, a sample a deployment and probe (every 2 minutes, kept 72
hours, by default: some 2,160 rows a deployment).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from store.migrate import concurrent_index_block

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Built concurrently on PostgreSQL, as 0008's and 0014's, so that the probe's writes wait
    # for nothing; dropped first in case an earlier build was interrupted and left it invalid.
    with concurrent_index_block():
        op.drop_index(
            "ix_probe_samples_window_start",
            table_name="probe_samples",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.create_index(
            "ix_probe_samples_window_start",
            "probe_samples",
            ["window_start"],
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with concurrent_index_block():
        op.drop_index(
            "ix_probe_samples_window_start",
            table_name="probe_samples",
            postgresql_concurrently=True,
        )
