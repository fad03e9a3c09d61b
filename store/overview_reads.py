"""The console overview's figures, summed by the database: receipts counted and their cost
summed per time bucket, UTC day, outcome, usage status, profile and deployment, and latency
percentiles per deployment. Every query is filtered by the caller's tenant.

The page read every receipt of the window and summed them here, at most 50,000 of them: at
74 calls/s (docs/benchmarks.md) that is the last 11 minutes of a 24-hour chart. Summed in
SQL, the page gets a few hundred rows whatever the traffic; the window is still read whole."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from store.columns import UtcDateTime
from store.console_reads import open_and_closed
from store.reconciliation import sent_nothing
from store.tables import InvocationReceiptRow

R = InvocationReceiptRow
_KEYS = ("bucket", "day", "outcome", "usage_status", "profile_id", "deployment_id", "in_flight")


@dataclass(frozen=True)
class Cell:
    """The receipts of one bucket that share an outcome, usage status, profile and deployment:
    how many, and their summed cost (None when none of them has one)."""

    bucket: int  # the bucket's index from the window's start, each `width` long
    day: date  # the receipts' UTC day: a bucket may span midnight
    outcome: str
    usage_status: str
    profile_id: str
    deployment_id: str
    # Still open: its outcome and usage are the claim's placeholders (Failed, Unknown) until
    # it closes, so it is counted apart, never as a failure nor as awaiting a statement.
    in_flight: bool
    sent_nothing: bool  # domain.statements.sent_nothing: it awaits no statement
    count: int
    cost: Decimal | None


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles of one deployment's closed receipts in the window."""

    latency_p50: float | None = None
    latency_p95: float | None = None
    ttft_p50: float | None = None


@dataclass(frozen=True)
class OverviewFigures:
    cells: list[Cell]
    percentiles: dict[str, Percentiles]


def _bucket_and_day(dialect: str, start: datetime, width: timedelta) -> tuple[Any, Any]:
    started = col(R.started_at)
    since = sa.literal(start, UtcDateTime())
    bucket: Any
    day: Any
    if dialect == "postgresql":
        seconds = sa.extract("epoch", started - since)
        bucket = sa.cast(sa.func.floor(seconds / width.total_seconds()), sa.Integer)
        day = sa.cast(sa.func.timezone("UTC", started), sa.Date)
    else:
        # SQLite keeps UTC text without a zone (store.columns.UtcDateTime), and has no floor()
        # unless built with its math functions; a bucket is never negative (every receipt
        # read started at or after `start`), so truncation is floor.
        elapsed = (sa.func.julianday(started) - sa.func.julianday(since)) * 86400.0
        bucket = sa.cast(elapsed / width.total_seconds(), sa.Integer)
        day = sa.func.date(started)
    return bucket.label("bucket"), day.label("day")


async def _cells(
    session: AsyncSession, tenant_id: str, start: datetime, width: timedelta
) -> list[Cell]:
    bucket, day = _bucket_and_day(session.get_bind().dialect.name, start, width)
    receipts = (
        sa.select(
            bucket,
            day,
            col(R.outcome).label("outcome"),
            col(R.usage_status).label("usage_status"),
            col(R.profile_id).label("profile_id"),
            col(R.deployment_id).label("deployment_id"),
            sa.case((col(R.ended_at).is_(None), 1), else_=0).label("in_flight"),
            sa.case((sent_nothing(), 1), else_=0).label("sent_nothing"),
            col(R.estimated_cost_usd).label("cost"),
        )
        .where(col(R.tenant_id) == tenant_id)
        .where(col(R.started_at) >= start)
    )
    # Open and closed apart, each by its own index, in one statement: it sees one moment, so
    # a receipt that closes meanwhile is counted once (as two reads, it was in both).
    window = sa.union_all(*open_and_closed(receipts)).subquery()
    keys = [window.c[name] for name in (*_KEYS, "sent_nothing")]
    stmt = sa.select(
        *keys, sa.func.count().label("n"), sa.func.sum(window.c.cost).label("cost")
    ).group_by(*keys)
    return [
        Cell(
            bucket=int(row.bucket),
            day=row.day if isinstance(row.day, date) else date.fromisoformat(row.day),
            outcome=str(getattr(row.outcome, "value", row.outcome)),
            usage_status=str(getattr(row.usage_status, "value", row.usage_status)),
            profile_id=row.profile_id,
            deployment_id=row.deployment_id,
            in_flight=bool(row.in_flight),
            sent_nothing=bool(row.sent_nothing),
            count=int(row.n),
            cost=None if row.cost is None else Decimal(str(row.cost)),
        )
        for row in (await session.execute(stmt)).all()
    ]


async def _nearest_ranks(
    session: AsyncSession, tenant_id: str, start: datetime, column: Any, ps: Sequence[int]
) -> dict[str, dict[int, float]]:
    """deploymentId → {p: the column's nearest-rank p-th percentile}, over the closed receipts
    of the window that have a value (an open one has none yet). Ranked by a window function,
    which both engines have: PostgreSQL's percentile_disc is not SQLite's."""
    ranked = (
        sa.select(
            col(R.deployment_id).label("deployment_id"),
            column.label("value"),
            sa.func.row_number()
            .over(partition_by=col(R.deployment_id), order_by=column)
            .label("rank"),
            sa.func.count().over(partition_by=col(R.deployment_id)).label("n"),
        )
        .where(col(R.tenant_id) == tenant_id)
        .where(col(R.started_at) >= start)
        .where(col(R.ended_at).is_not(None))
        .where(column.is_not(None))
        .subquery()
    )
    # The nearest rank is ceil(p/100 · n), in integers so neither engine needs ceil().
    rank_of = {p: (ranked.c.n * p + 99) // 100 for p in ps}
    stmt = sa.select(
        ranked.c.deployment_id,
        ranked.c.value,
        *(sa.case((ranked.c.rank == r, 1), else_=0).label(f"p{p}") for p, r in rank_of.items()),
    ).where(sa.or_(*(ranked.c.rank == r for r in rank_of.values())))
    found: dict[str, dict[int, float]] = {}
    for row in (await session.execute(stmt)).all():
        for p in ps:
            if getattr(row, f"p{p}"):
                found.setdefault(row.deployment_id, {})[p] = float(row.value)
    return found


async def overview_figures(
    session: AsyncSession, tenant_id: str, start: datetime, width: timedelta
) -> OverviewFigures:
    cells = await _cells(session, tenant_id, start, width)
    latency = await _nearest_ranks(session, tenant_id, start, col(R.latency_ms), (50, 95))
    ttft = await _nearest_ranks(session, tenant_id, start, col(R.time_to_first_token_ms), (50,))
    percentiles = {
        d: Percentiles(
            latency_p50=latency.get(d, {}).get(50),
            latency_p95=latency.get(d, {}).get(95),
            ttft_p50=ttft.get(d, {}).get(50),
        )
        for d in latency.keys() | ttft.keys()
    }
    return OverviewFigures(cells, percentiles)
