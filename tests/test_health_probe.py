"""The health probe against the real dev server, a real deployment lifecycle and the local
upstream simulator with fault injection: Approved → Degraded at the next probe when the
upstream fails, Degraded → Approved when it recovers, each with its event, and never a receipt."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, func, select
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.worker import Worker

from activities.probe_types import HealthProbeReport
from activities.probes import ProbeActivities
from core import metrics
from core.local_ports import free_port
from core.settings import Settings
from domain.health import HealthProbeInput
from providers.secrets import Connection, SecretResolutionError
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.probes import probe_latency
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import (
    approved_deployment,
    profile_event,
    publish,
    record_evidence,
    register,
)
from tests.helpers.deadline import eventually
from workflows.health_probe import HealthProbeWorkflow

MODEL = "probe-model"


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _state(http: httpx.AsyncClient, auth: dict[str, str], deployment: str) -> str:
    got = (await http.get(f"/factory/model-deployments/{deployment}", headers=auth)).json()
    return str(got["state"])


async def _transitions(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> list[tuple[str, str, bool]]:
    async with sessions() as s:
        rows = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.event_type) == "DeploymentStateChanged")
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    return [
        (r.payload["fromState"], r.payload["toState"], r.payload["healthy"])
        for r in rows
        if r.payload["fromState"] in ("Approved", "Degraded")
    ]


async def test_a_failing_upstream_degrades_the_deployment_and_recovery_restores_it(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with UpstreamServer() as upstream:
        await register(
            http, auth, "sim/probe", provider="local-upstream", model=MODEL,
            endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        await register(  # a Candidate is never probed
            http, auth, "sim/candidate", provider="local-upstream", model="candidate-model",
            endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        await record_evidence(temporal_client, tenant, "sim/probe", {"tool-calling": 0.95})
        approved = await http.post("/factory/model-deployments/sim/probe/approve", headers=auth)
        assert approved.status_code == 200, approved.text

        first = datetime.fromtimestamp(int(time.time()) // 60 * 60, UTC)

        async def probe(minute: int) -> HealthProbeReport:
            return await temporal_client.execute_workflow(
                HealthProbeWorkflow.run,
                HealthProbeInput(
                    tenant_ids=[tenant],
                    window_start=first + timedelta(minutes=minute),
                    timeout_seconds=5,
                    attempts=2,
                    retry_interval_seconds=0.2,
                ),
                id=f"probe-test-{uuid.uuid4().hex[:8]}",
                task_queue=settings.temporal_task_queue,
            )

        async def state() -> tuple[str, bool]:
            got = (await http.get("/factory/model-deployments/sim/probe", headers=auth)).json()
            return got["state"], got["healthy"]

        healthy = await probe(0)
        assert (healthy.probed, healthy.ok, healthy.degraded) == (1, 1, [])
        assert upstream.requests(MODEL) == 1 and upstream.requests("candidate-model") == 0

        upstream.inject(MODEL, Fault(kind=FaultKind.SERVER_ERROR))
        failing = await probe(1)
        assert failing.degraded == [f"{tenant}/sim/probe"]
        assert await state() == ("Degraded", False)
        assert upstream.requests(MODEL) == 3  # a transient failure is tried again once

        again = await probe(1)  # the same window: the recorded result, no second probe
        assert (again.failed, again.degraded) == (1, [])
        assert upstream.requests(MODEL) == 3

        upstream.state.clear_faults(MODEL)
        recovered = await probe(2)
        assert recovered.recovered == [f"{tenant}/sim/probe"]
        assert await state() == ("Approved", True)

        upstream.inject(MODEL, Fault(kind=FaultKind.AUTH))
        refused = await probe(3)
        assert refused.degraded == [f"{tenant}/sim/probe"]
        assert upstream.requests(MODEL) == 5  # an auth failure is not retried

    assert await _transitions(sessions, tenant) == [
        ("Approved", "Degraded", False),
        ("Degraded", "Approved", True),
        ("Approved", "Degraded", False),
    ]
    async with sessions() as s:
        stats = await probe_latency(s, since=first, tenant_id=tenant)
        receipts = await s.scalar(
            select(func.count())
            .select_from(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
        )
        invoked = await s.scalar(
            select(func.count())
            .select_from(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
            .where(col(OutboxEventRow.event_type) == "ModelInvoked")
        )
    # A probe is not an invocation: no receipt, no usage event, no budget.
    assert (receipts, invoked) == (0, 0)
    latency = stats[(tenant, "sim/probe")]
    assert (latency.latency_samples, latency.probes, latency.failures) == (2, 4, 2)
    assert latency.latency_p50_ms is not None and latency.latency_p95_ms is not None
    assert latency.latency_p50_ms <= latency.latency_p95_ms
    attrs = {"provider": "local-upstream", "deployment": "sim/probe"}
    assert metrics.probe_outcomes.value({**attrs, "outcome": "failed"}) >= 2
    assert len(metrics.probe_latency.values(attrs)) >= 2


async def test_a_reranker_no_profile_lists_yet_is_probed_with_a_rerank(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    """A deployment no active profile lists is probed by what its adapter can answer: a chat
    request to a reranker failed as unsupported, and it went Degraded at the first probe."""
    async with UpstreamServer() as upstream:
        await approved_deployment(
            http, auth, temporal_client, tenant, "sim/reranker", provider="rerank",
            model="probe-rerank", endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        report: HealthProbeReport = await temporal_client.execute_workflow(
            HealthProbeWorkflow.run,
            HealthProbeInput(
                tenant_ids=[tenant],
                window_start=datetime.fromtimestamp(int(time.time()) // 60 * 60, UTC),
                timeout_seconds=5,
                attempts=1,
            ),
            id=f"probe-rerank-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
        assert (report.probed, report.ok, report.degraded) == (1, 1, []), report
        assert upstream.requests("probe-rerank") == 1
    assert await _state(http, auth, "sim/reranker") == "Approved"


async def test_failures_to_reach_two_providers_at_once_hold_the_degrade_verdicts(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    # The probing worker lost its egress: every deployment, on two providers, is unreachable.
    # Degrading them all left the router refusing every call until the next run.
    gone = f"upstream:127.0.0.1:{free_port()}"  # nothing listens there
    for deployment, provider in (("gone/openai", "openai"), ("gone/anthropic", "anthropic")):
        await approved_deployment(
            http, auth, temporal_client, tenant, deployment, provider=provider, model=MODEL,
            endpointRef=gone,
        )  # fmt: skip
    report = await temporal_client.execute_workflow(
        HealthProbeWorkflow.run,
        HealthProbeInput(
            tenant_ids=[tenant], timeout_seconds=2, attempts=1, retry_interval_seconds=0.2
        ),
        id=f"probe-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    assert (report.probed, report.failed, report.degraded) == (2, 2, [])
    assert report.held == [f"{tenant}/gone/anthropic", f"{tenant}/gone/openai"]
    # A second run in the window replays the held failures: they stay held.
    again = await temporal_client.execute_workflow(
        HealthProbeWorkflow.run,
        HealthProbeInput(tenant_ids=[tenant], window_start=report.window_start, attempts=1),
        id=f"probe-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    assert (again.failed, again.degraded, again.held) == (2, [], report.held)
    for deployment in ("gone/openai", "gone/anthropic"):
        assert await _state(http, auth, deployment) == "Approved"


async def test_a_cancelled_run_stops_and_judges_nothing(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    # A guard: the run's cancellation reaches the probes it awaits together (asyncio.gather
    # cancels them and raises), so the run stops there, judging nothing, rather than taking a
    # probe cut short for one that did not run.
    async with UpstreamServer() as upstream:
        upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
        await approved_deployment(
            http, auth, temporal_client, tenant, "sim/hung", provider="local-upstream",
            model=MODEL, endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        handle = await temporal_client.start_workflow(
            HealthProbeWorkflow.run,
            HealthProbeInput(tenant_ids=[tenant], timeout_seconds=60, attempts=1),
            id=f"probe-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
        await eventually(lambda: upstream.requests(MODEL) >= 1)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), 30)
        assert isinstance(ended.value.cause, CancelledError), ended.value.cause
    assert await _state(http, auth, "sim/hung") == "Approved"


async def test_probes_still_hanging_at_the_deadline_are_cut_and_the_rest_are_judged(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    # A provider that hangs holds its probes for their whole timeout. The scheduled run has a
    # timeout of its own (10 minutes): judging only once every probe returned, a large fleet
    # behind a hanging provider timed the run out with no verdict applied at all. Here the run
    # times out at 25 s, the hanging probes would hold 30 s, and the deadline is 10 s.
    async with UpstreamServer() as upstream:
        upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
        upstream.inject("probe-bad", Fault(kind=FaultKind.SERVER_ERROR))
        for deployment, model in (
            ("sim/hung-1", MODEL),
            ("sim/hung-2", MODEL),
            ("sim/hung-3", MODEL),
            ("sim/bad", "probe-bad"),
        ):
            await approved_deployment(
                http, auth, temporal_client, tenant, deployment, provider="local-upstream",
                model=model, endpointRef=upstream.endpoint_ref,
            )  # fmt: skip
        report = await temporal_client.execute_workflow(
            HealthProbeWorkflow.run,
            HealthProbeInput(
                tenant_ids=[tenant],
                timeout_seconds=30,
                attempts=1,
                concurrency=4,
                deadline_seconds=10,
            ),
            id=f"probe-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
            execution_timeout=timedelta(seconds=25),
        )
        assert (report.probed, report.unprobed, report.failed) == (4, 3, 1), report
        assert report.degraded == [f"{tenant}/sim/bad"]
        assert upstream.requests(MODEL) == 3
    assert await _state(http, auth, "sim/bad") == "Degraded"
    assert await _state(http, auth, "sim/hung-1") == "Approved"


@pytest.mark.parametrize("busy", [FaultKind.RATE_LIMIT, FaultKind.OVERLOADED])
async def test_a_probe_answered_busy_degrades_nothing(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
    busy: FaultKind,
) -> None:
    """At its rate limit under real traffic, a deployment's probe got a 429 (or Anthropic's
    529): it went Degraded, its traffic went elsewhere, the next probe got through and it went
    Approved again, every few minutes. A busy answer is the deployment serving others."""
    model = f"busy-{uuid.uuid4().hex[:6]}"
    async with UpstreamServer() as upstream:
        await approved_deployment(
            http, auth, temporal_client, tenant, "sim/busy", provider="anthropic", model=model,
            endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        upstream.inject(model, Fault(kind=busy))
        report: HealthProbeReport = await temporal_client.execute_workflow(
            HealthProbeWorkflow.run,
            HealthProbeInput(
                tenant_ids=[tenant], timeout_seconds=5, attempts=2, retry_interval_seconds=0.2
            ),
            id=f"probe-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
        assert upstream.requests(model) >= 1
    assert (report.failed, report.degraded) == (1, [])
    assert report.held == [f"{tenant}/sim/busy"]
    assert await _state(http, auth, "sim/busy") == "Approved"


async def _run(
    temporal_client: Client, queue: str, tenant: str, **over: object
) -> HealthProbeReport:
    data = HealthProbeInput.model_validate(
        {"tenant_ids": [tenant], "timeout_seconds": 5, "attempts": 1, **over}
    )
    return await temporal_client.execute_workflow(
        HealthProbeWorkflow.run,
        data,
        id=f"probe-test-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )


async def test_an_embedding_deployment_only_a_retired_profile_lists_is_probed_with_an_embedding(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    """Modality was read from Active profiles alone: an embedding deployment whose profile was
    retired got a chat request, failed it (not a chat model) and went Degraded, and every later
    probe failed the same way, so it never recovered."""
    model = f"embed-{uuid.uuid4().hex[:6]}"
    async with UpstreamServer() as upstream:
        await approved_deployment(
            http, auth, temporal_client, tenant, "sim/embedder", provider="local-upstream",
            model=model, endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        event = profile_event(f"emb-{uuid.uuid4().hex[:6]}", ["sim/embedder"], {})
        event["profile"]["modality"] = "Embedding"
        assert (await publish(http, auth, event)).status_code == 200
        retired = await publish(
            http,
            auth,
            {
                "eventType": "AssetReleaseDeprecated",
                "releaseId": event["releaseId"],
                "profileId": event["profile"]["profileId"],
                "version": event["profile"]["version"],
            },
        )
        assert retired.status_code == 200, retired.text
        # An embedding model refuses a chat request for good.
        upstream.inject(model, Fault(kind=FaultKind.AUTH, endpoint="chat.completions"))
        report = await _run(temporal_client, settings.temporal_task_queue, tenant)
        assert (report.probed, report.ok, report.degraded) == (1, 1, []), report
        assert upstream.requests(model, "embeddings") == 1
        assert upstream.requests(model, "chat.completions") == 0
    assert await _state(http, auth, "sim/embedder") == "Approved"


class _NoSecrets:
    """A worker started without its secret volume: no reference resolves."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(self, endpoint_ref: str) -> Connection:
        self.asked.append(endpoint_ref)
        raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: not readable here")


