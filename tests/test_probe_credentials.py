"""Probes and breaker recovery trials resolve a deployment's credential as its tenant's, and a
probe that was never sent is no sample.

The registration check was the only one asking whether the deployment's tenant may name its
endpointRef: once the operator kept a shared reference for another tenant
(`secret_ref_tenants`), the deployments registered on it before were still probed every two
minutes with that tenant's key. And a probe that sent nothing (`credentials`) was recorded as a
failed sample, lowering the deployment's success rate in the router's history term."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.probe_types import HealthProbeReport
from activities.probes import ProbeActivities, send_probe
from activities.secret_policy import endpoint_broker
from core.settings import Settings
from domain.enums import DeploymentState
from domain.health import (
    CREDENTIALS,
    HealthProbeInput,
    ProbeOutcome,
    ProbeResult,
    ProbeTarget,
    sampled,
)
from providers.upstream import UpstreamServer
from store.probes import probe_latency
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment
from workflows.health_probe import HealthProbeWorkflow

MODEL = "shared-key-model"


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


@pytest.fixture
def shared_ref(monkeypatch: pytest.MonkeyPatch, upstream: UpstreamServer) -> str:
    """A shared `env:` reference (a key and its base URL) that names the local upstream."""
    name = f"MODEL_ROUTER_PROVIDER_SHARED_{uuid.uuid4().hex[:8].upper()}"
    monkeypatch.setenv(name, "sk-shared-0123456789")
    monkeypatch.setenv(f"{name}_BASE_URL", upstream.base_url)
    return f"env:{name}"


def _kept_for_another(settings: Settings, ref: str) -> Settings:
    """The operator's later setting: the reference is kept for another tenant."""
    return settings.model_copy(update={"secret_ref_tenants": {ref: ["tenant-a-owner"]}})


async def _stats(
    sessions: async_sessionmaker[AsyncSession], tenant: str, since: datetime
) -> tuple[int, int]:
    async with sessions() as session:
        found = await probe_latency(session, since=since, tenant_id=tenant)
    stats = [s.routing_stats() for s in found.values()]
    return sum(s.attempts for s in stats), sum(s.successes for s in stats)


async def test_a_deployment_whose_tenant_lost_its_reference_is_held_and_not_sampled(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    upstream: UpstreamServer,
    shared_ref: str,
) -> None:
    await approved_deployment(
        http, auth, temporal_client, tenant, "shared/probe", provider="local-upstream",
        model=MODEL, endpointRef=shared_ref,
    )  # fmt: skip
    first = datetime.fromtimestamp(int(time.time()) // 60 * 60, UTC)

    async def run(queue: str, minute: int) -> HealthProbeReport:
        # A window each: the same window would replay the first run's sample, sending nothing.
        data = HealthProbeInput(
            tenant_ids=[tenant],
            window_start=first + timedelta(minutes=minute),
            timeout_seconds=5,
            attempts=1,
        )
        return await temporal_client.execute_workflow(
            HealthProbeWorkflow.run,
            data,
            id=f"probe-test-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )

    # Allowed (the reference is shared): probed through it, one sample.
    allowed = await run(settings.temporal_task_queue, 0)
    assert (allowed.probed, allowed.ok) == (1, 1), allowed
    assert upstream.requests(MODEL) == 1
    since = first - timedelta(hours=1)
    assert await _stats(sessions, tenant, since) == (1, 1)

    # Kept for another tenant since: this worker's broker is the operator's new setting.
    restricted = endpoint_broker(_kept_for_another(settings, shared_ref))
    probes = ProbeActivities(sessions, restricted, settings.temporal_task_queue)
    queue = f"probe-kept-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[HealthProbeWorkflow],
        activities=[probes.targets, probes.probe, probes.apply_verdict, probes.prune],
    ):
        refused = await run(queue, 1)
    assert upstream.requests(MODEL) == 1  # nothing sent with the other tenant's key
    assert (refused.probed, refused.failed, refused.degraded) == (1, 1, []), refused
    assert refused.held == [f"{tenant}/shared/probe"]
    got = await http.get("/factory/model-deployments/shared/probe", headers=auth)
    assert got.json()["state"] == "Approved"
    # Not sent, so not a sample: the history term still reads one attempt, one success.
    assert await _stats(sessions, tenant, since) == (1, 1)


async def test_a_recovery_trial_is_not_sent_on_a_reference_kept_for_other_tenants(
    settings: Settings, upstream: UpstreamServer, shared_ref: str
) -> None:
    """The breaker's recovery trial is `send_probe` too (activities/breaker_recovery.py)."""
    target = ProbeTarget(
        tenant_id=f"tenant-b-{uuid.uuid4().hex[:8]}",
        deployment_id="shared/trial",
        provider="local-upstream",
        model=MODEL,
        endpoint_ref=shared_ref,
        state=DeploymentState.DEGRADED,
    )
    ok, _, _ = await send_probe(endpoint_broker(settings), target, 5)
    assert ok.outcome is ProbeOutcome.OK and upstream.requests(MODEL) == 1

    kept = endpoint_broker(_kept_for_another(settings, shared_ref))
    refused, transient, message = await send_probe(kept, target, 5)
    assert (refused.outcome, refused.error_class, transient) == (
        ProbeOutcome.FAILED,
        CREDENTIALS,
        False,
    )
    assert upstream.requests(MODEL) == 1
    # The reference, never the tenants it is kept for.
    assert shared_ref in message and "tenant-a-owner" not in message


def test_only_a_probe_that_was_sent_is_a_sample() -> None:
    def result(error: str | None) -> ProbeResult:
        outcome = ProbeOutcome.FAILED if error else ProbeOutcome.OK
        return ProbeResult(tenant_id="t", deployment_id="d", outcome=outcome, error_class=error)

    assert not sampled(result(CREDENTIALS))
    # A busy answer is the chance a call there gets through now (domain/health.py).
    assert sampled(result("rate_limit")) and sampled(result("overloaded"))
    assert sampled(result("timeout")) and sampled(result(None))
