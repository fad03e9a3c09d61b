"""The overview's numbers, laid out from the sums the store made (store/overview_reads.py):
invocation rate per minute by outcome, latency and time to first token per deployment, spend
per profile per day, and the receipts still awaiting reconciliation (usage Unknown or
Estimated): per day in the window, and the whole backlog."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from api.console.charts import Series
from domain.enums import InvocationOutcome, UsageStatus
from store.overview_reads import Cell, Percentiles

WINDOWS = {
    "24h": (timedelta(hours=24), timedelta(minutes=30)),
    "7d": (timedelta(days=7), timedelta(hours=2)),
}
AWAITING = (UsageStatus.UNKNOWN.value, UsageStatus.ESTIMATED.value)
IN_FLIGHT = "In flight"  # open receipts: their outcome is not yet known


@dataclass(frozen=True)
class Rate:
    labels: list[str]
    series: list[Series]
    every_nth: int


def rate_by_outcome(cells: Sequence[Cell], now: datetime, window: str) -> Rate:
    """Buckets from `now` minus the window, as the store counted them."""
    span, width = WINDOWS[window]
    start = now - span
    n = int(span / width)
    names = [*(o.value for o in InvocationOutcome), IN_FLIGHT]
    counts: dict[str, list[float]] = {name: [0.0] * n for name in names}
    for c in cells:
        name = IN_FLIGHT if c.in_flight else c.outcome
        if 0 <= c.bucket < n and name in counts:
            counts[name][c.bucket] += c.count
    minutes = width.total_seconds() / 60
    fmt = "%H:%M" if window == "24h" else "%a %H:%M"
    labels = [(start + width * i).strftime(fmt) for i in range(n)]
    series = [
        Series(name, [c / minutes for c in values])
        for name, values in counts.items()
        if any(values)
    ]
    return Rate(labels, series, every_nth=max(1, n // 8))


@dataclass(frozen=True)
class LatencyRow:
    deployment_id: str
    count: int
    p50: float | None
    p95: float | None
    ttft_p50: float | None


def latency_per_deployment(
    cells: Sequence[Cell], percentiles: dict[str, Percentiles]
) -> list[LatencyRow]:
    seen: dict[str, int] = defaultdict(int)
    for c in cells:
        seen[c.deployment_id] += c.count
    none = Percentiles()
    return [
        LatencyRow(
            d,
            seen[d],
            percentiles.get(d, none).latency_p50,
            percentiles.get(d, none).latency_p95,
            percentiles.get(d, none).ttft_p50,
        )
        for d in sorted(seen)
    ]


@dataclass(frozen=True)
class PerDay:
    days: list[str]
    series: list[Series]


def _days(now: datetime, window: str) -> list[str]:
    span, _ = WINDOWS[window]
    first = (now - span).date()
    return [(first + timedelta(days=i)).isoformat() for i in range((now.date() - first).days + 1)]


def spend_per_profile_per_day(cells: Sequence[Cell], now: datetime, window: str) -> PerDay:
    days = _days(now, window)
    index = {d: i for i, d in enumerate(days)}
    spend: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * len(days))
    for c in cells:
        day = c.day.isoformat()
        if c.cost is not None and day in index:
            spend[c.profile_id][index[day]] += c.cost
    return PerDay(days, [Series(k, [float(v) for v in spend[k]]) for k in sorted(spend)])


def awaiting_per_day(cells: Sequence[Cell], now: datetime, window: str) -> PerDay:
    days = _days(now, window)
    index = {d: i for i, d in enumerate(days)}
    counts = {s: [0.0] * len(days) for s in AWAITING}
    for c in cells:
        day = c.day.isoformat()
        if c.usage_status in counts and day in index and not c.sent_nothing and not c.in_flight:
            counts[c.usage_status][index[day]] += c.count
    return PerDay(days, [Series(s, counts[s]) for s in AWAITING])


def backlog(count: int, cap: int) -> str:
    """The backlog as the page says it: counted up to `cap` and one more
    (store/console_reads.awaiting_reconciliation), so one past the cap is "more than"."""
    return f"more than {cap:,}" if count > cap else f"{count:,}"
