"""GET /metrics: the Prometheus text exposition of the process's OpenTelemetry metrics.

It holds ids and classes, never content, but tenant ids and their traffic among them: with
`metrics_token` set it takes that bearer token alone (core/scrape_auth.py); unset, it is open
like the health probes. Operators who do not want it served turn off `metrics_enabled` and
rely on OTLP export instead."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from api.deps import RuntimeDep
from api.problems import problem_response
from core.scrape_auth import scrape_allowed

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
    # One recount at a time, waited on at most 2 s: a hung store leaves the last count.
    await runtime.usage_recount()
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
