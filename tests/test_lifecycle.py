"""The ModelOps state machine through the API and the lifecycle workflow: every legal and
illegal transition, the approval gate's refusals, and their events."""

from __future__ import annotations

import asyncio
import uuid
from functools import partial

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from activities.lifecycle_client import LifecycleClient, LifecycleClosed
from activities.lifecycle_types import ApproveRequest, workflow_id
from core.settings import Settings
from domain.approval import IntendedUse
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import DeploymentState
from domain.lifecycle import Transition
from store.tables import ModelDeploymentRow, OutboxEventRow
from store.views import deployment_record
from tests.conftest import TokenFactory
from tests.helpers.catalog import (
    deployment_body,
    profile_event,
    publish,
    record_evidence,
    register,
)
from tests.helpers.deadline import eventually
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _events(
    sessions: async_sessionmaker[AsyncSession], tenant: str, aggregate: str
) -> list[tuple[str, object, object]]:
    async with sessions() as s:
        rows = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.aggregate_id) == aggregate)
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    return [(r.event_type, r.payload.get("fromState"), r.payload.get("toState")) for r in rows]


async def _probe(temporal: Client, tenant: str, deployment_id: str, update: str) -> str:
    handle = temporal.get_workflow_handle(workflow_id(tenant, deployment_id))
    record = await handle.execute_update(update, result_type=dict)
    return str(record["state"])


