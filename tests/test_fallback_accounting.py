"""Fallback accounting during outages, and who answered, through the real API against the local
upstream: an answer from any deployment but the plan's first candidate — skipped because it is
Degraded, its breaker open, or after its error — is a fallback on the receipt, in a
ModelFallbackUsed event and in the `fallbacks` metric, with the reason the primary was passed
over; every place naming the answering deployment (headers, the stream's final event, the
non-stream body) agrees with the receipt, and `model` stays the profile id."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from core import metrics
from core.settings import Settings
from domain.invocation import invoke_workflow_id
from domain.sweep import workflow_ceiling_seconds
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import receipt as _receipt

A, B, E = "fa-primary", "fa-second", "fa-erring"  # upstream models


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    for model in (A, B, E):
        upstream.state.clear_faults(model)
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for dep, model in (("fa/a", A), ("fa/b", B), ("fa/e", E)):
        await approved_deployment(
            http, auth, temporal_client, tenant, dep, model=model, endpointRef=upstream.endpoint_ref
        )
    for event in (
        # Two deployments in preference order; fallback off: the plan itself has a second.
        profile_event("fa", ["fa/a", "fa/b"]),
        # Only fa/a, falling back to another profile's deployment.
        profile_event("fa-b", ["fa/b"]),
        profile_event("fa-chain", ["fa/a"], fallbackEnabled=True, fallbackChain=["fa-b"]),
        # A primary that answers with errors, and fallback on.
        profile_event("fa-err", ["fa/e", "fa/b"], fallbackEnabled=True, fallbackChain=["fa-b"]),
    ):
        assert (await publish(http, auth, event)).status_code == 200
    return auth


async def _degrade(temporal: Client, tenant: str, deployment_id: str) -> None:
    """What the health probe does when fa/a's probes fail: Approved → Degraded."""
    handle = temporal.get_workflow_handle(workflow_id(tenant, deployment_id))
    record = await handle.execute_update("probe_failed", result_type=dict)
    assert record["state"] == "Degraded"


async def _fallback_events(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> dict[str, dict[str, Any]]:
    async with sessions() as s:
        rows = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
            )
        ).all()
    return {r.aggregate_id: r.payload for r in rows}


async def _chat(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    profile: str,
    *,
    stream: bool = False,
    run: uuid.UUID | None = None,
) -> tuple[httpx.Response, str, list[Any]]:
    key = f"fa-{uuid.uuid4().hex}"
    headers = {**auth, "Idempotency-Key": key}
    if run is not None:
        headers["X-Run-Id"] = str(run)
    body = {"model": profile, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    events: list[Any] = []
    resp = await http.post("/v1/chat/completions", headers=headers, json=body)
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return resp, key, events


def _fallbacks(profile: str, reason: str) -> float:
    return metrics.fallbacks.value({"profile": profile, "reason": reason})


async def test_a_degraded_primary_skipped_is_a_fallback_everywhere(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    tenant: str,
) -> None:
    # A run pinned its plan [fa/a, fa/b] while both were well; then fa/a's provider went down
    # and the health probe moved it to Degraded.
    run = uuid.uuid4()
    resp, key, _ = await _chat(http, auth, "fa", run=run)
    assert resp.status_code == 200 and resp.headers["X-Model-Router-Deployment"] == "fa/a"
    assert not (await _receipt(sessions, tenant, key)).fallback_used
    upstream.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    await _degrade(temporal_client, tenant, "fa/a")
    seen_a = upstream.requests(A)

    # An outage of twenty calls: with and without a run, streamed or not, through the plan's
    # second candidate or through the fallback chain. Every answer is counted.
    before = {p: _fallbacks(p, "degraded") for p in ("fa", "fa-chain")}
    calls: list[tuple[str, str]] = []
    for i in range(20):
        profile = "fa-chain" if i % 4 == 3 else "fa"
        resp, key, _ = await _chat(
            http, auth, profile, stream=i % 2 == 1, run=run if i % 4 == 0 else None
        )
        assert resp.status_code == 200, resp.text
        assert resp.headers["X-Model-Router-Deployment"] == "fa/b"
        calls.append((profile, key))
    assert upstream.requests(A) == seen_a  # the Degraded primary was never called

    emitted = await _fallback_events(sessions, tenant)
    for profile, key in calls:
        row = await _receipt(sessions, tenant, key)
        assert (row.deployment_id, row.fallback_used) == ("fa/b", True), (profile, key)
        assert emitted[str(row.invocation_id)] == {
            "invocationId": str(row.invocation_id),
            "tenantId": tenant,
            "profileId": profile,
            "fromDeploymentId": "fa/a",
            "toDeploymentId": "fa/b",
            "reason": "degraded",
        }
    counted = {p: _fallbacks(p, "degraded") - before[p] for p in before}
    assert counted == {"fa": 15, "fa-chain": 5}


async def test_the_reason_names_an_error_or_an_open_breaker(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    upstream.inject(E, Fault(kind=FaultKind.SERVER_ERROR))
    errors, opens = _fallbacks("fa-err", "server_error"), _fallbacks("fa-err", "circuit_open")
    resp, key, _ = await _chat(http, auth, "fa-err")  # three 500s, which open the breaker
    assert resp.status_code == 200
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.fallback_used) == ("fa/b", True)
    assert (await _fallback_events(sessions, tenant))[str(row.invocation_id)]["reason"] == (
        "server_error"
    )
    resp, key, _ = await _chat(http, auth, "fa-err")  # the breaker is open: fa/e is skipped
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.fallback_used) == ("fa/b", True)
    assert (await _fallback_events(sessions, tenant))[str(row.invocation_id)]["reason"] == (
        "circuit_open"
    )
    assert _fallbacks("fa-err", "server_error") == errors + 1
    assert _fallbacks("fa-err", "circuit_open") == opens + 1


