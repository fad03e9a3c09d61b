"""The invocation side of an API process: the hub, pooled adapters, and the in-process Temporal
workers that make eager start and in-memory streaming possible."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.invoke_hub import InvocationHub
from activities.invoke_setup import invoke_activities
from api.invocations import Invocations
from api.runtime_types import InvokeConfig
from core.settings import Settings
from store.artifacts import ArtifactStore
from workflows.deployment_lifecycle import workflow_id as lifecycle_workflow_id
from workflows.invoke import InvokeModelWorkflow

log = logging.getLogger("model_router.api")


class InvokeRuntime:
    def __init__(self, settings: Settings, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.settings = settings
        self.hub = InvocationHub()
        self.activities, self._adapters = invoke_activities(settings, sessions, self.hub)
        self.artifacts = ArtifactStore(settings.artifact_root)
        self.config = InvokeConfig(
            workflow_queue=settings.temporal_invocation_task_queue,
            caller_queue=f"{settings.temporal_invocation_task_queue}-api-{uuid.uuid4().hex[:12]}",
            timeout_seconds=settings.default_timeout_seconds,
        )
        self.service: Invocations | None = None
        self._workers: list[Worker] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._reports: set[asyncio.Task[None]] = set()

    def start(self, client: Client, runtime: Any) -> None:
        acts = self.activities
        # Eager start needs a worker on the workflow's queue built on the very client that
        # starts workflows; the caller queue is this process's alone.
        self._workers = [
            Worker(
                client,
                task_queue=self.config.workflow_queue,
                workflows=[InvokeModelWorkflow],
                activities=[acts.call_provider, acts.close_abandoned],
                max_concurrent_workflow_tasks=64,
            ),
            Worker(client, task_queue=self.config.caller_queue, activities=[acts.call_provider]),
        ]
        self._tasks = [asyncio.create_task(w.run()) for w in self._workers]
        self.service = Invocations(client, self.config, self.hub, self.artifacts, runtime)
        self.activities.breakers.report = self._lifecycle_reporter(client)

    def _lifecycle_reporter(self, client: Client) -> Callable[[str, str, bool], None]:
        """Sustained failure seen by this process's breakers goes to the deployment's
        lifecycle as probe_failed (Degraded), and recovery as probe_recovered."""

        async def report(tenant_id: str, deployment_id: str, healthy: bool) -> None:
            handle = client.get_workflow_handle(lifecycle_workflow_id(tenant_id, deployment_id))
            try:
                await handle.execute_update("probe_recovered" if healthy else "probe_failed")
            except Exception as exc:  # a retired or not-yet-approved deployment: nothing to do
                log.info("breaker report not applied: %s", type(exc).__name__)

        def schedule(tenant_id: str, deployment_id: str, healthy: bool) -> None:
            task = asyncio.get_running_loop().create_task(report(tenant_id, deployment_id, healthy))
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)

        return schedule

    async def stop(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(Exception):
                await worker.shutdown()
        for task in self._tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        await self._adapters.aclose()
