"""A complete answer is finalised promptly even when the provider never sends its terminator
and keeps the connection open (the stall begins right after the last content and usage)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from providers.registry import build_adapter
from providers.secrets import UpstreamSecretBroker
from providers.types import ChatRequest, Finish, Message, ProviderTimeouts, TextDelta, UsageEvent
from providers.upstream import Fault, FaultKind, UpstreamServer

HELLO = ChatRequest(messages=(Message(role="user", content="hello there"),))
TERMINATORS = {"openai": "[DONE]", "anthropic": "message_stop"}


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


async def _events_before_terminator(upstream: UpstreamServer, provider: str) -> int:
    """How many SSE events the simulator sends before its terminator for HELLO."""
    if provider == "openai":
        url, body = (
            "/v1/chat/completions",
            {
                "model": "held",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hello there"}],
            },
        )
    else:
        url, body = (
            "/v1/messages",
            {
                "model": "held",
                "stream": True,
                "max_tokens": 100,
                "messages": [{"role": "user", "content": "hello there"}],
            },
        )
    async with httpx.AsyncClient(
        base_url=upstream.base_url,
        headers={"Authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01"},
    ) as c:
        resp = await c.post(url, json=body)
    data = [line for line in resp.text.splitlines() if line.startswith("data: ")]
    return sum(1 for line in data if TERMINATORS[provider] not in line)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_held_open_stream_after_the_answer_finishes_promptly(
    upstream: UpstreamServer, provider: str
) -> None:
    count = await _events_before_terminator(upstream, provider)
    upstream.inject("held", Fault(kind=FaultKind.STREAM_STALL, after_chunks=count, times=1))
    connection = await UpstreamSecretBroker().resolve(upstream.endpoint_ref)
    timeouts = ProviderTimeouts(connect=2, read=30)  # the read timeout would be far too late
    async with build_adapter(provider, "held", connection, timeouts=timeouts) as adapter:
        started = time.monotonic()
        events = [e async for e in adapter.stream(HELLO)]
        elapsed = time.monotonic() - started
    # Ended at the answer's last event, never by the read timeout: the next slower bound.
    assert elapsed < timeouts.read, f"held for {elapsed:.1f}s"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Echo: hello there"
    assert any(isinstance(e, UsageEvent) for e in events)
    assert isinstance(events[-1], Finish)
