"""Invocations resolve a deployment's credential as its tenant's, as probes do
(tests/test_probe_credentials.py): tenant B's deployment on a reference later kept for tenant A
(`secret_ref_tenants`, `tenants/<tenant>/`) is not called with A's key.

The adapter pool built its clients with the plain broker, keyed without the tenant: B's calls
spent A's key on every invocation, and with B's probes now held, a Degraded such deployment
never came back. The check runs when a client is built or refreshed, never per call; a refusal
gets none of the refresh's grace."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.adapter_pool import AdapterPool
from activities.evaluation_refusals import CANNOT_RUN, ready
from activities.invoke_attempts import CREDENTIALS_UNRESOLVED
from activities.secret_policy import KeptForOtherTenants, endpoint_broker
from core.settings import Settings
from domain.invocation import Target
from providers.types import ChatRequest, Message, ProviderTimeouts
from providers.upstream import UpstreamServer
from store.receipts import by_key
from store.tables import OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.stack import serve

OWNER = "tenant-a-owner"
TIMEOUTS = ProviderTimeouts(connect=2, read=10)
REQUEST = ChatRequest(messages=(Message(role="user", content="hello"),))


@pytest.fixture
def shared_ref(monkeypatch: pytest.MonkeyPatch, upstream: UpstreamServer) -> str:
    """A shared `env:` reference (a key and its base URL) that names the local upstream."""
    name = f"MODEL_ROUTER_PROVIDER_SHARED_{uuid.uuid4().hex[:8].upper()}"
    monkeypatch.setenv(name, "sk-shared-0123456789")
    monkeypatch.setenv(f"{name}_BASE_URL", upstream.base_url)
    return f"env:{name}"


def _model() -> str:
    return f"kept-{uuid.uuid4().hex[:8]}"  # the upstream is the module's: counts of our own


def _kept_for_owner(settings: Settings, ref: str) -> Settings:
    """The operator's later setting: the reference is kept for another tenant."""
    return settings.model_copy(update={"secret_ref_tenants": {ref: [OWNER]}})


async def test_a_client_is_built_only_for_a_tenant_that_may_name_the_reference(
    settings: Settings, upstream: UpstreamServer, shared_ref: str
) -> None:
    model, tenant_b = _model(), f"tenant-b-{uuid.uuid4().hex[:8]}"
    target = Target(
        deployment_id="shared/call", provider="local-upstream", model=model, endpoint_ref=shared_ref
    )
    shared = AdapterPool(endpoint_broker(settings), TIMEOUTS)
    async with shared.lease(target, tenant_b) as adapter:
        assert (await adapter.complete(REQUEST)).text
    assert upstream.requests(model) == 1
    await shared.aclose()

    kept = AdapterPool(endpoint_broker(_kept_for_owner(settings, shared_ref)), TIMEOUTS)
    # The owner's deployment of the same id on it: served, through a client of its own.
    async with kept.lease(target, OWNER) as adapter:
        assert (await adapter.complete(REQUEST)).text
    assert upstream.requests(model) == 2
    # B's is refused, though the owner's client is fresh: clients are the tenant's.
    with pytest.raises(KeptForOtherTenants) as refused:
        await kept.ready(target, tenant_b)
    with pytest.raises(KeptForOtherTenants):
        async with kept.lease(target, tenant_b):
            pass
    assert upstream.requests(model) == 2 and kept.open_clients == 1
    # The reference, never the tenants it is kept for.
    assert shared_ref in str(refused.value) and OWNER not in str(refused.value)
    # An evaluation of B's deployment cannot run, and says why.
    with pytest.raises(ApplicationError, match="kept for other tenants") as cannot:
        await ready(kept, target, tenant_b)
    assert (cannot.value.type, cannot.value.non_retryable) == (CANNOT_RUN, True)
    await kept.aclose()


