"""A provider's keep-alives (Anthropic `ping` events; the SSE comments OpenAI-compatible relays
send while a model works) hold a stream's idle bound open, never its first token's, through
both upstream protocols (activities/resilience.timed_stream), and reach the caller's stream as
its surface's own keep-alive once output has started (api/wire.relay). The session's bounds
are 2 s each (tests/conftest.py)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.helpers.surfaces import PROTOCOLS, Catalog
from tests.helpers.surfaces import receipt as _receipt

LONG = " ".join(f"word{i}" for i in range(40))


def _keep_alive(upstream: UpstreamServer, model: str, after_chunks: int, seconds: float) -> int:
    """The next call to `model` pauses after `after_chunks` events for `seconds` of nothing but
    a keep-alive every 0.5 s; returns the upstream's count of calls to it so far."""
    fault = Fault(
        kind=FaultKind.KEEP_ALIVE, after_chunks=after_chunks, delay=seconds, interval=0.5, times=1
    )
    upstream.inject(model, fault)
    return upstream.requests(model)


def _sdk(api_url: str, catalog: Catalog) -> AsyncOpenAI:
    token = catalog.auth["Authorization"].removeprefix("Bearer ")
    return AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0, timeout=30)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_hold_a_stream_open_past_the_idle_bound(
    protocol: str,
    api_url: str,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    model = catalog.model(protocol)
    # Midway through the answer, 3.5 s of keep-alives: longer than the 2 s idle bound, with no
    # silence as long as it.
    calls = _keep_alive(upstream, model, after_chunks=8, seconds=3.5)
    key = f"ka-{uuid.uuid4().hex}"
    async with _sdk(api_url, catalog) as sdk:
        stream = await sdk.chat.completions.create(
            model=catalog.profile(protocol),
            messages=[{"role": "user", "content": LONG}],
            stream=True,
            extra_headers={"Idempotency-Key": key},
        )
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(pieces) == f"Echo: {LONG}"
    assert upstream.requests(model) - calls == 1
    row = await _receipt(sessions, catalog.tenant, key)
    assert (row.outcome, row.usage_status) == ("Completed", "Reported")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_before_the_first_token_do_not_hold_its_bound(
    protocol: str,
    api_url: str,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    model = catalog.model(protocol)
    # Nothing but keep-alives for a minute from the headers on: the first token's 2 s bound
    # ends the attempt (were it restarted by each keep-alive, the SDK's 30 s would end first).
    calls = _keep_alive(upstream, model, after_chunks=0, seconds=60)
    key = f"ka-{uuid.uuid4().hex}"
    async with _sdk(api_url, catalog) as sdk:
        with pytest.raises(openai.APIStatusError) as failed:
            await sdk.chat.completions.create(
                model=catalog.profile(protocol),
                messages=[{"role": "user", "content": LONG}],
                extra_headers={"Idempotency-Key": key},
            )
    assert failed.value.status_code == 504  # a timeout, as Chat Completions answers one
    body = failed.value.response.json()["error"]
    assert body["code"] == "timeout" and "first token" in body["message"], body
    assert upstream.requests(model) - calls == 1
    row = await _receipt(sessions, catalog.tenant, key)
    assert (row.outcome, row.usage_status) == ("Failed", "Unknown")


# Each surface: its path, a streamed request's body, and its keep-alive on the wire.
SURFACES: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": LONG}], "stream": True},
        ": keep-alive",
    ),
    "messages": (
        "/v1/messages",
        {"max_tokens": 500, "messages": [{"role": "user", "content": LONG}], "stream": True},
        "event: ping",
    ),
    "responses": ("/v1/responses", {"input": LONG, "stream": True}, ": keep-alive"),
}


async def _said(surface: str, api_url: str, catalog: Catalog) -> str:
    """The answer's text through the surface's official SDK."""
    profile, token = catalog.profile("openai"), catalog.auth["Authorization"][7:]
    if surface == "messages":
        async with (
            AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0) as claude,
            claude.messages.stream(
                model=profile, max_tokens=500, messages=[{"role": "user", "content": LONG}]
            ) as stream,
        ):
            return "".join([text async for text in stream.text_stream])
    async with _sdk(api_url, catalog) as gpt:
        if surface == "responses":
            async with gpt.responses.stream(model=profile, input=LONG) as answer:
                return (await answer.get_final_response()).output_text
        chunks = await gpt.chat.completions.create(
            model=profile, messages=[{"role": "user", "content": LONG}], stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


@pytest.mark.parametrize("surface", SURFACES)
async def test_the_callers_stream_keeps_alive_while_the_provider_does(
    surface: str, api_url: str, http: httpx.AsyncClient, catalog: Catalog, upstream: UpstreamServer
) -> None:
    path, body, keep_alive = SURFACES[surface]
    model = catalog.model("openai")
    _keep_alive(upstream, model, after_chunks=8, seconds=1.0)
    lines: list[str] = []
    async with http.stream(
        "POST",
        path,
        json={"model": catalog.profile("openai"), **body},
        headers=catalog.auth,
    ) as resp:
        assert resp.status_code == 200
        lines = [line async for line in resp.aiter_lines()]
    said = [i for i, line in enumerate(lines) if "word" in line]
    # The pause's keep-alives (one every 0.5 s for 1 s) came between two pieces of the answer
    # (the Messages stream also pings once at its start, as Anthropic's does).
    kept = [i for i, line in enumerate(lines) if line == keep_alive and said[0] < i < said[-1]]
    assert len(kept) >= 2, lines
    # The official SDKs read through them.
    _keep_alive(upstream, model, after_chunks=8, seconds=1.0)
    assert await _said(surface, api_url, catalog) == f"Echo: {LONG}"
