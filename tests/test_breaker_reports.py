"""What one process's breakers tell the fleet, and what the fleet's catalog tells them: a
Degraded report held while the process's own network looks at fault (the health probe's
network rule, domain/health.py), and an open breaker forgotten once the catalog judged its
deployment. On an injected clock; the last test runs the catalog through the real store and
lifecycle."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.lifecycle_client import LifecycleClient
from activities.resilience import BreakerRegistry
from core.settings import Settings
from domain.breaker import BreakerState
from domain.catalog import CatalogDeployment
from domain.enums import DeploymentState
from domain.lifecycle import Transition
from domain.snapshot import CatalogSnapshot
from providers.upstream import UpstreamServer
from routing.snapshots import SnapshotCache
from store.db import create_engine
from store.receipt_statements import ReceiptStatements
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment

COOLDOWN = 5.0
Reports = list[tuple[str, bool]]


def _registry(now: list[float], threshold: int = 1) -> tuple[BreakerRegistry, Reports]:
    reports: Reports = []
    breakers = BreakerRegistry(threshold=threshold, cooldown=COOLDOWN, clock=lambda: now[0])
    breakers.report = lambda _tenant, deployment, healthy: reports.append((deployment, healthy))
    return breakers, reports


def _failed_trial(
    breakers: BreakerRegistry, now: list[float], deployment: str, provider: str, kind: str
) -> None:
    """The breaker's cool-down passes and its trial fails: sustained failure."""
    now[0] += COOLDOWN
    breaker = breakers.get("t", deployment)
    assert breaker.allow() and breaker.state is BreakerState.HALF_OPEN
    breaker.failure(kind=kind, provider=provider)
    assert breaker.state is BreakerState.OPEN


def test_breakers_open_unreachable_on_two_providers_hold_the_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pod whose egress broke: every provider it calls fails to connect or times out. Its
    # report degraded each deployment for the whole fleet, the probe approved them again, and
    # the pod reported them again: a fleet-wide outage, over and over.
    now = [0.0]
    breakers, reports = _registry(now)
    breakers.get("t", "a").failure(kind="connection", provider="openai")
    breakers.get("t", "b").failure(kind="timeout", provider="anthropic")
    with caplog.at_level(logging.WARNING, logger="model_router.breakers"):
        _failed_trial(breakers, now, "a", "openai", "connection")
        _failed_trial(breakers, now, "a", "openai", "connection")
    assert reports == []
    assert not breakers.get("t", "a").allow()  # still kept off it here, the cool-down again
    held = [r for r in caplog.records if "own network suspected" in r.getMessage()]
    assert len(held) == 1  # logged once, not at every failed trial
    # The other provider answers again: a's failure is a's own now, and reported.
    now[0] += COOLDOWN
    b = breakers.get("t", "b")
    assert b.allow()
    b.success()
    _failed_trial(breakers, now, "a", "openai", "connection")
    assert reports == [("a", False)]


def test_breakers_open_unreachable_on_one_provider_report() -> None:
    # One provider unreachable (two of its deployments): its outage, reported as before.
    now = [0.0]
    breakers, reports = _registry(now)
    breakers.get("t", "a").failure(kind="connection", provider="openai")
    breakers.get("t", "a2").failure(kind="connection", provider="openai")
    _failed_trial(breakers, now, "a", "openai", "connection")
    assert reports == [("a", False)]
    # As the probe's rule has it, a deployment judged already (reported here) is left out of
    # the share, its provider still among those unreachable: with a second provider lost
    # too, nothing answers, and this process's network cannot be told from both outages.
    breakers.get("t", "b").failure(kind="timeout", provider="anthropic")
    _failed_trial(breakers, now, "b", "anthropic", "timeout")
    assert reports == [("a", False)]


def test_a_provider_that_answered_means_the_network_works() -> None:
    # The rule is the probe's, share included: a third provider open on a 5xx answered, so
    # two providers unreachable are two outages, not this process's network.
    now = [0.0]
    breakers, reports = _registry(now)
    breakers.get("t", "a").failure(kind="connection", provider="openai")
    breakers.get("t", "b").failure(kind="timeout", provider="anthropic")
    breakers.get("t", "c").failure(kind="server_error", provider="mistral")
    _failed_trial(breakers, now, "a", "openai", "connection")
    assert reports == [("a", False)]


def _deployment(deployment_id: str, state: DeploymentState, version: int) -> CatalogDeployment:
    return CatalogDeployment(
        deployment_id=deployment_id,
        tenant_id="t",
        provider="openai",
        model="m",
        region="eu",
        privacy_class="Regional",
        state=state,
        healthy=state is DeploymentState.APPROVED,
        version=version,
    )


def _catalog(version: int, *deployments: CatalogDeployment) -> CatalogSnapshot:
    return CatalogSnapshot.build(version=version, deployments=list(deployments))


APPROVED, DEGRADED = DeploymentState.APPROVED, DeploymentState.DEGRADED


