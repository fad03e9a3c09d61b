"""A connection to a provider left idle is kept `provider_keepalive_seconds` for the next call
(120 s by default, where the SDKs keep one 5 s): calls to one provider a few seconds apart
share a connection instead of each paying a new TCP and TLS handshake."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from activities.invoke_setup import provider_timeouts
from core.settings import Settings
from providers.base import ProviderAdapter
from providers.completion_fold import collect_stream
from providers.registry import build_adapter
from providers.secrets import UpstreamSecretBroker
from providers.types import ChatRequest, Message, ProviderTimeouts
from providers.upstream import UpstreamServer
from tests.helpers.hang_up_proxy import HangUpProxy
from tests.helpers.sdk_adapters import SDK_TRANSPORTS, TIMEOUTS, sdk_adapter

HELLO = ChatRequest(messages=(Message(role="user", content="hello there"),))
# How long each adapter here sits idle between its two calls: past the short keep-alive below,
# well inside the long one. The wait is the scenario (a connection left idle), not a way to
# wait for something else.
IDLE = 0.6
SHORT, LONG = 0.2, 30.0


@pytest.fixture
async def proxy(upstream: UpstreamServer) -> AsyncIterator[HangUpProxy]:
    # Used here only to count the connections opened to the provider.
    async with HangUpProxy(upstream.host, upstream.port) as proxy:
        yield proxy


def test_the_product_keeps_idle_connections_past_the_sdks_5_seconds() -> None:
    settings = Settings(_env_file=None)
    assert settings.provider_keepalive_seconds == 120.0
    assert provider_timeouts(settings).keepalive == settings.provider_keepalive_seconds
    changed = Settings(_env_file=None, provider_keepalive_seconds=30)
    assert provider_timeouts(changed).keepalive == 30


async def _two_calls_apart(adapter: ProviderAdapter) -> None:
    for _ in range(2):
        answer = await collect_stream(adapter.stream(HELLO))
        assert answer.text == "Echo: hello there"
        await asyncio.sleep(IDLE)


@pytest.mark.parametrize(("keepalive", "connections"), [(LONG, 1), (SHORT, 2)])
@pytest.mark.parametrize("sdk", SDK_TRANSPORTS)
async def test_an_idle_connection_is_kept_for_the_keepalive(
    proxy: HangUpProxy, sdk: Any, keepalive: float, connections: int
) -> None:
    timeouts = TIMEOUTS.model_copy(update={"keepalive": keepalive})
    async with sdk_adapter(sdk, proxy.port, "idle", timeouts) as adapter:
        await _two_calls_apart(adapter)
    assert proxy.connections == connections


@pytest.mark.parametrize(("keepalive", "connections"), [(LONG, 1), (SHORT, 2)])
async def test_the_rerank_client_keeps_them_as_long(
    proxy: HangUpProxy, keepalive: float, connections: int
) -> None:
    connection = await UpstreamSecretBroker().resolve(f"upstream:127.0.0.1:{proxy.port}")
    timeouts = ProviderTimeouts(connect=2, read=10, keepalive=keepalive)
    model = f"idle-{uuid.uuid4().hex[:8]}"
    async with build_adapter("tei", model, connection, timeouts=timeouts) as reranker:
        for _ in range(2):
            await reranker.rerank("router timeouts", ["a", "b"])
            await asyncio.sleep(IDLE)
    assert proxy.connections == connections


async def test_a_connection_idle_past_the_sdks_5_seconds_is_used_again(
    proxy: HangUpProxy,
) -> None:
    # The product's default (ProviderTimeouts' own, as Settings'), past the SDKs' 5 s. The
    # simulator here keeps connections 30 s.
    async with sdk_adapter(SDK_TRANSPORTS[0].values[0], proxy.port, "idle") as adapter:
        await collect_stream(adapter.stream(HELLO))
        await asyncio.sleep(5.5)  # the idle spell itself
        await collect_stream(adapter.stream(HELLO))
    assert proxy.connections == 1
