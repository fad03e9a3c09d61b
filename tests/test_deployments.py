"""The first real slice: register a Candidate through Temporal into PostgreSQL, then read it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from domain.enums import Role
from store.tables import ModelDeploymentRow, OutboxEventRow
from tests.conftest import TokenFactory


def registration(deployment_id: str = "openai/global/gpt-test", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "deploymentId": deployment_id,
        "provider": "openai",
        "model": "gpt-4.1-2025-04-14",
        "region": "global",
        "privacyClass": "External",
        "endpointRef": "env:OPENAI_API_KEY",
        "licenseMetadata": {"commercialUse": True, "customerDeployment": True},
    }
    body.update(over)
    return body


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


async def _count(sessions: async_sessionmaker[AsyncSession], tenant: str) -> tuple[int, int]:
    async with sessions() as s:
        rows = await s.scalar(
            select(func.count())
            .select_from(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
        )
        events = await s.scalar(
            select(func.count())
            .select_from(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
        )
    return int(rows or 0), int(events or 0)


async def test_register_goes_through_temporal_into_the_database_and_lists(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    resp = await http.post(
        "/factory/model-deployments", json=registration(), headers={**auth, **key("k1")}
    )
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert created["state"] == "Candidate" and created["healthy"] is True
    assert created["version"] == 1 and created["tenantId"] == tenant
    assert resp.headers["location"] == "/factory/model-deployments/openai/global/gpt-test"

    # It was a workflow that did the write.
    handle = temporal_client.get_workflow_handle(f"deployment/{tenant}/openai/global/gpt-test")
    desc = await handle.describe()
    assert desc.workflow_type == "DeploymentLifecycle"
    assert desc.status is not None and desc.status.name == "RUNNING"

    # The row and its DeploymentStateChanged event landed together.
    async with sessions() as s:
        event = await s.scalar(
            select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
        )
    assert event is not None and event.event_type == "DeploymentStateChanged"
    assert event.payload["toState"] == "Candidate"
    assert event.topic == "model-access.deployments.v1.deployment-state-changed"

    listed = await http.get("/factory/model-deployments", headers=auth)
    assert [d["deploymentId"] for d in listed.json()] == ["openai/global/gpt-test"]
    got = await http.get("/factory/model-deployments/openai/global/gpt-test", headers=auth)
    assert got.status_code == 200 and got.json()["licenseMetadata"]["commercialUse"] is True

    again = await http.post(
        "/factory/model-deployments", json=registration(), headers={**auth, **key("k2")}
    )
    assert again.status_code == 409
    assert again.json()["field"] == "deploymentId"
    assert await _count(sessions, tenant) == (1, 1)


async def test_tenant_a_cannot_see_tenant_b(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    tenant_b = tenant + "-b"
    a = {"Authorization": f"Bearer {await token_for(tenant)}"}
    b = {"Authorization": f"Bearer {await token_for(tenant_b)}"}
    resp = await http.post(
        "/factory/model-deployments", json=registration("b/only"), headers={**b, **key("same")}
    )
    assert resp.status_code == 201

    assert (await http.get("/factory/model-deployments/b/only", headers=a)).status_code == 404
    assert (await http.get("/factory/model-deployments", headers=a)).json() == []
    # The same id is free in tenant A: ids never collide (and so never leak) across tenants.
    # So is the same idempotency key: keys are scoped to the tenant.
    mine = await http.post(
        "/factory/model-deployments", json=registration("b/only"), headers={**a, **key("same")}
    )
    assert mine.status_code == 201
    theirs = (await http.get("/factory/model-deployments/b/only", headers=b)).json()
    assert theirs["tenantId"] == tenant_b


BAD_BODIES = [
    pytest.param(b"{not json", "body", 400, id="malformed-json"),
    pytest.param(registration(privacyClass="Secretish"), "body.privacyClass", 422, id="bad-enum"),
    pytest.param(registration(healthy="yes", deploymentId=42), "body.deploymentId", 422, id="type"),
    pytest.param(
        registration(licenseMetadata={"commercialUse": "maybe"}),
        "body.licenseMetadata.commercialUse",
        422,
        id="nested-type",
    ),
    pytest.param(
        registration(endpointRef="sk-live-abcdefghijklmnop"),
        "body.endpointRef",
        422,
        id="raw-credential",
    ),
    pytest.param(
        registration(endpointRef="https://user:pw@host/v1"),
        "body.endpointRef",
        422,
        id="credential-in-url",
    ),
    pytest.param(
        {k: v for k, v in registration().items() if k != "provider"},
        "body.provider",
        422,
        id="missing-field",
    ),
    pytest.param(registration(surprise=1), "body.surprise", 422, id="unknown-field"),
    # Resolved away by HTTP clients: `team/../prod` would be addressed as `prod`.
    pytest.param(registration("team/../prod"), "body.deploymentId", 422, id="dot-dot-segment"),
    pytest.param(registration("team/./a"), "body.deploymentId", 422, id="dot-segment"),
    pytest.param(registration("team//a"), "body.deploymentId", 422, id="empty-segment"),
    pytest.param(registration("team/a/"), "body.deploymentId", 422, id="trailing-slash"),
    pytest.param(b"[]", "body", 422, id="wrong-shape"),
]


@pytest.mark.parametrize(("body", "field", "status"), BAD_BODIES)
async def test_bad_input_is_a_4xx_problem_naming_the_field_and_writes_nothing(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    body: Any,
    field: str,
    status: int,
) -> None:
    auth = {
        "Authorization": f"Bearer {await token_for(tenant, roles=[Role.OPERATOR])}",
        **key("bad-input"),
    }
    if isinstance(body, bytes):
        resp = await http.post(
            "/factory/model-deployments",
            content=body,
            headers={**auth, "Content-Type": "application/json"},
        )
    else:
        resp = await http.post("/factory/model-deployments", json=body, headers=auth)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert field in [e["field"] for e in problem["errors"]]
    assert problem["status"] == status
    assert await _count(sessions, tenant) == (0, 0)


async def test_idempotency_key_is_required_replays_and_refuses_another_body(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    missing = await http.post("/factory/model-deployments", json=registration(), headers=auth)
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "header.Idempotency-Key"

    first = await http.post(
        "/factory/model-deployments", json=registration("x/1"), headers={**auth, **key("once")}
    )
    replay = await http.post(
        "/factory/model-deployments", json=registration("x/1"), headers={**auth, **key("once")}
    )
    assert first.status_code == replay.status_code == 201
    assert replay.json() == first.json()
    assert replay.headers["idempotent-replay"] == "true"
    assert (
        replay.headers["location"] == first.headers["location"] == "/factory/model-deployments/x/1"
    )

    other = await http.post(
        "/factory/model-deployments", json=registration("x/2"), headers={**auth, **key("once")}
    )
    assert other.status_code == 409
    assert other.json()["field"] == "header.Idempotency-Key"
    assert await _count(sessions, tenant) == (1, 1)


async def test_one_key_with_two_bodies_at_once_registers_one_of_them(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The key was checked, then the write ran, then its answer was stored: two bodies under
    one key at the same moment both passed the check and registered two deployments (the
    second told 409 though its deployment existed). The key is reserved before the write."""
    import asyncio

    auth = {"Authorization": f"Bearer {await token_for(tenant)}", **key("two-bodies")}
    responses = await asyncio.gather(
        *(
            http.post("/factory/model-deployments", json=registration(f"tb/{i % 2}"), headers=auth)
            for i in range(6)
        )
    )
    statuses = sorted(r.status_code for r in responses)
    assert 201 in statuses and 409 in statuses, [r.text for r in responses]
    registered = {r.json()["deploymentId"] for r in responses if r.status_code == 201}
    assert len(registered) == 1, registered
    assert await _count(sessions, tenant) == (1, 1)


async def test_a_key_whose_registration_was_refused_may_register_a_corrected_body(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    """The key is reserved before the write; a write refused left it that body's for good,
    and the corrected request was a 409 for a key nothing was registered under."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    taken = await http.post(
        "/factory/model-deployments", json=registration("rk/1"), headers={**auth, **key("a")}
    )
    assert taken.status_code == 201, taken.text
    again = await http.post(
        "/factory/model-deployments", json=registration("rk/1"), headers={**auth, **key("b")}
    )
    assert again.status_code == 409 and again.json()["field"] == "deploymentId", again.text
    corrected = await http.post(
        "/factory/model-deployments", json=registration("rk/2"), headers={**auth, **key("b")}
    )
    assert corrected.status_code == 201, corrected.text


async def test_concurrent_registrations_with_one_key_make_one_deployment(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    import asyncio

    auth = {"Authorization": f"Bearer {await token_for(tenant)}", **key("race")}
    responses = await asyncio.gather(
        *(
            http.post("/factory/model-deployments", json=registration("r/1"), headers=auth)
            for _ in range(8)
        )
    )
    assert {r.status_code for r in responses} == {201}
    assert len({r.text for r in responses}) == 1
    assert await _count(sessions, tenant) == (1, 1)
