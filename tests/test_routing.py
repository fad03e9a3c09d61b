"""Route plans through the API: preview explains, resolve pins once per run, later catalog and
policy changes affect only new runs."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from domain.enums import Role
from domain.scoring import DEFAULT_WEIGHTS
from store.tables import OutboxEventRow, RoutePlanRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register

INTERNAL_NOT_EXTERNAL = {
    "allowedPrivacyClasses": {
        "Public": ["External", "Regional", "Confidential", "Local"],
        "Internal": ["Regional", "Confidential", "Local"],
        "Confidential": ["Confidential", "Local"],
        "Restricted": ["Local"],
    }
}


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _approved(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal: Client,
    tenant: str,
    deployment_id: str,
    score: float = 0.95,
    **over: Any,
) -> None:
    await register(http, auth, deployment_id, **over)
    await record_evidence(temporal, tenant, deployment_id, {"tool-calling": score})
    resp = await http.post(f"/factory/model-deployments/{deployment_id}/approve", headers=auth)
    assert resp.status_code == 200, resp.text


@pytest.fixture
async def catalog(
    http: httpx.AsyncClient, auth: dict[str, str], temporal_client: Client, tenant: str
) -> None:
    await _build_catalog(http, auth, temporal_client, tenant)


async def _build_catalog(
    http: httpx.AsyncClient, auth: dict[str, str], temporal: Client, tenant: str
) -> None:
    await _approved(http, auth, temporal, tenant, "azure/we/coder", 0.9)
    await _approved(
        http,
        auth,
        temporal,
        tenant,
        "openai/global/coder",
        0.99,
        privacyClass="External",
        region="global",
    )
    event = profile_event(
        "code-agent",
        ["azure/we/coder", "openai/global/coder"],
        {"tool-calling": 0.8},
        privacyClass="External",
        allowedRegions=["westeurope", "global"],
    )
    assert (await publish(http, auth, event)).status_code == 200
    policy = {"revision": "p1", "policy": INTERNAL_NOT_EXTERNAL}
    assert (await http.put("/factory/tenant-policy", json=policy, headers=auth)).status_code == 200


async def test_preview_lists_policy_exclusion_with_reason(
    http: httpx.AsyncClient, auth: dict[str, str], catalog: None
) -> None:
    resp = await http.post(
        "/factory/model-profiles/code-agent/route-plan/preview",
        json={"dataClassification": "Internal", "needsTools": True},
        headers=auth,
    )
    assert resp.status_code == 200, resp.text
    plan = resp.json()
    assert plan["profileId"] == "code-agent" and plan["profileVersion"] == "1"
    assert [c["deploymentId"] for c in plan["candidates"]] == ["azure/we/coder"], plan["excluded"]
    assert plan["candidates"][0]["kept"] is True and 0 < plan["candidates"][0]["score"] <= 1
    [excluded] = plan["excluded"]
    assert excluded["deploymentId"] == "openai/global/coder"
    assert excluded["reason"] == "privacy class External not allowed by tenant policy"
    assert plan["policyRevision"] == "p1" and plan["constraints"]["tools"] == "strict"

    # Public data may go to the External deployment, which then wins on its evidence.
    public = await http.post(
        "/factory/model-profiles/code-agent/route-plan/preview",
        json={"dataClassification": "Public"},
        headers=auth,
    )
    assert public.json()["candidates"][0]["deploymentId"] == "openai/global/coder"
    # Nothing was persisted by previews.
    again = await http.post(
        "/factory/model-profiles/code-agent/route-plan/preview",
        json={"dataClassification": "Internal", "needsTools": True},
        headers=auth,
    )
    assert again.json()["candidates"] == plan["candidates"]


async def test_fifty_concurrent_resolves_make_one_plan(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    catalog: None,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
) -> None:
    invoker = {"Authorization": f"Bearer {await token_for(tenant)}"}
    run = str(uuid.uuid4())
    body = {"runId": run, "profileId": "code-agent", "dataClassification": "Internal"}
    responses = await asyncio.gather(
        *(http.post("/gateway/route-plans", json=body, headers=invoker) for _ in range(50))
    )
    assert all(r.status_code in (200, 201) for r in responses), {r.status_code for r in responses}
    assert [r.status_code for r in responses].count(201) == 1
    assert len({r.json()["routePlanId"] for r in responses}) == 1
    assert {r.json()["tenantId"] for r in responses} == {tenant}  # the spec's RoutePlan field
    async with sessions() as s:
        plans = await s.scalar(
            select(func.count())
            .select_from(RoutePlanRow)
            .where(col(RoutePlanRow.tenant_id) == tenant)
        )
        events = await s.scalar(
            select(func.count())
            .select_from(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
            .where(col(OutboxEventRow.event_type) == "RoutePlanResolved")
        )
    assert plans == 1 and events == 1


async def test_plans_are_pinned_and_changes_affect_only_new_runs(
    http: httpx.AsyncClient, auth: dict[str, str], catalog: None
) -> None:
    run1 = str(uuid.uuid4())
    body = {"runId": run1, "profileId": "code-agent", "dataClassification": "Internal"}
    first = (await http.post("/gateway/route-plans", json=body, headers=auth)).json()
    assert first["candidates"] == ["azure/we/coder"] and first["profileVersion"] == "1"

    # The policy now lets Internal data go External, and a new profile version replaces v1.
    open_policy = {
        "revision": "p2",
        "policy": {
            "allowedPrivacyClasses": {"Internal": ["External", "Regional", "Confidential", "Local"]}
        },
    }
    assert (
        await http.put("/factory/tenant-policy", json=open_policy, headers=auth)
    ).status_code == 200
    v2 = profile_event(
        "code-agent",
        ["openai/global/coder", "azure/we/coder"],
        {"tool-calling": 0.8},
        version="2",
        privacyClass="External",
        allowedRegions=["westeurope", "global"],
    )
    assert (await publish(http, auth, v2)).status_code == 200
    retire = {
        "eventType": "AssetReleaseDeprecated",
        "releaseId": "rel-code-agent-1",
        "profileId": "code-agent",
        "version": "1",
    }
    assert (await http.post("/factory/asset-events", json=retire, headers=auth)).status_code == 200

    pinned = await http.post("/gateway/route-plans", json=body, headers=auth)
    assert pinned.status_code == 200
    assert pinned.json() == first  # the retired version still serves the run pinned to it

    fresh = (
        await http.post(
            "/gateway/route-plans", json={**body, "runId": str(uuid.uuid4())}, headers=auth
        )
    ).json()
    assert fresh["profileVersion"] == "2" and fresh["policyRevision"] == "p2"
    assert set(fresh["candidates"]) == {"openai/global/coder", "azure/we/coder"}


def _scores(plan: dict[str, Any]) -> dict[str, float]:
    return {c["deploymentId"]: c["score"] for c in plan["candidates"]}


async def _public_scores(http: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, float]:
    url = "/factory/model-profiles/code-agent/route-plan/preview"
    resp = await http.post(url, json={"dataClassification": "Public"}, headers=auth)
    assert resp.status_code == 200, resp.text
    return _scores(resp.json())


async def test_weights_reload_without_restart(
    http: httpx.AsyncClient, auth: dict[str, str], catalog: None
) -> None:
    # The weights set are this test's tenant's own: nothing to put back for the tests beside it.
    before = await _public_scores(http, auth)
    weights = {"capability": 1.0, "cost": 0.0, "latency": 0.0, "history": 0.0}
    assert (
        await http.put("/factory/routing/weights", json=weights, headers=auth)
    ).status_code == 200
    assert (await http.get("/factory/routing/weights", headers=auth)).json() == weights
    after = await _public_scores(http, auth)
    assert after != before
    assert after["openai/global/coder"] > after["azure/we/coder"]
    bad = await http.put("/factory/routing/weights", json={**weights, "cost": 0.5}, headers=auth)
    assert bad.status_code == 422
    assert (await http.get("/factory/routing/weights", headers=auth)).json() == weights


async def test_a_tenants_weights_rerank_its_routes_and_no_other_tenants(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    catalog: None,
    temporal_client: Client,
    token_for: TokenFactory,
    tenant: str,
) -> None:
    """The weights were one platform-wide value, and roles are a tenant client's: any tenant's
    PlatformAdmin re-ranked every tenant's routes. Now each tenant's are its own."""
    other_tenant = f"{tenant}-w"
    other = {"Authorization": f"Bearer {await token_for(other_tenant)}"}
    await _build_catalog(http, other, temporal_client, other_tenant)
    default = (await http.get("/factory/routing/weights", headers=other)).json()
    assert default == DEFAULT_WEIGHTS.model_dump()
    others_before = await _public_scores(http, other)
    before = await _public_scores(http, auth)
    assert before == others_before  # the same catalog, the same weights

    # Several first writes at once: each waits its turn on the catalog version, none a 500.
    weights = {"capability": 1.0, "cost": 0.0, "latency": 0.0, "history": 0.0}
    answers = await asyncio.gather(
        *(http.put("/factory/routing/weights", json=weights, headers=auth) for _ in range(5))
    )
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    after = await _public_scores(http, auth)
    assert after != before and after["openai/global/coder"] > after["azure/we/coder"]

    assert await _public_scores(http, other) == others_before
    assert (await http.get("/factory/routing/weights", headers=other)).json() == default
    assert (await http.get("/factory/routing/weights", headers=auth)).json() == weights


async def test_setting_weights_needs_the_tenants_platform_admin(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    """An Operator may write the tenant's policy but not its weights, which re-rank every route
    of the tenant at once (as when they were platform-wide)."""
    operator = {"Authorization": f"Bearer {await token_for(tenant, roles=[Role.OPERATOR])}"}
    weights = {"capability": 1.0, "cost": 0.0, "latency": 0.0, "history": 0.0}
    refused = await http.put("/factory/routing/weights", json=weights, headers=operator)
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert "PlatformAdmin" in refused.json()["detail"]
    read = await http.get("/factory/routing/weights", headers=operator)
    assert read.json() == DEFAULT_WEIGHTS.model_dump()


async def test_routing_is_tenant_isolated_and_validates_input(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    catalog: None,
    token_for: TokenFactory,
    tenant: str,
) -> None:
    other = {"Authorization": f"Bearer {await token_for(tenant + '-r')}"}
    url = "/factory/model-profiles/code-agent/route-plan/preview"
    assert (await http.post(url, json={}, headers=other)).status_code == 404
    body = {"runId": str(uuid.uuid4()), "profileId": "code-agent"}
    assert (await http.post("/gateway/route-plans", json=body, headers=other)).status_code == 404
    assert (await http.get("/factory/tenant-policy", headers=other)).json()[
        "revision"
    ] == "baseline-1"

    bad = await http.post(url, json={"dataClassification": "Secret"}, headers=auth)
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "body.dataClassification"
    bad_run = await http.post("/gateway/route-plans", json={**body, "runId": "nope"}, headers=auth)
    assert bad_run.status_code == 422 and bad_run.json()["errors"][0]["field"] == "body.runId"
    bad_policy = await http.put(
        "/factory/tenant-policy",
        json={"revision": "x", "policy": {"allowedPrivacyClasses": {}}},
        headers=auth,
    )
    assert bad_policy.status_code == 422
    # Each field named, and never the value given: it used to be quoted (pydantic's
    # input_value) with the field left as the whole policy.
    quoted = await http.put(
        "/factory/tenant-policy",
        json={"revision": "x", "policy": {"allowedPrivacyClasses": {"Internal": ["ProjectX"]}}},
        headers=auth,
    )
    assert quoted.status_code == 422 and "ProjectX" not in quoted.text
    assert quoted.json()["errors"][0]["field"] == "body.policy.allowedPrivacyClasses.Internal.0"


async def test_concurrent_first_writes_of_a_tenants_policy_are_one_document_and_no_500(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    """Two first writes at once both found no policy row and inserted one: the second's
    unique violation was a 500. Now they take turns: the same document is written once (both
    200), another document under the same revision is a 409 naming it."""
    fresh = f"{tenant}-pol"
    auth = {"Authorization": f"Bearer {await token_for(fresh)}"}
    current = (await http.get("/factory/tenant-policy", headers=auth)).json()
    policy = {k: v for k, v in current.items() if k not in ("tenantId", "revision")}
    body = {"revision": "first", "policy": policy}
    other = {"revision": "first", "policy": {**policy, "allowedRegions": ["eu-west"]}}
    answers = await asyncio.gather(
        *[http.put("/factory/tenant-policy", json=b, headers=auth) for b in [body] * 6 + [other]]
    )
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {200, 409}, [a.text for a in answers]
    written = (await http.get("/factory/tenant-policy", headers=auth)).json()
    assert written["revision"] == "first"


async def test_the_newest_version_is_the_same_one_to_the_api_and_to_routing(
    http: httpx.AsyncClient, auth: dict[str, str], temporal_client: Client, tenant: str
) -> None:
    """Versions 1.9 then 1.10: the API listed 1.10 as current (its parts compared as numbers)
    while routing chose 1.9 (the versions compared as text), so every new run routed and
    pinned on the release the operator had replaced."""
    await _approved(http, auth, temporal_client, tenant, "azure/we/old")
    await _approved(http, auth, temporal_client, tenant, "azure/we/new")
    for version, deployment in (("1.9", "azure/we/old"), ("1.10", "azure/we/new")):
        event = profile_event("versioned", [deployment], {"tool-calling": 0.8}, version=version)
        assert (await publish(http, auth, event)).status_code == 200
    listed = await http.get("/factory/model-profiles/versioned", headers=auth)
    assert listed.status_code == 200 and listed.json()["version"] == "1.10", listed.text
    preview = await http.post(
        "/factory/model-profiles/versioned/route-plan/preview", json={}, headers=auth
    )
    assert preview.status_code == 200, preview.text
    assert preview.json()["profileVersion"] == "1.10"
    assert [c["deploymentId"] for c in preview.json()["candidates"]] == ["azure/we/new"]
