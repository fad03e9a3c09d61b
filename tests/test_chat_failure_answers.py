"""How Chat Completions answers a call that did not complete, against the local upstream's
faults: a failure before any output with OpenAI's status, type and code for its kind (a rate
limit a 429 the openai SDK raises as RateLimitError; a timeout a 504; the rest a 503
`server_error`), keeping Retry-After, and the same type and code when it fails after output
began (the stream's error event); a replay of a key whose caller left mid-stream (Cancelled)
as a closed key on every surface, whole or streamed, never a provider's failure; and every
event stream unbuffered by a proxy (`X-Accel-Buffering: no`)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.openai_stream import ChatChunks
from domain.enums import InvocationOutcome
from domain.invocation import InvocationSummary
from providers.types import TextDelta
from providers.upstream import Fault, FaultKind, Reply, UpstreamServer, default_responder
from store.receipts import by_key
from tests.helpers.deadline import eventually
from tests.helpers.surfaces import Catalog

MESSAGES: Any = [{"role": "user", "content": "status please"}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_provider_rate_limit_is_openais_429(
    openai_sdk: Any, catalog: Catalog, upstream: UpstreamServer, stream: bool
) -> None:
    model = catalog.model("openai")
    # Its Retry-After is past what the router waits itself: the caller hears of it at once.
    upstream.inject(model, Fault(kind=FaultKind.RATE_LIMIT, retry_after=3, times=1))
    try:
        with pytest.raises(openai.RateLimitError) as limited:
            await openai_sdk.chat.completions.create(
                model=catalog.profile("openai"), messages=MESSAGES, stream=stream
            )
    finally:
        upstream.state.clear_faults(model)
    error = limited.value
    assert error.status_code == 429
    assert (error.type, error.code) == ("requests", "rate_limit_exceeded")
    assert error.response.headers["Retry-After"] == "3"
    assert "x-should-retry" not in error.response.headers  # the SDK may come back
    body = error.response.json()
    assert (body["status"], body["errorClass"]) == (429, "transient"), body
    assert body["receiptId"] == error.response.headers["X-Model-Router-Receipt-Id"]


async def test_a_timeout_is_a_504_and_other_transient_failures_a_503_server_error(
    http: httpx.AsyncClient, catalog: Catalog, upstream: UpstreamServer
) -> None:
    model, profile = catalog.model("openai"), catalog.profile("openai")

    async def call() -> httpx.Response:
        key = {"Idempotency-Key": f"fa-{uuid.uuid4().hex}"}
        body = {"model": profile, "messages": MESSAGES}
        return await http.post("/v1/chat/completions", headers={**catalog.auth, **key}, json=body)

    # Silence after the role chunk: the first token's bound (2 s in tests) ends the attempt.
    upstream.inject(model, Fault(kind=FaultKind.STREAM_STALL, after_chunks=1, times=1))
    timed_out = await call()
    assert timed_out.status_code == 504, timed_out.text
    error = timed_out.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "timeout"), error
    assert timed_out.json()["status"] == 504
    assert int(timed_out.headers["Retry-After"]) >= 1

    # A 500 on every attempt: the provider's server error, retried, then answered.
    upstream.inject(model, Fault(kind=FaultKind.SERVER_ERROR, times=3))
    try:
        failed = await call()
    finally:
        upstream.state.clear_faults(model)
    assert failed.status_code == 503, failed.text
    error = failed.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_error"), error
    assert int(failed.headers["Retry-After"]) >= 1


async def test_a_stream_failing_after_output_says_the_type_and_code_a_whole_answer_gives(
    openai_sdk: Any, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """The error event said the outcome as its code (`Partial`, the SDK's APIError.code) and
    the gateway's kind as its type: an overload mid-stream (Anthropic's in-stream
    `overloaded_error`) is said as the same overload before any output is answered."""
    model, profile = catalog.model("anthropic"), catalog.profile("anthropic")
    upstream.register(model, lambda turn: Reply(text=" ".join(f"w{i}" for i in range(40))))
    upstream.inject(model, Fault(kind=FaultKind.STREAM_ERROR, after_chunks=8))
    said = ""
    try:
        with pytest.raises(openai.APIError) as streamed:
            async for chunk in await openai_sdk.chat.completions.create(
                model=profile, messages=MESSAGES, stream=True
            ):
                said += "".join(c.delta.content or "" for c in chunk.choices)
    finally:
        upstream.register(model, default_responder)
        upstream.state.clear_faults(model)
    # Then the same failure before any output (after the stream: the breaker it may open
    # would refuse a call after it before the deployment is asked).
    upstream.inject(model, Fault(kind=FaultKind.OVERLOADED))
    try:
        with pytest.raises(openai.APIStatusError) as whole:
            await openai_sdk.chat.completions.create(model=profile, messages=MESSAGES)
    finally:
        upstream.state.clear_faults(model)
    assert said.startswith("w0")  # output had reached the caller
    assert (whole.value.type, whole.value.code) == ("server_error", "overloaded")
    assert (streamed.value.type, streamed.value.code) == (whole.value.type, whole.value.code)
    assert "overloaded" in streamed.value.message


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (FaultKind.RATE_LIMIT, "rate_limit"),
        (FaultKind.CONTEXT_LENGTH, "context_length"),
        (FaultKind.AUTH, "auth"),
    ],
)
async def test_a_stream_failing_after_output_names_each_kind_as_a_whole_answer_does(
    openai_sdk: Any, catalog: Catalog, upstream: UpstreamServer, fault: FaultKind, kind: str
) -> None:
    """OpenAI's own names (`rate_limit_exceeded`, `context_length_exceeded`) or the gateway's
    kind, as the whole answer gives them; most kinds the local upstream cannot fail with
    mid-stream, so the stream's writer is given the receipt of one."""
    model = catalog.model("openai")
    upstream.inject(model, Fault(kind=fault))
    try:
        with pytest.raises(openai.APIStatusError) as whole:
            await openai_sdk.chat.completions.create(
                model=catalog.profile("openai"), messages=MESSAGES
            )
    finally:
        upstream.state.clear_faults(model)
    writer = ChatChunks(uuid.uuid4(), "p", include_usage=False)
    writer.start()
    writer.text("partly")
    writer.add(TextDelta(text=" said"))
    summary = InvocationSummary(
        invocation_id=uuid.uuid4(), outcome=InvocationOutcome.PARTIAL, error_kind=kind
    )
    [line] = [x for x in (await writer.fail(summary)).split(b"\n") if x.startswith(b"data: ")]
    error = json.loads(line.removeprefix(b"data: "))["error"]
    assert whole.value.code is not None
    assert (error["type"], error["code"]) == (whole.value.type, whole.value.code)


