"""GET /metrics: the Prometheus text exposition of the process's OpenTelemetry metrics.

Unauthenticated like the health probes (scrapers rarely carry tokens); it holds ids and
classes, never content. Operators who do not want it served turn off `metrics_enabled` and
rely on OTLP export instead."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

router = APIRouter(tags=["observability"])


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
