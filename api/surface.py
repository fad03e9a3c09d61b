"""What every invoke surface shares (Chat Completions, Messages, Responses, the gateway): the
invocation service, the call headers, the receipt headers, folding an invocation's events into
one answer, replaying a stored answer as events, and the failure a caller is told.

They are defined in `api/routers/openai.py` (the first surface) and named publicly here, so the
new surfaces reuse them rather than copy them; moving the definitions here is left to the
restructuring of the invocation stream (issue 18), which is when the other surfaces' imports
change too, to keep this change clear of the files other work edits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from activities.invoke_hub import ReceiptReady
from api.invocations import Replayed, Running
from api.routers.openai import (
    DEPLOYMENT,
    RECEIPT,
    USAGE_STATUS,
    CallHeaders,
    Headers,
    Service,
    receipt_headers,
    stream_headers,
)
from api.routers.openai import _collect as collect
from api.routers.openai import _failure as failure_response
from api.routers.openai import _first as first_event
from api.routers.openai import _replay_events as replay_events
from api.routers.openai import router_extension as receipt_view
from domain.enums import InvocationOutcome
from domain.invocation import InvocationSummary
from providers.types import Finish, TextDelta, ToolCallDelta

__all__ = [
    "DEPLOYMENT",
    "RECEIPT",
    "USAGE_STATUS",
    "CallHeaders",
    "Headers",
    "Service",
    "collect",
    "failure_response",
    "first_event",
    "no_retry",
    "receipt_headers",
    "receipt_view",
    "relay",
    "replay_events",
    "stream_headers",
]


def no_retry(status: int, problem: dict[str, Any]) -> dict[str, str]:
    """Both SDKs retry 409 (as a lock timeout) and every 5xx unless told otherwise: a reused
    Idempotency-Key or a permanent failure will not change on a retry."""
    if status == 409 or problem.get("errorClass") == "permanent":
        return {"x-should-retry": "false"}
    return {}


class StreamEvents(Protocol):
    """A surface's wire events for one streamed invocation."""

    def start(self) -> bytes: ...
    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes: ...
    def end(self, summary: InvocationSummary) -> bytes: ...
    def fail(self, summary: InvocationSummary) -> bytes: ...


async def relay(running: Running, first: Any, events: StreamEvents) -> AsyncIterator[bytes]:
    """An invocation's events (live, or a replayed answer) in a surface's wire format, ending
    with its receipt: `end` when it completed, `fail` (never a clean stop) otherwise."""
    yield events.start()
    item: Any = first
    while True:
        if isinstance(item, Replayed):
            for event in replay_events(item):
                yield events.add(event)
        elif isinstance(item, TextDelta | ToolCallDelta | Finish):
            yield events.add(item)
        elif isinstance(item, ReceiptReady):
            if item.summary.outcome is InvocationOutcome.COMPLETED:
                yield events.end(item.summary)
            else:
                yield events.fail(item.summary)
            return
        item = await anext(running.events)
