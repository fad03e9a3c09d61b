"""The overview's numbers and its SVG, without a browser: buckets, percentiles, per-day sums,
and that every label is escaped (a deployment id is operator input)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.console import charts, overview_data
from domain.enums import InvocationOutcome, UsageStatus
from store import console_reads
from store.console_reads import ReceiptPoint
from tests.helpers.receipts import add_receipt

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _point(minutes_ago: float, **over: object) -> ReceiptPoint:
    fields: dict[str, object] = {
        "started_at": NOW - timedelta(minutes=minutes_ago),
        "outcome": "Completed",
        "usage_status": "Reported",
        "profile_id": "code-agent",
        "deployment_id": "local/sim-chat",
        "latency_ms": 100,
        "time_to_first_token_ms": 40,
        "cost": Decimal("0.001"),
    }
    fields.update(over)
    return ReceiptPoint(**fields)  # type: ignore[arg-type]


def test_rate_is_per_minute_in_half_hour_buckets_by_outcome() -> None:
    points = [_point(5), _point(6), _point(7, outcome="Failed"), _point(60 * 25)]  # last: outside
    rate = overview_data.rate_by_outcome(points, NOW, "24h")
    assert len(rate.labels) == 48
    by_name = {s.name: s.values for s in rate.series}
    assert set(by_name) == {"Completed", "Failed"}
    assert by_name["Completed"][-1] == 2 / 30 and sum(by_name["Completed"][:-1]) == 0
    assert by_name["Failed"][-1] == 1 / 30


def test_latency_percentiles_and_ttft_per_deployment() -> None:
    points = [_point(1, latency_ms=ms, time_to_first_token_ms=ms // 2) for ms in range(1, 101)]
    points.append(_point(1, deployment_id="other", latency_ms=None, time_to_first_token_ms=None))
    rows = {r.deployment_id: r for r in overview_data.latency_per_deployment(points)}
    assert (rows["local/sim-chat"].p50, rows["local/sim-chat"].p95) == (50.0, 95.0)
    assert rows["local/sim-chat"].ttft_p50 == 25.0 and rows["local/sim-chat"].count == 100
    assert rows["other"].p50 is None and rows["other"].count == 1


def test_spend_per_profile_per_day_and_receipts_awaiting_reconciliation() -> None:
    points = [
        _point(10, cost=Decimal("0.5")),
        _point(60 * 13, cost=Decimal("0.25")),  # yesterday (UTC)
        _point(10, profile_id="embedding", cost=None, usage_status="Unknown"),
        _point(20, usage_status="Estimated"),
        # A denial: Estimated at zero, no provider saw it; it awaits no statement.
        _point(30, usage_status="Estimated", outcome="Denied", sent_nothing=True, cost=None),
    ]
    spend = overview_data.spend_per_profile_per_day(points, NOW, "24h")
    assert spend.days == ["2026-11-30", "2026-12-01"]
    assert {s.name: s.values for s in spend.series} == {"code-agent": [0.25, 0.5 + 0.001]}
    awaiting = overview_data.awaiting_per_day(points, NOW, "24h")
    assert {s.name: s.values for s in awaiting.series} == {
        "Unknown": [0.0, 1.0],
        "Estimated": [0.0, 1.0],
    }


def test_svg_escapes_every_label_and_describes_itself() -> None:
    svg = charts.grouped_bars(
        "c1", "Latency <b>", {"<script>alert(1)</script>": [10.0, 20.0, None]}, ["p50", "p95"], "ms"
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'role="img"' in svg and '<title id="c1-t">Latency &lt;b&gt;</title>' in svg
    bars = charts.stacked_bars("c2", "Rate", ["a", "b"], [charts.Series("x", [0, 3])], "calls")
    assert bars.count("<rect") == 2  # one bar (a has nothing) and one legend swatch
    assert "total 3 calls" in bars
    # A rate is described by its highest bar: the total of per-minute rates means nothing.
    rates = [charts.Series("x", [2, 3]), charts.Series("y", [1, 0])]
    per_minute = charts.stacked_bars("c4", "Rate", ["a", "b"], rates, "calls/min", rate=True)
    assert "highest 3 calls/min" in per_minute and "total" not in per_minute


def test_small_values_get_an_axis_of_their_own_size() -> None:
    # A fraction of a cent is still a visible bar: the axis tops out near the value, not at 1.
    svg = charts.stacked_bars("c3", "Spend", ["day"], [charts.Series("p", [0.000006])], "USD")
    height = float(re.search(r'<rect [^>]*height="([0-9.]+)"', svg).group(1))  # type: ignore[union-attr]
    assert height > 0.5 * (charts.HEIGHT - charts.TOP - charts.BOTTOM)
    assert ">0.00001<" in svg and ">0.0000025<" in svg


async def test_a_receipt_no_provider_saw_is_not_awaiting_reconciliation(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """Read from the store as the overview reads it: a denial (Estimated at zero tokens) is
    known usage, as the reconciler and its gauge count it; an Unknown receipt awaits."""
    now = datetime.now(UTC)
    for status, outcome, tokens in (
        (UsageStatus.ESTIMATED, InvocationOutcome.DENIED, 0),
        (UsageStatus.UNKNOWN, InvocationOutcome.FAILED, None),
        (UsageStatus.ESTIMATED, InvocationOutcome.COMPLETED, 12),
    ):
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="local/sim-chat",
            started_at=now - timedelta(minutes=5),
            usage_status=status,
            outcome=outcome,
            input_tokens=tokens,
            output_tokens=tokens,
        )
    async with sessions() as session:
        rows = await console_reads.overview_rows(session, tenant, now - timedelta(hours=1))
    awaiting = overview_data.awaiting_per_day(rows.points, now, "24h")
    assert {s.name: sum(s.values) for s in awaiting.series} == {"Unknown": 1, "Estimated": 1}
