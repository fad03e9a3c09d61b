"""Evaluations at their edges: a key used again once its run's history is gone (Temporal's
retention, a cluster restored without histories), a deployment whose stored row does not read,
a listing profile whose stored row does not read, and an API process whose suite version is
not the worker's (a rolling deploy that bumps the suite). API → Temporal → the real adapters →
the local upstream, as tests/test_evaluation.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from activities.evaluation import EvaluationActivities
from activities.evaluation_refusals import CANNOT_RUN
from activities.evaluation_rows import PROFILE_UNREADABLE
from activities.evaluation_types import EvaluationInput, FailInput
from api import evaluations as api_evaluations
from core.settings import Settings
from domain.suite import SUITE_VERSION, Suite
from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.suite_responders import competent_responder
from store.db import transaction
from store.tables import EvaluationRow, ModelDeploymentRow, ModelProfileRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, register
from tests.helpers.deadline import eventually

_UNREADABLE = "https://model-router.dev/problems/stored-record-unreadable"
# Stored values only a hand-written row holds: none of them may be echoed back.
_LEGACY_KEY, _LEGACY_LEVEL = "legacyTermX9", "very-high-Q7"


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        # Meets every threshold: a shortfall is the unreadable profile's alone.
        server.register("listed-sim", competent_responder(Suite()))
        yield server


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _evaluate(
    http: httpx.AsyncClient, auth: dict[str, str], dep: str, key: str
) -> httpx.Response:
    return await http.post(
        f"/factory/model-deployments/{dep}/evaluate", headers={**auth, "Idempotency-Key": key}
    )


async def _ended(http: httpx.AsyncClient, auth: dict[str, str], dep: str) -> dict[str, Any]:
    """The deployment once its latest evaluation ended."""

    async def done() -> dict[str, Any] | None:
        body = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
        ev = body.get("evaluation") or {}
        return body if ev.get("status") in ("Completed", "Failed") else None

    return dict(await eventually(done, timeout=120, interval=0.3))


async def _corrupt_license(
    sessions: async_sessionmaker[AsyncSession], tenant: str, dep: str
) -> None:
    """The license as a hand or an older rule would have written it: a key `LicenseMetadata`
    forbids (tests/test_unreadable_rows_rest.py)."""
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
            .where(col(ModelDeploymentRow.deployment_id) == dep)
            .values(license_metadata={"commercialUse": True, _LEGACY_KEY: True})
        )


async def _evaluation_rows(
    sessions: async_sessionmaker[AsyncSession], tenant: str, dep: str
) -> list[EvaluationRow]:
    async with sessions() as session:
        stmt = (
            select(EvaluationRow)
            .where(col(EvaluationRow.tenant_id) == tenant)
            .where(col(EvaluationRow.deployment_id) == dep)
        )
        return list((await session.scalars(stmt)).all())


async def _gone(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return True
        raise
    return False


async def test_a_key_whose_history_is_gone_answers_with_its_evaluation_and_runs_nothing(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    temporal_client: Client,
) -> None:
    """The key's row was found (no other key's evaluation looked for), nothing inserted, and
    the start, finding no history to refuse a duplicate by, ran the whole suite again: billed
    twice, its outcome written over the first one's row, the 202 showing the first."""
    dep, model, key = "edge/retained", "retained-sim", f"retained-{uuid.uuid4().hex}"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    started = await _evaluate(http, auth, dep, key)
    assert started.status_code == 202, started.text
    eid = started.json()["evaluationId"]
    ended = (await _ended(http, auth, dep))["evaluation"]
    assert ended["status"] == "Completed", ended
    # Its history gone, as past the namespace's retention.
    await temporal_client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=temporal_client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=eid),
        )
    )
    await eventually(lambda: _gone(temporal_client, eid), timeout=120, interval=0.2)
    sent = upstream.requests(model)

    again = await _evaluate(http, auth, dep, key)
    assert again.status_code == 202, again.text
    view = again.json()
    assert (view["evaluationId"], view["status"]) == (eid, "Completed")
    assert view["evidenceRef"] == ended["evidenceRef"]
    # No run under its id: nothing is sent to the provider, and nothing overwrites the row.
    assert await _gone(temporal_client, eid)
    assert upstream.requests(model) == sent
    body = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
    assert body["evaluation"] == ended


