"""What the invoke path promises beyond the happy path: a receipt that closes even when the API
process dies mid-stream — with no second call — and a stream that an API process told to stop
(a rolling restart's SIGTERM) finishes before the process exits. (No content anywhere:
tests/test_canary.py.)"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from core import metrics
from core.settings import Settings
from providers.upstream import UpstreamServer
from store.receipts import by_key
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.deadline import eventually
from tests.helpers.process import Proc


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await register(
        http,
        auth,
        "sim/slow",
        provider="openai",
        model="slow-sim",
        endpointRef=upstream.endpoint_ref,
    )
    await record_evidence(temporal_client, tenant, "sim/slow", {"tool-calling": 0.9})
    assert (
        await http.post("/factory/model-deployments/sim/slow/approve", headers=auth)
    ).status_code == 200
    assert (await publish(http, auth, profile_event("slow", ["sim/slow"]))).status_code == 200
    return auth


def _api_process(settings: Settings, port: int) -> Proc:
    """An API process of its own on `port`, on the tests' stack, started up."""
    env = {
        **os.environ,
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": settings.temporal_task_queue,
        "MODEL_ROUTER_TEMPORAL_INVOCATION_TASK_QUEUE": settings.temporal_invocation_task_queue,
        "MODEL_ROUTER_AUTH_JWT_SECRET": settings.auth_jwt_secret.get_secret_value(),  # type: ignore[union-attr]
        "MODEL_ROUTER_ENVIRONMENT": "test",  # upstream endpoints are refused in production
        "MODEL_ROUTER_ALLOW_UPSTREAM_ENDPOINTS": "true",
        "MODEL_ROUTER_ARTIFACT_ROOT": str(settings.artifact_root),
    }
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "api.app:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    api = Proc(argv, env=env)
    try:
        api.wait_for_line("Application startup complete", timeout=90)
    except BaseException:
        api.stop()
        raise
    return api


async def _closed(
    sessions: async_sessionmaker[AsyncSession], tenant: str, key: str
) -> InvocationReceiptRow:
    async def closed() -> InvocationReceiptRow | None:
        async with sessions() as s:
            row = await by_key(s, tenant, key)
        return row if row is not None and row.ended_at is not None else None

    found: InvocationReceiptRow = await eventually(closed, timeout=60, interval=0.25)
    return found


