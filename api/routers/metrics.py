"""GET /metrics: the Prometheus text exposition of the process's OpenTelemetry metrics.

It holds ids and classes, never content, but tenant ids and their traffic among them: with
`metrics_token` set it takes that bearer token alone (core/scrape_auth.py); unset, it is open
like the health probes. Operators who do not want it served turn off `metrics_enabled` and
rely on OTLP export instead."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

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
    await recount_usage_unknown(runtime, request.app.state)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# How long a scrape waits on the store for the recount: Prometheus gives a scrape 10 s by
# default, and a store that hangs (frozen, partitioned) rather than refuses held the scrape
# for the pool's wait and the statement's bound, 30 s and more: every target read as down,
# every other metric gone with it, in the outage they are for.
RECOUNT_WAIT_SECONDS = 2.0


async def recount_usage_unknown(runtime: RuntimeDep, holder: Any) -> None:
    """The usage_unknown gauge from the store (one grouped count over an indexed column), as
    one recount at a time in its own task (kept on `holder`, the app's state), waited on for
    at most RECOUNT_WAIT_SECONDS. A store that does not answer in time leaves the last count
    and the scrape still succeeds; the recount is left to finish rather than cancelled (a
    cancelled one still waited for its session's close on a hung server)."""
    task: asyncio.Task[None] | None = getattr(holder, "usage_recount", None)
    if task is None or task.done():
        task = asyncio.ensure_future(_recount(runtime))
        holder.usage_recount = task
    done, _ = await asyncio.wait({task}, timeout=RECOUNT_WAIT_SECONDS)
    if not done:
        log.warning("usage_unknown recount still waiting on the store; the last count exported")


async def _recount(runtime: RuntimeDep) -> None:
    try:
        async with runtime.sessions() as session:
            lookback = runtime.settings.reconciler_lookback_hours
            instruments.set_usage_unknown(await awaiting_by_provider(session, lookback))
    except Exception as exc:
        log.warning("usage_unknown not recounted: %s", type(exc).__name__)
