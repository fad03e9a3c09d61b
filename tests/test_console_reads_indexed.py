"""The console's reads of a tenant's history are served by an index, not a scan of everything
the tenant ever did: each read's own statements, as the console runs them, explained by
PostgreSQL with sequential scans priced out (so the plan names the index it would use at
scale rather than what suits the test database's few rows)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from core.settings import Settings
from store import console_reads, overview_reads
from tests.helpers.plans import plans

Read = Callable[[AsyncSession], Awaitable[object]]


TENANT = f"tenant-{uuid.uuid4().hex[:8]}"
SINCE = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("read", "indexes"),
    [
        (
            lambda s: console_reads.receipts(s, TENANT, console_reads.ReceiptFilter()),
            ["ix_receipts_open", "ix_receipts_tenant_closed"],
        ),
        (
            lambda s: overview_reads.overview_figures(
                s, TENANT, SINCE - timedelta(days=7), timedelta(hours=2)
            ),
            # The sums of the open receipts and of the closed ones in one statement (one
            # moment: a receipt closing meanwhile is counted once), then the closed ones'
            # latency and time to first token, ranked.
            [("ix_receipts_open", "ix_receipts_tenant_closed"), *["ix_receipts_tenant_closed"] * 2],
        ),
        (
            lambda s: console_reads.deployment_history(s, TENANT, "openai/gpt"),
            ["ix_outbox_deployment_events"],
        ),
        (
            lambda s: console_reads.distinct_values(s, TENANT),
            # The catalog, by any of its tenant's indexes.
            ["on model_deployments", "on model_profiles"],
        ),
    ],
    ids=["receipts-list", "overview", "deployment-history", "filter-lists"],
)
async def test_console_reads_use_an_index_of_the_tenants_history(
    settings: Settings, read: Read, indexes: list[str | tuple[str, ...]]
) -> None:
    # One statement per expected index (or table, read by an index since no plan may scan):
    # a read of receipts asks the open ones, then the closed ones.
    found = await plans(settings.database_url, read)
    assert len(found) == len(indexes), found
    for plan, index in zip(found, indexes, strict=True):
        for name in (index,) if isinstance(index, str) else index:
            assert name in plan, plan
        assert "Seq Scan" not in plan, plan