async def test_a_worker_that_resolves_no_credential_degrades_nothing(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
) -> None:
    """A worker rolled out without its secret volume failed every probe as `credentials`,
    non-transient, and degraded the whole fleet, though the API processes resolved every key.
    The probe did not run: the verdicts are held and nothing is sent."""
    async with UpstreamServer() as upstream:
        for deployment, provider in (("keys/openai", "openai"), ("keys/anthropic", "anthropic")):
            await approved_deployment(
                http, auth, temporal_client, tenant, deployment, provider=provider,
                model=MODEL, endpointRef=upstream.endpoint_ref,
            )  # fmt: skip
        broker = _NoSecrets()
        probes = ProbeActivities(sessions, broker, settings.temporal_task_queue)
        queue = f"probe-no-secrets-{uuid.uuid4().hex[:8]}"
        async with Worker(
            temporal_client,
            task_queue=queue,
            workflows=[HealthProbeWorkflow],
            activities=[probes.targets, probes.probe, probes.apply_verdict, probes.prune],
        ):
            report = await _run(temporal_client, queue, tenant)
        assert sorted(broker.asked) == [upstream.endpoint_ref] * 2
        assert upstream.requests() == 0
    assert (report.probed, report.failed, report.degraded) == (2, 2, []), report
    assert report.held == [f"{tenant}/keys/anthropic", f"{tenant}/keys/openai"]
    for deployment in ("keys/openai", "keys/anthropic"):
        assert await _state(http, auth, deployment) == "Approved"
    # Not sent, so no sample for the router's history term to count as a failure.
    async with sessions() as session:
        since = datetime.now(UTC) - timedelta(hours=1)
        assert await probe_latency(session, since=since, tenant_id=tenant) == {}


