"""Each invocation counted once in `invocations`, by whoever wrote its receipt's close, and each
call refused before its claim counted in `refusals` by a reason of a fixed set: a call whose
receipt its workflow closed while the call still ran was counted twice (by that close and again
by the call's own, which found it closed); a profile whose every candidate is Degraded, and a
claim the store did not take, refused calls that no counter showed."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.service import RPCError

from activities.invoke_closers import WorkflowCloses
from activities.lifecycle_types import workflow_id
from core import metrics
from core.settings import Settings
from domain.invocation import Disposition, InvocationInput, invocation_id, invoke_workflow_id
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipt_statements import ReceiptStatements
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve, workers
from tests.helpers.surfaces import Catalog
from tests.helpers.tcp_proxy import SeverableProxy

OPENAI = "openai"


def _chat() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "count me once"}], "max_tokens": 20}


async def _started_with(client: Client, tenant: str, key: str) -> InvocationInput:
    """The input the call's InvokeModel workflow was started with (its claim's time in it), read
    from its history once the start is in."""
    handle = client.get_workflow_handle(invoke_workflow_id(tenant, invocation_id(tenant, key)))

    async def started() -> InvocationInput | None:
        try:
            async for event in handle.fetch_history_events():
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                [data] = await client.data_converter.decode(payloads, [InvocationInput])
                return data
        except RPCError:
            return None  # not started yet
        return None

    found: InvocationInput = await eventually(started, timeout=10, interval=0.02)
    return found


async def test_a_call_its_workflow_closed_while_it_ran_is_counted_once(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The workflow's abandoned close (`close_abandoned_receipt`, as when it took the call for
    lost) wins the receipt while the provider still holds its answer, and counts it Failed; the
    call's own close then finds the receipt closed and tells its caller what it says, without
    counting it a second time. On an API of its own whose first-token bound (60 s) the held
    answer cannot reach: under the suite's 2 s the call could end before the workflow's close
    on a slow machine."""
    model, profile = f"counts-{uuid.uuid4().hex[:8]}", "counts-abandoned"
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    endpoint = {"provider": OPENAI, "model": model, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, profile, {"ca/sim": endpoint})
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"counts-{run}",
            "temporal_invocation_task_queue": f"counts-inv-{run}",
            "invoke_first_byte_timeout_seconds": 60.0,
            "invoke_first_token_timeout_seconds": 60.0,
        }
    )
    key = f"abandoned-{uuid.uuid4().hex[:8]}"
    failed = {"tenant": tenant, "profile": profile, "provider": OPENAI, "outcome": "Failed"}
    async with workers(own, sessions) as client, serve(own, client) as api:
        async with httpx.AsyncClient(base_url=api.url, timeout=90) as own_http:
            # Held until the test releases it.
            seen = upstream.requests(model)
            upstream.inject(model, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=60, times=1))
            before = metrics.invocations.value(failed)
            body = {"profileId": profile, "idempotencyKey": key, "request": _chat()}
            call = asyncio.create_task(own_http.post("/gateway/invoke", headers=auth, json=body))

            await eventually(lambda: upstream.requests(model) > seen, timeout=10, interval=0.02)
            data = await _started_with(client, tenant, key)
            closes = WorkflowCloses(ReceiptStatements(sessions.kw["bind"]))
            closed = await closes.close_abandoned(data)
            assert closed.disposition is Disposition.DONE
            assert metrics.invocations.value(failed) == before + 1  # counted by the close that won

            def released() -> bool:
                # Again until the answer is out: a release ends the delays under way only.
                upstream.release()
                return call.done()

            await eventually(released, timeout=30, interval=0.05)
            answered = await call
    assert answered.json()["closeReason"] == "caller-lost", answered.text
    async with sessions() as s:
        row = await by_key(s, tenant, key)
    assert row is not None and (row.outcome, row.close_reason) == ("Failed", "caller-lost")
    assert metrics.invocations.value(failed) == before + 1  # and not again by the call's close


async def test_a_profile_whose_every_candidate_is_degraded_counts_its_refusals(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    temporal_client: Client,
) -> None:
    """Every candidate Degraded: the call is refused (503, nothing claimed or called) and counted
    `none-available`, as a call every breaker refuses is counted `circuit-open`."""
    tenant, model = catalog.tenant, catalog.model(OPENAI)
    handle = temporal_client.get_workflow_handle(workflow_id(tenant, catalog.deployment(OPENAI)))
    record = await handle.execute_update("probe_failed", result_type=dict)
    assert record["state"] == "Degraded"
    seen = upstream.requests(model)
    before = metrics.refusals.value({"reason": "none-available"})
    body = {"profileId": catalog.profile(OPENAI), "request": _chat()}
    refused = await http.post("/gateway/invoke", headers=catalog.auth, json=body)
    assert refused.status_code == 503, refused.text
    assert "Retry-After" in refused.headers
    assert metrics.refusals.value({"reason": "none-available"}) == before + 1
    assert upstream.requests(model) == seen


@contextlib.asynccontextmanager
async def _through_proxy(
    settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[tuple[str, SeverableProxy]]:
    """An API of the test's own reaching PostgreSQL through a severable proxy (its standalone
    workers do not), on queues of its own, its invoke path's statements bounded at 1 s."""
    url = make_url(settings.database_url)
    assert url.host is not None and url.port is not None
    proxy = SeverableProxy(url.host, url.port)
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"counts-{run}",
            "temporal_invocation_task_queue": f"counts-inv-{run}",
        }
    )
    through_proxy = own.model_copy(
        update={
            "database_url": url.set(port=proxy.port).render_as_string(hide_password=False),
            "invoke_store_wait_seconds": 1.0,
            "database_statement_timeout_seconds": 1.0,
        }
    )
    async with workers(own, sessions) as client, serve(through_proxy, client) as api:
        async with proxy:
            yield api.url, proxy


async def test_a_claim_the_store_did_not_take_counts_its_refusal(
    http: httpx.AsyncClient,
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The store goes silent under the claim: the call is refused (503, nothing claimed or
    called) and counted `store-unavailable`."""
    model, profile = f"counts-{uuid.uuid4().hex[:8]}", "counts-store"
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    endpoint = {"provider": OPENAI, "model": model, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, profile, {"ct/sim": endpoint})
    async with _through_proxy(settings, sessions) as (url, proxy):
        async with httpx.AsyncClient(base_url=url, timeout=30) as api:
            # Calls first: the catalog snapshot in memory and the claim's statement prepared,
            # so that the claim is the call's first statement.
            for n in range(3):
                body = {"profileId": profile, "idempotencyKey": f"warm-{n}", "request": _chat()}
                warm = await api.post("/gateway/invoke", headers=auth, json=body)
                assert warm.status_code == 200, warm.text
            seen = upstream.requests(model)
            before = metrics.refusals.value({"reason": "store-unavailable"})
            assert proxy.sever() > 0  # every connection the pool holds goes silent
            body = {"profileId": profile, "idempotencyKey": "unclaimed", "request": _chat()}
            refused = await api.post("/gateway/invoke", headers=auth, json=body)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "store_unavailable", refused.text
            assert metrics.refusals.value({"reason": "store-unavailable"}) == before + 1
            assert upstream.requests(model) == seen
