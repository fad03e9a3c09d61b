"""What becomes of a call whose adopting activity is cancelled: stopped, or let go of.

A local activity is cancelled for unlike reasons that the SDK hands over alike (sdk-core sends
one `Cancelled` for each of these):
- the workflow was asked to cancel (an operator's `temporal workflow cancel`), or it ended
  (terminated, timed out): the call stops, as the design says cancelling the activity must;
- the SDK evicted the run from its cache: Temporal did not answer the workflow task's heartbeat
  (8 s into a task running a local activity) within the SDK's retries, an outage of about 10 s,
  or the in-process worker was rebuilt. The workflow is still running and its next execution
  runs the activity again. Stopping the call there ended every call longer than ~8 s that an
  outage of ~10 s overlapped (Failed, `internal`, the key spent), though neither its answer nor
  its receipt needs Temporal.

The cancellation's details tell some apart (the activity's own timeout, the worker shutting
down); those stop the call. Otherwise the call is let go of at once: it goes on, closes its own
receipt and answers its caller, and waits in the hub for the run's next execution to adopt it.
Deciding first and asking later matters: the activity's completion is what lets the SDK finish
the eviction, and a next execution that found it still running was handed its cancellation
(and closed the receipt as abandoned beside the call still answering). Then Temporal is asked,
in the background, whether the workflow has a cancel request or has ended; if so the call is
stopped after all. Temporal not answering within ASK_SECONDS leaves the call going: a cancel
request cannot have reached the activity without Temporal having been there to take it."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from activities.invoke_hub import InvocationHub, PendingCall

log = logging.getLogger("model_router.invoke")

# How long a call let go of waits in the hub, once it ended, for the run's next execution: that
# comes within seconds of Temporal answering again (the evicted workflow task times out 10 s
# after it began). One that comes later finds nothing and closes nothing, the call's task having
# closed its receipt. The entry holds no content by then.
LET_GO_KEEP_SECONDS = 600.0
# Asking Temporal why: each read's bound, and how long to keep asking (a second apart).
CHECK_SECONDS = 2.0
ASK_SECONDS = 30.0
# A cancel request, or the run's end, on the workflow's record.
_STOPS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)


class CancelledCalls:
    def __init__(self, hub: InvocationHub) -> None:
        self._hub = hub
        self._asking: set[asyncio.Task[None]] = set()

    async def after_cancel(self, token: str, pending: PendingCall) -> None:
        """The adopting activity was cancelled (called from its CancelledError handler)."""
        if not self._maybe_evicted():
            await stop(pending)
            return
        self._hub.let_go(token, pending, LET_GO_KEEP_SECONDS)
        log.warning("call's run evicted: the call goes on, for the run's next execution")
        info = activity.info()
        if info.workflow_id is None:
            return
        try:
            client = activity.client()
        except RuntimeError:  # an activity run outside a worker: nobody to ask
            return
        asking = asyncio.create_task(
            _stop_if_asked(client, info.workflow_id, info.workflow_run_id, pending)
        )
        self._asking.add(asking)
        asking.add_done_callback(self._asking.discard)

    def _maybe_evicted(self) -> bool:
        if not activity.info().is_local or self._hub.stopping:
            return False  # the caller queue's activity, whose cancel is the server's; a stop
        details = activity.cancellation_details()
        return details is None or not (
            details.timed_out or details.worker_shutdown or details.paused or details.reset
        )


async def stop(pending: PendingCall) -> None:
    """Stop the call: its task closes the receipt as ended by us and tells the caller."""
    work = pending.work
    if work is not None and not work.done():
        work.cancel()
        await asyncio.wait({work})  # its receipt closed, as when the activity awaited it


async def _stop_if_asked(
    client: Client, workflow_id: str, run_id: str | None, pending: PendingCall
) -> None:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ASK_SECONDS
    while True:
        try:
            asked = await asyncio.wait_for(_on_record(handle), CHECK_SECONDS + 0.5)
        except Exception as exc:  # Temporal away or slow: asked again, within ASK_SECONDS
            if loop.time() >= deadline:
                log.info("why the call's run was let go was not answered (%s)", type(exc).__name__)
                return
            await asyncio.sleep(1.0)  # a retry interval, not a wait-for
            continue
        if asked:
            log.warning("call's workflow was cancelled or ended: the call let go of is stopped")
            await stop(pending)
        return


async def _on_record(handle: WorkflowHandle[Any, Any]) -> bool:
    timeout = timedelta(seconds=CHECK_SECONDS)
    async for event in handle.fetch_history_events(rpc_timeout=timeout):
        if event.event_type in _STOPS:
            return True
    return False
