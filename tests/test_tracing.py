"""One trace per invocation: the HTTP request's span, Temporal's workflow and activity spans,
and the provider call's GenAI span, all in the caller's trace, with no content on any of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.collector import collector
from tests.helpers.deadline import eventually
from tests.helpers.spans import SpanCapture, by_name, exported

MODEL = "traced-sim"


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await approved_profile(
        http,
        auth,
        temporal_client,
        tenant,
        "traced",
        {
            "sim/traced": {
                "provider": "openai",
                "model": MODEL,
                "endpointRef": upstream.endpoint_ref,
            }
        },
    )
    return auth


def _trace_of(spans: list[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]


def _chain(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """Names from `span` up to the root, following parent ids within the captured spans."""
    ids = {s.context.span_id: s for s in spans if s.context is not None}
    names = [span.name]
    while span.parent is not None and span.parent.span_id in ids:
        span = ids[span.parent.span_id]
        names.append(span.name)
    return names


@pytest.mark.parametrize("stream", [False, True])
async def test_one_trace_from_http_request_to_provider_call(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    spans: SpanCapture,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    stream: bool,
) -> None:
    key = uuid.uuid4().hex
    marker = f"CANARY-{uuid.uuid4().hex}"
    trace_id = uuid.uuid4().int & ((1 << 128) - 1)
    traceparent = f"00-{trace_id:032x}-{uuid.uuid4().hex[:16]}-01"
    resp = await http.post(
        "/v1/chat/completions",
        json={
            "model": "traced",
            "stream": stream,
            "messages": [{"role": "user", "content": f"say {marker}"}],
        },
        headers={**auth, "Idempotency-Key": key, "traceparent": traceparent},
    )
    assert resp.status_code == 200 and marker in resp.text
    receipt_id = resp.headers["x-model-router-receipt-id"]

    wanted = {
        "POST /v1/chat/completions",
        "StartWorkflow:InvokeModel",
        "RunWorkflow:InvokeModel",
        "StartActivity:call_provider",
        "RunActivity:call_provider",
        f"chat {MODEL}",
    }

    async def complete() -> list[ReadableSpan] | None:
        mine = _trace_of(spans.spans, trace_id)
        return mine if wanted <= set(by_name(mine)) else None

    mine = await eventually(complete, timeout=15)
    names = by_name(mine)
    (provider,) = names[f"chat {MODEL}"]
    (server,) = names["POST /v1/chat/completions"]
    # The caller's trace was continued, and the provider call hangs under the HTTP request.
    assert server.kind is SpanKind.SERVER and server.parent is not None
    assert server.attributes is not None and server.attributes["http.route"] == (
        "/v1/chat/completions"
    )
    assert server.attributes["http.response.status_code"] == 200
    # The provider call begins inside the request, at the claim, beside the workflow: it hangs
    # directly under the HTTP request. The workflow and the activity that adopts the call hang
    # under the start, in the same trace.
    assert _chain(provider, mine) == [f"chat {MODEL}", "POST /v1/chat/completions"]
    (adopt,) = names["RunActivity:call_provider"]
    assert _chain(adopt, mine) == [
        "RunActivity:call_provider",
        "StartActivity:call_provider",
        "StartWorkflow:InvokeModel",
        "POST /v1/chat/completions",
    ]
    # Temporal's workflow spans hang under the start, beside the activity's.
    (run,) = names["RunWorkflow:InvokeModel"]
    (start,) = names["StartWorkflow:InvokeModel"]
    assert run.parent is not None and start.context is not None
    assert run.parent.span_id == start.context.span_id

    attrs = dict(provider.attributes or {})
    assert provider.kind is SpanKind.CLIENT
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == MODEL
    assert attrs["gen_ai.response.model"] == MODEL
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert isinstance(attrs["gen_ai.usage.output_tokens"], int)
    assert attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["model.profile"] == "traced"
    assert attrs["model.deployment"] == "sim/traced"
    assert attrs["receipt.id"] == receipt_id
    uuid.UUID(str(attrs["policy.decision.id"]))

    async with sessions() as session:
        receipt = await by_key(session, tenant, key)
    assert receipt is not None and str(receipt.invocation_id) == receipt_id
    assert attrs["policy.decision.id"] == str(receipt.policy_decision_id)
    assert marker not in exported(spans.spans)


async def test_failed_attempts_are_error_spans_without_the_providers_words(
    http: httpx.AsyncClient, auth: dict[str, str], spans: SpanCapture, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.SERVER_ERROR, times=1))
    trace_id = uuid.uuid4().int & ((1 << 128) - 1)
    resp = await http.post(
        "/v1/chat/completions",
        json={"model": "traced", "messages": [{"role": "user", "content": "hello"}]},
        headers={
            **auth,
            "Idempotency-Key": uuid.uuid4().hex,
            "traceparent": f"00-{trace_id:032x}-{uuid.uuid4().hex[:16]}-01",
        },
    )
    assert resp.status_code == 200  # the retry answered

    async def two_attempts() -> list[ReadableSpan] | None:
        found = by_name(_trace_of(spans.spans, trace_id)).get(f"chat {MODEL}", [])
        return found if len(found) == 2 else None

    first, second = sorted(
        await eventually(two_attempts, timeout=15),
        key=lambda s: (s.attributes or {})["model_router.attempt"],
    )
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["error.type"] == "server_error"
    assert not first.events  # no recorded exception: its message is the provider's text
    assert second.status.status_code is StatusCode.UNSET
    assert (second.attributes or {})["model_router.outcome"] == "Completed"


def test_otlp_export_ships_spans_when_configured() -> None:
    # Its own process: this one's global TracerProvider is the test capture.
    with collector() as (base, bodies):
        endpoint = base + "/v1/traces"
        script = textwrap.dedent(
            f"""
            from core import tracing
            tracing.configure_exporters(service_name="model-router", otlp_endpoint={endpoint!r})
            with tracing.tracer().start_as_current_span("otlp-probe-span"):
                pass
            tracing.shutdown()  # flushes the batch
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert any(b.startswith(b"/v1/traces ") and b"otlp-probe-span" in b for b in bodies)


def test_the_temporal_client_carries_the_tracing_interceptor_only_when_tracing_is_on() -> None:
    # Its own process: this one has the test capture installed, so tracing is on here.
    script = textwrap.dedent(
        """
        from core import tracing
        from core.settings import Settings
        from core.temporal import client_options

        settings = Settings(auth_jwt_secret="x" * 32, _env_file=None)
        off = client_options(settings)["interceptors"]
        # An endpoint that nothing listens on: spans are batched, never sent here.
        tracing.configure_exporters(
            service_name="model-router", otlp_endpoint="http://127.0.0.1:9/v1/traces"
        )
        on = client_options(settings)["interceptors"]
        print(len(off), [type(i).__name__ for i in on])
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MODEL_ROUTER_"))}
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.stdout.split("\n")[0] == "0 ['TracingInterceptor']"
