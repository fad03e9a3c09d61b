"""The usage_unknown gauge, recounted from the store (one grouped count over an indexed
column): by both /metrics endpoints before a scrape and by the reconciler after each run, so it
equals the database after restarts and whichever process exports it."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core import metrics
from store.reconciliation import awaiting_by_provider


async def recount_usage_unknown(
    sessions: async_sessionmaker[AsyncSession], lookback_hours: float
) -> dict[str, int]:
    """The receipts awaiting usage within the lookback, by provider, set on the gauge."""
    async with sessions() as session:
        counts = await awaiting_by_provider(session, lookback_hours)
    metrics.set_usage_unknown(counts)
    return counts
