"""Watching an invocation's workflow result through a Temporal outage: a watch that Temporal
did not answer says nothing of the workflow, whose call may be running in this process, so it
is watched again rather than taken for the workflow's end (which stopped the call, or sent a
stream's answer a second time from the store)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.service import RPCError, RPCStatusCode

from api.invocation_start import Started

# After a watch that Temporal did not answer (the SDK gives up after about 10 s of retries), how
# long before the workflow's result is watched again; the hub is read all the while.
REWATCH_SECONDS = 2.0
# What Temporal says when it did not answer (down, overloaded, a deadline passed): worth asking
# again. Any other refusal (the workflow not found, the request refused) will not change.
_UNANSWERED = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
)


def watch_failed(result: asyncio.Future[Any]) -> bool:
    """Whether the watch of the workflow's result ended because Temporal did not answer, rather
    than with the workflow's end (a result, the workflow's own failure, or a refusal that a
    retry would not change, which is taken for its end as before)."""
    if result.cancelled():
        return False
    exc = result.exception()
    return isinstance(exc, RPCError) and exc.status in _UNANSWERED


async def rewatch(started: Started, after: float = REWATCH_SECONDS) -> Any:
    """The workflow's result, watched again after `after` seconds."""
    await asyncio.sleep(after)  # a retry interval, not a wait for something
    return await started.result().result()