async def test_a_reference_that_is_wrong_is_logged_and_counted_not_degraded(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One deployment's reference names the gateway's own signing key: no process may send it.
    The worker cannot tell a wrong reference from its own missing secret, so the deployment is
    held, not degraded; the operator learns of it from the log line and the `credentials`
    count, neither of which carries the secret."""
    variable = f"MODEL_ROUTER_PROVIDER_WRONG_{uuid.uuid4().hex[:8].upper()}"
    assert settings.auth_jwt_secret is not None
    secret = settings.auth_jwt_secret.get_secret_value()
    monkeypatch.setenv(variable, secret)
    async with UpstreamServer() as upstream:
        await approved_deployment(
            http, auth, temporal_client, tenant, "keys/wrong", provider="anthropic",
            model=MODEL, endpointRef=f"env:{variable}",
        )  # fmt: skip
        await approved_deployment(
            http, auth, temporal_client, tenant, "keys/right", provider="local-upstream",
            model=MODEL, endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        counted = {"provider": "anthropic", "class": "credentials"}
        before = metrics.provider_errors.value(counted)
        caplog.set_level(logging.WARNING, logger="model_router.probes")
        report = await _run(temporal_client, settings.temporal_task_queue, tenant)
        assert upstream.requests(MODEL) == 1
    assert (report.ok, report.failed, report.degraded) == (1, 1, []), report
    assert report.held == [f"{tenant}/keys/wrong"]
    assert await _state(http, auth, "keys/wrong") == "Approved"
    assert metrics.provider_errors.value(counted) == before + 1
    # This tenant's lines: the worker serves every test of the process.
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "model_router.probes"
        and r.levelno == logging.WARNING
        and tenant in r.getMessage()
    ]
    assert len(said) == 1 and f"{tenant}/keys/wrong" in said[0] and variable in said[0], said
    assert secret not in caplog.text and secret not in report.model_dump_json()


async def test_a_probe_that_did_not_run_does_not_dilute_the_network_rule(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    # Two providers unreachable, and a third deployment whose credential this worker lacks:
    # counted as a probe that reached its deployment, it made two of three (67 %) and the
    # worker's lost egress degraded both unreachable ones.
    gone = f"upstream:127.0.0.1:{free_port()}"  # nothing listens there
    for deployment, provider, ref in (
        ("gone/openai", "openai", gone),
        ("gone/anthropic", "anthropic", gone),
        ("keys/unset", "openai", f"env:MODEL_ROUTER_PROVIDER_UNSET_{uuid.uuid4().hex[:8].upper()}"),
    ):
        await approved_deployment(
            http, auth, temporal_client, tenant, deployment, provider=provider, model=MODEL,
            endpointRef=ref,
        )  # fmt: skip
    report = await _run(temporal_client, settings.temporal_task_queue, tenant, timeout_seconds=2)
    assert (report.probed, report.failed, report.degraded) == (3, 3, []), report
    assert report.held == [f"{tenant}/{d}" for d in ("gone/anthropic", "gone/openai", "keys/unset")]


async def test_a_verdict_lands_while_another_providers_probes_still_hang(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    temporal_client: Client,
) -> None:
    """Judged together, a deployment failing at once stayed Approved (and routed) until the
    slowest probe of the run was in: up to the run's deadline, 5.5 minutes, behind one
    provider's hanging probes. No result still out can make those hangs the worker's own
    network (they are one provider's), so the Degrade lands at once."""
    async with UpstreamServer() as upstream:
        upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
        upstream.inject("probe-bad", Fault(kind=FaultKind.SERVER_ERROR))
        for deployment, provider, model in (
            ("sim/hung-1", "local-upstream", MODEL),
            ("sim/hung-2", "local-upstream", MODEL),
            ("sim/bad", "anthropic", "probe-bad"),
        ):
            await approved_deployment(
                http, auth, temporal_client, tenant, deployment, provider=provider,
                model=model, endpointRef=upstream.endpoint_ref,
            )  # fmt: skip
        handle = await temporal_client.start_workflow(
            HealthProbeWorkflow.run,
            # The hanging probes hold 60 s, three times as long as the wait below.
            HealthProbeInput(tenant_ids=[tenant], timeout_seconds=60, attempts=1),
            id=f"probe-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
        try:
            await eventually(lambda: _is(http, auth, "sim/bad", "Degraded"), timeout=20)
            assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
            assert upstream.requests(MODEL) == 2
        finally:
            await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
    assert await _state(http, auth, "sim/hung-1") == "Approved"


async def _is(http: httpx.AsyncClient, auth: dict[str, str], deployment: str, state: str) -> bool:
    return await _state(http, auth, deployment) == state