async def test_api_killed_mid_stream_closes_receipt_unknown_without_a_second_call(
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    upstream.state.configure("slow-sim", chunk_delay=0.5)
    before = upstream.requests("slow-sim")
    lost = {"tenant": tenant, "profile": "slow", "provider": "openai", "outcome": "Failed"}
    failures = metrics.invocations.value(lost)
    port = free_port()
    api = _api_process(settings, port)
    try:
        run = uuid.uuid4()
        body = {
            "model": "slow",
            "stream": True,
            "messages": [{"role": "user", "content": "a long answer please " * 5}],
        }
        headers = {**auth, "Idempotency-Key": "killed", "X-Run-Id": str(run)}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            async with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if '"content":"E' in line or '"content":"Echo' in line:
                        break  # the first token reached the caller
                api.proc.send_signal(signal.SIGKILL)
                api.proc.wait(timeout=10)
    finally:
        api.stop()
        upstream.state.configure("slow-sim", chunk_delay=0.0)

    row = await _closed(sessions, tenant, "killed")
    assert (row.outcome, row.usage_status) == ("Failed", "Unknown")
    assert row.input_tokens is None and row.output_tokens is None  # Unknown is never zero
    assert row.close_reason == "caller-lost"
    assert upstream.requests("slow-sim") - before == 1
    # The worker that closed it counts the invocation failed: a caller lost with its process
    # is in the dashboards' failures (this test's process hosts the shared queue's worker).
    assert metrics.invocations.value(lost) == failures + 1

    # After a restart the API serves the closed receipt; a retry with the key replays it.
    again = _api_process(settings, port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            listed = (await c.get(f"/factory/runs/{run}/model-receipts", headers=auth)).json()
            assert [(r["outcome"], r["usageStatus"]) for r in listed] == [("Failed", "Unknown")]
            retry = await c.post(
                "/v1/chat/completions", json={**body, "stream": False}, headers=headers
            )
            # The replay names why the receipt closed and which receipt it is; it never blames
            # the provider, and tells the SDK not to retry the spent key.
            assert retry.status_code == 409, retry.text
            problem = retry.json()
            assert problem["closeReason"] == "caller-lost"
            assert problem["receiptId"] == str(row.invocation_id)
            assert problem["error"]["type"] == "caller-lost"
            assert problem["type"].endswith("/invocation-closed")
            assert retry.headers["x-should-retry"] == "false"
            assert retry.headers["X-Model-Router-Receipt-Id"] == str(row.invocation_id)
            async with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as sse:
                # Asked as a stream, the same 409 before any stream: it was a 200 of the stored
                # part of the answer, then an error event.
                assert sse.status_code == 409
                streamed = json.loads(await sse.aread())
                assert sse.headers["x-should-retry"] == "false"
            assert streamed["type"].endswith("/invocation-closed")
            assert (streamed["closeReason"], streamed["receiptId"]) == (
                "caller-lost",
                str(row.invocation_id),
            )
    finally:
        again.stop()
    assert upstream.requests("slow-sim") - before == 1


async def test_a_stream_under_way_when_the_api_is_told_to_stop_finishes_first(
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # A rolling restart sends SIGTERM: uvicorn stops accepting connections and waits for the
    # requests under way. The stream goes on to its end, its receipt closes Completed, and then
    # the process exits. The stream lasts over 5 s, as an agent's often do: Temporal Core's
    # long-task warning, which InvokeModel's first task meets by design, stays out of the log
    # (core/temporal_logs.py).
    upstream.state.configure("slow-sim", chunk_delay=0.3)
    before = upstream.requests("slow-sim")
    port = free_port()
    api = _api_process(settings, port)
    body = {
        "model": "slow",
        "stream": True,
        "messages": [{"role": "user", "content": "a long answer please " * 5}],
    }
    headers = {**auth, "Idempotency-Key": "told-to-stop"}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            async with c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status_code == 200
                lines = []
                async for line in resp.aiter_lines():
                    lines.append(line)
                    if len(lines) == 4:
                        api.proc.send_signal(signal.SIGTERM)
        api.wait(timeout=60)
    finally:
        api.stop()
        upstream.state.configure("slow-sim", chunk_delay=0.0)
    assert lines[-2:] == ["data: [DONE]", ""], lines[-4:]
    text = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in lines
        if line.startswith("data: {")
    )
    assert text.startswith("Echo: a long answer please"), text
    row = await _closed(sessions, tenant, "told-to-stop")
    assert (row.outcome, row.usage_status) == ("Completed", "Reported")
    assert upstream.requests("slow-sim") - before == 1
    assert "Application shutdown complete" in api.output
    assert "TMPRL1104" not in api.output, api.output


async def test_client_disconnect_cancels_the_call_and_records_cancelled(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    api_url: str,
) -> None:
    upstream.state.configure("slow-sim", chunk_delay=0.5)
    try:
        body = {
            "model": "slow",
            "stream": True,
            "messages": [{"role": "user", "content": "long answer " * 20}],
        }
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as c:
            async with c.stream(
                "POST",
                "/v1/chat/completions",
                json=body,
                headers={**auth, "Idempotency-Key": "walked-away"},
            ) as resp:
                async for line in resp.aiter_lines():
                    if '"content":"E' in line:
                        break  # one token, then the caller goes away

        async def closed() -> object:
            async with sessions() as s:
                row = await by_key(s, tenant, "walked-away")
            return row if row is not None and row.ended_at is not None else None

        row = await eventually(closed, timeout=30)
        assert (row.outcome, row.usage_status) == ("Cancelled", "Unknown")
        assert row.latency_ms is not None and row.latency_ms < 10_000  # not the whole answer
    finally:
        upstream.state.configure("slow-sim", chunk_delay=0.0)


async def _latest(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> InvocationReceiptRow | None:
    """The tenant's latest receipt once it is closed (the call's key is the gateway's own)."""
    async with sessions() as s:
        row = (
            await s.scalars(
                select(InvocationReceiptRow)
                .where(col(InvocationReceiptRow.tenant_id) == tenant)
                .order_by(col(InvocationReceiptRow.started_at).desc())
            )
        ).first()
    return row if row is not None and row.ended_at is not None else None


@pytest.mark.parametrize("keyed", [False, True], ids=["no-key", "key"])
async def test_a_non_stream_caller_that_leaves_stops_its_call_unless_it_can_come_back(
    auth: dict[str, str],
    tenant: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    api_url: str,
    keyed: bool,
) -> None:
    """The SDK's own timeout, then its retries (each without a key, so each a new call), paid
    for every answer in full and delivered none. Without a key the call stops when its caller
    leaves, as a stream's does; with one it runs on, and the key gets its answer."""
    upstream.state.configure("slow-sim", chunk_delay=0.5)
    key = f"left-{uuid.uuid4().hex[:8]}"
    # Echoed back one word a chunk: 17 chunks, some 8.5 s whole, the caller gone after 1 s.
    body = {"model": "slow", "messages": [{"role": "user", "content": "long answer " * 8}]}
    headers = {**auth, "Idempotency-Key": key} if keyed else auth
    try:
        async with httpx.AsyncClient(base_url=api_url, timeout=1.0) as c:
            with pytest.raises(httpx.ReadTimeout):  # the caller gives up, and its socket closes
                await c.post("/v1/chat/completions", json=body, headers=headers)
        row = await eventually(lambda: _latest(sessions, tenant), timeout=60)
        if not keyed:
            assert (row.outcome, row.usage_status) == ("Cancelled", "Unknown"), row.latency_ms
            assert row.latency_ms < 6_000  # not the whole answer
        else:
            assert row.outcome == "Completed"
            async with httpx.AsyncClient(base_url=api_url, timeout=30) as c:
                again = await c.post("/v1/chat/completions", json=body, headers=headers)
            assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"]
    finally:
        upstream.state.configure("slow-sim", chunk_delay=0.0)


async def test_a_replayed_provider_call_never_reaches_the_upstream_twice(
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    from temporalio.testing import ActivityEnvironment

    from activities.invoke_hub import InvocationHub
    from activities.invoke_setup import invoke_activities
    from domain.invocation import Disposition, InvocationInput, Target
    from providers.types import ChatRequest, Message
    from tests.helpers.invocations import invocation_input

    hub = InvocationHub()
    acts, adapters = invoke_activities(settings, sessions, hub)
    request = ChatRequest(messages=(Message(role="user", content="once"),))
    key = f"replay-{uuid.uuid4().hex}"

    target = Target(
        deployment_id="sim/slow",
        provider="openai",
        model="slow-sim",
        endpoint_ref=upstream.endpoint_ref,
    )

    def attempt() -> InvocationInput:
        token, _ = hub.open(request)
        return invocation_input(tenant, key, profile_id="slow", target=target, caller_token=token)

    before = upstream.requests("slow-sim")
    first_input = attempt()
    env = ActivityEnvironment()
    first = await env.run(acts.call_provider, first_input)
    assert first.disposition is Disposition.DONE and first.outcome == "Completed"
    # The same attempt replayed finds its request already taken; a new attempt for the same
    # invocation (another process holding the request again) finds the receipt claimed.
    assert (await env.run(acts.call_provider, first_input)).disposition is Disposition.NOT_HERE
    assert (await env.run(acts.call_provider, attempt())).disposition is Disposition.ALREADY_CLAIMED
    assert upstream.requests("slow-sim") - before == 1
    await adapters.aclose()
