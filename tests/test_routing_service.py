"""The routing service on its own (routing.routes.Routes), against the real store: a call gets a
typed Route, a run's calls the plan ResolveRoutePlan pinned, and each way of having no route its
typed refusal."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.lifecycle_types import workflow_id
from core.settings import Settings
from domain.invocation import Operation
from domain.planner import PlanRequest
from domain.policy import DataClassification
from providers.upstream import UpstreamServer
from routing import snapshots
from routing.refusals import NoneAvailable, PolicyDenied, UnknownProfile, WrongModality
from routing.routes import Route, Routes
from routing.snapshots import SnapshotCache
from store.db import create_engine
from store.receipt_statements import ReceiptStatements
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish


@pytest.fixture
async def routes(
    settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[Routes]:
    engine = create_engine(settings.database_url, pre_ping=False)
    yield Routes(sessions, SnapshotCache(sessions, ReceiptStatements(engine)))
    await engine.dispose()


async def _on_upstream(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal: Client,
    tenant: str,
    upstream: UpstreamServer,
    deployment_id: str,
    **fields: str,
) -> None:
    """An Approved deployment on the local upstream, of a model name of its own."""
    model = f"{deployment_id.replace('/', '-')}-{uuid.uuid4().hex[:8]}"
    await approved_deployment(
        http,
        auth,
        temporal,
        tenant,
        deployment_id,
        model=model,
        endpointRef=upstream.endpoint_ref,
        **fields,
    )


async def _degrade(temporal: Client, tenant: str, deployment_id: str) -> None:
    """What the health probe does when the deployment's probes fail: Approved → Degraded."""
    handle = temporal.get_workflow_handle(workflow_id(tenant, deployment_id))
    assert (await handle.execute_update("probe_failed", result_type=dict))["state"] == "Degraded"


