"""GET /metrics exposes the spec's instruments with their dimensions through the OpenTelemetry
SDK, OTLP export pushes them when configured, and the JSON logs carry request id, tenant and
receipt id but never content."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from pydantic import SecretStr, ValidationError
from temporalio.client import Client

from core import metrics
from core.logging import JsonFormatter
from core.metrics_server import MetricsServer
from core.settings import Settings
from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.collector import collector
from tests.helpers.stack import serve

PREFIX = "connectsoft_factory_model_gateway_"


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Everything the app logs, as the production JSON handler would write it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(PREFIX + name)]


async def test_metrics_endpoint_exposes_every_spec_instrument(http: httpx.AsyncClient) -> None:
    tag = uuid.uuid4().hex[:8]
    # Direct records for the instruments an invocation does not reach in this test.
    metrics.fallbacks.add(1, {"reason": f"primary-failed-{tag}"})
    metrics.denials.add(1, {"tenant": tag, "reason": "budget"})
    metrics.provider_errors.add(1, {"provider": "openai", "class": f"timeout-{tag}"})
    metrics.usage_unknown.move_to(3, {"provider": f"p-{tag}"})
    metrics.usage_unknown.move_to(2, {"provider": f"p-{tag}"})

    resp = await http.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    assert f"# TYPE {PREFIX}fallbacks_total counter" in text
    assert any(f'reason="primary-failed-{tag}"' in s for s in _series(text, "fallbacks_total"))
    assert any('reason="budget"' in s for s in _series(text, "denials_total"))
    assert any(f'class="timeout-{tag}"' in s for s in _series(text, "provider_errors_total"))
    # The gauge is the store's count at scrape time, not the moves this process made: a
    # provider without waiting receipts reads 0 (tests/test_worker.py covers real counts).
    gauge = [s for s in _series(text, "usage_unknown") if f'provider="p-{tag}"' in s]
    assert len(gauge) == 1 and gauge[0].endswith(" 0.0")
    # Not in the OpenAPI document: it is an operations endpoint, not part of the API.
    assert "/metrics" not in (await http.get("/openapi.json")).json()["paths"]


async def test_with_a_metrics_token_only_a_scrape_carrying_it_reads_the_series(
    settings: Settings,
) -> None:
    """The series name tenants and their traffic: on a port callers reach, any caller read
    every tenant's. With the token set, the API's and the worker's /metrics take it alone."""
    token = SecretStr(f"scrape-{uuid.uuid4().hex}")
    right = {"Authorization": f"Bearer {token.get_secret_value()}"}
    wrong = [{}, {"Authorization": "Bearer nope"}, {"Authorization": token.get_secret_value()}]
    # Exported only once the process's exporters are bound (the app binds them at its
    # creation): recorded before that, the series was in the scrape only when another test of
    # this process had created an app first.
    metrics.configure_exporters()
    metrics.denials.add(1, {"tenant": "t-scraped", "reason": "budget"})

    async with serve(settings.model_copy(update={"metrics_token": token})) as api:
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
            for headers in wrong:
                refused = await http.get("/metrics", headers=headers)
                assert refused.status_code == 401, headers
                assert refused.headers["www-authenticate"].startswith("Bearer")
                assert "t-scraped" not in refused.text
            scraped = await http.get("/metrics", headers=right)
    assert scraped.status_code == 200 and 'tenant="t-scraped"' in scraped.text

    async def nothing() -> None:
        return None

    port = free_port()
    registry = metrics.configure_exporters()
    async with MetricsServer("127.0.0.1", port, registry, nothing, token):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for headers in wrong:
                assert (await http.get("/metrics", headers=headers)).status_code == 401
            scraped = await http.get("/metrics", headers=right)
    assert scraped.status_code == 200 and 'tenant="t-scraped"' in scraped.text


