"""The overview's sums as the database makes them, on PostgreSQL and on SQLite (the embedded
default): receipts per bucket, day, outcome and usage, percentiles per deployment, and every
receipt of the window counted however many there are."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.console import overview_data
from domain.enums import InvocationOutcome, UsageStatus
from store.db import transaction
from store.overview_reads import overview_figures
from tests.helpers.receipts import add_receipt

HALF_HOUR = timedelta(minutes=30)


async def test_receipts_are_summed_per_bucket_day_and_deployment(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # The window starts at 00:10 UTC: the bucket of 23:50-00:20 spans midnight, and each
    # receipt in it is summed under its own day.
    now = datetime(2026, 12, 2, 0, 10, tzinfo=UTC)
    start = now - timedelta(hours=24)
    receipts = [
        # (minutes before now, outcome, usage, tokens, cost, open)
        (5, InvocationOutcome.COMPLETED, UsageStatus.REPORTED, 10, "0.5", False),
        (15, InvocationOutcome.COMPLETED, UsageStatus.REPORTED, 10, "0.25", False),
        (25, InvocationOutcome.FAILED, UsageStatus.UNKNOWN, None, None, False),
        (3, InvocationOutcome.COMPLETED, UsageStatus.UNKNOWN, None, None, True),
        # A denial: Estimated at zero tokens, no provider saw it, so it awaits nothing.
        (40, InvocationOutcome.DENIED, UsageStatus.ESTIMATED, 0, None, False),
        (60 * 23 - 5, InvocationOutcome.COMPLETED, UsageStatus.ESTIMATED, 12, "1", False),
        (60 * 25, InvocationOutcome.COMPLETED, UsageStatus.REPORTED, 10, "9", False),  # before
    ]
    for minutes, outcome, usage, tokens, cost, open_ in receipts:
        await add_receipt(
            store,
            tenant=tenant,
            deployment_id="local/sim-chat",
            started_at=now - timedelta(minutes=minutes),
            usage_status=usage,
            outcome=outcome,
            input_tokens=tokens,
            output_tokens=tokens,
            estimated_cost_usd=None if cost is None else Decimal(cost),
            open_=open_,
        )
    await add_receipt(
        store, tenant="someone-else", deployment_id="local/sim-chat",
        started_at=now, usage_status=UsageStatus.REPORTED,
    )  # fmt: skip
    async with store() as session:
        figures = await overview_figures(session, tenant, start, HALF_HOUR)

    assert sum(c.count for c in figures.cells) == 6
    rate = overview_data.rate_by_outcome(figures.cells, now, "24h")
    by_name = {s.name: s.values for s in rate.series}
    # 23:50-00:10 is the last bucket (23:40-00:10): two Completed closed, one Failed, and one
    # open, in flight: an open receipt's outcome is its claim's placeholder (it was counted
    # as what the placeholder said, Failed on a real claim).
    assert by_name["Completed"][-1] == 2 / 30 and by_name["Failed"][-1] == 1 / 30
    assert by_name["In flight"][-1] == 1 / 30 and sum(by_name["In flight"]) == 1 / 30
    assert by_name["Denied"][-2] == 1 / 30 and by_name["Completed"][2] == 1 / 30
    spend = overview_data.spend_per_profile_per_day(figures.cells, now, "24h")
    assert spend.days == ["2026-12-01", "2026-12-02"]
    assert {s.name: s.values for s in spend.series} == {"code-agent": [1.25, 0.5]}
    awaiting = overview_data.awaiting_per_day(figures.cells, now, "24h")
    # The open receipt awaits its close, not a statement.
    assert {s.name: s.values for s in awaiting.series} == {
        "Unknown": [1.0, 0.0],
        "Estimated": [1.0, 0.0],
    }
    (row,) = overview_data.latency_per_deployment(figures.cells, figures.percentiles)
    # add_receipt closes every receipt at 1200 ms, first token at 350 ms; the open one has none.
    assert (row.count, row.p50, row.p95, row.ttft_p50) == (6, 1200.0, 1200.0, 350.0)


def _nearest_rank(values: list[int], p: int) -> float:
    ordered = sorted(values)
    return float(ordered[max(1, -(-p * len(ordered) // 100)) - 1])


async def test_every_receipt_of_the_window_is_counted_past_fifty_thousand(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The page read at most 50,000 receipts and said "the newest 50000 only": at 74 calls/s,
    the last 11 minutes of a 24-hour chart. Made by PostgreSQL itself, one a second."""
    n = 50_001
    now = datetime.now(UTC)
    async with transaction(sessions) as session:
        await session.execute(
            text(
                "INSERT INTO invocation_receipts (invocation_id, tenant_id, project_id,"
                " profile_id, deployment_id, fallback_used, request_hash, idempotency_key,"
                " policy_decision_id, outcome, usage_status, pricing_revision, latency_ms,"
                " time_to_first_token_ms, estimated_cost_usd, started_at, ended_at)"
                " SELECT gen_random_uuid(), :tenant, 'p', 'code-agent', 'sim', false,"
                " 'sha256:x', 'k' || i, gen_random_uuid(), 'Completed', 'Reported', 'r',"
                " (i * 7919) % 1000, i % 300, 0.001, at, at + interval '1 second'"
                " FROM generate_series(1, :n) AS i,"
                " LATERAL (SELECT CAST(:now AS timestamptz) - i * interval '1 second' AS at) t"
            ),
            {"tenant": tenant, "now": now, "n": n},
        )
    try:
        async with sessions() as session:
            day = now - timedelta(hours=24)
            figures = await overview_figures(session, tenant, day, HALF_HOUR)
    finally:
        async with transaction(sessions) as session:
            await session.execute(
                text("DELETE FROM invocation_receipts WHERE tenant_id = :t"), {"t": tenant}
            )
    (row,) = overview_data.latency_per_deployment(figures.cells, figures.percentiles)
    assert row.count == n
    latencies = [(i * 7919) % 1000 for i in range(1, n + 1)]
    assert row.p50 == _nearest_rank(latencies, 50) and row.p95 == _nearest_rank(latencies, 95)
    assert row.ttft_p50 == _nearest_rank([i % 300 for i in range(1, n + 1)], 50)
    spend = overview_data.spend_per_profile_per_day(figures.cells, now, "24h")
    assert sum(sum(s.values) for s in spend.series) == pytest.approx(n * 0.001)
    assert len(figures.cells) < 100  # sums, not rows: a few per bucket