async def test_a_refresh_refused_for_the_tenant_drops_the_working_client_at_once(
    settings: Settings, upstream: UpstreamServer, tmp_path: Path
) -> None:
    """A `file:` reference whose folder the operator keeps for tenant A while the gateway runs
    (linked in as `tenants/<A>`): no restart, so the refusal comes at B's client's refresh.
    A secret that does not read keeps the working client for up to one more TTL
    (tests/test_adapter_refresh.py); this refusal must not."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "key.json").write_text(
        json.dumps({"api_key": "sk-shared-file-0123", "base_url": upstream.base_url})
    )
    model, tenant_b, now = _model(), f"tenant-b-{uuid.uuid4().hex[:8]}", [0.0]
    target = Target(
        deployment_id="shared/file",
        provider="local-upstream",
        model=model,
        endpoint_ref=f"file:{tmp_path / 'shared' / 'key.json'}",
    )
    broker = endpoint_broker(settings.model_copy(update={"secret_file_dirs": [tmp_path]}))
    pool = AdapterPool(broker, TIMEOUTS, ttl_seconds=100, clock=lambda: now[0])
    async with pool.lease(target, tenant_b) as working:
        assert (await working.complete(REQUEST)).text
        assert upstream.requests(model) == 1
        # Kept for A now, while B's call is still under way.
        (tmp_path / "tenants").mkdir()
        (tmp_path / "tenants" / OWNER).symlink_to(tmp_path / "shared")
        now[0] = 150.0  # B's client is due for its refresh
        with pytest.raises(KeptForOtherTenants):
            await pool.ready(target, tenant_b)
        assert pool.open_clients == 1  # retired, still carrying the call under way
    assert pool.open_clients == 0  # closed as that call ended
    now[0] = 160.0  # within REFRESH_RETRY_SECONDS: asked again, not served from a kept client
    with pytest.raises(KeptForOtherTenants):
        async with pool.lease(target, tenant_b):
            pass
    assert upstream.requests(model) == 1
    async with pool.lease(target, OWNER) as adapter:  # A's own deployment on it
        assert (await adapter.complete(REQUEST)).text
    assert upstream.requests(model) == 2
    # The operator shares the reference again. A refusal is asked again only every
    # REFRESH_RETRY_SECONDS (30 s after the one at 150), not at every call: until then B's
    # calls are refused as they were, without the pool's lock or a listing of the folders.
    (tmp_path / "tenants" / OWNER).unlink()
    now[0] = 175.0
    with pytest.raises(KeptForOtherTenants):
        await pool.ready(target, tenant_b)
    now[0] = 181.0
    async with pool.lease(target, tenant_b) as adapter:
        assert (await adapter.complete(REQUEST)).text
    assert upstream.requests(model) == 3
    await pool.aclose()


async def _fallback_reason(
    sessions: async_sessionmaker[AsyncSession], tenant: str, invocation: str
) -> Any:
    async with sessions() as s:
        rows = await s.scalars(
            select(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
            .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
            .where(col(OutboxEventRow.aggregate_id) == invocation)
        )
        return [r.payload["reason"] for r in rows.all()]


async def test_a_call_through_the_api_is_refused_on_a_reference_kept_for_other_tenants(
    settings: Settings,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    upstream: UpstreamServer,
    shared_ref: str,
) -> None:
    model, spare = _model(), _model()
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    await approved_deployment(
        http, auth, temporal_client, tenant, "kept/shared", provider="local-upstream",
        model=model, endpointRef=shared_ref,
    )  # fmt: skip
    await approved_deployment(
        http, auth, temporal_client, tenant, "kept/spare", model=spare,
        endpointRef=upstream.endpoint_ref,
    )  # fmt: skip
    for event in (
        profile_event("kept-only", ["kept/shared"]),
        profile_event("kept-spare", ["kept/spare"]),
        # Fallback on: the plan's second candidate may answer after the first failed.
        profile_event(
            "kept-spared",
            ["kept/shared", "kept/spare"],
            fallbackEnabled=True,
            fallbackChain=["kept-spare"],
        ),
    ):
        assert (await publish(http, auth, event)).status_code == 200

    async def chat(client: httpx.AsyncClient, profile: str) -> tuple[httpx.Response, str]:
        key = f"kept-{uuid.uuid4().hex}"
        body = {"model": profile, "messages": [{"role": "user", "content": "hello"}]}
        resp = await client.post(
            "/v1/chat/completions", headers={**auth, "Idempotency-Key": key}, json=body
        )
        return resp, key

    # Shared: B's deployment answers through it.
    resp, _ = await chat(http, "kept-only")
    assert resp.status_code == 200, resp.text
    assert upstream.requests(model) == 1

    # A gateway whose operator has since kept the reference for another tenant.
    own = _kept_for_owner(settings, shared_ref).model_copy(
        update={"temporal_invocation_task_queue": f"kept-{uuid.uuid4().hex[:8]}"}
    )
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as client:
        refused, _ = await chat(client, "kept-only")
        spared, key = await chat(client, "kept-spared")
    # Told as any unresolved credential: nothing of the reference or of its owners.
    assert refused.status_code == 502, refused.text
    assert refused.json()["reason"] == CREDENTIALS_UNRESOLVED
    assert shared_ref.removeprefix("env:") not in refused.text and OWNER not in refused.text
    # With a second deployment, the call falls over to it (`auth`, as any credential failure).
    assert spared.status_code == 200, spared.text
    assert spared.headers["X-Model-Router-Deployment"] == "kept/spare"
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and (row.deployment_id, row.fallback_used) == ("kept/spare", True)
    assert await _fallback_reason(sessions, tenant, str(row.invocation_id)) == ["auth"]
    # The shared reference's upstream heard nothing more.
    assert upstream.requests(model) == 1 and upstream.requests(spare) == 1
