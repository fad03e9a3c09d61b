"""A refreshed provider client serves new calls while the old one finishes what it carries:
streams running through a client when the pool replaces it (its TTL passed, e.g. to pick up a
rotated key) complete in full, and the old client is closed once its last call ends. Real SDK
clients over HTTP to the upstream simulator."""

from __future__ import annotations

import asyncio

from activities.adapter_pool import AdapterPool
from activities.invoke_hub import InvocationHub
from activities.invoke_setup import invoke_activities
from core.settings import Settings
from domain.invocation import Target
from providers.secrets import default_broker
from providers.types import ChatRequest, Finish, Message, ProviderTimeouts, TextDelta
from providers.upstream import UpstreamServer
from store.db import create_engine, session_factory

MODEL = "refresh-sim"
REQUEST = ChatRequest(messages=(Message(role="user", content="a long enough answer " * 4),))


def _target(upstream: UpstreamServer) -> Target:
    return Target(
        deployment_id="refresh/sim",
        provider="openai",
        model=MODEL,
        endpoint_ref=upstream.endpoint_ref,
    )


async def test_a_refresh_during_streaming_cuts_no_call(upstream: UpstreamServer) -> None:
    upstream.state.configure(MODEL, chunk_delay=0.02)
    # Every lease after the first finds its client past the TTL and refreshes it.
    pool = AdapterPool(
        default_broker(allow_upstream=True), ProviderTimeouts(connect=2, read=10), ttl_seconds=1e-6
    )
    target = _target(upstream)
    started = [asyncio.Event() for _ in range(4)]

    async def call(i: int) -> tuple[str, bool]:
        text, finished = "", False
        async with pool.lease(target) as adapter:
            async for event in adapter.stream(REQUEST):
                if isinstance(event, TextDelta):
                    text += event.text
                    started[i].set()
                elif isinstance(event, Finish):
                    finished = True
        return text, finished

    # Each call starts streaming before the next one refreshes the client under it.
    calls: list[asyncio.Task[tuple[str, bool]]] = []
    for i in range(4):
        calls.append(asyncio.create_task(call(i)))
        await asyncio.wait_for(started[i].wait(), timeout=20)
    assert pool.open_clients == 4  # one current, three retired but still carrying a stream
    results = await asyncio.gather(*calls)
    whole = (await _direct(target)).strip()
    assert all(finished and text.strip() == whole for text, finished in results), results
    assert pool.open_clients == 1  # each retired client closed when its stream ended
    await pool.aclose()
    assert pool.open_clients == 0
    upstream.state.configure(MODEL, chunk_delay=0.0)


async def _direct(target: Target) -> str:
    pool = AdapterPool(default_broker(allow_upstream=True), ProviderTimeouts(connect=2, read=10))
    async with pool.lease(target) as adapter:
        answer = (await adapter.complete(REQUEST)).text
    await pool.aclose()
    return answer


async def test_the_refresh_interval_is_a_setting(settings: Settings) -> None:
    engine = create_engine(settings.database_url)
    own = settings.model_copy(update={"invoke_adapter_ttl_seconds": 7.5})
    _, pool = invoke_activities(own, session_factory(engine), InvocationHub())
    assert pool.ttl_seconds == 7.5
    await pool.aclose()
    await engine.dispose()
