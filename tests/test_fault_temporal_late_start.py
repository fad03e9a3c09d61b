"""A workflow start Temporal takes but answers too late: the gateway gives up on it at its
bound, refuses the call with a 503 (nothing claimed, the key unused) and undoes its claim, while
the workflow exists after all. That workflow must not spend the key (claim it and close it
Failed, so that the retry the caller was invited to make is a 409), nor take over the retry's
own claim (close it Failed, or end so that the retry's call is cancelled). And when the store
is away too as the claim is undone, the claim is undone once it answers. The API reaches
Temporal and PostgreSQL through proxies that hold or silence what passes; the workers reach
them directly."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowExecutionStatus

from core.settings import Settings
from domain.invocation import invocation_id, invoke_workflow_id
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import Served, on_own_temporal, own_temporal, serve, workers
from tests.helpers.tcp_proxy import SeverableProxy

PROFILE, MODEL = "late-start", "late-start-sim"
BOUND = 2.0


@dataclass
class Stack:
    api: Served
    proxy: SeverableProxy  # to Temporal
    database: SeverableProxy
    client: Client
    token: str

    def sdk(self) -> openai.AsyncOpenAI:
        """The official SDK on this gateway, without its own retries (the tests count calls)."""
        return openai.AsyncOpenAI(base_url=f"{self.api.url}/v1", api_key=self.token, max_retries=0)


@pytest.fixture
async def stack(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
) -> AsyncIterator[Stack]:
    async with own_temporal(tmp_path) as dev:
        own = on_own_temporal(
            settings,
            dev,
            "late",
            invoke_start_wait_seconds=BOUND,
            invoke_start_overlap_seconds=0.0,  # every call waits for its start
            invoke_answers_ahead=0,
            invoke_first_byte_timeout_seconds=60.0,
            invoke_first_token_timeout_seconds=60.0,
        )
        url = make_url(settings.database_url)
        assert url.host is not None and url.port is not None
        database = SeverableProxy(url.host, url.port)
        through_proxies = {
            "database_url": url.set(port=database.port).render_as_string(hide_password=False),
            "invoke_store_wait_seconds": 1.0,
            "database_statement_timeout_seconds": 1.0,
        }
        # The database proxy closes first, so that the API's shutdown finds its severed
        # connections closed rather than waits on them.
        async with (
            SeverableProxy("127.0.0.1", dev.port) as proxy,
            workers(own, sessions) as client,
            serve(
                own.model_copy(
                    update={"temporal_address": f"127.0.0.1:{proxy.port}", **through_proxies}
                )
            ) as api,
            database,
        ):
            token = await token_for(tenant)
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await approved_profile(
                    http,
                    auth,
                    client,
                    tenant,
                    PROFILE,
                    {
                        "late/sim": {
                            "provider": "openai",
                            "endpointRef": upstream.endpoint_ref,
                            "model": MODEL,
                        }
                    },
                )
            yield Stack(api, proxy, database, client, token)


async def _refused_while_replies_held(stack: Stack, sdk: openai.AsyncOpenAI, key: str) -> None:
    """One call answered, then Temporal's replies held: the keyed call's start lands but its
    answer does not come within the bound, so the call is a 503. The replies pass again after."""
    await sdk.chat.completions.create(model=PROFILE, messages=[{"role": "user", "content": "a"}])
    stack.proxy.hold_replies()
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            await sdk.chat.completions.create(
                model=PROFILE,
                messages=[{"role": "user", "content": "late"}],
                extra_headers={"Idempotency-Key": key},
            )
    finally:
        stack.proxy.restore_replies()
    assert refused.value.status_code == 503
    assert refused.value.response.json()["reason"] == "temporal-unreachable"


async def _ready(stack: Stack) -> None:
    async def ready() -> bool:
        async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as http:
            return (await http.get("/readyz")).status_code == 200

    await eventually(ready, timeout=60, interval=0.2)


async def test_a_start_answered_past_the_bound_leaves_the_key_unused(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"late-{uuid.uuid4().hex[:8]}"
    await _refused_while_replies_held(stack, sdk, key)
    before = upstream.requests(MODEL)
    # The start had landed: its workflow runs (once its eager task times out), finds the call
    # nowhere and ends, closing nothing.
    handle = stack.client.get_workflow_handle(
        invoke_workflow_id(tenant, invocation_id(tenant, key))
    )

    async def ended() -> bool:
        return (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED

    await eventually(ended, timeout=60, interval=0.2)
    assert (await handle.result())["disposition"] == "not-claimed"
    async with sessions() as session:
        assert await by_key(session, tenant, key) is None  # not spent: no receipt at all

    # The retry the 503 invited runs and answers, with one provider call.
    await _ready(stack)
    answer = await sdk.chat.completions.create(
        model=PROFILE,
        messages=[{"role": "user", "content": "late"}],
        extra_headers={"Idempotency-Key": key},
    )
    assert answer.choices[0].message.content
    assert upstream.requests(MODEL) == before + 1
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed"
    await sdk.close()


async def test_a_retry_made_while_the_late_start_still_runs_is_answered_by_its_own_run(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"late-retry-{uuid.uuid4().hex[:8]}"
    await _refused_while_replies_held(stack, sdk, key)
    await _ready(stack)
    # The retry's call outlasts the late start's eager task timeout (10 s), after which that
    # workflow would run its close had it been adopted.
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=15, times=1))
    try:
        answer = await sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "late"}],
            extra_headers={"Idempotency-Key": key},
            timeout=60,
        )
    finally:
        upstream.state.clear_faults(MODEL)
    assert answer.choices[0].message.content
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.ended_at is not None
    assert row.outcome == "Completed", row.close_reason
    handle = stack.client.get_workflow_handle(
        invoke_workflow_id(tenant, invocation_id(tenant, key))
    )
    assert (await handle.result())["disposition"] == "done"
    await sdk.close()


async def test_a_claim_whose_release_the_store_refused_is_undone_once_it_answers(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    """A partition of the API's host: Temporal and the store go silent together, between the
    claim and its release. The caller is told nothing was claimed; the claim is undone once the
    store answers again, not left open for the sweeper to close Failed, spending the key."""
    sdk = stack.sdk()
    for n in range(3):  # the path's statements prepared, and its pools' connections open
        await sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "a"}],
            extra_headers={"Idempotency-Key": f"warm-{uuid.uuid4().hex}-{n}"},
        )
    before = upstream.requests(MODEL)
    key = f"partition-{uuid.uuid4().hex[:8]}"
    assert stack.proxy.sever(hold=True) > 0  # the start is never answered
    call = asyncio.create_task(
        sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "partitioned"}],
            extra_headers={"Idempotency-Key": key},
        )
    )

    async def claimed() -> bool:
        async with sessions() as session:
            return await by_key(session, tenant, key) is not None

    try:
        await eventually(claimed, timeout=BOUND, interval=0.01)
        # The release finds the store unreachable, on any connection.
        assert stack.database.sever(partition=True) > 0
        # Within the start's bound and the store's: a new connection to an unreachable host
        # waited asyncpg's default of 60 s.
        with pytest.raises(openai.APIStatusError) as refused:
            await asyncio.wait_for(call, timeout=BOUND + 20)
        assert refused.value.status_code == 503
        async with sessions() as session:
            assert await by_key(session, tenant, key) is not None  # not undone yet
        stack.database.restore()

        async def undone() -> bool:
            async with sessions() as session:
                return await by_key(session, tenant, key) is None

        await eventually(undone, timeout=30, interval=0.2)
    finally:
        stack.proxy.restore()
    assert upstream.requests(MODEL) == before  # the call waited for its start: nothing called
    await sdk.close()
