"""What the caller, the receipt and the metrics say about a failure, against the local
upstream's faults: a dropped connection mid-stream is a cut stream (both wire protocols); a 503
tells the caller when a candidate may really be tried again; attempts replaced after a timeout
or a cut, which a provider may bill but no receipt carries, are counted."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.api.history.v1 import History
from temporalio.client import Client

from core import metrics
from domain.invocation import invoke_workflow_id
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import receipt as _receipt

A, B, C = "fr-primary", "fr-second", "fr-claude"  # upstream models
LONG = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    upstream.state.clear_faults()
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for dep, provider, model in (
        ("fr/a", "openai", A),
        ("fr/b", "openai", B),
        ("fr/claude", "anthropic", C),
    ):
        await approved_deployment(
            http,
            auth,
            temporal_client,
            tenant,
            dep,
            provider=provider,
            model=model,
            endpointRef=upstream.endpoint_ref,
        )
    for event in (
        profile_event("fr-solo", ["fr/a"]),
        profile_event("fr-fb", ["fr/a", "fr/b"], fallbackEnabled=True, fallbackChain=["fr-solo"]),
        profile_event("fr-claude", ["fr/claude"]),
    ):
        assert (await publish(http, auth, event)).status_code == 200
    return auth


async def _call(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str
) -> tuple[httpx.Response, str]:
    key = f"fr-{uuid.uuid4().hex}"
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "messages": [{"role": "user", "content": LONG}]},
    )
    return resp, key


async def _stream(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str
) -> tuple[list[Any], str]:
    key = f"fr-{uuid.uuid4().hex}"
    events: list[Any] = []
    async with http.stream(
        "POST",
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "stream": True, "messages": [{"role": "user", "content": LONG}]},
    ) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events, key


@pytest.mark.parametrize(
    ("profile", "model", "provider"),
    [("fr-solo", A, "openai"), ("fr-claude", C, "anthropic")],
)
async def test_a_connection_dropped_after_output_is_a_cut_stream(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    profile: str,
    model: str,
    provider: str,
) -> None:
    # Four SSE events carry the first words in both protocols; then the connection drops.
    upstream.inject(model, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    cuts = {"provider": provider, "class": "stream_incomplete"}
    before = metrics.provider_errors.value(cuts)
    events, key = await _stream(http, auth, profile)
    assert any(e.get("choices") and e["choices"][0]["delta"].get("content") for e in events[:-1])
    assert "[DONE]" not in events
    # The type and code the non-stream error below gives the kind (its type was the kind).
    error = events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "stream_incomplete"), error
    assert events[-1]["error"]["errorClass"] == "transient"  # as on the non-stream errors
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.usage_status) == ("Partial", "Unknown")
    # The stream's headers named the request: the reconciler can settle this one exactly.
    assert row.provider_request_id
    assert metrics.provider_errors.value(cuts) == before + 1

    # Behind a non-stream call the caller saw nothing (issue 20): a cut is a failed attempt,
    # retried; only when every attempt is cut does the caller hear of it.
    upstream.inject(model, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=3))
    resp, _ = await _call(http, auth, profile)
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "stream_incomplete"
    # Transient like every other: a 503, and the caller is told when to come back.
    assert resp.json()["errorClass"] == "transient" and int(resp.headers["Retry-After"]) >= 1


async def test_a_503_says_when_a_candidate_may_be_tried_again(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # The provider's Retry-After, longer than the router waits itself, is passed on (with the
    # rate limit's 429, as OpenAI answers it: api/openai_errors.FAILURES).
    upstream.inject(A, Fault(kind=FaultKind.RATE_LIMIT, retry_after=3, times=1))
    resp, _ = await _call(http, auth, "fr-solo")
    assert resp.status_code == 429 and resp.headers["Retry-After"] == "3"
    # Within the cap.
    upstream.inject(A, Fault(kind=FaultKind.RATE_LIMIT, retry_after=600, times=1))
    resp, _ = await _call(http, auth, "fr-solo")
    assert resp.status_code == 429 and resp.headers["Retry-After"] == "60"
    # An answer clears the provider's word; an open breaker's rest of cool-down (1 s in
    # tests) is what is left.
    resp, _ = await _call(http, auth, "fr-solo")
    assert resp.status_code == 200
    upstream.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    try:
        resp, _ = await _call(http, auth, "fr-solo")  # three failures open the breaker
        assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
        resp, _ = await _call(http, auth, "fr-solo")
        assert resp.json()["error"]["code"] == "unavailable"
        assert resp.headers["Retry-After"] == "1"
    finally:
        upstream.state.clear_faults(A)


@pytest.mark.parametrize("text", ["inf", "1e400", "nan", "soon"])
async def test_a_retry_after_that_names_no_time_is_not_passed_on(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, text: str
) -> None:
    # A provider (or a proxy before it) whose Retry-After is not a time: the caller still gets
    # the transient 429 with a Retry-After of the router's own, never a 500; and so does the
    # next caller, once the breaker has the provider's word on record (a 503, nothing called).
    upstream.inject(A, Fault(kind=FaultKind.RATE_LIMIT, retry_after_text=text))
    try:
        for told, status in (("rate_limit_exceeded", 429), ("unavailable", 503)):
            resp, _ = await _call(http, auth, "fr-solo")
            assert resp.status_code == status and resp.json()["error"]["code"] == told
            assert 1 <= int(resp.headers["Retry-After"]) <= 60
    finally:
        upstream.state.clear_faults(A)


@pytest.mark.parametrize(("profile", "model"), [("fr-solo", A), ("fr-claude", C)])
async def test_an_event_without_end_is_a_malformed_stream_not_a_process_filling_up(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    profile: str,
    model: str,
) -> None:
    # A provider (or a proxy relaying a file) sends one event's data as 32 MiB without a line
    # end, then goes quiet: the attempt fails as soon as the event passes the reader's bound,
    # as a malformed stream, rather than holding the whole line until the stream goes idle.
    upstream.inject(model, Fault(kind=FaultKind.ENDLESS_LINE, after_chunks=1))
    try:
        resp, _ = await _call(http, auth, profile)
    finally:
        upstream.state.clear_faults(model)
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "stream_incomplete", (
        resp.text
    )
    assert "EventTooLarge" in resp.json()["error"]["message"], resp.text


async def test_replaced_attempts_a_provider_may_bill_are_counted(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    timeouts = {"provider": "openai", "reason": "timeout"}
    cuts = {"provider": "openai", "reason": "stream_incomplete"}
    # A stream cut before any output is retried on the same deployment: one replaced attempt.
    before = metrics.attempts_abandoned.value(cuts)
    upstream.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=1, times=1))
    resp, key = await _call(http, auth, "fr-solo")
    assert resp.status_code == 200
    assert (await _receipt(sessions, tenant, key)).outcome == "Completed"
    assert metrics.attempts_abandoned.value(cuts) == before + 1
    # The primary accepts and never answers; the fallback answers. The receipt is the
    # fallback's, with its reported usage: the abandoned attempt is on no receipt.
    before = metrics.attempts_abandoned.value(timeouts)
    upstream.inject(A, Fault(kind=FaultKind.HANG, times=1))
    resp, key = await _call(http, auth, "fr-fb")
    assert resp.status_code == 200 and resp.headers["X-Model-Router-Deployment"] == "fr/b"
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.usage_status, row.fallback_used) == ("fr/b", "Reported", True)
    assert metrics.attempts_abandoned.value(timeouts) == before + 1
    # Not replaced: the receipt itself carries it (Failed, usage Unknown on the primary).
    upstream.inject(A, Fault(kind=FaultKind.HANG, times=1))
    resp, key = await _call(http, auth, "fr-solo")
    assert resp.status_code == 504  # a timeout, as Chat Completions answers one
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.usage_status) == ("fr/a", "Unknown")
    assert metrics.attempts_abandoned.value(timeouts) == before + 1


async def test_what_a_providers_error_quotes_of_the_request_is_not_kept_or_passed_on(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    temporal_client: Client,
) -> None:
    """An OpenAI-compatible server (vLLM, say) passes on pydantic's words, quoting up to 50
    characters of the offending value: the prompt. The reason went into the workflow's history
    and the caller's error as it was."""
    quoted = (
        "1 validation error for ChatCompletionRequest messages.0.content Input should be a "
        f"valid string [type=string_type, input_value='{LONG[:50]}', input_type=str]; "
        f'the prompt "{LONG[60:120]}" was flagged'
    )
    upstream.inject(A, Fault(kind=FaultKind.CONTENT_POLICY, message=quoted, times=1))
    resp, key = await _call(http, auth, "fr-solo")
    assert resp.status_code == 400, resp.text
    assert "word1 " not in resp.text and "word12 " not in resp.text, resp.text
    # What an operator needs of it stays: the field, the type of error.
    assert "messages.0.content" in resp.text and "type=string_type" in resp.text, resp.text
    row = await _receipt(sessions, tenant, key)
    history = await _history(temporal_client, tenant, row.invocation_id)
    assert "content_policy" in history  # the history holds the call's story: its kind
    assert "messages.0.content" not in history and "word1 " not in history


