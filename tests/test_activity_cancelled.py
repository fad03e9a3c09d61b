"""The activity that adopted a call is cancelled mid-answer, as the activity on the caller's
queue is (the server's cancel, its worker stopping): cancelling it stops the call, as the design
says, and the call's task closes the receipt Failed, usage Unknown, close reason `internal` (our
side ended it), and tells the caller. The receipt used to stay open for the sweeper while the
caller's connection was dropped. Cancelled through the SDK's own test environment, on the real
store and the local upstream. (A local activity cancelled by the SDK's eviction of its run lets
go of the call instead: tests/test_fault_temporal_eviction.py.)"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.invoke_hub import InvocationHub, ReceiptReady
from activities.invoke_setup import invoke_activities
from core.settings import Settings
from domain.invocation import Target
from providers.types import ChatRequest, Message
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from store import receipts
from tests.helpers.deadline import eventually
from tests.helpers.invocations import invocation_input

MODEL = "cancelled-sim"


async def test_a_call_whose_adopting_activity_is_cancelled_is_closed_by_our_side(
    tenant: str,
    settings: Settings,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    hub = InvocationHub()
    acts, adapters = invoke_activities(settings, sessions, hub)
    # Two chunks, then keep-alives (the idle bound moves) for far longer than the test.
    upstream.inject(
        MODEL, Fault(kind=FaultKind.KEEP_ALIVE, after_chunks=2, delay=60, interval=0.5, times=1)
    )
    try:
        request = ChatRequest(messages=(Message(role="user", content="long"),))
        token, pending = hub.open(request, caller_claims=True)
        target = Target(
            deployment_id="sim/cancelled",
            provider="openai",
            model=MODEL,
            endpoint_ref=upstream.endpoint_ref,
        )
        data = invocation_input(tenant, profile_id="cancelled", target=target, caller_token=token)
        assert await acts.statements.claim(data, "sim/cancelled")
        acts.begin(data, pending)
        env = ActivityEnvironment()
        activity = asyncio.create_task(env.run(acts.call_provider, data))
        await eventually(lambda: upstream.requests(MODEL) >= 1)
        await asyncio.sleep(0.5)  # not a wait-for: the call is under way, mid-answer
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(activity, 20)

        async def closed() -> bool:
            async with sessions() as session:
                row = await receipts.by_key(session, tenant, data.idempotency_key)
            return row is not None and row.ended_at is not None

        await eventually(closed, timeout=20)
        async with sessions() as session:
            row = await receipts.by_key(session, tenant, data.idempotency_key)
        assert row is not None
        assert (row.outcome, row.usage_status, row.close_reason) == (
            "Failed",
            "Unknown",
            "internal",
        )
        told = []
        while not pending.events.empty():
            told.append(pending.events.get_nowait())
        assert any(isinstance(e, ReceiptReady) for e in told)  # the caller hears it
    finally:
        upstream.state.clear_faults(MODEL)
        await adapters.aclose()
