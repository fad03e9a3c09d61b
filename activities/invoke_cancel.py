"""Why the activity adopting a call was cancelled: its workflow asked, or the SDK let go of it.

A local activity is cancelled for two unlike reasons, and the SDK tells them apart in nothing it
hands the activity (sdk-core sends one `Cancelled` for both):
- the workflow was asked to cancel (an operator's `temporal workflow cancel`): the call stops,
  as the design says cancelling the activity must;
- the SDK evicted the run from its cache: Temporal did not answer the workflow task's heartbeat
  (8 s into a task running a local activity) within the SDK's retries, an outage of about 10 s,
  or the in-process worker was rebuilt. The workflow is still running and its next execution
  runs the activity again. Stopping the call there ended every call longer than ~8 s that an
  outage of ~10 s overlapped (Failed, `internal`, the key spent), though neither its answer nor
  its receipt needs Temporal.

So the history is asked: only a cancel request on record stops the call. A history that cannot
be read in time (Temporal is the thing away) is taken for an eviction: a cancel request cannot
have reached the activity without Temporal having been there to take it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.api.enums.v1 import EventType

# The history read's bound. It runs only on a cancelled call (never on the invoke path), and a
# paused server holds it for all of it; the SDK's completion of the cancelled activity waits.
CHECK_SECONDS = 2.0
_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED


async def cancel_requested() -> bool:
    """Whether this activity's workflow has a cancel request on record; False when Temporal
    does not say within CHECK_SECONDS, or this activity has no client to ask with."""
    try:
        return await asyncio.wait_for(_on_record(), CHECK_SECONDS + 0.5)
    except Exception:  # Temporal away, slow, or no client (an activity run outside a worker)
        return False


async def _on_record() -> bool:
    info = activity.info()
    if info.workflow_id is None:  # an activity of no workflow: nothing can ask it to cancel
        return False
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    timeout = timedelta(seconds=CHECK_SECONDS)
    async for event in handle.fetch_history_events(rpc_timeout=timeout):
        if event.event_type == _REQUESTED:
            return True
    return False