async def test_the_whole_legal_path_with_versions_and_events(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    await register(http, auth, "d/full")
    evaluated = await record_evidence(temporal_client, tenant, "d/full", {"tool-calling": 0.95})
    assert (evaluated.state, evaluated.version) == ("Evaluated", 2)

    approved = await http.post("/factory/model-deployments/d/full/approve", headers=auth)
    assert approved.status_code == 200, approved.text
    assert (approved.json()["state"], approved.json()["version"]) == ("Approved", 3)

    assert await _probe(temporal_client, tenant, "d/full", "probe_failed") == "Degraded"
    got = (await http.get("/factory/model-deployments/d/full", headers=auth)).json()
    assert (got["state"], got["healthy"], got["version"]) == ("Degraded", False, 4)
    assert await _probe(temporal_client, tenant, "d/full", "probe_failed") == "Degraded"  # no-op
    assert await _probe(temporal_client, tenant, "d/full", "probe_recovered") == "Approved"
    assert await _probe(temporal_client, tenant, "d/full", "probe_recovered") == "Approved"  # no-op

    # New evidence on an Approved deployment keeps the approval.
    again = await record_evidence(temporal_client, tenant, "d/full", {"tool-calling": 0.5})
    assert again.state == "Approved"

    retired = await http.post("/factory/model-deployments/d/full/retire", headers=auth)
    assert retired.status_code == 200 and retired.json()["state"] == "Retired"
    final = (await http.get("/factory/model-deployments/d/full", headers=auth)).json()
    assert final["version"] == 7
    assert final["evidence"]["capabilities"]["tool-calling"]["score"] == 0.5

    assert await _events(sessions, tenant, "d/full") == [
        ("DeploymentStateChanged", None, "Candidate"),
        ("CapabilityEvidenceRecorded", None, None),
        ("DeploymentStateChanged", "Candidate", "Evaluated"),
        ("DeploymentStateChanged", "Evaluated", "Approved"),
        ("DeploymentStateChanged", "Approved", "Degraded"),
        ("DeploymentStateChanged", "Degraded", "Approved"),
        ("CapabilityEvidenceRecorded", None, None),
        ("DeploymentStateChanged", "Approved", "Retired"),
    ]
    handle = temporal_client.get_workflow_handle(workflow_id(tenant, "d/full"))
    assert (await handle.describe()).status.name == "COMPLETED"  # type: ignore[union-attr]


@pytest.mark.parametrize("start", ["Candidate", "Evaluated", "Degraded"])
async def test_retire_from_every_non_final_state(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client, start: str
) -> None:
    await register(http, auth, "d/r")
    if start != "Candidate":
        await record_evidence(temporal_client, tenant, "d/r", {"tool-calling": 0.9})
    if start == "Degraded":
        assert (
            await http.post("/factory/model-deployments/d/r/approve", headers=auth)
        ).status_code == 200
        await _probe(temporal_client, tenant, "d/r", "probe_failed")
    resp = await http.post("/factory/model-deployments/d/r/retire", headers=auth)
    assert resp.status_code == 200 and resp.json()["state"] == "Retired"


async def test_a_deployment_whose_workflow_is_gone_gets_one_again_from_the_store(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
) -> None:
    """A lifecycle workflow terminated by hand, or a Temporal cluster restored without its
    histories: the deployment kept its state for good, every approval, retirement and health
    verdict refused as if it were retired."""
    await register(http, auth, "d/lost")
    await record_evidence(temporal_client, tenant, "d/lost", {"tool-calling": 0.9})
    handle = temporal_client.get_workflow_handle(workflow_id(tenant, "d/lost"))
    await handle.terminate(reason="an operator's clean-up")
    approved = await http.post("/factory/model-deployments/d/lost/approve", headers=auth)
    assert approved.status_code == 200, approved.text
    assert approved.json()["state"] == "Approved"
    # The health probe's verdicts land too (they go through the same client, with the store).
    await temporal_client.get_workflow_handle(workflow_id(tenant, "d/lost")).terminate()
    resume = (settings.temporal_task_queue, partial(_stored, sessions, tenant, "d/lost"))
    degraded = await LifecycleClient(temporal_client).transition(
        tenant, "d/lost", Transition.PROBE_FAILED, resume=resume
    )
    assert degraded.state is DeploymentState.DEGRADED
    retired = await http.post("/factory/model-deployments/d/lost/retire", headers=auth)
    assert retired.status_code == 200 and retired.json()["state"] == "Retired"
    # A retired one is not brought back: its lifecycle has ended.
    again = await http.post("/factory/model-deployments/d/lost/approve", headers=auth)
    assert again.status_code == 409 and again.json()["state"] == "Retired"


async def test_a_row_read_before_its_retirement_starts_no_workflow_again(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
) -> None:
    """Two callers find the workflow gone; one starts it again and retires the deployment
    before the other, holding the row as it read it (Approved), starts its own: that start
    is refused (the retired run completed), not a new lifecycle from a stale row."""
    await register(http, auth, "d/stale")
    stale = await _stored(sessions, tenant, "d/stale")
    assert stale is not None
    retired = await http.post("/factory/model-deployments/d/stale/retire", headers=auth)
    assert retired.status_code == 200

    async def as_read_before() -> DeploymentRecord:
        return stale

    with pytest.raises(LifecycleClosed):
        await LifecycleClient(temporal_client).transition(
            tenant,
            "d/stale",
            Transition.RECORD_LICENSE,
            resume=(settings.temporal_task_queue, as_read_before),
        )
    described = await temporal_client.get_workflow_handle(workflow_id(tenant, "d/stale")).describe()
    assert described.status is not None and described.status.name == "COMPLETED"


async def _stored(
    sessions: async_sessionmaker[AsyncSession], tenant: str, deployment: str
) -> DeploymentRecord | None:
    async with sessions() as session:
        row = await session.get(ModelDeploymentRow, (tenant, deployment))
    return deployment_record(row) if row is not None else None


async def test_a_retired_id_registered_again_is_a_409_naming_it(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    await register(http, auth, "d/gone")
    retired = await http.post("/factory/model-deployments/d/gone/retire", headers=auth)
    assert retired.status_code == 200
    again = await http.post(
        "/factory/model-deployments",
        json=deployment_body("d/gone"),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert again.status_code == 409, again.text
    assert again.json()["state"] == "Retired" and "new id" in again.json()["detail"]


ILLEGAL = [
    ("Candidate", "approve"),
    ("Candidate", "probe_failed"),
    ("Candidate", "probe_recovered"),
    ("Evaluated", "probe_failed"),
    ("Evaluated", "probe_recovered"),
    ("Approved", "record_license"),
    ("Degraded", "approve"),
    ("Degraded", "record_license"),
    ("Retired", "approve"),
    ("Retired", "record_license"),
    ("Retired", "probe_failed"),
]


async def _bring_to(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal: Client, state: str
) -> None:
    await register(http, auth, "d/x")
    if state == "Candidate":
        return
    if state != "Retired":
        await record_evidence(temporal, tenant, "d/x", {"tool-calling": 0.9})
    if state in ("Approved", "Degraded"):
        assert (
            await http.post("/factory/model-deployments/d/x/approve", headers=auth)
        ).status_code == 200
    if state == "Degraded":
        await _probe(temporal, tenant, "d/x", "probe_failed")
    if state == "Retired":
        assert (
            await http.post("/factory/model-deployments/d/x/retire", headers=auth)
        ).status_code == 200


@pytest.mark.parametrize(("state", "action"), ILLEGAL)
async def test_illegal_transitions_are_refused_naming_the_state(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    state: str,
    action: str,
) -> None:
    await _bring_to(http, auth, tenant, temporal_client, state)
    before = (await http.get("/factory/model-deployments/d/x", headers=auth)).json()
    if action in ("approve", "retire"):
        resp = await http.post(f"/factory/model-deployments/d/x/{action}", headers=auth)
    elif action == "record_license":
        resp = await http.put(
            "/factory/model-deployments/d/x/license", json={"commercialUse": True}, headers=auth
        )
    else:
        handle = temporal_client.get_workflow_handle(workflow_id(tenant, "d/x"))
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.service import RPCError

        with pytest.raises((WorkflowUpdateFailedError, RPCError)) as info:
            await handle.execute_update(action)
        if state != "Retired":
            assert state in str(info.value.cause)
        return
    assert resp.status_code == 409, resp.text
    assert resp.json()["state"] == state
    assert state in resp.json()["detail"]
    after = (await http.get("/factory/model-deployments/d/x", headers=auth)).json()
    assert after == before  # nothing was written


async def test_approving_an_approved_deployment_again_answers_it(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # The spec's ApproveDeployment is naturally idempotent. It was a 409 the second time: for
    # two operators approving at once, and for a retry after our own 503 ("try again") when
    # the approval had been applied after all.
    await register(
        http, auth, "d/again", licenseMetadata={"commercialUse": True, "redistribution": False}
    )
    await record_evidence(temporal_client, tenant, "d/again", {"tool-calling": 0.9})
    path = "/factory/model-deployments/d/again/approve"
    both = await asyncio.gather(*(http.post(path, headers=auth) for _ in range(2)))
    assert [r.status_code for r in both] == [200, 200], [r.text for r in both]
    assert {(r.json()["state"], r.json()["version"]) for r in both} == {("Approved", 3)}
    again = await http.post(path, headers=auth)
    assert again.status_code == 200 and again.json()["version"] == 3
    approvals = [e for e in await _events(sessions, tenant, "d/again") if e[2] == "Approved"]
    assert len(approvals) == 1
    # Its checks are passed again: a use the license forbids is refused, the approval standing.
    refused = await http.post(path, json={"intendedUse": ["redistribution"]}, headers=auth)
    assert refused.status_code == 409, refused.text
    assert "redistribution" in {r.get("licenseTerm") for r in refused.json()["refusals"]}
    got = (await http.get("/factory/model-deployments/d/again", headers=auth)).json()
    assert (got["state"], got["version"]) == ("Approved", 3)


async def test_a_key_whose_registration_had_other_fields_is_a_409(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    settings: Settings,
) -> None:
    # The key's first request registered the deployment, and its answer was never stored (a
    # 503 on the worker's timeout, or the store away as it was remembered). Sent again with an
    # edited body, it was a 201 for a registration never applied.
    key = uuid.uuid4().hex
    first = DeploymentRegistration.model_validate(deployment_body("d/keyed"))
    await LifecycleClient(temporal_client).register(
        settings.temporal_task_queue, tenant, key, first
    )
    edited = await http.post(
        "/factory/model-deployments",
        json=deployment_body("d/keyed", model="gpt-4.1-mini"),
        headers={**auth, "Idempotency-Key": key},
    )
    assert edited.status_code == 409, edited.text
    assert edited.json()["field"] == "header.Idempotency-Key"
    same = await http.post(
        "/factory/model-deployments",
        json=deployment_body("d/keyed"),
        headers={**auth, "Idempotency-Key": key},
    )
    assert same.status_code == 201 and same.json()["model"] == "gpt-4.1", same.text


async def test_license_is_recorded_before_approval(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client
) -> None:
    await register(http, auth, "d/lic", licenseMetadata=None)
    await record_evidence(temporal_client, tenant, "d/lic", {"tool-calling": 0.9})
    refused = await http.post("/factory/model-deployments/d/lic/approve", headers=auth)
    assert refused.status_code == 409
    assert [r["code"] for r in refused.json()["refusals"]] == ["license-missing"]
    recorded = await http.put(
        "/factory/model-deployments/d/lic/license",
        json={"commercialUse": True, "fineTuning": False},
        headers=auth,
    )
    assert recorded.status_code == 200 and recorded.json()["licenseMetadata"]["commercialUse"]
    assert (
        await http.post("/factory/model-deployments/d/lic/approve", headers=auth)
    ).status_code == 200


async def test_approval_refusals_name_each_cause(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client
) -> None:
    await register(http, auth, "d/gate", licenseMetadata={"commercialUse": False})
    for event in (
        profile_event("code-agent", ["d/gate"], {"tool-calling": 0.9, "json-schema": 0.95}),
        profile_event("reasoning", ["d/gate"], {"planning": 0.8, "tool-calling": 0.7}),
        profile_event("unrelated", ["d/other"], {"patch-success": 0.99}),
    ):
        assert (await publish(http, auth, event)).status_code == 200
    await record_evidence(
        temporal_client, tenant, "d/gate", {"tool-calling": 0.85, "json-schema": 0.99}
    )
    resp = await http.post(
        "/factory/model-deployments/d/gate/approve",
        json={"intendedUse": ["commercialUse", "customerDeployment"]},
        headers=auth,
    )
    assert resp.status_code == 409
    refusals = resp.json()["refusals"]
    assert {
        (r["code"], r.get("licenseTerm")) for r in refusals if r["code"].startswith("license")
    } == {
        ("license-forbids", "commercialUse"),
        ("license-forbids", "customerDeployment"),
    }
    evidence = {
        (r["profileId"], r["capability"], r.get("threshold"), r.get("score"))
        for r in refusals
        if "profileId" in r
    }
    assert evidence == {
        ("code-agent", "tool-calling", 0.9, 0.85),
        ("reasoning", "planning", 0.8, None),  # never measured
    }
    assert "unrelated" not in resp.text  # only profiles that list the deployment count
    state = (await http.get("/factory/model-deployments/d/gate", headers=auth)).json()["state"]
    assert state == "Evaluated"

    # Fix the license and the evidence: approval goes through.
    await http.put(
        "/factory/model-deployments/d/gate/license",
        json={"commercialUse": True, "customerDeployment": True},
        headers=auth,
    )
    await record_evidence(
        temporal_client,
        tenant,
        "d/gate",
        {"tool-calling": 0.95, "json-schema": 0.99, "planning": 0.9},
    )
    ok = await http.post("/factory/model-deployments/d/gate/approve", headers=auth)
    assert ok.status_code == 200 and ok.json()["state"] == "Approved"


async def test_license_forbidding_use_is_never_approved_even_with_perfect_evidence(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client
) -> None:
    await register(http, auth, "d/nc", licenseMetadata={"commercialUse": False})
    await record_evidence(temporal_client, tenant, "d/nc", {"tool-calling": 1.0})
    # Naming other terms, or none, still checks commercial use: serving is commercial use.
    bodies: list[dict[str, list[str]] | None] = [
        None,
        {"intendedUse": []},
        {"intendedUse": ["redistribution"]},
    ]
    for body in bodies:
        resp = await http.post("/factory/model-deployments/d/nc/approve", json=body, headers=auth)
        assert resp.status_code == 409, (body, resp.text)
        assert "commercialUse" in {r.get("licenseTerm") for r in resp.json()["refusals"]}
    state = (await http.get("/factory/model-deployments/d/nc", headers=auth)).json()["state"]
    assert state == "Evaluated"


async def test_unknown_and_foreign_deployments_are_404(
    http: httpx.AsyncClient, auth: dict[str, str], token_for: TokenFactory, tenant: str
) -> None:
    await register(http, auth, "d/mine")
    other = {"Authorization": f"Bearer {await token_for(tenant + '-other')}"}
    for path in (
        "/factory/model-deployments/d/mine/approve",
        "/factory/model-deployments/d/mine/retire",
    ):
        resp = await http.post(path, headers=other)
        assert resp.status_code == 404, resp.text
    lic = await http.put(
        "/factory/model-deployments/d/mine/license", json={"commercialUse": True}, headers=other
    )
    assert lic.status_code == 404
    assert (
        await http.post("/factory/model-deployments/nope/approve", headers=auth)
    ).status_code == 404
    # The owner's deployment is untouched.
    mine = (await http.get("/factory/model-deployments/d/mine", headers=auth)).json()
    assert mine["state"] == "Candidate" and mine["version"] == 1


async def test_a_store_step_refusing_a_transition_is_named_not_a_500(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The store activity's refusal (here: the row gone under a running lifecycle) reaches the
    update wrapped in the activity's failure; read as such, it was an unknown failure (a 500,
    then a 503 saying to try again): it is the 404 it names."""
    await register(http, auth, "d/gone")
    async with sessions() as session:
        row = await session.get(ModelDeploymentRow, (tenant, "d/gone"))
        assert row is not None
        await session.delete(row)
        await session.commit()
    resp = await http.post("/factory/model-deployments/d/gone/retire", headers=auth)
    assert resp.status_code == 404, resp.text
    assert resp.json()["field"] == "deploymentId"


def test_workflow_is_registered_with_the_expected_updates() -> None:
    names = {
        "register",
        "approve",
        "record_evidence",
        "record_license",
        "probe_failed",
        "probe_recovered",
        "retire",
    }
    defn = DeploymentLifecycleWorkflow.__temporal_workflow_definition  # type: ignore[attr-defined]
    assert names <= set(defn.updates)


async def test_history_stays_bounded_through_continue_as_new(
    temporal_client: Client, settings: Settings, worker: None
) -> None:
    import uuid

    from activities.lifecycle_types import LifecycleInput, RegisterRequest
    from domain.deployments import DeploymentRegistration

    tenant, dep = f"t-{uuid.uuid4().hex[:8]}", "can/1"
    handle = await temporal_client.start_workflow(
        DeploymentLifecycleWorkflow.run,
        LifecycleInput(
            tenant_id=tenant,
            deployment_id=dep,
            registration=DeploymentRegistration.model_validate(
                {
                    "deploymentId": dep,
                    "provider": "openai",
                    "model": "m",
                    "region": "eu",
                    "privacyClass": "Regional",
                    "endpointRef": "env:K",
                    "licenseMetadata": {"commercialUse": True},
                }
            ),
            idempotency_key="k",
            max_transitions_per_run=2,
        ),
        id=workflow_id(tenant, dep),
        task_queue=settings.temporal_task_queue,
    )
    first_run = (await handle.describe()).run_id
    await handle.execute_update(
        DeploymentLifecycleWorkflow.register, RegisterRequest(idempotency_key="k")
    )
    await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.9})
    await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.95})

    latest = temporal_client.get_workflow_handle(workflow_id(tenant, dep))

    async def new_run() -> bool:
        return (await latest.describe()).run_id != first_run

    await eventually(new_run)
    # The new run carries the projection and keeps serving transitions and the original key.
    again = await latest.execute_update(
        DeploymentLifecycleWorkflow.register, RegisterRequest(idempotency_key="k")
    )
    assert again.created and again.deployment.version == 3
    approved = await latest.execute_update(
        DeploymentLifecycleWorkflow.approve,
        ApproveRequest(intended_use=[IntendedUse.COMMERCIAL_USE]),
    )
    assert approved.state == "Approved" and approved.version == 4


async def test_a_stored_license_that_no_longer_reads_is_refused_at_once_not_retried_for_ever(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal_client: Client,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Written before a rule was tightened (or by hand), the license failed to read in the
    approval check, which was retried for ever holding the deployment's lock: the approval
    hung until the API's timeout, and every later transition queued behind it."""
    await register(http, auth, "d/unread")
    await record_evidence(temporal_client, tenant, "d/unread", {"tool-calling": 0.9})
    async with sessions() as session:
        row = (
            await session.scalars(
                select(ModelDeploymentRow)
                .where(col(ModelDeploymentRow.tenant_id) == tenant)
                .where(col(ModelDeploymentRow.deployment_id) == "d/unread")
            )
        ).one()
        row.license_metadata = {"licenseName": "x", "notAField": True}
        await session.commit()
    # Each transition is refused at once, saying why: none waits behind another for ever.
    for action in ("approve", "approve", "retire"):
        refused = await http.post(f"/factory/model-deployments/d/unread/{action}", headers=auth)
        assert refused.status_code == 409, refused.text
        assert "does not read" in refused.json()["detail"]