async def test_an_invocation_shows_in_metrics_and_in_json_logs_without_content(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    json_log: io.StringIO,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await register(
        http, auth, "sim/m", provider="openai", model="m-sim", endpointRef=upstream.endpoint_ref
    )
    await record_evidence(temporal_client, tenant, "sim/m", {"tool-calling": 0.9})
    approve = await http.post("/factory/model-deployments/sim/m/approve", headers=auth)
    assert approve.status_code == 200
    assert (await publish(http, auth, profile_event("metered", ["sim/m"]))).status_code == 200

    marker = f"CANARY-{uuid.uuid4().hex}"
    resp = await http.post(
        "/v1/chat/completions",
        json={"model": "metered", "messages": [{"role": "user", "content": f"say {marker}"}]},
        headers={**auth, "X-Request-Id": f"req-{tenant}", "Idempotency-Key": uuid.uuid4().hex},
    )
    assert resp.status_code == 200, resp.text
    receipt_id = resp.headers["x-model-router-receipt-id"]

    text = (await http.get("/metrics")).text
    mine = [s for s in _series(text, "invocations_total") if f'tenant="{tenant}"' in s]
    assert mine, text
    assert all(f'{dim}="' in mine[0] for dim in ("tenant", "profile", "provider", "outcome")), mine[
        0
    ]
    latency = [s for s in _series(text, "latency_seconds_count") if 'profile="metered"' in s]
    assert {p for p in ("ttft", "completion") if any(f'phase="{p}"' in s for s in latency)} == {
        "ttft",
        "completion",
    }
    tokens = [s for s in _series(text, "tokens_total") if f'tenant="{tenant}"' in s]
    assert {d for d in ("input", "output") if any(f'direction="{d}"' in s for s in tokens)}
    # The gateway's overhead in buckets a millisecond or two apart where it lives (12-14 ms a
    # call at c=1 on the benchmark's machine): the latency buckets' 10-25 ms could not show it.
    bounds = {s.split('le="')[1].split('"')[0] for s in _series(text, "overhead_seconds_bucket")}
    assert {"0.01", "0.012", "0.014", "0.016"} <= bounds, bounds
    assert marker not in text

    # The access line is written as the response finishes; give the server a moment.
    for _ in range(50):
        if receipt_id in json_log.getvalue():
            break
        await asyncio.sleep(0.05)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines() if line.strip()]
    access = [
        line
        for line in lines
        if line["logger"] == "model_router.access" and line.get("request_id") == f"req-{tenant}"
    ]
    assert len(access) == 1, lines
    assert access[0]["tenant"] == tenant
    assert access[0]["receipt_id"] == receipt_id
    assert access[0]["status"] == 200 and access[0]["path"] == "/v1/chat/completions"
    assert marker not in json_log.getvalue()


def test_log_content_refuses_to_turn_on_in_production() -> None:
    with pytest.raises(ValidationError, match="log_content"):
        Settings(environment="production", log_content=True, _env_file=None)
    assert Settings(environment="test", log_content=True, _env_file=None).log_content
    assert Settings(_env_file=None).log_content is False


def test_upstream_endpoints_refuse_to_turn_on_in_production() -> None:
    # `upstream:HOST:PORT` points a deployment anywhere: a tenant's operator could read
    # internal services as model output.
    with pytest.raises(ValidationError, match="allow_upstream_endpoints"):
        Settings(environment="production", allow_upstream_endpoints=True, _env_file=None)
    assert Settings(environment="development", allow_upstream_endpoints=True, _env_file=None)
    assert Settings(_env_file=None).allow_upstream_endpoints is False


def test_otlp_export_pushes_metrics_when_configured() -> None:
    # Its own process: a process has one MeterProvider, and this one's has no OTLP endpoint.
    with collector() as (base, bodies):
        endpoint = base + "/v1/metrics"
        script = textwrap.dedent(
            f"""
            import time
            from core import metrics
            metrics.configure_exporters(otlp_endpoint={endpoint!r}, otlp_interval_seconds=0.2)
            metrics.invocations.add(1, {{"tenant": "otlp-t", "outcome": "Completed"}})
            time.sleep(1.0)
            """
        )
        process = subprocess.Popen([sys.executable, "-c", script])
        assert process.wait(timeout=60) == 0
    pushed = [
        b
        for b in bodies
        if b.startswith(b"/v1/metrics ") and b"connectsoft.factory.model_gateway.invocations" in b
    ]
    assert pushed
    # Each process pushes as its own instance (`api --workers N` runs N of them on one host).
    assert all(b"service.instance.id" in b and f"-{process.pid}".encode() in b for b in pushed)


def test_a_histogram_keeps_a_bounded_tail_in_process() -> None:
    """The in-process copy (for tests) kept a thousand values a series, some 32 KB: with a
    probe latency series per deployment, 190 MB in a worker probing 6,000 deployments."""
    histogram = metrics.Histogram("bounded", "s", "a test's own")
    for i in range(1_000):
        histogram.record(float(i), {"deployment": "d"})
    assert histogram.values({"deployment": "d"}) == [float(i) for i in range(936, 1_000)]
    assert histogram.count({"deployment": "d"}) == 1_000


def test_json_formatter_keeps_ids_and_drops_unknown_extras() -> None:
    from core.logging import bind, request_context

    record = logging.LogRecord("model_router.x", logging.INFO, __file__, 1, "done", None, None)
    record.__dict__.update({"body": "CANARY-body", "status": 201, "prompt": "CANARY-prompt"})
    with request_context(request_id="r-1"):
        bind(tenant="t-1", receipt_id="rc-1", ignored=None)
        line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "r-1" and line["tenant"] == "t-1" and line["receipt_id"] == "rc-1"
    assert line["status"] == 201 and line["message"] == "done"
    assert "CANARY" not in json.dumps(line)
