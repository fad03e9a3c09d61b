"""A run's next execution reaches the API process while the activity of its evicted execution
still holds the call. Under load a workflow task can time out on the server (its process was
starved, the task's heartbeat late): the server hands the run to a next execution at once, and
that execution's activity reaches the call's process (on its caller queue) before the stale
local activity has heard of the eviction, or while it asks Temporal why it was cancelled. It
found nothing in the hub and reported NOT_HERE, and the workflow closed the receipt Failed
`caller-lost` beside the answer the call went on to give (seen once in CI, a keyed non-stream
call of some 21 s under the suite's load).

The next execution's activity now awaits the same call and returns its one outcome; the stale
activity, cancelled, leaves the call to it. A cancel request on the workflow's record still
stops the call. Both activities run through the SDK's own test environment, on the real store,
the local upstream and a real workflow record on the Temporal dev server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.invoke import InvokeActivities
from activities.invoke_hub import InvocationHub, PendingCall
from activities.invoke_setup import invoke_activities
from core.settings import Settings
from domain.enums import InvocationOutcome
from domain.invocation import INVOKE_WORKFLOW, Disposition, InvocationInput, Target
from providers.types import ChatRequest, Message
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from providers.upstream.responders import fixed
from store import receipts
from tests.helpers.deadline import eventually
from tests.helpers.invocations import invocation_input
from tests.helpers.refused_close import refused_close

MODEL = "shared-sim"
# The provider's silence after two events, ended by the test (upstream.release()) once what it
# waits for has happened.
SILENCE_SECONDS = 60.0


@dataclass
class Held:
    """A call the API began, adopted by the local activity of a run's execution now evicted."""

    acts: InvokeActivities
    hub: InvocationHub
    data: InvocationInput
    pending: PendingCall
    workflow: WorkflowHandle[object, object]
    stale: ActivityEnvironment
    stale_run: asyncio.Task[object]


@pytest.fixture
async def held(
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> AsyncIterator[Held]:
    hub = InvocationHub()
    acts, adapters = invoke_activities(settings, sessions, hub)
    upstream.inject(
        MODEL,
        Fault(
            kind=FaultKind.KEEP_ALIVE,
            after_chunks=2,
            delay=SILENCE_SECONDS,
            interval=SILENCE_SECONDS * 2,
            times=1,
        ),
    )
    # The workflow's record, on a queue nobody polls: what the stale activity asks about.
    workflow: WorkflowHandle[object, object] = await temporal_client.start_workflow(
        INVOKE_WORKFLOW,
        id=f"shared-{uuid.uuid4()}",
        task_queue=f"unpolled-{uuid.uuid4().hex[:8]}",
    )
    try:
        token, pending = hub.open(
            ChatRequest(messages=(Message(role="user", content="long"),)), caller_claims=True
        )
        target = Target(
            deployment_id="sim/shared",
            provider="openai",
            model=MODEL,
            endpoint_ref=upstream.endpoint_ref,
        )
        data = invocation_input(tenant, profile_id="shared", target=target, caller_token=token)
        assert await acts.statements.claim(data, "sim/shared")
        acts.begin(data, pending)
        stale = ActivityEnvironment(client=temporal_client)
        stale.info = dataclasses.replace(
            stale.info,
            is_local=True,
            workflow_id=workflow.id,
            workflow_run_id=workflow.result_run_id,
        )
        stale_run = asyncio.create_task(stale.run(acts.call_provider, data))
        await eventually(lambda: pending.claimed and upstream.requests(MODEL) >= 1)
        yield Held(acts, hub, data, pending, workflow, stale, stale_run)
    finally:
        upstream.release()
        upstream.state.clear_faults(MODEL)
        with contextlib.suppress(Exception):  # its record is all the test needed
            await workflow.terminate()
        await adapters.aclose()


async def _next_execution(held: Held) -> asyncio.Task[object]:
    """The run's next execution's activity on the caller queue, once it awaits the call."""
    shared = asyncio.create_task(ActivityEnvironment().run(held.acts.call_provider, held.data))
    # Before, it found nothing and returned NOT_HERE at once.
    await eventually(lambda: shared.done() or held.pending.adopters == 2)
    assert not shared.done(), shared.result()
    return shared


async def _receipt(
    sessions: async_sessionmaker[AsyncSession], held: Held
) -> tuple[str | None, str | None, str | None]:
    async def closed() -> bool:
        async with sessions() as session:
            row = await receipts.by_key(session, held.data.tenant_id, held.data.idempotency_key)
        return row is not None and row.ended_at is not None

    await eventually(closed, timeout=20)
    async with sessions() as session:
        row = await receipts.by_key(session, held.data.tenant_id, held.data.idempotency_key)
    assert row is not None
    return row.outcome, row.usage_status, row.close_reason


async def test_a_next_execution_awaits_the_call_its_evicted_run_still_holds(
    held: Held, upstream: UpstreamServer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    shared = await _next_execution(held)
    held.stale.cancel()  # the stale activity hears of its run's eviction
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(held.stale_run, 20)
    assert not held.pending.let_go  # left to the execution awaiting it, not put back
    held.pending.delivered.set()  # the caller has its answer (the API's response, here none)
    upstream.release()
    summary = await asyncio.wait_for(shared, 30)
    assert (summary.disposition, summary.outcome) == (  # type: ignore[attr-defined]
        Disposition.DONE,
        InvocationOutcome.COMPLETED,
    )
    assert (await _receipt(sessions, held))[0] == "Completed"
    assert held.pending.adopters == 0 and held.hub.share(held.data.caller_token) is None


async def test_a_cancel_on_record_still_stops_a_call_two_executions_await(
    held: Held, sessions: async_sessionmaker[AsyncSession]
) -> None:
    shared = await _next_execution(held)
    await held.workflow.cancel()
    held.stale.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(held.stale_run, 20)
    # The call stopped under both: the next execution's activity ends with it.
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(shared, 20)
    assert await _receipt(sessions, held) == ("Failed", "Unknown", "internal")


async def test_a_next_execution_gets_the_close_a_stale_activity_returned_owed(
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The store refused the call's close (FINALIZE: the workflow owes it), and the activity
    returned that before its run was evicted: its result never reached the workflow. The run's
    next execution must still get the close to write; finding nothing it closed the receipt
    Failed `caller-lost` once the store answered, beside the answer the caller had."""
    hub = InvocationHub()
    acts, adapters = invoke_activities(settings, sessions, hub)
    model = "owed-sim"
    upstream.register(model, fixed("a fine answer"))
    token, pending = hub.open(
        ChatRequest(messages=(Message(role="user", content="hi"),)), caller_claims=True
    )
    target = Target(
        deployment_id="sim/owed", provider="openai", model=model, endpoint_ref=upstream.endpoint_ref
    )
    data = invocation_input(tenant, profile_id="owed", target=target, caller_token=token)
    try:
        async with refused_close(sessions, data.idempotency_key):
            assert await acts.statements.claim(data, "sim/owed")
            acts.begin(data, pending)
            stale = ActivityEnvironment()
            stale.info = dataclasses.replace(stale.info, is_local=True)
            owed = await asyncio.wait_for(stale.run(acts.call_provider, data), 60)
            assert owed.disposition is Disposition.FINALIZE
            # The next execution, on the caller queue: the same close to write, not NOT_HERE.
            again = await asyncio.wait_for(ActivityEnvironment().run(acts.call_provider, data), 20)
        assert again.disposition is Disposition.FINALIZE, again
        assert again.outcome is InvocationOutcome.COMPLETED
    finally:
        await adapters.aclose()