async def test_a_process_keeps_the_snapshots_of_the_tenants_it_compiled_last(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each snapshot holds its tenant's whole catalog: a process kept every tenant it had ever
    served (some 100-300 KB each, for its life)."""
    monkeypatch.setattr(snapshots, "MAX_TENANTS", 2)
    engine = create_engine(settings.database_url, pre_ping=False)
    try:
        cache = SnapshotCache(sessions, ReceiptStatements(engine))
        tenants = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(3)]
        for tenant in tenants:
            await cache.view(tenant)
        assert [cache.cached(t) is not None for t in tenants] == [False, True, True]
        assert (await cache.view(tenants[0])).tenant_id == tenants[0]  # compiled again
        assert cache.cached(tenants[1]) is None
    finally:
        await engine.dispose()


async def test_a_call_gets_a_typed_route_and_a_run_its_pinned_plan(
    routes: Routes,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await _on_upstream(http, auth, temporal_client, tenant, upstream, "rs/a")
    resp = await publish(http, auth, profile_event("rs-chat", ["rs/a"], {}))
    assert resp.status_code == 200, resp.text
    needs = PlanRequest(tenant_id=tenant, data_classification=DataClassification.INTERNAL)

    route = await routes.route(needs, "rs-chat", None, Operation.CHAT)
    assert isinstance(route, Route)
    assert [t.deployment_id for t in route.targets] == ["rs/a"]
    assert route.route_plan_id is None  # a call without a run pins nothing
    assert (route.primary_deployment_id, route.primary_passed_over) == ("rs/a", None)

    run = uuid.uuid4()
    row, created = await routes.pin(needs, "rs-chat", run)
    assert created and row.candidates == ["rs/a"]
    again, created = await routes.pin(needs, "rs-chat", run)
    assert not created and again.route_plan_id == row.route_plan_id
    on_run = await routes.route(needs, "rs-chat", run, Operation.CHAT)
    assert on_run.route_plan_id == row.route_plan_id
    assert on_run.policy_decision_id == row.policy_decision_id

    with pytest.raises(UnknownProfile):
        await routes.route(needs, "rs-nowhere", None, Operation.CHAT)
    with pytest.raises(UnknownProfile):
        await routes.pin(needs, "rs-nowhere", uuid.uuid4())
    with pytest.raises(WrongModality) as wrong:
        await routes.route(needs, "rs-chat", None, Operation.EMBED)
    assert (wrong.value.modality.value, wrong.value.needed.value) == ("Chat", "Embedding")

    # The baseline policy keeps Restricted data on Local deployments: a denial about the data,
    # from the call's decision and from ResolveRoutePlan's alike, and no plan is pinned.
    restricted = needs.model_copy(update={"data_classification": DataClassification.RESTRICTED})
    with pytest.raises(PolicyDenied) as denied:
        await routes.route(restricted, "rs-chat", None, Operation.CHAT)
    assert (denied.value.reason, denied.value.about_data) == ("privacy_denied_by_policy", True)
    with pytest.raises(PolicyDenied):
        await routes.pin(restricted, "rs-chat", uuid.uuid4())


async def test_a_profile_with_no_routable_deployment_is_none_available(
    routes: Routes, http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    # Listed but never registered: not in the catalog, which is no denial.
    resp = await publish(http, auth, profile_event("rs-empty", ["rs/ghost"], {}))
    assert resp.status_code == 200, resp.text
    needs = PlanRequest(tenant_id=tenant, data_classification=DataClassification.INTERNAL)
    with pytest.raises(NoneAvailable) as none:
        await routes.route(needs, "rs-empty", None, Operation.CHAT)
    assert none.value.profile_id == "rs-empty"
    # The reason a mistyped id and an outage are told apart by (the spec's "class transient
    # and reason").
    assert (none.value.reason, none.value.excluded) == (
        "not_in_catalog",
        [("rs/ghost", "not_in_catalog")],
    )
    with pytest.raises(NoneAvailable):
        await routes.pin(needs, "rs-empty", uuid.uuid4())


async def test_a_policy_denial_is_the_same_while_a_deployment_it_refuses_is_degraded(
    routes: Routes,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    # The baseline policy keeps Restricted data on Local deployments; rs/x is Regional. Health
    # is the planner's first filter: Degraded, rs/x was excluded as unhealthy alone, and a
    # Restricted call was the transient 503 it is refused as only once rs/x recovered.
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await _on_upstream(http, auth, temporal_client, tenant, upstream, "rs/x")
    resp = await publish(http, auth, profile_event("rs-deg", ["rs/x"], {}))
    assert resp.status_code == 200, resp.text
    await _degrade(temporal_client, tenant, "rs/x")

    restricted = PlanRequest(tenant_id=tenant, data_classification=DataClassification.RESTRICTED)
    with pytest.raises(PolicyDenied) as denied:
        await routes.route(restricted, "rs-deg", None, Operation.CHAT)
    assert (denied.value.reason, denied.value.about_data) == ("privacy_denied_by_policy", True)
    with pytest.raises(PolicyDenied):
        await routes.pin(restricted, "rs-deg", uuid.uuid4())
    # Data the policy lets rs/x see: waiting on rs/x's recovery is the answer.
    internal = restricted.model_copy(update={"data_classification": DataClassification.INTERNAL})
    with pytest.raises(NoneAvailable) as none:
        await routes.route(internal, "rs-deg", None, Operation.CHAT)
    assert none.value.waiting_on == ["rs/x"]
    assert (none.value.reason, none.value.excluded) == ("unhealthy", [("rs/x", "unhealthy")])
    with pytest.raises(NoneAvailable):
        await routes.pin(internal, "rs-deg", uuid.uuid4())


async def test_a_fallback_chain_waited_on_makes_the_refusal_transient(
    routes: Routes,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    # Restricted data: the baseline policy refuses the profile's own Regional rs/r, and lets the
    # chain's Local rs/l see it. Both Degraded: the chain will take the call once rs/l is back,
    # so the answer is the 503 waiting on it, not the profile's denial.
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for dep, privacy in (("rs/r", "Regional"), ("rs/l", "Local")):
        await _on_upstream(http, auth, temporal_client, tenant, upstream, dep, privacyClass=privacy)
    for event in (
        profile_event("rs-local", ["rs/l"], {}, privacyClass="Local"),
        profile_event("rs-main", ["rs/r"], {}, fallbackEnabled=True, fallbackChain=["rs-local"]),
    ):
        resp = await publish(http, auth, event)
        assert resp.status_code == 200, resp.text
    for dep in ("rs/r", "rs/l"):
        await _degrade(temporal_client, tenant, dep)
    restricted = PlanRequest(tenant_id=tenant, data_classification=DataClassification.RESTRICTED)
    with pytest.raises(NoneAvailable) as none:
        await routes.route(restricted, "rs-main", None, Operation.CHAT)
    assert "rs/l" in none.value.waiting_on
    assert none.value.reason == "unhealthy"