async def test_evaluating_a_deployment_whose_row_does_not_read_is_refused_at_once(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """Accepted, it ran every case against the provider, then failed with pydantic's message,
    the stored values in it, as its reason."""
    dep, model = "edge/unread", "unread-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    await _corrupt_license(sessions, tenant, dep)

    for key in ("unread-1", "unread-1", "unread-2"):
        refused = await _evaluate(http, auth, dep, key)
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        problem = refused.json()
        assert (problem["type"], problem["field"]) == (_UNREADABLE, "deploymentId")
        assert "correct the row" in problem["detail"] and dep in problem["detail"]
        assert _LEGACY_KEY not in refused.text
    # Nothing claimed, nothing started, nothing sent.
    assert await _evaluation_rows(sessions, tenant, dep) == []
    assert upstream.requests(model) == 0


async def test_a_row_that_stops_reading_during_the_evaluation_stops_its_cases(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    settings: Settings,
) -> None:
    """Corrupted once the run is under way (accepted as readable): the cases not yet sent are
    not, and the run fails naming the field, never its stored values. The whole suite went to
    the provider, and the import's refusal quoted the row."""
    dep, model = "edge/spoilt", "spoilt-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    # Every answer held until the row is corrupted: only the cases sent by then (at most the
    # suite's concurrency) reach the provider before one asks again.
    upstream.inject(model, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120))
    try:
        started = await _evaluate(http, auth, dep, "spoilt-1")
        assert started.status_code == 202, started.text
        await eventually(lambda: upstream.requests(model) > 0, timeout=60, interval=0.05)
        await _corrupt_license(sessions, tenant, dep)

        async def failed() -> EvaluationRow | None:
            # Held answers go, those whose delay began after an earlier release too.
            upstream.state.release()
            [row] = await _evaluation_rows(sessions, tenant, dep)
            return row if row.status != "Running" else None

        row = await eventually(failed, timeout=120, interval=0.3)
    finally:
        upstream.state.clear_faults(model)
        upstream.state.release()
    assert row.status == "Failed", row.reason
    assert "stored record does not read (license_metadata)" in (row.reason or "")
    assert _LEGACY_KEY not in (row.reason or "")
    assert upstream.requests(model) <= settings.evaluation_concurrency


async def test_preparing_a_deployment_whose_row_does_not_read_cannot_run(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """The prepare step, for a row corrupted between the API's acceptance and the run's first
    step (no request can place it there): CannotRun naming the field, not retried."""
    dep = "edge/prepared"
    await register(http, auth, dep)
    await _corrupt_license(sessions, tenant, dep)
    # The step reaches neither a provider, the artifacts nor Temporal before it refuses.
    unused: Any = None
    acts = EvaluationActivities(sessions, unused, unused, unused, context_token_cap=16_000)
    data = EvaluationInput(evaluation_id="e", tenant_id=tenant, deployment_id=dep)
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(acts.prepare, data)
    assert refused.value.type == CANNOT_RUN and refused.value.non_retryable
    assert "does not read (license_metadata)" in refused.value.message
    assert _LEGACY_KEY not in refused.value.message


async def test_a_listing_profile_that_does_not_read_is_named_not_the_evaluations_failure(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """Its ValidationError failed the record step after the evidence was imported, retried for
    half an hour, then the evaluation Failed beside a deployment Evaluated on that evidence."""
    dep = "edge/listed"
    hexa = uuid.uuid4().hex[:6]
    bad, good = f"edge-{hexa}-unreadable", f"edge-{hexa}-fine"
    await register(http, auth, dep, model="listed-sim", endpointRef=upstream.endpoint_ref)
    for profile_id in (bad, good):
        event = profile_event(profile_id, [dep], {"tool-calling": 0.8}, maxContextTokens=8192)
        assert (await publish(http, auth, event)).status_code == 200
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == tenant)
            .where(col(ModelProfileRow.profile_id) == bad)
            .values(required_capabilities={"tool-calling": _LEGACY_LEVEL})
        )

    assert (await _evaluate(http, auth, dep, f"listed-{hexa}")).status_code == 202
    body = await _ended(http, auth, dep)
    evaluation = body["evaluation"]
    assert evaluation["status"] == "Completed", evaluation
    assert body["state"] == "Evaluated"
    assert body["evidence"]["evidenceRef"] == evaluation["evidenceRef"]
    [shortfall] = evaluation["summary"]["shortfalls"]
    assert (shortfall["code"], shortfall["profileId"]) == (PROFILE_UNREADABLE, bad)
    assert f"profile {bad} v1" in shortfall["message"]
    assert _LEGACY_LEVEL not in str(evaluation)

    # A failure reported after its outcome was recorded (the record step failed past its
    # bound after storing it) leaves the outcome: the deployment is Evaluated on it.
    unused: Any = None
    acts = EvaluationActivities(sessions, unused, unused, unused, context_token_cap=16_000)
    late = FailInput(evaluation_id=evaluation["evaluationId"], tenant_id=tenant, reason="late")
    await ActivityEnvironment().run(acts.fail, late)
    after = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
    assert after["evaluation"] == evaluation


async def test_the_evaluation_says_the_suite_version_its_evidence_was_recorded_with(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rolling deploy that bumps the suite: the API process inserted the row with its own
    version, the worker recorded the scores (and CapabilityEvidenceRecorded) with its own, and
    the row went on saying the API's."""
    dep = "edge/versions"
    await register(http, auth, dep, model="versions-sim", endpointRef=upstream.endpoint_ref)
    newer = "2099.1.1-next"
    with monkeypatch.context() as patched:
        patched.setattr(api_evaluations, "SUITE_VERSION", newer)
        started = await _evaluate(http, auth, dep, f"versions-{uuid.uuid4().hex}")
    assert started.status_code == 202, started.text
    assert started.json()["suiteVersion"] == newer  # the API's, while its run is under way

    body = await _ended(http, auth, dep)
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    recorded = {c["suiteVersion"] for c in body["evidence"]["capabilities"].values()}
    assert recorded == {SUITE_VERSION}
    assert body["evaluation"]["suiteVersion"] == SUITE_VERSION
