"""A provider that closes a kept-alive connection just as a request goes out on it (its idle
timeout running out at that moment) costs the call nothing: the request is sent once more at
once (providers/transport.resending): through the SDKs on either transport, and through the
rerank adapter's httpx client. Only a hang-up before the answer's status line is sent again, and
only once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from domain.enums import InvocationOutcome
from providers import transport
from providers.base import ProviderAdapter
from providers.completion_fold import collect_stream
from providers.errors import ErrorKind, ProviderError
from providers.registry import build_adapter
from providers.rerank_adapter import RerankAdapter
from providers.secrets import UpstreamSecretBroker
from providers.transport import ResendOnHangUp, ResendOnHangUpHttpx, resending
from providers.types import ChatRequest, Message, ProviderTimeouts
from providers.upstream import UpstreamServer
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.hang_up_proxy import HangUpProxy
from tests.helpers.sdk_adapters import SDK_TRANSPORTS, sdk_adapter

HELLO = ChatRequest(messages=(Message(role="user", content="hello there"),))
TIMEOUTS = ProviderTimeouts(connect=2, read=10)


@pytest.fixture(params=[False, True], ids=["fin", "reset"])
async def proxy(
    request: pytest.FixtureRequest, upstream: UpstreamServer
) -> AsyncIterator[HangUpProxy]:
    async with HangUpProxy(upstream.host, upstream.port, reset=request.param) as proxy:
        yield proxy


@pytest.fixture(params=SDK_TRANSPORTS)
async def adapter(
    request: pytest.FixtureRequest, proxy: HangUpProxy
) -> AsyncIterator[ProviderAdapter]:
    async with sdk_adapter(request.param, proxy.port, "stale") as built:
        yield built


async def _answer(adapter: ProviderAdapter, streamed: bool) -> str:
    whole = await (collect_stream(adapter.stream(HELLO)) if streamed else adapter.complete(HELLO))
    return whole.text


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_request_on_a_connection_closed_under_it_is_sent_once_more(
    adapter: ProviderAdapter, proxy: HangUpProxy, upstream: UpstreamServer, streamed: bool
) -> None:
    # A complete answer leaves its connection in the pool with either transport. (A stream
    # leaves it only with aiohttp: httpx2 closes a connection whose response is closed before
    # its end, and the adapter closes it at the usage chunk, without waiting for [DONE].)
    assert await _answer(adapter, streamed=False) == "Echo: hello there"
    before = upstream.requests(adapter.model)
    assert proxy.hang_up_open() == 1  # the connection the first call left in the pool
    assert await _answer(adapter, streamed) == "Echo: hello there"
    # The request hung up on never reached the server; the one sent again, on a new
    # connection, did: one answer, one request served.
    assert proxy.hung_up == 1 and proxy.connections == 2
    assert upstream.requests(adapter.model) - before == 1


async def test_a_provider_that_hangs_up_on_every_request_is_asked_twice_then_fails(
    adapter: ProviderAdapter, proxy: HangUpProxy, upstream: UpstreamServer
) -> None:
    proxy.hang_up_always()
    with pytest.raises(ProviderError) as caught:
        await _answer(adapter, streamed=True)
    assert caught.value.kind is ErrorKind.CONNECTION and caught.value.transient
    assert proxy.hung_up == 2  # sent once more, and no more
    assert upstream.requests(adapter.model) == 0


async def test_a_burst_on_connections_closed_under_it_is_answered_in_full(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Through the gateway: every pooled connection to the deployment's provider is closed under
    # the next burst. Before the resend, each of those calls failed its attempt on a connection
    # error, three of them opened the deployment's breaker, and the burst's callers got 503s
    # from a healthy provider.
    # The resend's bound (0.5 s from the request's hand-over to the hang-up, tested on its own
    # in tests/test_provider_error_kinds.py) is raised here: on a loaded CI host a burst's
    # hang-up was once seen past it, and that call's attempt failed (the API runs in this
    # process, so the module's bound is the one it reads).
    monkeypatch.setattr(transport, "RESEND_WITHIN_SECONDS", 30.0)
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    async with HangUpProxy(upstream.host, upstream.port) as proxy:
        behind = {
            "model": f"stale-{uuid.uuid4().hex[:8]}",
            "endpointRef": f"upstream:127.0.0.1:{proxy.port}",
        }
        await approved_profile(http, auth, temporal_client, tenant, "sc-solo", {"sc/a": behind})

        async def burst() -> list[httpx.Response]:
            return await asyncio.gather(
                *(
                    http.post(
                        "/v1/chat/completions",
                        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
                        json={"model": "sc-solo", "messages": [{"role": "user", "content": "hi"}]},
                    )
                    for _ in range(16)
                )
            )

        assert all(r.status_code == 200 for r in await burst())
        assert proxy.hang_up_open() >= 3  # enough to have opened the breaker
        answers = await burst()
        assert [r.status_code for r in answers] == [200] * 16, [r.text for r in answers]
        assert proxy.hung_up >= 3
    async with sessions() as session:
        rows = (
            await session.scalars(
                select(InvocationReceiptRow).where(col(InvocationReceiptRow.tenant_id) == tenant)
            )
        ).all()
    assert len(rows) == 32 and {r.outcome for r in rows} == {InvocationOutcome.COMPLETED}


@pytest.mark.parametrize(
    ("build", "wrapped"),
    [
        (openai.DefaultAioHttpClient, ResendOnHangUp),
        (anthropic.DefaultAioHttpClient, ResendOnHangUp),
        (openai.DefaultAsyncHttpxClient, ResendOnHangUp),
        (httpx.AsyncClient, ResendOnHangUpHttpx),  # the rerank adapter's
    ],
    ids=["openai", "anthropic", "httpx2", "httpx"],
)
def test_a_proxy_from_the_environment_is_resent_through_too(
    build: Any, wrapped: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = resending(build())
    mounted = [t for t in client._mounts.values() if t is not None]
    assert mounted and all(isinstance(t, wrapped) for t in mounted)
    assert isinstance(client._transport, wrapped)


async def test_a_rerank_request_on_a_connection_closed_under_it_is_sent_once_more(
    proxy: HangUpProxy, upstream: UpstreamServer
) -> None:
    # The rerank adapter's own httpx client keeps connections alive the same way.
    connection = await UpstreamSecretBroker().resolve(f"upstream:127.0.0.1:{proxy.port}")
    model = f"stale-{uuid.uuid4().hex[:8]}"
    documents = ["quarterly revenue", "router retries and timeouts"]
    async with build_adapter("tei", model, connection, timeouts=TIMEOUTS) as reranker:
        assert isinstance(reranker, RerankAdapter)
        await reranker.rerank("router timeouts", documents)
        assert proxy.hang_up_open() == 1
        result = await reranker.rerank("router timeouts", documents)
        assert [r.index for r in result.results] == [1, 0]
        assert proxy.hung_up == 1 and proxy.connections == 2
        assert upstream.requests(model, "rerank") == 2
        # And only once: a server that hangs up on every request fails the call as before.
        proxy.hang_up_always()
        with pytest.raises(ProviderError) as caught:
            await reranker.rerank("router timeouts", documents)
    assert caught.value.kind is ErrorKind.CONNECTION and caught.value.transient
    assert proxy.hung_up == 3 and upstream.requests(model, "rerank") == 2