async def test_every_place_naming_the_answering_deployment_agrees_with_the_receipt(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    api_url: str,
    tenant: str,
) -> None:
    # The primary fails before any output; the fallback answers the stream.
    upstream.inject(E, Fault(kind=FaultKind.SERVER_ERROR, times=3))
    resp, key, events = await _chat(http, auth, "fa-err", stream=True)
    row = await _receipt(sessions, tenant, key)
    assert row.deployment_id == "fa/b" and row.fallback_used
    assert resp.headers["X-Model-Router-Deployment"] == "fa/b"
    assert resp.headers["X-Model-Router-Receipt-Id"] == str(row.invocation_id)
    assert events[-1] == "[DONE]"
    final = events[-2]["model_router"]
    assert (final["deploymentId"], final["fallbackUsed"]) == ("fa/b", True)
    assert all(e["model"] == "fa-err" for e in events[:-1])  # the profile, never the model

    # The gateway's stream says the same.
    upstream.inject(E, Fault(kind=FaultKind.SERVER_ERROR, times=3))
    body = {
        "profileId": "fa-err",
        "stream": True,
        "request": {"messages": [{"role": "user", "content": "x"}]},
    }
    async with http.stream("POST", "/gateway/invoke", headers=auth, json=body) as gw:
        text = (await gw.aread()).decode()
    assert gw.headers["X-Model-Router-Deployment"] == "fa/b"
    receipt = json.loads(text.rsplit("event: receipt\ndata: ", 1)[1])
    assert receipt["deploymentId"] == "fa/b" and receipt["fallbackUsed"]

    # Non-stream, through the official SDK: header, body and receipt agree; `model` is the
    # profile id.
    upstream.inject(E, Fault(kind=FaultKind.SERVER_ERROR, times=3))
    token = auth["Authorization"].removeprefix("Bearer ")
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="fa-err", messages=[{"role": "user", "content": "hi"}]
        )
    completion = raw.parse()
    assert completion.model == "fa-err"
    extension = (completion.model_extra or {})["model_router"]
    async with sessions() as s:
        got = await s.get(InvocationReceiptRow, uuid.UUID(raw.headers["x-model-router-receipt-id"]))
    assert got is not None and got.deployment_id == "fa/b" and got.fallback_used
    assert raw.headers["x-model-router-deployment"] == extension["deploymentId"] == "fa/b"
    assert extension["receiptId"] == raw.headers["x-model-router-receipt-id"]
    assert extension["fallbackUsed"] is True


async def test_a_fallback_that_failed_too_was_taken_but_answered_nothing(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    # Both fa/e and its fallback fa/b answer with errors: the receipt and the `fallbacks`
    # metric say a fallback was taken; ModelFallbackUsed ("a fallback answered") is not written.
    upstream.inject(E, Fault(kind=FaultKind.SERVER_ERROR))
    upstream.inject(B, Fault(kind=FaultKind.SERVER_ERROR))
    try:
        taken = _fallbacks("fa-err", "server_error")
        resp, key, _ = await _chat(http, auth, "fa-err")
    finally:
        upstream.state.clear_faults(B)
    assert resp.status_code >= 500
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Failed", "fa/b", True)
    assert _fallbacks("fa-err", "server_error") == taken + 1
    assert str(row.invocation_id) not in await _fallback_events(sessions, tenant)


async def test_an_invocations_workflow_runs_a_day_at_most(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    tenant: str,
) -> None:
    # Wedged (a workflow task failing after an incompatible deploy), a running InvokeModel kept
    # its receipt from the sweeper for good; timed out, it is ended, and the sweeper closes it
    # (tests/test_receipt_sweeper.py).
    resp, key, _ = await _chat(http, auth, "fa")
    assert resp.status_code == 200, resp.text
    row = await _receipt(sessions, tenant, key)
    handle = temporal_client.get_workflow_handle(invoke_workflow_id(tenant, row.invocation_id))
    config = (await handle.describe()).raw_description.execution_config
    ceiling = workflow_ceiling_seconds(settings.default_timeout_seconds)
    assert config.workflow_execution_timeout.ToSeconds() == ceiling == 86_400