async def _history(client: Client, tenant: str, invocation_id: uuid.UUID) -> str:
    """The invocation's whole history as raw protobuf bytes (payloads unencoded), as text."""
    run = client.get_workflow_handle(invoke_workflow_id(tenant, invocation_id))
    await run.result()
    events = (await run.fetch_history()).events
    return History(events=events).SerializeToString().decode("utf-8", "replace")


@pytest.mark.parametrize(
    "message",
    [
        # llama.cpp's parse error: the prompt after a colon, quoted by nothing.
        "Failed to parse input at pos 144: <tool_call><parameter=old_string>{marker}",
        # vLLM's validation error as a dict: short quoted strings, each under any length rule.
        "[{{'type': 'string_type', 'loc': ('body',), 'input': {{'content': '{marker}'}}}}]",
    ],
)
async def test_no_words_of_a_providers_error_reach_the_workflows_history(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    temporal_client: Client,
    message: str,
) -> None:
    """No redaction of a provider's words is certain to leave no content: a history keeps only
    the failure's kind. The caller, whose request it was, is told them."""
    marker = f"MRK{uuid.uuid4().hex[:8]}"
    upstream.inject(
        A, Fault(kind=FaultKind.CONTENT_POLICY, message=message.format(marker=marker), times=1)
    )
    resp, key = await _call(http, auth, "fr-solo")
    assert resp.status_code == 400, resp.text
    assert marker in resp.text  # the caller's own words, told to the caller alone
    row = await _receipt(sessions, tenant, key)
    history = await _history(temporal_client, tenant, row.invocation_id)
    assert "content_policy" in history
    assert marker not in history
