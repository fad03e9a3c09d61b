"""What the agent clients of the Responses surface rely on beyond the SDK's happy path, with the
official openai SDK against an OpenAI-protocol and an Anthropic-protocol deployment of the
local upstream: a streamed call that overflows the context window is a stream ending in
`response.failed` with `context_length_exceeded` (Codex, always streaming, compacts only on
that event; an HTTP 400 ended its turn), its key replaying it so, while a whole response's
overflow and a stream's other failures stay HTTP errors the SDKs retry by status;
`truncation: "auto"` (the Agents SDK's and the AI SDK's) is taken; `created_at` and
`completed_at` are integer Unix seconds, as OpenAI sends them, live and replayed."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.surfaces import PROTOCOLS, Catalog, receipt


@pytest.fixture
async def client(api_url: str, token_for: TokenFactory, tenant: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


async def _events(client: AsyncOpenAI, profile: str, key: str) -> list[Any]:
    stream = await client.responses.create(
        model=profile, input="too long", stream=True, extra_headers={"Idempotency-Key": key}
    )
    return [event async for event in stream]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_streamed_context_overflow_is_response_failed(
    client: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    model, profile = catalog.model(protocol), catalog.profile(protocol)
    key = f"overflow-{uuid.uuid4().hex}"
    upstream.inject(model, Fault(kind=FaultKind.CONTEXT_LENGTH))
    try:
        live = await _events(client, profile, key)
        asked = upstream.requests(model)
        replayed = await _events(client, profile, key)  # the key's answer, the provider not asked
        assert upstream.requests(model) == asked
        with pytest.raises(openai.BadRequestError) as whole:
            await client.responses.create(model=profile, input="too long")
    finally:
        upstream.state.clear_faults(model)
    row = await receipt(sessions, catalog.tenant, key)
    for events in (live, replayed):
        assert [e.type for e in events] == [
            "response.created",
            "response.in_progress",
            "response.failed",
        ]
        failed = events[-1].response
        assert failed.id == f"resp_{row.invocation_id.hex}" and failed.status == "failed"
        assert failed.error.code == "context_length_exceeded"
        assert failed.error.message.startswith("model call failed: context_length")
        assert failed.output == []
        assert (failed.model_extra or {})["model_router"]["receiptId"] == str(row.invocation_id)
    assert whole.value.code == "context_length_exceeded"  # a whole response: the 400, as before
    assert row.outcome == "Failed"


async def test_a_streams_other_failures_before_output_stay_http_errors(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """A rate limit is the 429 the SDKs retry, not a stream: only an overflow becomes one."""
    model = catalog.model("openai")
    upstream.inject(model, Fault(kind=FaultKind.RATE_LIMIT))
    try:
        with pytest.raises(openai.RateLimitError):
            await client.responses.create(
                model=catalog.profile("openai"), input="busy", stream=True
            )
    finally:
        upstream.state.clear_faults(model)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_truncation_auto_is_taken(
    client: AsyncOpenAI, catalog: Catalog, protocol: str
) -> None:
    """The gateway never truncates: an overflow under "auto" fails as under "disabled"."""
    response = await client.responses.create(
        model=catalog.profile(protocol), input="hello", truncation="auto"
    )
    assert response.status == "completed" and response.output_text == "Echo: hello"
    assert response.truncation == "auto"


async def test_times_are_integer_seconds_live_replayed_and_streamed(
    client: AsyncOpenAI, catalog: Catalog
) -> None:
    profile, key = catalog.profile("anthropic"), {"Idempotency-Key": f"ints-{uuid.uuid4().hex}"}
    for _ in ("live", "replayed"):
        raw = await client.responses.with_raw_response.create(
            model=profile, input="what time", extra_headers=key
        )
        body = json.loads(raw.http_response.content)
        assert type(body["created_at"]) is int and type(body["completed_at"]) is int, body
    async with client.responses.with_streaming_response.create(
        model=profile, input="what time", stream=True
    ) as streamed:
        data = [
            json.loads(line.removeprefix("data: "))
            async for line in streamed.iter_lines()
            if line.startswith("data: ")
        ]
    created, completed = data[0], data[-1]
    assert created["type"] == "response.created"
    assert type(created["response"]["created_at"]) is int
    assert completed["type"] == "response.completed"
    assert type(completed["response"]["created_at"]) is int
    assert type(completed["response"]["completed_at"]) is int
