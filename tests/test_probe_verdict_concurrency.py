"""Health-probe verdicts against the real dev server, real lifecycle workflows and the upstream
simulator, on a worker with few activity slots: a verdict's activity holds a slot while it waits
on its lifecycle's update, and the update needs another slot on the same queue to write the row.
Released together, more Degrades than the worker had slots took every one, and not one had
landed 30 s later, short of the verdicts' own 40 s timeout."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from activities.lifecycle import LifecycleActivities
from activities.lifecycle_client import LifecycleClient
from activities.lifecycle_types import ApproveRequest
from activities.probes import ProbeActivities
from activities.secret_policy import endpoint_broker
from core.settings import Settings
from domain.approval import IntendedUse
from domain.deployments import DeploymentRegistration
from domain.health import HealthProbeInput
from domain.lifecycle import Transition
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.repositories import ModelDeploymentRepository
from tests.helpers.catalog import deployment_body, record_evidence
from tests.helpers.deadline import UNBOUNDED, eventually
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow
from workflows.health_probe import VERDICTS_AT_ONCE, HealthProbeWorkflow

# The fewest slots the bound leaves one free in: one more than the verdicts applied at once.
SLOTS = VERDICTS_AT_ONCE + 1
# More Degrades than slots, so that applied together they cannot all hold one.
LOST = [f"lost/{i}" for i in range(SLOTS + 3)]


async def _approved(
    client: Client, queue: str, tenant: str, deployment_id: str, **fields: object
) -> None:
    """Registered, given passing evidence and approved, its lifecycle on `queue`."""
    lifecycle = LifecycleClient(client)
    registration = DeploymentRegistration.model_validate(deployment_body(deployment_id, **fields))
    await lifecycle.register(queue, tenant, uuid.uuid4().hex, registration)
    await record_evidence(client, tenant, deployment_id, {"tool-calling": 0.9})
    await lifecycle.transition(
        tenant,
        deployment_id,
        Transition.APPROVE,
        ApproveRequest(intended_use=[IntendedUse.COMMERCIAL_USE]),
    )


async def _states(
    sessions: async_sessionmaker[AsyncSession], tenant: str, deployments: list[str]
) -> dict[str, str]:
    states: dict[str, str] = {}
    async with sessions() as session:
        repository = ModelDeploymentRepository(session, tenant)
        for deployment in deployments:
            row = await repository.get(deployment)
            states[deployment] = str(row.state) if row is not None else "missing"
    return states


async def test_degrades_released_together_all_land_on_a_worker_with_few_slots(
    tenant: str,
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # One provider drops every connection; another's probe answers, but only once the test lets
    # it. Until then the failures may still be this worker's own network (two providers), so
    # the Degrades wait, and its answer releases them all in one workflow task.
    queue = f"probe-slots-{uuid.uuid4().hex[:8]}"
    lifecycle = LifecycleActivities(sessions)
    probes = ProbeActivities(sessions, endpoint_broker(settings), queue)
    async with (
        UpstreamServer() as upstream,
        Worker(
            temporal_client,
            task_queue=queue,
            workflows=[DeploymentLifecycleWorkflow, HealthProbeWorkflow],
            activities=[
                lifecycle.register_candidate,
                lifecycle.apply_transition,
                lifecycle.check_approval,
                probes.targets,
                probes.probe,
                probes.apply_verdict,
                probes.prune,
            ],
            max_concurrent_activities=SLOTS,
        ),
    ):
        for deployment in LOST:
            await _approved(
                temporal_client, queue, tenant, deployment, provider="openai", model="lost",
                endpointRef=upstream.endpoint_ref,
            )  # fmt: skip
        await _approved(
            temporal_client, queue, tenant, "slow/ok", provider="anthropic", model="slow",
            endpointRef=upstream.endpoint_ref,
        )  # fmt: skip
        upstream.inject("lost", Fault(kind=FaultKind.HANG_UP, delay=0))
        # Held until `release()`: the 600 s are only a bound should the test never get there.
        upstream.inject("slow", Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=600))
        handle = await temporal_client.start_workflow(
            HealthProbeWorkflow.run,
            HealthProbeInput(
                tenant_ids=[tenant], timeout_seconds=60, attempts=1, concurrency=len(LOST) + 1
            ),
            id=f"probe-slots-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        try:

            async def only_the_slow_probe_out() -> bool:
                # The run's probes were scheduled together, and the slow one cannot end before
                # `release()`: one probe still out is that one.
                pending = (await handle.describe()).raw_description.pending_activities
                return [p.activity_type.name for p in pending] == ["probe_deployment"]

            await eventually(only_the_slow_probe_out, timeout=UNBOUNDED)
            assert await _states(sessions, tenant, LOST) == {d: "Approved" for d in LOST}
            upstream.release()
            try:
                report = await asyncio.wait_for(handle.result(), UNBOUNDED)
            except TimeoutError:
                # Starved, nothing moves before the verdicts' own 40 s timeout.
                out = (await handle.describe()).raw_description.pending_activities
                raise AssertionError(
                    f"the run is not over after {UNBOUNDED}s: "
                    f"{await _states(sessions, tenant, LOST)}, "
                    f"its activities out: {[p.activity_type.name for p in out]}"
                ) from None
        finally:
            if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
                await handle.terminate("test over")
    assert (report.probed, report.ok, report.failed, report.held) == (
        len(LOST) + 1, 1, len(LOST), [],
    ), report  # fmt: skip
    # A verdict not applied (its activity failed, the run logging it) is left out of `degraded`.
    assert report.degraded == sorted(f"{tenant}/{d}" for d in LOST)
    states = await _states(sessions, tenant, [*LOST, "slow/ok"])
    assert states == {**{d: "Degraded" for d in LOST}, "slow/ok": "Approved"}
