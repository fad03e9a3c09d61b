"""PostgreSQL fails over and leaves the API's connections silent: open, but to a host that is
gone (no reset, no close). Every statement sent on one used to wait for TCP to give up, about
15 minutes: a call claimed on one hung, and a call whose close went to one never ended. Now
each wait on the invocation's own statements is bounded (`invoke_store_wait_seconds`): the
connection is dropped, a call that could not be claimed is a prompt 503 with Retry-After and
nothing called, a close goes to the invocation's workflow, and the calls after them run on
fresh connections to the server that took over. Every other statement of the API (an
operator's read, a key's lookup) is bounded by `database_statement_timeout_seconds` the same
way: a 503, then the next request is served on a fresh connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from domain.failures import STORE_RETRY_AFTER_SECONDS
from domain.invocation import closer_queue, invoke_workflow_id
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.activity_history import activity_runs
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.receipts import all_closed
from tests.helpers.stack import Served, serve, workers
from tests.helpers.tcp_proxy import SeverableProxy

PROFILE, MODEL = "store-silent", "store-silent-sim"
WAIT = 1.0  # invoke_store_wait_seconds and database_statement_timeout_seconds in these tests
HI: Any = [{"role": "user", "content": "a longer answer, please"}]


@contextlib.asynccontextmanager
async def _through_proxy(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    statement_timeout: float = WAIT,
    **update: Any,
) -> AsyncIterator[tuple[Served, SeverableProxy]]:
    """An API of the test's own that reaches PostgreSQL through a severable proxy (its standalone
    workers do not), on queues of its own: it runs the in-process workers of its invocation
    queue. The proxy closes first, so that the API's shutdown finds its severed connections
    closed rather than waits on them. Statements off the invoke path's own wait
    `statement_timeout` (`database_statement_timeout_seconds`)."""
    url = make_url(settings.database_url)
    assert url.host is not None and url.port is not None
    proxy = SeverableProxy(url.host, url.port)
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"silent-{run}",
            "temporal_invocation_task_queue": f"silent-inv-{run}",
        }
    )
    through_proxy = own.model_copy(
        update={
            "database_url": url.set(port=proxy.port).render_as_string(hide_password=False),
            "invoke_store_wait_seconds": WAIT,
            "database_statement_timeout_seconds": statement_timeout,
            **update,
        }
    )
    async with workers(own, sessions) as client, serve(through_proxy, client) as api:
        async with proxy:
            yield api, proxy


async def _warmed(sdk: openai.AsyncOpenAI, key: str) -> None:
    """Three calls first: the claim's statement prepared, so its execution is one send (the
    request a proxy cuts)."""
    for n in range(3):
        await sdk.chat.completions.create(
            model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": f"{key}-warm-{n}"}
        )


async def _published(
    http: httpx.AsyncClient,
    token: str,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    deployment: str,
) -> None:
    """The test's profile, published on one approved deployment of the local upstream."""
    auth = {"Authorization": f"Bearer {token}"}
    endpoint = {"provider": "openai", "model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, PROFILE, {deployment: endpoint})


async def test_a_failover_that_leaves_connections_silent_costs_a_prompt_503_not_a_hang(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    token = await token_for(tenant)
    await _published(http, token, tenant, temporal_client, upstream, "sv/sim")
    before = upstream.requests(MODEL)
    answered: list[str] = []
    async with _through_proxy(settings, sessions) as (api, proxy):
        sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=30)
        await sdk.chat.completions.create(
            model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": "warm"}
        )
        answered.append("warm")

        # A stream under way when the failover comes: claimed, its close still to come.
        # The close meets a silent connection (the pool hands out the one it used last,
        # the claim's), is given up after the bound, and goes to the invocation's workflow,
        # whose close runs on a fresh connection. The stream ends with its answer.
        upstream.state.configure(MODEL, chunk_delay=0.1)
        stream = await sdk.chat.completions.create(
            model=PROFILE, messages=HI, stream=True, extra_headers={"Idempotency-Key": "mid"}
        )
        first = await anext(aiter(stream))
        assert first.id
        assert proxy.sever() > 0
        rest = [chunk async for chunk in stream]
        assert any(c.choices and c.choices[0].finish_reason == "stop" for c in rest), rest
        answered.append("mid")
        upstream.state.configure(MODEL, chunk_delay=0.0)
        await sdk.chat.completions.create(
            model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": "between"}
        )
        answered.append("between")

        # A second failover. The next call is claimed on a silent connection: refused
        # within the bound, nothing claimed, nothing called.
        assert proxy.sever() > 0
        started = time.monotonic()
        try:
            await sdk.chat.completions.create(
                model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": "after-0"}
            )
            raise AssertionError("a claim on a silent connection was answered")
        except openai.APIStatusError as refused:
            assert refused.status_code == 503, refused.response.text
            # Come back as soon as any refusal of the store says, not after a provider's
            # cool-down (no provider was asked), and the provider is not blamed.
            assert int(refused.response.headers["retry-after"]) == STORE_RETRY_AFTER_SECONDS
            problem = refused.response.json()
            assert (problem["closeReason"], problem["errorClass"]) == ("unavailable", "transient")
            # OpenAI's type for a 503, the kind as its code (api/openai_errors.FAILURES).
            assert problem["error"]["code"] == "store_unavailable"
        assert time.monotonic() - started < 30  # the SDK's own timeout: it did not hang

        # Calls go on, each on a connection that answers or refused as that one was.
        for n in range(1, 12):
            key = f"after-{n}"
            try:
                await sdk.chat.completions.create(
                    model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
                )
            except openai.APIStatusError as refused:
                assert refused.status_code == 503, refused.response.text
                continue
            answered.append(key)
            break
        assert answered[-1].startswith("after-"), "no call was answered after the failover"
        await sdk.close()

    await eventually(partial(all_closed, sessions, tenant), timeout=60, interval=0.25)
    async with sessions() as session:
        for key in answered:
            row = await by_key(session, tenant, key)
            assert row is not None and row.outcome == "Completed", (key, row)
        unclaimed = await by_key(session, tenant, "after-0")
    assert unclaimed is None  # nothing was claimed for it
    # One provider call per answered call; none for the refused ones.
    assert upstream.requests(MODEL) - before == len(answered)


async def test_a_call_ending_as_the_store_goes_silent_is_answered_within_the_invoke_bound(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The first call of a pricing revision in a process reads its pricebook as the call ends,
    before the close. With the store gone silent (a partition: new connections too) that read
    waited out the statement timeout (here 60 s, the default) while the close beside it gave up
    after the invoke path's bound. Now it has the same bound: the cost is left unknown, the close
    goes to the workflow, and the caller is answered."""
    token = await token_for(tenant)
    await _published(http, token, tenant, temporal_client, upstream, "sl/price")
    key = f"price-{uuid.uuid4().hex[:8]}"
    before = upstream.requests(MODEL)
    # The provider holds its answer until the store has gone silent (released just after).
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=60, times=1))
    # The provider's held first token is released by the test, not timed out: the suite's 2 s
    # first-token bound ran out before it on a loaded machine.
    held = {"invoke_first_token_timeout_seconds": 25.0}
    async with _through_proxy(settings, sessions, statement_timeout=60, **held) as (api, proxy):
        # No call before this one: its revision's pricebook is not read yet in this process.
        sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=30)
        call = asyncio.create_task(
            sdk.chat.completions.create(
                model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
            )
        )

        async def claimed() -> bool:
            async with sessions() as session:
                row = await by_key(session, tenant, key)
            return row is not None

        await eventually(claimed, timeout=10, interval=0.02)
        # The provider call starts at the claim: it may reach the upstream after it is seen.
        await eventually(lambda: upstream.requests(MODEL) > before, timeout=10, interval=0.02)
        proxy.sever(partition=True)  # while the provider is still thinking

        def released() -> bool:
            # Again until the answer is out: a release ends the delays under way only, and one
            # begun just after it (the request seen, its delay not yet begun) was held 60 s.
            upstream.release()
            return call.done()

        await eventually(released, timeout=30, interval=0.1)
        done = await call  # within the SDK's 30 s, not after the 60 s statement timeout
        assert done.choices[0].message.content
        proxy.restore()
        await sdk.close()
        standalone = closer_queue(api.app.state.runtime.settings.temporal_invocation_task_queue)
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed"
    assert row.estimated_cost_usd is None  # left unknown: its pricebook could not be read
    # The close the API's store refused was written by the standalone worker, on its own
    # connections, at its first attempt: on the queue the API's worker polls too, that worker
    # took the first attempt and, in one CI run, the next five, each failing on its silence.
    runs = await activity_runs(temporal_client, invoke_workflow_id(tenant, row.invocation_id))
    assert [(r.activity, r.queue, r.attempt) for r in runs] == [("finalize_receipt", standalone, 1)]


async def test_an_operators_read_on_a_silent_connection_is_a_503_and_the_next_is_served(
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    async with (
        _through_proxy(settings, sessions) as (api, proxy),
        httpx.AsyncClient(base_url=api.url, timeout=30) as client,
    ):
        assert (await client.get("/factory/model-deployments", headers=auth)).status_code == 200
        # The request's session gives its connection back after the response: once it has,
        # the pool holds a connection for the next request, and the failover comes.
        pool = api.app.state.runtime.engine.pool

        async def given_back() -> bool:
            return bool(pool.checkedin() >= 1)

        await eventually(given_back, timeout=10, interval=0.02)
        assert proxy.sever() > 0
        # The pooled connection is pinged before use, and the ping meets the silence.
        resp = await client.get("/factory/model-deployments", headers=auth)
        assert resp.status_code == 503, resp.text
        assert resp.json()["type"].endswith("/store-unavailable"), resp.text
        assert int(resp.headers["retry-after"]) >= 1
        again = await client.get("/factory/model-deployments", headers=auth)
        assert again.status_code == 200, again.text


async def test_a_claim_that_lands_after_it_was_given_up_is_undone_and_its_key_answers_again(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = await token_for(tenant)
    await _published(http, token, tenant, temporal_client, upstream, "sl/sim")
    before = upstream.requests(MODEL)
    async with _through_proxy(settings, sessions) as (api, proxy):
        sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=30)
        ask: Any = {"model": PROFILE, "messages": HI, "extra_headers": {"Idempotency-Key": "late"}}
        # Warm: the invoke path's statements prepared on its connection, the claim included
        # (the first call after a publish reads the catalog version and claims plainly; the
        # next ones claim with the version check), so a claim sends its execution at once.
        await _warmed(sdk, "late")
        # The path goes silent holding what is sent into it: the claim is on its way when the
        # API gives up on it and tells the caller nothing was claimed.
        assert proxy.sever(hold=True) > 0
        with pytest.raises(openai.APIStatusError) as refused:
            await sdk.chat.completions.create(**ask)
        assert refused.value.status_code == 503
        # The path heals and delivers the claim: it lands, after the caller was told it had
        # not. The API undoes it, so the key is as the 503 said: unused.
        with caplog.at_level(logging.WARNING, logger="model_router.api"):
            assert proxy.restore() > 0

            async def answered() -> bool:
                try:
                    done = await sdk.chat.completions.create(**ask)
                except openai.APIStatusError as exc:
                    # Until it is undone, the landed claim is a call in progress to a retry.
                    assert exc.status_code == 503, exc.response.text
                    return False
                return bool(done.choices[0].message.content)

            await eventually(answered, timeout=60, interval=0.5)
        assert any("landed after they were given up" in r.getMessage() for r in caplog.records)
        await sdk.close()
    async with sessions() as session:
        row = await by_key(session, tenant, "late")
    assert row is not None and row.outcome == "Completed"
    assert upstream.requests(MODEL) - before == 4  # three warm calls and "late", once each


async def test_a_claim_whose_answer_was_lost_after_it_landed_is_the_calls_own(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The claim reaches PostgreSQL and commits, then its connection is reset before the answer
    (a proxy or a failover): the claim is sent again on a fresh connection and finds the key
    taken, by itself. It used to wait on its own claim as on another call's: a 503 in progress,
    then the sweeper closed it Failed and the key was spent, the provider never called."""
    token = await token_for(tenant)
    await _published(http, token, tenant, temporal_client, upstream, "sl/own")
    before = upstream.requests(MODEL)
    key = f"own-{uuid.uuid4().hex[:8]}"
    async with _through_proxy(settings, sessions) as (api, proxy):
        sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=30)
        await _warmed(sdk, key)
        proxy.cut_request_with(key.encode())
        done = await sdk.chat.completions.create(
            model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
        )
        assert done.choices[0].message.content
        assert proxy.cut_pending() is False  # the claim was the request cut
        await sdk.close()
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed"
    assert upstream.requests(MODEL) - before == 4  # three warm calls and this one, once each


async def test_a_claim_that_landed_when_the_store_then_went_away_is_undone(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The claim commits, its answer is lost, and the server is gone before the claim can be
    sent again (every connection reset, new ones refused): the caller is told nothing was
    claimed. The claim that landed used to stay open with no call behind it, the key's retries
    a 503 in progress until the sweeper closed it Failed, and then a 409: the key spent and the
    provider never called. Now it is undone once the store answers, and the retry is served."""
    token = await token_for(tenant)
    await _published(http, token, tenant, temporal_client, upstream, "sl/down")
    before = upstream.requests(MODEL)
    key = f"down-{uuid.uuid4().hex[:8]}"
    async with _through_proxy(settings, sessions) as (api, proxy):
        sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=30)
        await _warmed(sdk, key)
        proxy.cut_request_with(key.encode(), then_down=True)
        with pytest.raises(openai.APIStatusError) as refused:
            await sdk.chat.completions.create(
                model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
            )
        assert refused.value.status_code == 503
        assert proxy.cut_pending() is False  # the claim was the request cut

        async def landed() -> bool:
            async with sessions() as session:
                row = await by_key(session, tenant, key)
            return row is not None and row.ended_at is None

        # It lands: the server runs the request it was let through on a connection the proxy
        # keeps open, but maybe after the API's 503 (read at once, under CI's load it had not
        # yet: one failure). Nothing can undo it meanwhile: the proxy refuses the API's store.
        await eventually(landed, timeout=10)
        proxy.restore()

        async def retried() -> bool:
            try:
                done = await sdk.chat.completions.create(
                    model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": key}
                )
            except openai.APIStatusError as exc:
                # Until the claim is undone: in progress (the sweeper's bound is far off).
                assert exc.status_code == 503, exc.response.text
                return False
            return bool(done.choices[0].message.content)

        await eventually(retried, timeout=15, interval=0.5)
        await sdk.close()
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed"
    assert upstream.requests(MODEL) - before == 4  # three warm calls and the retry, once each
