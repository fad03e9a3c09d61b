"""What becomes of a call whose adopting activity is cancelled: stopped, or let go of.

A local activity is cancelled for unlike reasons that the SDK hands over alike (sdk-core sends
one `Cancelled` for each of these, its details no different):
- the workflow was asked to cancel (an operator's `temporal workflow cancel`), or it ended
  (terminated, timed out): the call stops, as the design says cancelling the activity must;
- the SDK evicted the run from its cache: Temporal did not answer the workflow task's heartbeat
  (8 s into a task running a local activity) within the SDK's retries, an outage of about 10 s,
  or the in-process worker was rebuilt. The workflow is still running and its next execution
  runs the activity again. Stopping the call there ended every call longer than ~8 s that an
  outage of ~10 s overlapped (Failed, `internal`, the key spent), though neither its answer nor
  its receipt needs Temporal.

So Temporal is asked first, for up to CHECK_SECONDS: a cancel request or the run's end on the
workflow's record stops the call (its close written before the activity's cancellation goes
on, as when the cancel went straight to the call). Otherwise the call is let go of: it goes on,
closes its own receipt and answers its caller, and waits in the hub for the run's next
execution to adopt it. A next execution handed this activity's cancellation (it found it still
finishing) adopts the call on the caller queue (workflows/invoke.py). One whose activity reached
the call before this activity was cancelled already awaits it (InvocationHub.share): the call is
left to it, neither stopped nor put back. When Temporal does not
answer (it is the thing away) the call is let go of and Temporal asked again in the background
for up to ASK_SECONDS: a cancel request cannot have reached the activity without Temporal
having been there to take it, but one may be on record all the same.

The caller queue's activity, whose cancellation is the server's own (or its heartbeat's), and a
process stopping its workers (`InvocationHub.stopping`), stop the call at once."""

from __future__ import annotations

import asyncio
import contextlib
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
# closed its receipt.
LET_GO_KEEP_SECONDS = 600.0
# Asking Temporal why: each read's bound, and how long to keep asking in the background (a
# second apart) when the first read was not answered.
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
        handle = _own_workflow()
        if not activity.info().is_local or self._hub.stopping or handle is None:
            await stop(pending)
            return
        try:
            asked = await _asked(handle)
        except Exception:  # Temporal away or slow: asked again in the background
            asked = None
        except asyncio.CancelledError:  # cancelled again (the worker stopping): no time to ask
            asked = True
        if asked or self._hub.stopping:
            await stop(pending)
            return
        if self._hub.shared(pending):  # the run's next execution awaits it already
            log.warning("call's run evicted: the call goes on, adopted by its next execution")
            return
        self._hub.let_go(token, pending, LET_GO_KEEP_SECONDS)
        log.warning("call's run evicted: the call goes on, for the run's next execution")
        if asked is None:
            asking = asyncio.create_task(_stop_if_asked(handle, pending))
            self._asking.add(asking)
            asking.add_done_callback(self._asking.discard)

    async def aclose(self, bound: float) -> None:
        """This process is stopping: no more asking, and the calls it let go of that still run
        are stopped (they would end with it, their receipts left to the sweeper); each closes
        its receipt as ended by us. Waits for them up to `bound` seconds."""
        for asking in list(self._asking):
            asking.cancel()
        works = [call.work for call in self._hub.let_go_calls() if call.work is not None]
        for work in works:
            work.cancel()
        if works:
            await asyncio.wait(works, timeout=bound)


def _own_workflow() -> WorkflowHandle[Any, Any] | None:
    info = activity.info()
    if info.workflow_id is None:
        return None
    try:
        client: Client = activity.client()
    except RuntimeError:  # an activity run outside a worker: nobody to ask
        return None
    return client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)


async def stop(pending: PendingCall) -> None:
    """Stop the call: its task closes the receipt as ended by us and tells the caller."""
    work = pending.work
    if work is not None and not work.done():
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({work})  # its receipt closed, as when the activity awaited it


async def _stop_if_asked(handle: WorkflowHandle[Any, Any], pending: PendingCall) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ASK_SECONDS
    while loop.time() < deadline:
        await asyncio.sleep(1.0)  # a retry interval, not a wait-for
        try:
            asked = await _asked(handle)
        except Exception as exc:  # still away: asked again, within ASK_SECONDS
            log.debug("asking why the call's run was let go of: %s", type(exc).__name__)
            continue
        if asked:
            log.warning("call's workflow was cancelled or ended: the call let go of is stopped")
            await stop(pending)
        return
    log.info("why the call's run was let go of was not answered in %.0f s", ASK_SECONDS)


async def _asked(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the workflow has a cancel request or its end on record (raises when Temporal
    does not say within CHECK_SECONDS)."""
    return await asyncio.wait_for(_on_record(handle), CHECK_SECONDS + 0.5)


async def _on_record(handle: WorkflowHandle[Any, Any]) -> bool:
    timeout = timedelta(seconds=CHECK_SECONDS)
    async for event in handle.fetch_history_events(rpc_timeout=timeout):
        if event.event_type in _STOPS:
            return True
    return False
