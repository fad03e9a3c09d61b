"""A fleet's series all reach `GET /metrics`: past the OpenTelemetry SDK's default of 2,000
attribute sets an instrument folded every further tenant into one `otel_metric_overflow` series,
silently (core/metrics.py, SERIES_LIMIT)."""

from __future__ import annotations

import re
import uuid

import httpx

from core import metrics

PREFIX = "connectsoft_factory_model_gateway_"
TENANTS = 2_500  # past the SDK's default limit of 2,000, whatever this process recorded before


async def test_every_tenants_invocations_are_scraped_past_two_thousand(
    http: httpx.AsyncClient,
) -> None:
    # Bound before recording: the app binds the exporters at its creation, and `http`'s app
    # may have been created by then or not (tests/test_metrics_endpoint.py).
    metrics.configure_exporters()
    tag = uuid.uuid4().hex[:8]
    tenants = [f"fleet-{tag}-{i:05d}" for i in range(TENANTS)]
    for tenant in tenants:
        metrics.invocations.add(
            1, {"tenant": tenant, "profile": "p", "provider": "openai", "outcome": "Completed"}
        )

    scraped = await http.get("/metrics")
    assert scraped.status_code == 200
    lines = scraped.text.splitlines()
    assert not [line for line in lines if "otel_metric_overflow" in line]
    series = [line for line in lines if line.startswith(PREFIX + "invocations_total{")]
    seen = {m.group(1) for line in series if (m := re.search(r'tenant="([^"]*)"', line))}
    assert set(tenants) <= seen, f"{len(set(tenants) - seen)} tenants missing"
