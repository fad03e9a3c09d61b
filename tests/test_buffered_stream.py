"""Issue 20: buffered streaming. A stream on a Batch profile (or one the caller asks to hold with
`X-Model-Router-Buffered: true`) is held by the gateway until the provider's stream completed,
then sent whole: a cut or a stall before the end is a failed attempt, rescued by the retry or
the fallback with nothing spliced, never Partial. Driven through the official openai SDK (and
httpx for the gateway's plain REST) against the upstream simulator's stream faults.

Upstream request counts: a cut (stream_incomplete, transient) is retried on the same deployment
up to the retry rule's three attempts, then fallen back from; a stall (timeout) moves to the
fallback at once (domain/retry.py). The stall is caught by the idle bound (2 s in test
settings)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from anthropic import AsyncAnthropic
from openai import APIError, AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core import metrics
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import receipt as _receipt

A, B, SLOW = "bs-primary", "bs-second", "bs-slow"  # upstream models of the deployments
LONG = " ".join(f"word{i}" for i in range(40))
WHOLE = f"Echo: {LONG}"
HOLD = "X-Model-Router-Buffered"


@pytest.fixture
async def sdk(
    http: httpx.AsyncClient,
    api_url: str,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> Any:
    upstream.state.clear_faults()
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    for dep, model in (("bs/a", A), ("bs/b", B), ("bs/slow", SLOW)):
        await approved_deployment(
            http, auth, temporal_client, tenant, dep, model=model, endpointRef=upstream.endpoint_ref
        )
    solo = profile_event("bs-solo", ["bs/a"])
    assert (await publish(http, auth, solo)).status_code == 200
    # The second allowed deployment is the fallback (the chain only has to be non-empty).
    chain: dict[str, Any] = {"fallbackEnabled": True, "fallbackChain": ["bs-solo"]}
    for profile, allowed, latency, fallback in (
        ("bs-batch", ["bs/a", "bs/b"], "Batch", chain),
        ("bs-live", ["bs/a", "bs/b"], "Interactive", chain),
        ("bs-standard", ["bs/a", "bs/b"], "Standard", chain),
        ("bs-slow", ["bs/slow"], "Batch", {}),
    ):
        event = profile_event(profile, allowed, latencyClass=latency, **fallback)
        published = await publish(http, auth, event)
        assert published.status_code == 200, published.text
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as client:
        yield client


class Seen:
    def __init__(self, upstream: UpstreamServer) -> None:
        self.up, self.a, self.b = upstream, upstream.requests(A), upstream.requests(B)

    def __call__(self) -> tuple[int, int]:
        return self.up.requests(A) - self.a, self.up.requests(B) - self.b


class Streamed:
    """What the caller read of one streamed call: content deltas, the final model_router
    object, the headers, or the error the SDK raised."""

    def __init__(self) -> None:
        self.key = f"bs-{uuid.uuid4().hex}"
        self.deltas: list[str] = []
        self.router: dict[str, Any] | None = None
        self.headers: Any = None
        self.error: APIError | None = None

    @property
    def text(self) -> str:
        return "".join(self.deltas)


async def _stream(sdk: AsyncOpenAI, profile: str, hold: str | None = None) -> Streamed:
    out = Streamed()
    headers = {"Idempotency-Key": out.key, **({HOLD: hold} if hold is not None else {})}
    raw = await sdk.chat.completions.with_raw_response.create(
        model=profile,
        messages=[{"role": "user", "content": LONG}],
        stream=True,
        extra_headers=headers,
    )
    out.headers = raw.headers
    try:
        async for chunk in raw.parse():
            for choice in chunk.choices:
                if choice.delta.content:
                    out.deltas.append(choice.delta.content)
            extra = chunk.model_extra or {}
            if "model_router" in extra:
                out.router = extra["model_router"]
    except APIError as exc:  # the stream's explicit error event (a cut after output)
        out.error = exc
    return out


# A garbled event is a broken stream like a cut (stream_incomplete): retried the same way.
@pytest.mark.parametrize("kind", [FaultKind.STREAM_CUT, FaultKind.MALFORMED_CHUNK])
async def test_a_cut_on_a_batch_profile_is_retried_and_the_caller_gets_it_whole(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    kind: FaultKind,
) -> None:
    labels = {"provider": "openai", "reason": "stream_incomplete"}
    abandoned = metrics.attempts_abandoned.value(labels)
    upstream.inject(A, Fault(kind=kind, after_chunks=4, times=1))
    seen = Seen(upstream)
    got = await _stream(sdk, "bs-batch")
    # The retry's answer alone: the four chunks the cut attempt sent are not spliced in.
    assert got.error is None and got.text == WHOLE
    assert seen() == (2, 0)
    assert got.router is not None
    assert got.router["deploymentId"] == "bs/a" and got.router["outcome"] == "Completed"
    assert got.router["providerAttempt"] == 2 and got.router["buffered"] is True
    assert got.router["fallbackUsed"] is False
    assert got.headers is not None and got.headers["x-model-router-deployment"] == "bs/a"
    row = await _receipt(sessions, tenant, got.key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "bs/a", False)
    assert row.buffered is True and row.usage_status == "Reported"
    assert metrics.attempts_abandoned.value(labels) == abandoned + 1
    assert row.provider_attempt == 2
    # A replay of the key reads the receipt back: the same attempt, buffered, nothing called.
    seen = Seen(upstream)
    again = await sdk.chat.completions.create(
        model="bs-batch",
        messages=[{"role": "user", "content": LONG}],
        stream=True,
        extra_headers={"Idempotency-Key": got.key},
    )
    last = [chunk async for chunk in again][-1]
    replayed = (last.model_extra or {})["model_router"]
    assert (replayed["buffered"], replayed["providerAttempt"]) == (True, 2) and seen() == (0, 0)


@pytest.mark.parametrize(
    ("kind", "reason", "primary_calls"),
    [(FaultKind.STREAM_CUT, "stream_incomplete", 3), (FaultKind.STREAM_STALL, "timeout", 1)],
)
async def test_a_batch_stream_falls_back_when_the_primary_keeps_breaking(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    kind: FaultKind,
    reason: str,
    primary_calls: int,
) -> None:
    labels = {"provider": "openai", "reason": reason}
    abandoned = metrics.attempts_abandoned.value(labels)
    upstream.inject(A, Fault(kind=kind, after_chunks=4))
    seen = Seen(upstream)
    got = await _stream(sdk, "bs-batch")
    assert got.error is None and got.text == WHOLE
    assert seen() == (primary_calls, 1)
    assert got.router is not None and got.router["deploymentId"] == "bs/b"
    assert got.router["providerAttempt"] == primary_calls + 1 and got.router["buffered"] is True
    assert got.router["fallbackUsed"] is True
    row = await _receipt(sessions, tenant, got.key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "bs/b", True)
    assert row.buffered is True
    # Each broken attempt on the primary was replaced, so each is counted as possibly billed.
    assert metrics.attempts_abandoned.value(labels) == abandoned + primary_calls


async def test_an_interactive_stream_held_on_request_is_rescued_too(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    upstream.inject(A, Fault(kind=FaultKind.STREAM_STALL, after_chunks=4, times=1))
    seen = Seen(upstream)
    got = await _stream(sdk, "bs-live", hold="true")
    assert got.error is None and got.text == WHOLE and seen() == (1, 1)
    assert got.router is not None and got.router["buffered"] is True
    assert (got.router["deploymentId"], got.router["providerAttempt"]) == ("bs/b", 2)
    row = await _receipt(sessions, tenant, got.key)
    assert (row.outcome, row.deployment_id, row.fallback_used, row.buffered) == (
        "Completed",
        "bs/b",
        True,
        True,
    )


@pytest.mark.parametrize(
    ("profile", "hold"), [("bs-batch", "false"), ("bs-standard", None), ("bs-live", None)]
)
async def test_a_stream_passed_through_keeps_the_no_splice_rule(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    profile: str,
    hold: str | None,
) -> None:
    """A Batch profile's caller may opt out (its tokens as they come); a Standard profile
    passes streams through like an Interactive one: a cut after output is Partial."""
    upstream.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    seen = Seen(upstream)
    got = await _stream(sdk, profile, hold=hold)
    assert got.error is not None and got.text and got.text != WHOLE
    assert seen() == (1, 0)  # the fallback never saw a request: no splice
    row = await _receipt(sessions, tenant, got.key)
    assert (row.outcome, row.usage_status, row.buffered) == ("Partial", "Unknown", False)
    # A clean stream on it says it was not held, and which attempt answered.
    got = await _stream(sdk, profile, hold=hold)
    assert got.router is not None and got.text == WHOLE
    assert (got.router["buffered"], got.router["providerAttempt"]) == (False, 1)


async def test_a_held_streams_time_to_first_token_is_its_whole_generation(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """The caller's first byte leaves once the provider's last chunk arrived: the receipt's
    TTFT and the ttft metric are at least the provider's whole generation (chunks paced
    `delay` apart), not its first token."""
    delay = 0.02
    upstream.state.configure(SLOW, chunk_delay=delay)
    try:
        got = await _stream(sdk, "bs-slow")
    finally:
        upstream.state.configure(SLOW, chunk_delay=0.0)
    assert got.text == WHOLE
    generation_ms = (len(got.deltas) - 1) * delay * 1000  # the sleeps between content chunks
    row = await _receipt(sessions, tenant, got.key)
    assert row.buffered is True and row.time_to_first_token_ms is not None
    assert row.time_to_first_token_ms >= int(generation_ms)
    assert row.latency_ms is not None and row.latency_ms >= row.time_to_first_token_ms
    ttft = metrics.latency.values({"profile": "bs-slow", "provider": "openai", "phase": "ttft"})
    # The metric holds the receipt's whole milliseconds in seconds; ms / 1000 * 1000 is not
    # always exact in floating point (1011 came back as 1010.999…), so round it back.
    assert ttft and round(ttft[-1] * 1000) == row.time_to_first_token_ms


async def test_the_gateway_stream_names_the_answering_attempt(
    sdk: AsyncOpenAI,
    http: httpx.AsyncClient,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    upstream.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    seen = Seen(upstream)
    key = f"bs-{uuid.uuid4().hex}"
    auth = {"Authorization": f"Bearer {sdk.api_key}"}
    run = uuid.uuid4()
    body = {
        "profileId": "bs-live",
        "runId": str(run),
        "idempotencyKey": key,
        "stream": True,
        "request": {"messages": [{"role": "user", "content": LONG}]},
    }
    events: list[tuple[str, Any]] = []
    async with http.stream(
        "POST", "/gateway/invoke", headers={**auth, HOLD: "true"}, json=body
    ) as resp:
        assert resp.status_code == 200
        name = ""
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    text = "".join(data.get("text", "") for name, data in events if name == "text_delta")
    assert text == WHOLE and seen() == (2, 0)
    name, receipt = events[-1]
    assert name == "receipt" and receipt["outcome"] == "Completed"
    assert (receipt["deploymentId"], receipt["providerAttempt"]) == ("bs/a", 2)
    assert receipt["buffered"] is True and receipt["fallbackUsed"] is False
    # The run's receipts (the REST receipt view) show the same field.
    listed = await http.get(f"/factory/runs/{run}/model-receipts", headers=auth)
    assert listed.status_code == 200 and [r["buffered"] for r in listed.json()] == [True]
    row = await _receipt(sessions, tenant, key)
    assert row.buffered is True


async def test_a_header_that_is_not_a_boolean_is_refused_naming_it(
    sdk: AsyncOpenAI, http: httpx.AsyncClient, upstream: UpstreamServer
) -> None:
    seen = Seen(upstream)
    resp = await http.post(
        "/v1/chat/completions",
        headers={"Authorization": f"Bearer {sdk.api_key}", HOLD: "sometimes"},
        json={"model": "bs-batch", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 400, resp.text  # as OpenAI answers a request it cannot take
    assert f"header.{HOLD}" in resp.text
    assert seen() == (0, 0)


async def test_messages_and_responses_streams_are_held_on_a_batch_profile(
    sdk: AsyncOpenAI,
    api_url: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """The agent surfaces hold a Batch profile's stream too, and their receipt event (which the
    SDKs pass through untouched) names the answering attempt."""
    key = f"bs-{uuid.uuid4().hex}"
    upstream.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    seen = Seen(upstream)
    async with AsyncAnthropic(base_url=api_url, api_key=sdk.api_key, max_retries=0) as claude:
        async with claude.messages.stream(
            model="bs-batch",
            max_tokens=500,
            messages=[{"role": "user", "content": LONG}],
            extra_headers={"Idempotency-Key": key},
        ) as stream:
            events = [event async for event in stream]
            message = await stream.get_final_message()
    said = "".join(b.text for b in message.content if b.type == "text")
    assert said == WHOLE and seen() == (2, 0)
    delta: Any = next(e for e in events if e.type == "message_delta")
    extra = (delta.model_extra or {})["model_router"]
    assert (extra["deploymentId"], extra["providerAttempt"], extra["buffered"]) == ("bs/a", 2, True)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.buffered) == ("Completed", True)

    key = f"bs-{uuid.uuid4().hex}"
    upstream.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    seen = Seen(upstream)
    async with sdk.responses.stream(
        model="bs-batch",
        input=[{"role": "user", "content": [{"type": "input_text", "text": LONG}]}],
        extra_headers={"Idempotency-Key": key},
    ) as answer:
        async for _ in answer:
            pass
        final = await answer.get_final_response()
    assert final.output_text == WHOLE and seen() == (2, 0)
    router = (final.model_extra or {})["model_router"]
    assert (router["providerAttempt"], router["buffered"]) == (2, True)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.buffered) == ("Completed", True)


async def test_a_non_stream_answer_is_recorded_as_held(
    sdk: AsyncOpenAI, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """Whatever the profile's class or the header says: the caller took one whole answer."""
    key = f"bs-{uuid.uuid4().hex}"
    raw = await sdk.chat.completions.with_raw_response.create(
        model="bs-live",
        messages=[{"role": "user", "content": LONG}],
        extra_headers={"Idempotency-Key": key, HOLD: "false"},
    )
    extra = raw.parse().model_extra or {}
    assert extra["model_router"]["buffered"] is True
    assert extra["model_router"]["providerAttempt"] == 1
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.buffered) == ("Completed", True)