def test_an_open_breaker_is_forgotten_once_the_catalog_says_degraded() -> None:
    # This process did not report it (another did): it routes nothing there meanwhile, so
    # its breaker stayed open through the outage; once the deployment was back its first call
    # was a trial, the others refused, and one blip on that trial degraded it fleet-wide again.
    now = [0.0]
    breakers, reports = _registry(now, threshold=3)
    v1 = _catalog(1, _deployment("a", APPROVED, 2))
    breakers.catalog_moved("t", None, v1)
    stale = breakers.get("t", "a")
    for _ in range(3):
        stale.failure(kind="server_error", provider="openai")
    assert stale.state is BreakerState.OPEN
    v2 = _catalog(2, _deployment("a", DEGRADED, 3))
    breakers.catalog_moved("t", v1, v2)
    breakers.catalog_moved("t", v2, _catalog(3, _deployment("a", APPROVED, 4)))
    now[0] += COOLDOWN
    fresh = breakers.get("t", "a")
    assert fresh is not stale and fresh.allow() and fresh.allow()  # every call, not one trial
    fresh.failure(kind="server_error", provider="openai")  # the first failure after recovery
    assert fresh.state is BreakerState.CLOSED and reports == []


def test_a_recovery_this_process_never_saw_degraded_forgets_the_breaker_too() -> None:
    # No call of the tenant here while the deployment was Degraded: no snapshot compiled in
    # between, and the next one has it Approved, its row two versions on.
    now = [0.0]
    breakers, _ = _registry(now)
    v1 = _catalog(1, _deployment("a", APPROVED, 2), _deployment("b", APPROVED, 2))
    breakers.catalog_moved("t", None, v1)
    for deployment in ("a", "b"):
        breakers.get("t", deployment).failure(provider="openai")
    kept = breakers.get("t", "b")
    v5 = _catalog(5, _deployment("a", APPROVED, 4), _deployment("b", APPROVED, 2))
    breakers.catalog_moved("t", v1, v5)
    assert breakers.get("t", "a").state is BreakerState.CLOSED
    # A catalog move that leaves the deployment as it was (b's row unchanged) keeps its
    # breaker: it is this process's only evidence, and nobody else's judgement replaced it.
    assert breakers.get("t", "b") is kept and kept.state is BreakerState.OPEN


def test_the_breaker_this_process_trials_back_is_kept() -> None:
    # The Degraded in the catalog is this process's own report: its trials close this breaker
    # (reporting the recovery), so the catalog leaves it be.
    now = [0.0]
    breakers, reports = _registry(now)
    breakers.trialling = lambda _tenant, deployment: deployment == "a"
    breakers.get("t", "a").failure(provider="openai")
    _failed_trial(breakers, now, "a", "openai", "server_error")
    assert reports == [("a", False)]
    trialled = breakers.get("t", "a")
    breakers.catalog_moved("t", None, _catalog(2, _deployment("a", DEGRADED, 3)))
    assert breakers.get("t", "a") is trialled
    trialled.success()
    assert reports == [("a", False), ("a", True)]


@pytest.fixture
async def statements(settings: Settings) -> AsyncIterator[ReceiptStatements]:
    engine = create_engine(settings.database_url, pre_ping=False)
    yield ReceiptStatements(engine)
    await engine.dispose()


async def test_a_snapshot_at_the_degraded_version_forgets_the_breaker(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    statements: ReceiptStatements,
) -> None:
    # The API process's snapshot cache tells its breakers of each catalog version it compiles
    # (the runtime wires `on_version` so); here with the real store and lifecycle.
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    deployment = "br/a"
    await approved_deployment(
        http,
        auth,
        temporal_client,
        tenant,
        deployment,
        model="br-primary",
        endpointRef=upstream.endpoint_ref,
    )
    now = [0.0]
    reports: Reports = []
    breakers = BreakerRegistry(threshold=1, cooldown=COOLDOWN, clock=lambda: now[0])
    breakers.report = lambda _tenant, dep, healthy: reports.append((dep, healthy))
    cache = SnapshotCache(sessions, statements)
    cache.on_version = breakers.catalog_moved
    await cache.view(tenant)
    stale = breakers.get(tenant, deployment)
    stale.failure(kind="server_error", provider="openai")
    assert stale.state is BreakerState.OPEN
    lifecycle = LifecycleClient(temporal_client)
    degraded = await lifecycle.transition(tenant, deployment, Transition.PROBE_FAILED)
    assert degraded.state is DeploymentState.DEGRADED  # another process's report, or the probe
    await cache.view(tenant)
    assert breakers.get(tenant, deployment) is not stale
    await lifecycle.transition(tenant, deployment, Transition.PROBE_RECOVERED)
    await cache.view(tenant)
    now[0] += COOLDOWN
    fresh = breakers.get(tenant, deployment)
    assert fresh.allow() and fresh.state is BreakerState.CLOSED  # a call, not a trial
    fresh.failure(kind="server_error", provider="openai")
    assert reports == []
