"""Killing the worker in the middle of an approval and restarting it leaves the workflow, the
projection row and the events consistent: one transition, one event, one version step."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from datetime import UTC, datetime

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client, WorkflowUpdateStage

from activities.lifecycle_types import (
    ApproveRequest,
    LifecycleInput,
    RegisterRequest,
    workflow_id,
)
from core.settings import Settings
from domain.approval import IntendedUse
from domain.deployments import CapabilityMeasurement, DeploymentRegistration, EvidenceInput
from store.tables import ModelDeploymentRow, OutboxEventRow
from tests.helpers.deadline import eventually
from tests.helpers.process import Proc
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


def _worker(settings: Settings, queue: str) -> Proc:
    env = {
        **os.environ,
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": queue,
    }
    proc = Proc([sys.executable, "-c", "import worker; worker.main()"], env=env)
    proc.wait_for_line("worker polling", timeout=30)
    return proc


async def test_worker_killed_mid_approval_then_restarted_is_consistent(
    settings: Settings, temporal_client: Client, sessions: async_sessionmaker[AsyncSession]
) -> None:
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    dep = "crash/approve"
    first = _worker(settings, queue)
    second: Proc | None = None
    try:
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
            ),
            id=workflow_id(tenant, dep),
            task_queue=queue,
        )
        await handle.execute_update(
            DeploymentLifecycleWorkflow.register, RegisterRequest(idempotency_key="k")
        )
        await handle.execute_update(
            DeploymentLifecycleWorkflow.record_evidence,
            EvidenceInput(
                evidence_ref="eval/1",
                suite_version="s1",
                evaluated_at=datetime.now(UTC),
                scores={"tool-calling": CapabilityMeasurement(score=0.9, verdict="pass")},
            ),
        )

        # Hold the row so the approval's store step blocks mid-transaction (at its locked read
        # of the row), then kill the worker.
        url = make_url(settings.database_url)
        lock = await asyncpg.connect(
            host=url.host, port=url.port, user=url.username, database=url.database
        )
        tx = lock.transaction()
        await tx.start()
        await lock.execute(
            "SELECT 1 FROM model_deployments WHERE tenant_id=$1 AND deployment_id=$2 FOR UPDATE",
            tenant,
            dep,
        )
        update = await handle.start_update(
            DeploymentLifecycleWorkflow.approve,
            ApproveRequest(intended_use=[IntendedUse.COMMERCIAL_USE]),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )

        # Polled from another connection: statistics views are snapshotted per transaction.
        watcher = await asyncpg.connect(
            host=url.host, port=url.port, user=url.username, database=url.database
        )

        async def blocked() -> bool:
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE 'SELECT %FROM model_deployments%' "
                "AND query LIKE '%FOR UPDATE'"
            )
            return bool(waiting)

        await eventually(blocked, timeout=20)
        await watcher.close()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        await tx.rollback()
        await lock.close()

        second = _worker(settings, queue)

        async def settled() -> bool:
            async with sessions() as s:
                row = await s.get(ModelDeploymentRow, (tenant, dep))
                return row is not None and row.state == "Approved"

        # The killed attempt is retried on the new worker once its start-to-close timeout ends.
        await eventually(settled, timeout=60, interval=0.2)
        approved = await update.result()
        assert approved.state == "Approved" and approved.version == 3
        current = await handle.query(DeploymentLifecycleWorkflow.current)
        assert current is not None and current.state == "Approved"
    finally:
        first.stop()
        if second is not None:
            second.stop()

    async with sessions() as s:
        row = await s.get(ModelDeploymentRow, (tenant, dep))
        events = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    assert row is not None and (row.state, row.version) == ("Approved", 3)
    transitions = [
        (e.payload.get("fromState"), e.payload.get("toState"))
        for e in events
        if e.event_type == "DeploymentStateChanged"
    ]
    assert transitions == [
        (None, "Candidate"),
        ("Candidate", "Evaluated"),
        ("Evaluated", "Approved"),
    ]
