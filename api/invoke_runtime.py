"""The invocation side of an API process: the hub, pooled adapters, the in-process Temporal
workers that make eager start and in-memory streaming possible, and the breakers' reports to
the lifecycle with their recovery trials."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities.adapter_pool import AdapterPool
from activities.breaker_recovery import BreakerRecovery
from activities.invoke_hub import InvocationHub
from activities.invoke_setup import (
    INVOKE_WORKFLOW_RUNNER,
    InlineWorkflowTasks,
    first_activation_hold,
    invoke_activities,
)
from activities.secret_policy import endpoint_broker
from api.come_back import ComeBack
from api.given_up_claims import GivenUpClaims
from api.invocation_workers import InvocationWorkers
from api.invocations import Invocations
from api.replays import Replays
from api.runtime_types import InvokeConfig
from api.temporal_gate import TemporalGate
from core.settings import Settings
from domain.sweep import unstarted_bound, workflow_ceiling_seconds
from routing.routes import Routes
from store.receipt_statements import ReceiptStatements
from workflows.invoke import InvokeModelWorkflow

# What a worker calls as the SDK gives it up (its `on_fatal_error`).
OnFatal = Callable[[BaseException], Awaitable[None]]

# How long a stopping process waits for the calls it let go of (their runs evicted) to close
# their receipts once stopped: one statement each.
STOP_WAIT_SECONDS = 5.0
# Activities the caller queue runs at once: each is a coroutine waiting on a call of this
# process, so the bound is what one process holds in memory, not what it computes. Nothing caps
# the calls a process holds: past this many adopted on the caller queue (plus the 256 eager
# ones) a call waits for a slot, and one that waits past its 10 s schedule-to-start is taken
# for lost (closed caller-lost) again. One process at 4,352 calls held at once is far past
# what its core serves (tens of streams a second, docs/benchmarks.md).
CALLER_QUEUE_SLOTS = 4096


class InvokeRuntime:
    def __init__(
        self,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        routes: Routes,
        statements: ReceiptStatements | None = None,
    ) -> None:
        self.settings = settings
        self._routes = routes
        self.hub = InvocationHub()
        self._sessions = sessions
        self.activities, self._adapters = invoke_activities(
            settings, sessions, self.hub, statements
        )
        self.config = InvokeConfig(
            workflow_queue=settings.temporal_invocation_task_queue,
            caller_queue=f"{settings.temporal_invocation_task_queue}-api-{uuid.uuid4().hex[:12]}",
            timeout_seconds=settings.default_timeout_seconds,
            workflow_timeout=timedelta(
                seconds=workflow_ceiling_seconds(settings.default_timeout_seconds)
            ),
        )
        self.service: Invocations | None = None
        self.workers: InvocationWorkers | None = None
        self.recovery: BreakerRecovery | None = None
        self.come_back: ComeBack | None = None
        self.gate: TemporalGate | None = None
        self.given_up: GivenUpClaims | None = None

    @property
    def adapters(self) -> AdapterPool:
        return self._adapters

    def start(self, client: Client) -> None:
        self._client = client
        self.gate = gate = TemporalGate(
            client,
            self.settings.invoke_start_wait_seconds,
            self.settings.invoke_start_overlap_seconds,
        )

        async def failing(exc: BaseException) -> None:
            # Called as the SDK gives a worker up, before it waits out the worker's running
            # activities (up to a call's budget): the gate refuses calls from now, not from
            # when the worker's run ends, so no call waits on a queue nobody polls meanwhile.
            gate.hold(f"in-process worker failed ({type(exc).__name__})")

        # Kept running: a worker that stops is rebuilt, the gate refusing calls meanwhile.
        self.workers = InvocationWorkers(
            [
                lambda: self._workflow_worker(self._client, failing),
                lambda: self._caller_worker(self._client, failing),
            ],
            gate.hold,
            gate.release,
        )
        self.workers.start()
        acts = self.activities
        # Sustained failure seen by this process's breakers goes to the deployment's lifecycle
        # (Degraded), and this process trials it back (Approved) within a cool-down of healing.
        self.recovery = BreakerRecovery(
            client,
            self._sessions,
            acts.breakers,
            endpoint_broker(self.settings),
            cooldown=self.settings.invoke_breaker_cooldown_seconds,
            window=self.settings.invoke_breaker_recovery_seconds,
            trial_timeout=self.settings.health_probe_timeout_seconds,
        )
        self.come_back = ComeBack(
            acts.breakers,
            self.recovery,
            self.settings.invoke_unavailable_retry_after_max_seconds,
        )
        # Claims given up on with their statement on its way, undone if they land: while one
        # could, and no longer than the sweeper leaves a claim with no workflow.
        self.given_up = GivenUpClaims(
            self.activities.statements.release_given_up,
            unstarted_bound(self.settings.invoke_start_wait_seconds),
        )
        self.service = Invocations(
            client,
            self.config,
            self.hub,
            Replays(
                client,
                self._sessions,
                self.activities.files,
                self.settings.invoke_start_wait_seconds,
            ),
            self._sessions,
            self._routes,
            self.come_back,
            gate,
            self.activities,
            self.given_up,
        )

    def rebind(self, client: Client) -> None:
        """Use `client` from now on (connected with rotated TLS files: core/temporal_rotation.py):
        the workers take it for their next poll, a worker rebuilt is built on it."""
        self._client = client
        for holder in (self.gate, self.service, self.recovery, self.workers):
            if holder is not None:
                holder.rebind(client)

    def _workflow_worker(self, client: Client, failing: OnFatal) -> Worker:
        """Eager start needs a worker on the workflow's queue built on the very client that
        starts workflows."""
        acts = self.activities
        return Worker(
            client,
            task_queue=self.config.workflow_queue,
            workflows=[InvokeModelWorkflow],
            workflow_runner=INVOKE_WORKFLOW_RUNNER,
            workflow_task_executor=InlineWorkflowTasks(first_activation_hold(self.hub)),
            activities=[
                acts.call_provider,
                acts.closes.close_abandoned,
                acts.closes.finalize_receipt,
            ],
            # Each call holds a slot from its eager start until its workflow completes, now
            # after the response: under load those tails pile up, and a start that finds no
            # free slot is not eager (its task goes round the standalone worker and the caller
            # queue: 1.03 RespondWorkflowTaskCompleted per call at 64).
            max_concurrent_workflow_tasks=256,
            # One local activity per eager workflow task: fewer slots (Temporal's default 100)
            # kept the calls past 100 waiting for one, their workflows' completion held back.
            max_concurrent_local_activities=256,
            on_fatal_error=failing,
        )

    def _caller_worker(self, client: Client, failing: OnFatal) -> Worker:
        """The caller queue, this process's alone: an activity adopting a call of this
        process whose workflow task was not eager."""
        return Worker(
            client,
            task_queue=self.config.caller_queue,
            activities=[self.activities.call_provider],
            # Each activity here only waits on a call already running in this process; one that
            # found no free slot within 10 s (the workflow's schedule-to-start) was taken for
            # lost and its receipt closed `caller-lost` beside the call that then answered. With
            # Temporal's default 100 slots that began past 356 calls held at once
            # (tests/test_invoke_many_held.py).
            max_concurrent_activities=CALLER_QUEUE_SLOTS,
            on_fatal_error=failing,
        )

    async def stop(self) -> None:
        if self.gate is not None:
            await self.gate.aclose()
        if self.given_up is not None:
            await self.given_up.aclose(STOP_WAIT_SECONDS)
        if self.recovery is not None:
            await self.recovery.aclose()
        if self.workers is not None:
            self.hub.stopping = True  # the calls whose activities the stop cancels stop too
            await self.workers.stop()
        await self.activities.cancelled.aclose(STOP_WAIT_SECONDS)
        await self._adapters.aclose()
        self.activities.files.close()
