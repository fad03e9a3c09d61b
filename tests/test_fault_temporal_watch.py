"""Temporal goes away while a stream runs, for longer than the SDK retries a request (about
10 s), and the stream pauses meanwhile. Its answer and its receipt need no Temporal: the call's
task closes the receipt and hands the answer over in this process.

Once the hub has been quiet a while, the API also watches the workflow's result (a safety net
for a receipt closed elsewhere). A watch that Temporal did not answer used to be taken for the
workflow's end: a stream whose output had begun was then sent the whole stored answer after
what it had (its text twice); a call not yet adopted was stopped, and one that outlasted the
replay's few seconds of reads was answered 503 and stopped, its receipt Cancelled. Now such a
watch is only tried again later.

The provider holds its answer until the watch has failed (the API logs it), then lets it go: the
call ends well before the SDK would give up on the workflow task's own heartbeat (a local
activity's, 8 s into the task, retried as long), whose failure evicts the run: a separate
matter (tests/test_fault_temporal_eviction.py)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import UpstreamServer
from tests.helpers.temporal_outage import (
    OutageStack,
    capture,
    held_stream,
    logged,
    outage_fixture,
    receipt,
    running,
)

# The provider's longest silence, Temporal gone meanwhile: past the SDK's ~10 s of retries of
# the watch, which begins once the hub has been quiet for 2 s (api/invocations.QUIET_SECONDS).
# It is released as soon as the watch failed.
SILENCE_SECONDS = 60.0
WATCH_FAILED = "the workflow's result was not answered"


stack = outage_fixture("temporal-watch")


async def test_a_stream_pausing_through_a_temporal_outage_ends_with_its_answer_once(
    stack: OutageStack,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    capture(caplog, "model_router.api")
    key = f"watch-st-{uuid.uuid4().hex[:8]}"
    expected, text, chunks = await held_stream(stack, upstream, key, SILENCE_SECONDS)
    await running(stack, tenant, key)
    stack.dev.kill()
    await logged(caplog, WATCH_FAILED, timeout=30)
    upstream.release()
    async for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == expected  # all of it, once
    row = await receipt(sessions, tenant, key)
    assert row is not None and row.outcome == "Completed", row
