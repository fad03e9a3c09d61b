"""Profiles arrive as asset events: activation checks the invariants, versions are kept, and
deprecate/revoke retires a version while it stays readable for pinned runs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from store.tables import OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import (
    approved_deployment,
    profile_event,
    publish,
    record_evidence,
    register,
)


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _profile_events(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> list[tuple[str, dict[str, Any]]]:
    async with sessions() as s:
        rows = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.aggregate_type) == "ModelProfile")
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    return [(r.event_type, r.payload) for r in rows]


async def test_publish_list_get_versions_and_retire(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    await register(http, auth, "az/we/coder")
    await record_evidence(temporal_client, tenant, "az/we/coder", {"tool-calling": 0.93})
    v1 = await publish(http, auth, profile_event("code-agent", ["az/we/coder", "not/registered"]))
    assert v1.status_code == 200, v1.text
    assert v1.json()["status"] == "Active" and v1.json()["tenantId"] == tenant
    # Re-delivery of the same release is idempotent; the same version from another release is not.
    again = await publish(
        http, auth, profile_event("code-agent", ["az/we/coder", "not/registered"])
    )
    assert again.status_code == 200 and again.headers["idempotent-replay"] == "true"
    clash = profile_event(
        "code-agent", ["az/we/coder", "not/registered"], release={"releaseId": "rel-other"}
    )
    assert (await publish(http, auth, clash)).status_code == 409

    v2 = profile_event("code-agent", ["az/we/coder"], version="2", maxOutputTokens=8192)
    assert (await publish(http, auth, v2)).status_code == 200
    listed = (await http.get("/factory/model-profiles", headers=auth)).json()
    assert [(p["profileId"], p["version"]) for p in listed] == [("code-agent", "2")]

    detail = (await http.get("/factory/model-profiles/code-agent", headers=auth)).json()
    assert detail["version"] == "2" and detail["maxOutputTokens"] == 8192
    [dep] = detail["deployments"]
    assert dep["deploymentId"] == "az/we/coder" and dep["state"] == "Evaluated"
    assert dep["routable"] is False
    assert dep["evidence"]["capabilities"]["tool-calling"]["score"] == 0.93

    retire = {
        "eventType": "AssetReleaseDeprecated",
        "releaseId": "rel-code-agent-2",
        "profileId": "code-agent",
        "version": "2",
    }
    resp = await http.post("/factory/asset-events", json=retire, headers=auth)
    assert resp.status_code == 200 and resp.json()["status"] == "Retired"
    # New runs now get version 1; version 2 stays readable for runs pinned to it.
    assert (await http.get("/factory/model-profiles", headers=auth)).json()[0]["version"] == "1"
    pinned = await http.get("/factory/model-profiles/code-agent?version=2", headers=auth)
    assert pinned.status_code == 200 and pinned.json()["status"] == "Retired"

    revoke = {
        **retire,
        "eventType": "AssetReleaseRevoked",
        "releaseId": "rel-code-agent-1",
        "version": "1",
    }
    # A release's revocation reaches only the versions it activated: naming another release,
    # it is refused and the version stays (it was retired all the same).
    other = await http.post(
        "/factory/asset-events", json={**revoke, "releaseId": "rel-other"}, headers=auth
    )
    assert other.status_code == 409, other.text
    assert other.json()["differences"][0]["field"] == "releaseId"
    assert (await http.get("/factory/model-profiles", headers=auth)).json()[0]["version"] == "1"
    assert (await http.post("/factory/asset-events", json=revoke, headers=auth)).status_code == 200
    assert (await http.get("/factory/model-profiles", headers=auth)).json() == []
    assert (await http.get("/factory/model-profiles/code-agent", headers=auth)).status_code == 404
    missing = {**retire, "version": "9"}
    assert (await http.post("/factory/asset-events", json=missing, headers=auth)).status_code == 404

    assert [(t, p["version"]) for t, p in await _profile_events(sessions, tenant)] == [
        ("ModelProfileActivated", "1"),
        ("ModelProfileActivated", "2"),
        ("ModelProfileRetired", "2"),
        ("ModelProfileRetired", "1"),
    ]
    activated = (await _profile_events(sessions, tenant))[0][1]
    assert set(activated) == {"profileId", "version", "tenantId", "releaseId", "privacyClass"}


async def test_the_same_event_delivered_at_once_is_applied_once(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # An asset bus redelivers: copies of one event arriving together. Of activations, the
    # losers hit the version's unique key and were 409 ("activated concurrently"), not the
    # replay the same event gets; of retirements, each read the version Active and wrote its
    # own ModelProfileRetired.
    copies = 6
    event = profile_event("twin", ["not/registered"])
    published = await asyncio.gather(*(publish(http, auth, event) for _ in range(copies)))
    assert [r.status_code for r in published] == [200] * copies, [r.text for r in published]
    replays = [r.headers.get("idempotent-replay") for r in published]
    assert replays.count("true") == copies - 1
    retire = {
        "eventType": "AssetReleaseDeprecated",
        "releaseId": "rel-twin-1",
        "profileId": "twin",
        "version": "1",
    }
    retired = await asyncio.gather(
        *(http.post("/factory/asset-events", json=retire, headers=auth) for _ in range(copies))
    )
    assert [r.status_code for r in retired] == [200] * copies, [r.text for r in retired]
    assert [r.headers.get("idempotent-replay") for r in retired].count("true") == copies - 1
    assert [t for t, _ in await _profile_events(sessions, tenant)] == [
        "ModelProfileActivated",
        "ModelProfileRetired",
    ]


REFUSED = [
    pytest.param({"release": {"status": "Draft"}}, "not Published", id="not-published"),
    pytest.param({"release": {"adminApproved": False}}, "not approved", id="not-admin-approved"),
    pytest.param(
        {"fallbackChain": ["ghost"], "fallbackEnabled": True},
        "ghost is not an active",
        id="fallback-missing",
    ),
    pytest.param(
        {"fallbackChain": ["weak-external"], "fallbackEnabled": True},
        "privacy class External, weaker than Regional",
        id="fallback-weaker-privacy",
    ),
    pytest.param(
        {"fallbackChain": ["no-tools"], "fallbackEnabled": True},
        "does not guarantee tool-calling",
        id="fallback-drops-tools",
    ),
    pytest.param(
        {"fallbackChain": ["lower-json"], "fallbackEnabled": True},
        "does not guarantee json-schema >= 0.9",
        id="fallback-weaker-structured-output",
    ),
    pytest.param({"fallbackEnabled": True}, "fallbackChain is empty", id="enabled-without-chain"),
]


async def test_other_content_under_a_published_version_is_a_409_naming_each_field(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    first = await publish(http, auth, profile_event("immutable", [], maxOutputTokens=4096))
    assert first.status_code == 200 and "idempotent-replay" not in first.headers
    changed = profile_event("immutable", ["x/y"], maxOutputTokens=8192)
    resp = await publish(http, auth, changed)
    assert resp.status_code == 409, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["field"] == "profile.version"
    assert {d["field"]: (d["existing"], d["published"]) for d in problem["differences"]} == {
        "profile.allowedDeployments": ([], ["x/y"]),
        "profile.maxOutputTokens": (4096, 8192),
    }
    assert "maxOutputTokens" in problem["detail"] and "allowedDeployments" in problem["detail"]
    # Nothing changed: the version still says what it said first.
    shown = (await http.get("/factory/model-profiles/immutable", headers=auth)).json()
    assert (shown["maxOutputTokens"], shown["allowedDeployments"]) == (4096, [])


@pytest.mark.parametrize(("over", "reason"), REFUSED)
async def test_activation_refusals_name_the_reason(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    over: dict[str, Any],
    reason: str,
) -> None:
    strict = {"tool-calling": 0.9, "json-schema": 0.9}
    fallbacks = [
        profile_event("weak-external", [], strict, privacyClass="External"),
        profile_event("no-tools", [], {"json-schema": 0.95}),
        profile_event("lower-json", [], {"tool-calling": 0.9, "json-schema": 0.8}),
    ]
    for event in fallbacks:
        assert (await publish(http, auth, event)).status_code == 200
    resp = await publish(http, auth, profile_event("primary", [], strict, **over))
    assert resp.status_code == 422, resp.text
    assert any(reason in r for r in resp.json()["refusals"]), resp.json()
    names = [
        p["profileId"] for p in (await http.get("/factory/model-profiles", headers=auth)).json()
    ]
    assert "primary" not in names
    assert len(await _profile_events(sessions, tenant)) == len(fallbacks)  # no event for a refusal


async def test_a_stricter_fallback_with_the_same_guarantees_is_accepted(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    strict = {"tool-calling": 0.9, "json-schema": 0.9}
    local = profile_event("pii-local", [], {**strict, "planning": 0.5}, privacyClass="Local")
    assert (await publish(http, auth, local)).status_code == 200
    primary = profile_event(
        "primary", [], strict, fallbackChain=["pii-local"], fallbackEnabled=True
    )
    resp = await publish(http, auth, primary)
    assert resp.status_code == 200, resp.text
    assert resp.json()["fallbackChain"] == ["pii-local"]


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"eventType": "Nope"}, "body"),
        (profile_event("Bad Name!", []), "body.AssetReleasePublished.profile.profileId"),
        (
            profile_event("p", [], {"tool-calling": 1.5}),
            "body.AssetReleasePublished.profile.requiredCapabilities.tool-calling",
        ),
        (
            profile_event("p", [], {"telepathy": 0.5}),
            "body.AssetReleasePublished.profile.requiredCapabilities.telepathy.[key]",
        ),
        (profile_event("p", ["a", "a"]), "body.AssetReleasePublished.profile.allowedDeployments"),
        (profile_event("p", [], modality="Smell"), "body.AssetReleasePublished.profile.modality"),
    ],
)
async def test_bad_events_are_422_naming_the_field(
    http: httpx.AsyncClient, auth: dict[str, str], event: dict[str, Any], field: str
) -> None:
    resp = await publish(http, auth, event)
    assert resp.status_code == 422, resp.text
    fields = [e["field"] for e in resp.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields


async def test_profiles_are_tenant_isolated(
    http: httpx.AsyncClient, auth: dict[str, str], token_for: TokenFactory, tenant: str
) -> None:
    assert (await publish(http, auth, profile_event("secret-profile", []))).status_code == 200
    other = {"Authorization": f"Bearer {await token_for(tenant + '-b')}"}
    assert (await http.get("/factory/model-profiles", headers=other)).json() == []
    assert (
        await http.get("/factory/model-profiles/secret-profile", headers=other)
    ).status_code == 404
    retire = {
        "eventType": "AssetReleaseRevoked",
        "releaseId": "r",
        "profileId": "secret-profile",
        "version": "1",
    }
    assert (await http.post("/factory/asset-events", json=retire, headers=other)).status_code == 404
    assert len((await http.get("/factory/model-profiles", headers=auth)).json()) == 1


def test_versions_equal_by_their_parts_still_have_one_order() -> None:
    """ "1.0" and "1-0", "01" and "1" have the same parts: each reader kept whichever it saw
    first, in an order of its own, so the API and routing could name different newest."""
    from domain.profiles import version_order

    for a, b in (("1.0", "1-0"), ("01", "1")):
        assert version_order(a) != version_order(b)
        assert max([a, b], key=version_order) == max([b, a], key=version_order)
    assert version_order("1.10") > version_order("1.9") > version_order("1.0")
    # More parts after equal ones are newer, not older.
    assert version_order("1.1") > version_order("1") and version_order("1.0.1") > version_order(
        "1.0"
    )
    assert version_order("2.0.1") > version_order("2")


async def test_a_deployment_below_the_profiles_thresholds_is_not_shown_routable(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client
) -> None:
    # Approved and healthy, then re-evaluated below code-agent's 0.8: it stays Approved (the
    # thresholds are the router's filter), and the router leaves it out of the profile's plans.
    await approved_deployment(http, auth, temporal_client, tenant, "az/we/slipping")
    published = await publish(http, auth, profile_event("code-agent", ["az/we/slipping"]))
    assert published.status_code == 200, published.text
    detail = (await http.get("/factory/model-profiles/code-agent", headers=auth)).json()
    [dep] = detail["deployments"]
    assert (dep["state"], dep["routable"], dep["belowThresholds"]) == ("Approved", True, [])

    await record_evidence(temporal_client, tenant, "az/we/slipping", {"tool-calling": 0.6})
    detail = (await http.get("/factory/model-profiles/code-agent", headers=auth)).json()
    [dep] = detail["deployments"]
    assert (dep["state"], dep["routable"]) == ("Approved", False)
    assert dep["belowThresholds"] == ["tool-calling"]
    assert dep["exclusion"]["code"] == "capability_below_threshold"

    # Any filter the planner applies whatever the call: a deployment of no known context window
    # is in no plan of a profile with a context size, whatever its evidence.
    await approved_deployment(
        http, auth, temporal_client, tenant, "az/we/windowless", contextWindowTokens=None
    )
    published = await publish(
        http, auth, profile_event("windowless", ["az/we/windowless"], version="1")
    )
    assert published.status_code == 200, published.text
    detail = (await http.get("/factory/model-profiles/windowless", headers=auth)).json()
    [dep] = detail["deployments"]
    assert (dep["state"], dep["routable"], dep["belowThresholds"]) == ("Approved", False, [])
    assert dep["exclusion"]["code"] == "context_window_unknown"
