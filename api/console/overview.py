"""The overview: charts of the last 24 hours or 7 days, all from the store (receipts), drawn as
server-side SVG.

Its figures sum the tenant's receipts at large, so it is for the roles that watch the tenant's
operations (domain.access), not a Requester; and they are read at most once per tenant, window
and short while by this process (api/console/overview_cache.py), the page saying when."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from api.console import charts, overview_data
from api.console.overview_cache import Snapshot
from api.console.render import page
from api.console.session import ConsoleError, SignedIn
from api.deps import RuntimeDep
from domain.access import Action, reading_receipts
from domain.enums import Scope
from store import console_reads, overview_reads

router = APIRouter()


@router.get("/overview", response_class=HTMLResponse)
async def overview(
    request: Request,
    operator: SignedIn,
    runtime: RuntimeDep,
    window: Annotated[str, Query(max_length=4)] = "24h",
) -> Response:
    if not operator.may(Scope.RUNS_READ, Action.READ_RUNS):
        raise ConsoleError(403, "The overview reads receipts: it needs factory.runs.read.")
    wants = reading_receipts(of_one_run=False)
    if not operator.may(Scope.RUNS_READ, wants):
        raise ConsoleError(
            403,
            f"The overview sums every run's receipts of the tenant: it {operator.needs(wants)}. "
            "One run's receipts open on the Receipts page with its run id.",
        )
    if window not in overview_data.WINDOWS:
        raise ConsoleError(400, "window must be 24h or 7d.")
    span, width = overview_data.WINDOWS[window]
    tenant = operator.tenant_id
    lookback = runtime.settings.reconciler_lookback_hours

    async def read(now: datetime) -> Snapshot:
        async with runtime.sessions() as session:
            figures = await overview_reads.overview_figures(session, tenant, now - span, width)
            backlog = await console_reads.awaiting_reconciliation(
                session, tenant, now - timedelta(hours=lookback)
            )
        return Snapshot(now, figures, backlog)

    cache = runtime.overview_cache
    snapshot = await cache.view(tenant, window, read)
    # Charted from the moment the figures were read: the buckets are counted from it.
    now, figures, backlog = snapshot.as_of, snapshot.figures, snapshot.backlog
    cells = figures.cells
    rate = overview_data.rate_by_outcome(cells, now, window)
    latency = overview_data.latency_per_deployment(cells, figures.percentiles)
    spend = overview_data.spend_per_profile_per_day(cells, now, window)
    awaiting = overview_data.awaiting_per_day(cells, now, window)
    return page(
        request,
        "overview.html",
        operator,
        title="Overview",
        nav="overview",
        window=window,
        windows=list(overview_data.WINDOWS),
        as_of=now,
        read_every=int(cache.ttl[window].total_seconds()),
        total=sum(c.count for c in cells),
        rate_chart=charts.stacked_bars(
            "chart-rate",
            "Invocations per minute by outcome (UTC)",
            rate.labels,
            rate.series,
            "calls/min",
            rate.every_nth,
            rate=True,
        ),
        latency=latency,
        latency_chart=charts.grouped_bars(
            "chart-latency",
            "Latency p50 / p95 and time to first token (p50) per deployment",
            {r.deployment_id: [r.p50, r.p95, r.ttft_p50] for r in latency},
            ["p50", "p95", "TTFT p50"],
            "ms",
        ),
        spend=spend,
        spend_chart=charts.stacked_bars(
            "chart-spend", "Spend per profile per day (UTC)", spend.days, spend.series, "USD"
        ),
        awaiting=awaiting,
        awaiting_total=overview_data.backlog(backlog, console_reads.BACKLOG_CAP),
        lookback_hours=lookback,
        awaiting_in_window=int(sum(sum(s.values) for s in awaiting.series)),
        awaiting_chart=charts.stacked_bars(
            "chart-awaiting",
            "Receipts awaiting reconciliation (usage Unknown or Estimated) per day (UTC)",
            awaiting.days,
            awaiting.series,
            "receipts",
        ),
    )
