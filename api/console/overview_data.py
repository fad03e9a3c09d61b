"""The overview's numbers, computed from receipt points read from the store: invocation rate per
minute by outcome, latency and time to first token per deployment, spend per profile per day,
and the receipts still awaiting reconciliation (usage Unknown or Estimated)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from api.console.charts import Series
from domain.enums import InvocationOutcome, UsageStatus
from store.console_reads import ReceiptPoint

WINDOWS = {
    "24h": (timedelta(hours=24), timedelta(minutes=30)),
    "7d": (timedelta(days=7), timedelta(hours=2)),
}
AWAITING = (UsageStatus.UNKNOWN.value, UsageStatus.ESTIMATED.value)


def _utc(at: datetime) -> datetime:
    # SQLite hands timestamps back naive; they were written in UTC.
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def percentile(values: Sequence[int], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


@dataclass(frozen=True)
class Rate:
    labels: list[str]
    series: list[Series]
    every_nth: int


def rate_by_outcome(points: Sequence[ReceiptPoint], now: datetime, window: str) -> Rate:
    span, width = WINDOWS[window]
    start = now - span
    n = int(span / width)
    counts: dict[str, list[float]] = {o.value: [0.0] * n for o in InvocationOutcome}
    for p in points:
        i = int((_utc(p.started_at) - start) / width)
        if 0 <= i < n and p.outcome in counts:
            counts[p.outcome][i] += 1
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


def latency_per_deployment(points: Sequence[ReceiptPoint]) -> list[LatencyRow]:
    latency: dict[str, list[int]] = defaultdict(list)
    ttft: dict[str, list[int]] = defaultdict(list)
    seen: dict[str, int] = defaultdict(int)
    for p in points:
        seen[p.deployment_id] += 1
        if p.latency_ms is not None:
            latency[p.deployment_id].append(p.latency_ms)
        if p.time_to_first_token_ms is not None:
            ttft[p.deployment_id].append(p.time_to_first_token_ms)
    return [
        LatencyRow(
            d,
            seen[d],
            percentile(latency[d], 50),
            percentile(latency[d], 95),
            percentile(ttft[d], 50),
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


def spend_per_profile_per_day(points: Sequence[ReceiptPoint], now: datetime, window: str) -> PerDay:
    days = _days(now, window)
    index = {d: i for i, d in enumerate(days)}
    spend: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * len(days))
    for p in points:
        day = _utc(p.started_at).date().isoformat()
        if p.cost is not None and day in index:
            spend[p.profile_id][index[day]] += p.cost
    return PerDay(days, [Series(k, [float(v) for v in spend[k]]) for k in sorted(spend)])


def awaiting_per_day(points: Sequence[ReceiptPoint], now: datetime, window: str) -> PerDay:
    days = _days(now, window)
    index = {d: i for i, d in enumerate(days)}
    counts = {s: [0.0] * len(days) for s in AWAITING}
    for p in points:
        day = _utc(p.started_at).date().isoformat()
        if p.usage_status in counts and day in index and not p.sent_nothing:
            counts[p.usage_status][index[day]] += 1
    return PerDay(days, [Series(s, counts[s]) for s in AWAITING])
