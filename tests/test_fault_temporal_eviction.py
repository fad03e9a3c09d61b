"""Temporal pauses while a stream runs, long enough for the SDK to give up on the workflow task
of its run: a task running a local activity heartbeats 8 s into it, and when Temporal does not
answer within the SDK's retries the run is evicted from the worker's cache, which cancels its
local activity, the one that adopted the call. The workflow itself is still running.

That cancellation used to stop the call (Failed, usage Unknown, `internal`, the key spent), so
every call longer than ~8 s that an outage of ~10 s overlapped was lost, though its answer and
its receipt need no Temporal. Now the call goes on: it answers its caller and closes its own
receipt, and once Temporal is back the run's next execution adopts it again from the hub
(rather than closing its receipt as abandoned). A cancel the workflow was asked for still stops
the call (activities/invoke_cancel.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from domain.enums import InvocationOutcome
from domain.invocation import Disposition, InvocationSummary
from providers.upstream import UpstreamServer
from tests.helpers.temporal_outage import (
    HI,
    OutageStack,
    capture,
    first_text,
    held_stream,
    logged,
    outage_fixture,
    receipt,
    running,
    silent_after_two,
)

# The provider's silence, released by the test as soon as what it waits for has happened.
SILENCE_SECONDS = 120.0
EVICTED = "call's run evicted"


stack = outage_fixture("temporal-evict")


async def _scheduled(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The activities the workflow scheduled (its local activities are markers, not these)."""
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_call_whose_run_is_evicted_by_a_temporal_pause_goes_on_and_is_adopted_again(
    stack: OutageStack,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    capture(caplog, "model_router.invoke")
    key = f"evict-{uuid.uuid4().hex[:8]}"
    expected, text, chunks = await held_stream(stack, upstream, key, SILENCE_SECONDS)
    handle = await running(stack, tenant, key)
    stack.dev.pause()
    await logged(caplog, EVICTED, timeout=90)
    upstream.release()
    async for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == expected  # the whole answer, with Temporal still away
    row = await receipt(sessions, tenant, key)
    assert row is not None and (row.outcome, row.usage_status) == ("Completed", "Reported"), row

    stack.dev.resume()
    result = stack.client.get_workflow_handle(
        handle.id, run_id=handle.run_id, result_type=InvocationSummary
    )
    summary = await asyncio.wait_for(result.result(), 90)
    assert (summary.outcome, summary.disposition) == (InvocationOutcome.COMPLETED, Disposition.DONE)
    scheduled = await _scheduled(handle)
    assert "close_abandoned_receipt" not in scheduled, scheduled  # adopted, not given up on
    assert upstream.requests(stack.model) == 2  # the whole answer's, and the stream's one call
    row = await receipt(sessions, tenant, key)
    assert row.outcome == "Completed", row


async def test_a_call_whose_workflow_is_asked_to_cancel_stops(
    stack: OutageStack,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    key = f"evict-cancel-{uuid.uuid4().hex[:8]}"
    silent_after_two(upstream, stack.model, SILENCE_SECONDS)
    stream = await stack.sdk.chat.completions.create(
        model=stack.profile, messages=HI, stream=True, extra_headers={"Idempotency-Key": key}
    )
    _, chunks = await first_text(stream)
    handle = await running(stack, tenant, key)
    await handle.cancel()
    with pytest.raises(openai.APIError):  # the stream ends with our side's failure
        async for _ in chunks:
            pass
    row = await receipt(sessions, tenant, key)
    assert row is not None
    assert (row.outcome, row.usage_status) == ("Failed", "Unknown")
    # Stopped by our side, or closed by the workflow's own close beside the cancellation, which
    # a local activity's cancel resolves at once: either way a failure, the key spent.
    assert row.close_reason in ("internal", "caller-lost"), row

    # The workflow's cancel was not taken for an eviction: nothing adopts the call again.
    await asyncio.wait_for(handle.result(), 30)
    assert await _scheduled(handle) == ["close_abandoned_receipt"]
