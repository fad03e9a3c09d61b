"""GET /metrics: the Prometheus text exposition of the process's OpenTelemetry metrics.

It holds ids and classes, never content, but tenant ids and their traffic among them: with
`metrics_token` set it takes that bearer token alone (core/scrape_auth.py); unset, it is open
like the health probes. Operators who do not want it served turn off `metrics_enabled` and
rely on OTLP export instead."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from api.deps import RuntimeDep
from api.problems import problem_response
from core import metrics as instruments
from core.scrape_auth import scrape_allowed
from store.reconciliation import awaiting_by_provider

log = logging.getLogger(__name__)

router = APIRouter(tags=["observability"])


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, runtime: RuntimeDep) -> Response:
    if not scrape_allowed(request.headers.get("authorization"), runtime.settings.metrics_token):
        return problem_response(
            request,
            401,
            "GET /metrics takes the metrics token (MODEL_ROUTER_METRICS_TOKEN) as a bearer token.",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    registry: CollectorRegistry = request.app.state.metrics_registry
    await recount_usage_unknown(runtime)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# How long a scrape waits on the store for the recount: Prometheus gives a scrape 10 s by
# default, and a store that hangs (frozen, partitioned) rather than refuses held the scrape
# for the pool's wait and the statement's bound, 30 s and more: every target read as down,
# every other metric gone with it, in the outage they are for.
RECOUNT_WAIT_SECONDS = 2.0


async def recount_usage_unknown(runtime: RuntimeDep) -> None:
    """The usage_unknown gauge from the store (one grouped count over an indexed column); a
    store that does not answer, or not within RECOUNT_WAIT_SECONDS, leaves the last count,
    and the scrape still succeeds."""

    async def recount() -> None:
        async with runtime.sessions() as session:
            lookback = runtime.settings.reconciler_lookback_hours
            instruments.set_usage_unknown(await awaiting_by_provider(session, lookback))

    try:
        await asyncio.wait_for(recount(), RECOUNT_WAIT_SECONDS)
    except Exception as exc:
        log.warning("usage_unknown not recounted: %s", type(exc).__name__)
