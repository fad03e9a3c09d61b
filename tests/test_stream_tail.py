"""A streamed answer leaves its connection to the provider in the pool, though the provider
sends the stream's tail (`[DONE]`, `message_stop`, the body's end) a moment after the answer:
the tail is read off the answer's path (providers/stream_tail.py), for a bounded time."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.client import Client

from providers.base import ProviderAdapter
from providers.completion_fold import collect_stream
from providers.stream_tail import TAIL_SECONDS, tails_being_read
from providers.types import ChatRequest, Finish, Message
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.hang_up_proxy import HangUpProxy
from tests.helpers.sdk_adapters import SDK_TRANSPORTS, sdk_adapter

HELLO = ChatRequest(messages=(Message(role="user", content="hello there"),))
# A provider that paces its stream: its tail comes this long after the answer's last event.
PACE = 0.02


@pytest.fixture
async def proxy(upstream: UpstreamServer) -> AsyncIterator[HangUpProxy]:
    # Used here only to count the connections opened to the provider.
    async with HangUpProxy(upstream.host, upstream.port) as proxy:
        yield proxy


@pytest.fixture(params=SDK_TRANSPORTS)
async def adapter(
    request: pytest.FixtureRequest, proxy: HangUpProxy, upstream: UpstreamServer
) -> AsyncIterator[ProviderAdapter]:
    async with sdk_adapter(request.param, proxy.port, "tail") as built:
        upstream.state.configure(built.model, chunk_delay=PACE)
        yield built


def _a_tail_that_never_ends(upstream: UpstreamServer, model: str) -> None:
    """The next answer is whole, then nothing but keep-alives for a minute, the stream open."""
    upstream.inject(model, Fault(kind=FaultKind.MISSING_TERMINATOR, times=1))
    upstream.inject(
        model, Fault(kind=FaultKind.KEEP_ALIVE, after_chunks=100, delay=60, interval=0.2, times=1)
    )


async def test_a_paced_stream_leaves_its_connection_in_the_pool(
    adapter: ProviderAdapter, proxy: HangUpProxy, upstream: UpstreamServer
) -> None:
    for _ in range(4):
        answer = await collect_stream(adapter.stream(HELLO))
        assert answer.text == "Echo: hello there"
        # The next call finds the connection back in the pool once the tail has been read.
        await eventually(lambda: tails_being_read() == 0)
    # Before, each answer closed its connection with the tail still on its way: 4 connections.
    assert proxy.connections == 1
    assert upstream.requests(adapter.model) == 4


async def test_a_tail_that_never_ends_costs_its_connection_not_the_answer(
    adapter: ProviderAdapter, proxy: HangUpProxy, upstream: UpstreamServer
) -> None:
    _a_tail_that_never_ends(upstream, adapter.model)
    stream = adapter.stream(HELLO)
    events = [event async for event in stream]
    answered = time.monotonic()
    assert isinstance(events[-1], Finish)
    # The tail is still being read, off the answer's path, on the answer's connection.
    assert tails_being_read() >= 1 and proxy.open_connections() == 1
    await eventually(lambda: proxy.open_connections() == 0)
    # It was read until its bound, not to its end a minute away; then its connection closed.
    assert time.monotonic() - answered >= TAIL_SECONDS - 0.1
    assert (await adapter.complete(HELLO)).text == "Echo: hello there"
    assert proxy.connections == 2


async def test_gateway_calls_to_a_paced_provider_share_one_connection(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    model = f"tail-{uuid.uuid4().hex[:8]}"
    upstream.state.configure(model, chunk_delay=PACE)
    async with HangUpProxy(upstream.host, upstream.port) as proxy:
        behind = {"model": model, "endpointRef": f"upstream:127.0.0.1:{proxy.port}"}
        await approved_profile(http, auth, temporal_client, tenant, "st-solo", {"st/a": behind})
        # Approving may have asked the provider (the evaluation, on the worker's own clients).
        before = proxy.connections
        for stream in (True, False, True):
            resp = await http.post(
                "/v1/chat/completions",
                headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
                json={
                    "model": "st-solo",
                    "stream": stream,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
            assert resp.status_code == 200
            await eventually(lambda: tails_being_read() == 0)
        # The gateway's three calls, streamed or not (it streams from the provider either
        # way), went on one connection of its own.
        assert proxy.connections - before == 1


async def test_closing_the_adapter_ends_the_tails_it_is_reading(
    adapter: ProviderAdapter, proxy: HangUpProxy, upstream: UpstreamServer
) -> None:
    # The API closes a pooled adapter when it refreshes its clients (or stops): a tail still
    # being read then ends with it, not at its own bound.
    _a_tail_that_never_ends(upstream, adapter.model)
    events = [event async for event in adapter.stream(HELLO)]
    assert isinstance(events[-1], Finish) and proxy.open_connections() == 1
    closed = time.monotonic()
    await adapter.aclose()
    await eventually(lambda: proxy.open_connections() == 0)
    assert time.monotonic() - closed < TAIL_SECONDS
