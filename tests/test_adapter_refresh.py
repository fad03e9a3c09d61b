"""A refreshed provider client serves new calls while the old one finishes what it carries:
streams running through a client when the pool replaces it (its TTL passed, e.g. to pick up a
rotated key) complete in full, and the old client is closed once its last call ends. Real SDK
clients over HTTP to the upstream simulator."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.adapter_pool import AdapterPool
from activities.invoke_hub import InvocationHub
from activities.invoke_setup import invoke_activities
from core.settings import Settings
from domain.invocation import Target
from providers.secrets import Connection, SecretResolutionError, default_broker
from providers.types import ChatRequest, Finish, Message, ProviderTimeouts, TextDelta
from providers.upstream import UpstreamServer
from store.db import create_engine, session_factory
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.stack import serve

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
        async with pool.lease(target, "refresh-tenant") as adapter:
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
    async with pool.lease(target, "refresh-tenant") as adapter:
        answer = (await adapter.complete(REQUEST)).text
    await pool.aclose()
    return answer


class _Flaky:
    """A broker whose resolution fails while `failing` is set (a secret file caught
    mid-rewrite, a vault not answering)."""

    def __init__(self) -> None:
        self.inner = default_broker(allow_upstream=True)
        self.failing = False

    async def resolve(self, endpoint_ref: str) -> Connection:
        if self.failing:
            raise SecretResolutionError(f"{endpoint_ref} did not resolve")
        return await self.inner.resolve(endpoint_ref)


async def test_a_refresh_whose_credentials_fail_keeps_the_working_client(
    upstream: UpstreamServer,
) -> None:
    # The refresh failed the call in hand, on a client that worked.
    now = [0.0]
    broker = _Flaky()
    pool = AdapterPool(
        broker, ProviderTimeouts(connect=2, read=10), ttl_seconds=100, clock=lambda: now[0]
    )
    target = _target(upstream)
    async with pool.lease(target, "refresh-tenant") as first:
        pass
    broker.failing = True
    now[0] = 150.0  # due for its refresh
    async with pool.lease(target, "refresh-tenant") as adapter:
        assert adapter is first
        assert (await adapter.complete(REQUEST)).text
    now[0] = 170.0  # not asked again before REFRESH_RETRY_SECONDS
    async with pool.lease(target, "refresh-tenant") as adapter:
        assert adapter is first
    broker.failing = False
    now[0] = 181.0  # asked again, and it resolves: a new client
    async with pool.lease(target, "refresh-tenant") as adapter:
        assert adapter is not first
    assert pool.refreshes == 1
    # Past one more TTL of failures, the call fails for its credentials.
    broker.failing = True
    now[0] = 181.0 + 200.0
    with pytest.raises(SecretResolutionError):
        async with pool.lease(target, "refresh-tenant"):
            pass
    await pool.aclose()


async def test_the_refresh_interval_is_a_setting(settings: Settings) -> None:
    engine = create_engine(settings.database_url)
    own = settings.model_copy(update={"invoke_adapter_ttl_seconds": 7.5})
    _, pool = invoke_activities(own, session_factory(engine), InvocationHub())
    assert pool.ttl_seconds == 7.5
    await pool.aclose()
    await engine.dispose()


async def test_streams_through_the_gateway_survive_refreshes_under_them(
    settings: Settings,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A gateway whose provider clients are refreshed on every call: eight overlapping streams,
    each refreshing the client under the others, all end with their receipt, none cut."""
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    target = {"provider": "openai", "model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "refresh", {"rf/sim": target})
    upstream.state.configure(MODEL, chunk_delay=0.06)
    own = settings.model_copy(
        update={
            # Past its TTL at once: every attempt replaces the client under the running ones.
            "invoke_adapter_ttl_seconds": 1e-6,
            "temporal_invocation_task_queue": f"refresh-{uuid.uuid4().hex[:8]}",
        }
    )
    try:
        async with serve(own) as api:
            sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0)
            keys = [f"rf-{uuid.uuid4().hex[:8]}" for _ in range(8)]

            flowing = [asyncio.Event() for _ in keys]

            async def stream(i: int) -> tuple[str, dict[str, object]]:
                text, final = "", {}
                events = await sdk.chat.completions.create(
                    model="refresh",
                    messages=[{"role": "user", "content": "a long enough answer " * 4}],
                    stream=True,
                    extra_headers={"Idempotency-Key": keys[i]},
                )
                async for chunk in events:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                    if text:
                        flowing[i].set()
                    extra = chunk.model_extra or {}
                    if "model_router" in extra:
                        final = extra["model_router"]
                return text, final

            # Each stream starts once the one before it is flowing through its client.
            calls = []
            for i in range(len(keys)):
                calls.append(asyncio.create_task(stream(i)))
                await asyncio.wait_for(flowing[i].wait(), timeout=30)
            results = await asyncio.gather(*calls)
            refreshes = api.app.state.runtime.invoke.adapters.refreshes
            await sdk.close()
    finally:
        upstream.state.configure(MODEL, chunk_delay=0.0)
    assert refreshes >= len(keys) - 1  # every later stream replaced the client under the others
    assert all(final.get("outcome") == "Completed" for _, final in results), results
    assert len({text for text, _ in results}) == 1 and results[0][0]
    async with sessions() as session:
        for key in keys:
            row = await by_key(session, tenant, key)
            assert row is not None and row.outcome == "Completed"