# Each agent-native surface: its profile's protocol, the body of a call to it, and what a line of
# its stream holds once the first token ("Echo: …") has come.
SURFACES: dict[str, tuple[str, dict[str, Any], str]] = {
    "/v1/chat/completions": (
        "openai",
        {"messages": [{"role": "user", "content": "a " * 40}]},
        '"content":"E',
    ),
    "/v1/messages": (
        "anthropic",
        {"max_tokens": 200, "messages": [{"role": "user", "content": "a " * 40}]},
        '"text":"E',
    ),
    "/v1/responses": ("openai", {"input": "a " * 40}, '"delta":"E'),
}


@pytest.mark.parametrize("path", list(SURFACES))
async def test_a_replay_of_a_call_its_caller_left_is_a_closed_key_not_a_provider_failure(
    api_url: str,
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    path: str,
) -> None:
    protocol, request, first_token = SURFACES[path]
    model, key = catalog.model(protocol), f"left-{uuid.uuid4().hex}"
    upstream.state.configure(model, chunk_delay=0.5)
    body = {"model": catalog.profile(protocol), **request}
    headers = {**catalog.auth, "Idempotency-Key": key}
    try:
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as caller:
            async with caller.stream(
                "POST", path, json={**body, "stream": True}, headers=headers
            ) as resp:
                assert resp.status_code == 200, await resp.aread()
                async for line in resp.aiter_lines():
                    if first_token in line:
                        break  # one token, then the caller goes away

        async def closed() -> Any:
            async with sessions() as session:
                row = await by_key(session, tenant, key)
            return row if row is not None and row.ended_at is not None else None

        row = await eventually(closed, timeout=30)
    finally:
        upstream.state.configure(model, chunk_delay=0.0)
    assert row.outcome == "Cancelled"
    calls = upstream.requests(model)
    # Sent again whole, then as a stream: the same closed key either way. As a stream it was a
    # 200 of the partial output stored, then an error event, where the whole call was the 409.
    for stream in (False, True):
        again = await http.post(path, json={**body, "stream": stream}, headers=headers)
        # It was a 502 "model call failed: cancelled", errorClass permanent: the provider blamed.
        assert again.status_code == 409, (stream, again.headers, again.text)
        problem = again.json()
        if path == "/v1/messages":  # Anthropic's envelope: its own `type`, the problem's beside
            assert (problem["type"], problem["error"]["type"]) == ("error", "conflict_error")
        else:
            assert problem["type"].endswith("/invocation-closed"), problem
        assert (problem["closeReason"], problem["errorClass"]) == ("cancelled", "permanent")
        assert "new Idempotency-Key" in problem["detail"]
        assert problem["receiptId"] == str(row.invocation_id)
        assert again.headers["X-Model-Router-Receipt-Id"] == str(row.invocation_id)
        assert again.headers["x-should-retry"] == "false"
    assert upstream.requests(model) == calls  # a replay: the provider is not called again


async def test_every_event_stream_tells_a_proxy_not_to_buffer_it(
    http: httpx.AsyncClient, catalog: Catalog
) -> None:
    text: Any = [{"role": "user", "content": "hello"}]
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", {"model": catalog.profile("openai"), "messages": text}),
        ("/v1/messages", {"model": catalog.profile("anthropic"), "messages": text}),
        ("/v1/responses", {"model": catalog.profile("openai"), "input": "hello"}),
        (
            "/gateway/invoke",
            {"profileId": catalog.profile("openai"), "request": {"messages": text}},
        ),
    ]
    for path, body in requests:
        if path == "/v1/messages":
            body["max_tokens"] = 50
        async with http.stream(
            "POST", path, json={**body, "stream": True}, headers=catalog.auth
        ) as resp:
            assert resp.status_code == 200, (path, await resp.aread())
            assert resp.headers["content-type"].startswith("text/event-stream"), path
            assert resp.headers.get("x-accel-buffering") == "no", (path, resp.headers)
            assert resp.headers["cache-control"] == "no-store", path
            await resp.aread()
